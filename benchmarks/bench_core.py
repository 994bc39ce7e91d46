"""Core benchmark (issue 2): two keyed streams, 2M + 1M tuples, window 100 ms.

    python benchmarks/bench_core.py [--runs 5] [--scale 1.0]

Generates the ``bench`` set once into ``benchmarks/data/`` (seeded, about
2.7 valid pairs per input tuple), then times the real command end to end::

    streamjoin run benchmarks/data/bench/bench.toml --engine local --router none \
        --policy static --retention 50ms --no-results --out <tmp>

Each run is a fresh process; the table shows the process wall time (imports
included) and the job's own stage timings from ``report.json``.  The first
run is a warm-up and is not counted: on a VM whose memory is faulted in from
the host on first touch, the first pass over fresh memory can be many times
slower than any later one (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "bench"
#: the single-machine engine this benchmark measures (Spark: benchmarks/bench_routing.py)
ENGINE = "local"


def streamjoin_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("streamjoin")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "streamjoin.cli.main"]


def ensure_data(scale: float) -> Path:
    config = DATA / "bench.toml"
    marker = DATA / f".scale-{scale}"
    if not (config.exists() and marker.exists()):
        shutil.rmtree(DATA, ignore_errors=True)
        DATA.mkdir(parents=True)
        subprocess.run([*streamjoin_cmd(), "generate", "bench", "--out", str(DATA), "--seed", "7", "--scale", str(scale)],
                       check=True, stdout=subprocess.DEVNULL)
        marker.touch()
    return config


def one_run(config: Path, policy_args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*streamjoin_cmd(), "run", str(config), "--engine", ENGINE, "--router", "none", *policy_args,
             "--no-results", "--out", str(out)],
            capture_output=True, text=True,
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"run failed: {proc.stderr.strip()}")
        report = json.loads((out / "report.json").read_text())
    report["wall_s"] = wall
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--policy", default="static", help="static (default), none, kslack, mpkslack")
    args = ap.parse_args()
    config = ensure_data(args.scale)
    policy_args = ["--policy", args.policy]
    if args.policy == "static":
        policy_args += ["--retention", "50ms"]
    elif args.policy == "kslack":
        policy_args += ["--k", "50ms"]
    one_run(config, policy_args)  # warm-up, not counted
    reports = [one_run(config, policy_args) for _ in range(args.runs)]
    rows = sum(s["rows"] for s in reports[0]["streams"])
    print(f"data: {rows:,} input tuples, truth {reports[0]['truth_results']:,} "
          f"({reports[0]['truth_results'] / rows:.2f} per input tuple), emitted {reports[0]['emitted_results']:,}")
    stages = ["load", "join.progress", "join.candidates", "join.emit", "metrics", "write", "total"]
    print(f"{'run':>4} {'wall s':>8} {'tuples/s (wall)':>16} {'tuples/s (job)':>15}  " + " ".join(f"{s:>15}" for s in stages))
    for i, r in enumerate(reports, 1):
        t = r["timings_s"]
        print(f"{i:>4} {r['wall_s']:>8.2f} {rows / r['wall_s']:>16,.0f} {rows / t['total']:>15,.0f}  "
              + " ".join(f"{t.get(s, 0.0):>15.3f}" for s in stages))
    walls = [r["wall_s"] for r in reports]
    jobs = [r["timings_s"]["total"] for r in reports]
    print(f"median: wall {statistics.median(walls):.2f}s = {rows / statistics.median(walls):,.0f} tuples/s; "
          f"job {statistics.median(jobs):.2f}s = {rows / statistics.median(jobs):,.0f} tuples/s; "
          f"best wall {min(walls):.2f}s = {rows / min(walls):,.0f} tuples/s")


if __name__ == "__main__":
    main()
