"""Multi-way benchmark (issue 3): three keyed streams x 500k tuples, window 100 ms.

    python benchmarks/bench_multiway.py [--runs 5] [--scale 1.0]

Generates the ``bench3`` set once into ``benchmarks/data/bench3/`` and times
the real command end to end (a fresh process per run, one uncounted warm-up)::

    streamjoin run benchmarks/data/bench3/bench3.toml --engine local --router none \\
        --policy static --retention 50ms --no-results --out <tmp>

It prints the time per input tuple next to the 2-stream core benchmark's
(``bench_core.py``, run in the same invocation unless ``--skip-core``), since
the issue's bar is "under 2x the 2-stream time per input tuple".
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import one_run, streamjoin_cmd  # noqa: E402  (benchmarks/ is not a package)

import shutil  # noqa: E402
import subprocess  # noqa: E402

HERE = Path(__file__).resolve().parent


def ensure(kind: str, scale: float) -> Path:
    data = HERE / "data" / kind
    config = data / f"{kind}.toml"
    marker = data / f".scale-{scale}"
    if not (config.exists() and marker.exists()):
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        subprocess.run([*streamjoin_cmd(), "generate", kind, "--out", str(data), "--seed", "7", "--scale", str(scale)],
                       check=True, stdout=subprocess.DEVNULL)
        marker.touch()
    return config


def measure(config: Path, runs: int) -> tuple[int, int, list[dict]]:
    args = ["--policy", "static", "--retention", "50ms"]
    one_run(config, args)  # warm-up
    reports = [one_run(config, args) for _ in range(runs)]
    rows = sum(s["rows"] for s in reports[0]["streams"])
    return rows, reports[0]["truth_results"], reports


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--skip-core", action="store_true")
    args = ap.parse_args()
    sets = [("bench3", ensure("bench3", args.scale))]
    if not args.skip_core:
        sets.append(("bench", ensure("bench", args.scale)))
    print(f"{'set':>8} {'streams':>8} {'tuples':>11} {'results':>11} {'median wall s':>14} {'us/tuple':>9} "
          f"{'candidates s':>13} {'plan':>24}")
    per_tuple = {}
    for name, config in sets:
        rows, truth, reports = measure(config, args.runs)
        wall = statistics.median(r["wall_s"] for r in reports)
        cand = statistics.median(r["timings_s"].get("join.candidates", 0.0) for r in reports)
        per_tuple[name] = wall / rows * 1e6
        order = "->".join(reports[0].get("plan", {}).get("probe_order", []))
        print(f"{name:>8} {len(reports[0]['streams']):>8} {rows:>11,} {truth:>11,} {wall:>14.2f} "
              f"{per_tuple[name]:>9.3f} {cand:>13.3f} {order:>24}")
    if "bench" in per_tuple:
        print(f"3-stream / 2-stream time per input tuple: {per_tuple['bench3'] / per_tuple['bench']:.2f}x (bar: < 2x)")


if __name__ == "__main__":
    main()
