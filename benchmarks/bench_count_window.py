"""Count windows against duration windows on the sensors sample (issue 20 item 2).

    python benchmarks/bench_count_window.py [--runs 3] [--count 150]

Runs ``streamjoin run samples/sensors/sensors.toml --engine local --no-results``
as fresh processes, alternating two window settings for ``temperature``
(humidity keeps its 250 ms): the config's duration ``250ms`` and a count
``N tuples`` (default 150: about the stream's arrivals in 250 ms, 523k input
tuples in all).  Prints, per setting, the medians of the whole-process wall
time and of the job's stages from ``report.json`` (``join.candidates`` is the
truth enumeration: ``enumerate_truth`` for durations, ``enumerate_counted``
for the count), with truth, recall and peak memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "samples" / "sensors" / "sensors.toml"
STAGES = ("load", "join", "join.candidates", "join.progress", "join.emit", "metrics", "write", "total")


def run_once(window: str, out: Path) -> tuple[float, dict]:
    script = Path(sys.executable).with_name("streamjoin")
    cmd = [str(script), "run", str(CONFIG), "--engine", "local", "--no-results", "--window", f"temperature={window}",
           "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    return wall, json.loads((out / "report.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=150)
    args = ap.parse_args()
    settings = ["250ms", f"{args.count}tuples"]
    walls: dict[str, list[float]] = {s: [] for s in settings}
    stages: dict[str, dict[str, list[float]]] = {s: {k: [] for k in STAGES} for s in settings}
    facts: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for s in settings:   # alternating
                wall, report = run_once(s, Path(tmp) / f"{s}_{i}")
                walls[s].append(wall)
                for k in STAGES:
                    stages[s][k].append(report["timings_s"].get(k, float("nan")))
                facts[s] = {"truth": report["truth_results"], "recall": report["recall"],
                            "peak": report["memory_tuples"]["peak"]}
    print(f"sensors, temperature window, medians of {args.runs} alternating runs (seconds)")
    head = ["window", "wall", *STAGES, "truth", "recall", "peak tuples"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for s in settings:
        row = [s, f"{statistics.median(walls[s]):.2f}",
               *(f"{statistics.median(stages[s][k]):.2f}" for k in STAGES),
               f"{facts[s]['truth']:,}", f"{facts[s]['recall']:.4f}", f"{facts[s]['peak']:,}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
