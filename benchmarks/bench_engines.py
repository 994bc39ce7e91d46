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
workers -- on a ``local[n]`` master every core's, as one barrier stage -- and imports
the kernels and the data plane there).  The Spark time *beyond session
start-up* is ``total - spark_session - spark_warmup``; the table also shows
``total - spark_session`` (warm-up counted as work).  Every run must report
the same ``truth_results`` and ``emitted_results``.

CPU: ``cpu s`` is the process tree's user + system time -- for Spark the
driver, its JVM and the executors' Python workers, read from ``/proc`` every
0.05 s while the run lasts (a descendant's last 0.05 s can be missed: a lower
bound); the driver's own is exact (``wait4``).  The tree's CPU cannot be split
at the end of session start-up from outside, so the CPU ratio counts start-up
as work; ``py cpu`` leaves the JVM out (the Python side: driver and workers,
their imports and the warm-up job still counted); ``load`` is the host's 1-minute load average at each round's start.

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
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import child_env, ensure_data, streamjoin_cmd  # noqa: E402

POLICY = ["--policy", "static", "--retention", "50ms"]


TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> dict[int, tuple[float, bool]]:
    """User + system seconds of ``root`` and every descendant alive now (``/proc``),
    and whether the process is a JVM."""
    parent, cpu, jvm = {}, {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
            fields = tail.split()
        except OSError:
            continue
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / TICK   # utime, stime
        jvm[int(d)] = head.endswith("(java")
    mine, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for c, pp in parent.items():
            if pp == p and c not in mine:
                mine.add(c)
                frontier.append(c)
    return {p: (cpu[p], jvm[p]) for p in mine if p in cpu}


def one_run(config: Path, engine_args: list[str], env: dict | None = None, results: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        seen: dict[int, tuple[float, bool]] = {}
        done = threading.Event()
        with open(Path(tmp) / "stderr", "w+") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen([*streamjoin_cmd(), "run", str(config), *engine_args, *POLICY,
                                     *([] if results else ["--no-results"]), "--out", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=err, env=env)

            def sample():   # the tree's CPU, last value seen per process
                while not done.wait(0.05):
                    seen.update(_tree_cpu(proc.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            done.set()
            sampler.join()
            if os.waitstatus_to_exitcode(status) != 0:
                err.seek(0)
                raise SystemExit(f"run failed ({' '.join(engine_args)}): {err.read().strip()[-3000:]}")
        report = json.loads((out / "report.json").read_text())
    driver = usage.ru_utime + usage.ru_stime
    seen[proc.pid] = (driver, False)   # exact for the driver (wait4)
    jvm = sum(c for c, j in seen.values() if j)
    report.update(wall_s=wall, driver_cpu_s=driver, cpu_s=sum(c for c, _ in seen.values()), jvm_cpu_s=jvm)
    report["python_cpu_s"] = report["cpu_s"] - jvm   # the driver's Python and the executors' Python workers
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
        load = os.getloadavg()[0]
        for name, engine_args in runs.items():
            r = one_run(config, engine_args, env, args.results)
            got[name].append(r)
            t = r["timings_s"]
            print(f"round {i + 1} {name:<10} wall {r['wall_s']:7.2f} s  total {t['total']:7.2f} s  session "
                  f"{t.get('join.spark_session', 0.0):6.2f} s  warm-up {t.get('join.spark_warmup', 0.0):5.2f} s  cpu "
                  f"{r['cpu_s']:6.2f} s (driver {r['driver_cpu_s']:5.2f}, JVM {r['jvm_cpu_s']:5.2f}, Python "
                  f"{r['python_cpu_s']:5.2f} s)  load {load:4.1f}",
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
    local_cpu = med("local", lambda r: r["cpu_s"])
    py = lambda r: r.get("python_cpu_s", r["cpu_s"])  # noqa: E731
    head = (f"{'engine':<11} {'wall s':>7} {'total s':>8} {'session s':>10} {'warm-up s':>10} {'beyond s':>9} "
            f"{'ratio':>6} {'ratio (warm-up as work)':>24} {'wall ratio':>11} {'cpu s':>6} {'cpu ratio':>10} "
            f"{'py cpu s':>9} {'py cpu ratio':>13}"
            f"  join stages (median s)")
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
              f"{med(name, lambda r: r['wall_s']) / local_wall:>10.2f}x {med(name, lambda r: r['cpu_s']):>6.2f} "
              f"{med(name, lambda r: r['cpu_s']) / local_cpu:>9.2f}x {med(name, py):>9.2f} "
              f"{med(name, py) / local_cpu:>12.2f}x  "
              + " ".join(f"{s.split('.')[-1]} {med(name, t(s)):.2f}" for s in stages))
    print("ratio = median Spark time beyond session start-up / median local job time (report.json timings_s.total)")
    print("cpu = the process tree's user + system s (start-up included); cpu ratio = Spark's / local's (medians);\n"
          "py cpu = the same without the JVM (the driver's Python and the executors' Python workers, whose start-up\n"
          "-- imports, the warm-up job -- it still includes)")
    for name in runs:
        if name != "local":
            per = [(s["timings_s"]["total"] - s["timings_s"].get("join.spark_session", 0.0)
                    - s["timings_s"].get("join.spark_warmup", 0.0)) / loc["timings_s"]["total"]
                   for s, loc in zip(got[name], got["local"])]
            print(f"per round, {name}: beyond / that round's local total " + ", ".join(f"{x:.2f}" for x in per))


if __name__ == "__main__":
    main()
