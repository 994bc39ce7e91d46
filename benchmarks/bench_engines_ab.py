"""Spark engine vs local, two code versions A/B (issue 21, ninth pass).

    python benchmarks/bench_engines_ab.py --base <PYTHONPATH of the other version> [--runs 3]
        [--routers none,atr,ctr] [--partitions 2]

The runs of ``bench_engines.py`` (core data, ``--policy static --retention 50ms
--no-results``), each as a fresh process, for two versions of the code: ``base``
(a ``git archive`` of its ``cli/`` and ``pipelines/`` under ``<dir>/streamjoin/``,
given as ``<dir>``) and this checkout, alternating version by version and run by
run so that a change in the machine's speed hits both alike; one warm-up round
(which also builds the base's kernels) is not counted.  Prints each run, then
per engine and version the median time beyond session start-up, its ratio to the
same round's local run (median and per round), the CPU time (user + sys, the process
tree), the ``join.progress``, ``join.candidates``, ``join.join`` and ``metrics``
stages, and the per-round ratio of this checkout to the base.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engines as be  # noqa: E402
from bench_core import child_env, ensure_data  # noqa: E402


def beyond(r: dict) -> float:
    t = r["timings_s"]
    return t["total"] - t.get("join.spark_session", 0.0) - t.get("join.spark_warmup", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="PYTHONPATH holding the other version's streamjoin package")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--routers", default="none,atr,ctr")
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    config = ensure_data(1.0)
    runs = be.variants([r for r in args.routers.split(",") if r], args.partitions, "local[2]")
    envs = {"base": child_env(args.base), "this": child_env()}
    for engine_args in runs.values():   # warm-up round, not counted
        for env in envs.values():
            be.one_run(config, engine_args, env)
    got: dict[tuple[str, str], list[dict]] = {(v, n): [] for v in envs for n in runs}
    for i in range(args.runs):
        load = os.getloadavg()[0]
        for name, engine_args in runs.items():
            for v, env in envs.items():
                r = be.one_run(config, engine_args, env)
                got[(v, name)].append(r)
                print(f"round {i + 1} {v:<4} {name:<10} beyond {beyond(r):6.2f} s  cpu {r['cpu_s']:6.2f} s  "
                      f"truth {r['truth_results']} emitted {r['emitted_results']}  load {load:4.1f}", flush=True)
    expect = {(r["truth_results"], r["emitted_results"]) for rs in got.values() for r in rs}
    assert len(expect) == 1, expect
    med = statistics.median
    stages = ("join.progress", "join.candidates", "join.join", "metrics")
    print("\nengine      version  beyond s (min..max)   / local (per round)             cpu s  "
          + "  ".join(f"{s} s" for s in stages))
    for name in runs:
        for v in envs:
            rs, local = got[(v, name)], got[(v, "local")]
            b = [beyond(r) for r in rs]
            ratios = [beyond(r) / beyond(x) for r, x in zip(rs, local)]
            print(f"{name:<11} {v:<8} {med(b):5.2f} ({min(b):.2f}..{max(b):.2f})  {med(ratios):5.2f}x "
                  f"({', '.join(f'{x:.2f}' for x in ratios)})  {med(r['cpu_s'] for r in rs):5.2f}  "
                  + "  ".join(f"{med(r['timings_s'].get(s, 0.0) for r in rs):{len(s) + 2}.2f}" for s in stages))
    for name in runs:
        per = [beyond(t) / beyond(b) for t, b in zip(got[("this", name)], got[("base", name)])]
        print(f"{name}: this / base per round {', '.join(f'{x:.2f}' for x in per)}")


if __name__ == "__main__":
    main()
