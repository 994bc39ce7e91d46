"""Spark engine vs the local engine (issue 7): the core data, the same command.

    python benchmarks/bench_engines.py [--runs 3] [--routers none,atr,ctr] [--partitions 2] [--results]

On the core benchmark data (``benchmarks/bench_core.py``: 2M + 1M keyed
tuples, W 100 ms; generated once) this times, each as a fresh process::

    streamjoin run benchmarks/data/bench/bench.toml --engine local --router none \\
        --policy static --retention 50ms --no-results --out <tmp>
    streamjoin run benchmarks/data/bench/bench.toml --engine spark --master local[2] \\
        --router R --partitions 2 --policy static --retention 50ms --no-results --out <tmp>

Runs alternate (local, then each Spark router) so that a change in the
machine's speed hits every column alike; one warm-up round is not counted.
From ``report.json``: ``timings_s.total`` (the job, imports excluded) and, for
Spark, ``join.spark_session`` (getOrCreate: JVM and SparkContext) and
``join.spark_warmup`` (the first trivial job: starts the executors' Python
workers and imports the kernels there).  The Spark time *beyond session
start-up* is ``total - spark_session - spark_warmup``; the table also shows
``total - spark_session`` (warm-up counted as work).  Every run must report
the same ``truth_results`` and ``emitted_results``.

``--results`` drops ``--no-results``: every run also writes ``results.parquet``
(7.9M rows), and the table adds the ``write`` stage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import child_env, ensure_data, streamjoin_cmd  # noqa: E402

POLICY = ["--policy", "static", "--retention", "50ms"]


def one_run(config: Path, engine_args: list[str], env: dict | None = None, results: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        t0 = time.perf_counter()
        proc = subprocess.run([*streamjoin_cmd(), "run", str(config), *engine_args, *POLICY,
                               *([] if results else ["--no-results"]), "--out", str(out)],
                              capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"run failed ({' '.join(engine_args)}): {proc.stderr.strip()[-3000:]}")
        report = json.loads((out / "report.json").read_text())
    report["wall_s"] = wall
    return report


def variants(routers: list[str], partitions: int, master: str) -> dict[str, list[str]]:
    out = {"local": ["--engine", "local", "--router", "none"]}
    for r in routers:
        out[f"spark {r}"] = ["--engine", "spark", "--master", master, "--router", r, "--partitions", str(partitions)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="counted rounds (after one warm-up round)")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--routers", default="none,atr,ctr")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-thp", action="store_true",
                    help="NUMPY_MADVISE_HUGEPAGE=0 for every process of both engines (the Spark engine sets it "
                         "for its executors' Python workers anyway; see docs/performance.md)")
    ap.add_argument("--results", action="store_true", help="write results.parquet too (adds the write stage)")
    args = ap.parse_args()
    env = child_env(**({"NUMPY_MADVISE_HUGEPAGE": "0"} if args.no_thp else {}))
    config = ensure_data(args.scale)
    runs = variants([r for r in args.routers.split(",") if r], args.partitions, args.master)
    for name, engine_args in runs.items():  # warm-up round, not counted
        one_run(config, engine_args, env, args.results)
    got: dict[str, list[dict]] = {name: [] for name in runs}
    for i in range(args.runs):
        for name, engine_args in runs.items():
            r = one_run(config, engine_args, env, args.results)
            got[name].append(r)
            t = r["timings_s"]
            print(f"round {i + 1} {name:<10} wall {r['wall_s']:7.2f} s  total {t['total']:7.2f} s  session "
                  f"{t.get('join.spark_session', 0.0):6.2f} s  warm-up {t.get('join.spark_warmup', 0.0):5.2f} s",
                  flush=True)

    first = got["local"][0]
    expect = (first["truth_results"], first["emitted_results"])
    for name, reports in got.items():
        for r in reports:
            assert (r["truth_results"], r["emitted_results"]) == expect, (name, r["truth_results"], r["emitted_results"])
    rows = sum(s["rows"] for s in first["streams"])
    print(f"\ndata: {rows:,} input tuples; every run: truth {expect[0]:,}, emitted {expect[1]:,}"
          + ("; NUMPY_MADVISE_HUGEPAGE=0 for every process" if args.no_thp else "")
          + ("; results.parquet written" if args.results else ""))

    def med(name, fn):
        return statistics.median(fn(r) for r in got[name])

    def t(key):
        return lambda r: r["timings_s"].get(key, 0.0)

    def beyond(r):
        x = r["timings_s"]
        return x["total"] - x.get("join.spark_session", 0.0) - x.get("join.spark_warmup", 0.0)

    local_job = med("local", t("total"))
    local_wall = med("local", lambda r: r["wall_s"])
    head = (f"{'engine':<11} {'wall s':>7} {'total s':>8} {'session s':>10} {'warm-up s':>10} {'beyond s':>9} "
            f"{'ratio':>6} {'ratio (warm-up as work)':>24} {'wall ratio':>11}  join stages (median s)")
    print(head)
    print("-" * len(head))
    for name in runs:
        stages = ("join.progress", "join.join", "join.memory", "join.collect", "metrics") if name != "local" else (
            "join.progress", "join.candidates", "join.emit", "metrics")
        stages += ("write",) if args.results else ()
        b = med(name, beyond)
        with_warm = med(name, lambda r: r["timings_s"]["total"] - r["timings_s"].get("join.spark_session", 0.0))
        print(f"{name:<11} {med(name, lambda r: r['wall_s']):>7.2f} {med(name, t('total')):>8.2f} "
              f"{med(name, t('join.spark_session')):>10.2f} {med(name, t('join.spark_warmup')):>10.2f} {b:>9.2f} "
              f"{b / local_job:>5.2f}x {with_warm / local_job:>23.2f}x "
              f"{med(name, lambda r: r['wall_s']) / local_wall:>10.2f}x  "
              + " ".join(f"{s.split('.')[-1]} {med(name, t(s)):.2f}" for s in stages))
    print("ratio = median Spark time beyond session start-up / median local job time (report.json timings_s.total)")


if __name__ == "__main__":
    main()
