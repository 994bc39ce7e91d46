"""``--policy flink-sql`` against ``--policy flink`` on the same input (issue 18).

    python benchmarks/bench_flink_sql.py [--rows 250000,500000] [--runs 3]
    python benchmarks/bench_flink_sql.py --engines [--rows 250000] [--runs 2]

``--engines``: ``--policy flink-sql --join full`` on the three engines instead --
local in memory, the bounded engine (``--chunk-rows 100000``) and ``--engine
spark --master local[2] --router atr`` -- alternating, with the same checks.

Data (synthetic, written under ``benchmarks/data/flink_sql/``): two streams of
``rows`` rows each over one hour of event time (whole ms), 1,000 keys, 90 % of
the rows up to 1 s late, 10 % up to 60 s late.  Job: ``--key key --window 10s
--watermark 5s`` (watermark interval 200 ms, Flink's default), results written.

Each measurement is a fresh ``streamjoin run`` process (spawn to exit),
alternating flink / flink-sql, one uncounted warm-up round first; the stage
times are report.json's ``timings_s`` (``join.progress`` holds the policy's
decisions: for flink-sql the caches, probes and timers).  Medians are printed
with the emitted results and memory peak of each policy (the same every round;
a difference stops the benchmark).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "flink_sql"
S = 1_000_000
MS = 1000
T0 = 1_700_000_000 * S


def write_input(rows: int) -> Path:
    root = DATA / f"rows_{rows}"
    if (root / "right.parquet").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(rows)
    for name in ("left", "right"):
        ts = T0 + np.sort(rng.integers(0, 3_600_000, rows)) * MS
        late = np.where(rng.random(rows) < 0.1, rng.integers(0, 60 * S, rows), rng.integers(0, S, rows))
        pl.DataFrame({"ts": ts, "arrival": ts + late, "key": rng.integers(0, 1000, rows)}).with_columns(
            pl.col("ts", "arrival").cast(pl.Datetime("us"))).write_parquet(root / f"{name}.parquet")
    return root


#: --engines: the engine arguments of each measured run (flink-sql --join full)
ENGINES = {"local": ["--engine", "local", "--chunk-rows", "0"],
           "bounded": ["--engine", "local", "--chunk-rows", "100000"],
           "spark": ["--engine", "spark", "--master", "local[2]", "--router", "atr", "--partitions", "2"]}


def run(root: Path, policy: str, extra: list[str] | None = None, label: str | None = None) -> tuple[float, dict]:
    out = root / f"out_{label or policy}"
    cmd = [sys.executable, "-m", "streamjoin.cli.main", "run", "--stream", f"left={root / 'left.parquet'}",
           "--stream", f"right={root / 'right.parquet'}", "--arrival", "arrival", "--key", "key", "--window", "10s",
           "--policy", policy, "--watermark", "5s", *(extra or ["--engine", "local"]), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    return wall, json.loads((out / "report.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="250000,500000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--engines", action="store_true",
                    help="flink-sql --join full on the local, bounded and Spark engines")
    args = ap.parse_args()
    if args.engines:
        return engines(args)
    print("| rows per stream | policy | process s | join s | join.progress s | emitted | memory peak |")
    print("|---|---|---|---|---|---|---|")
    for rows in (int(r) for r in args.rows.split(",")):
        root = write_input(rows)
        got: dict[str, list] = {"flink": [], "flink-sql": []}
        facts: dict[str, tuple] = {}
        for r in range(args.runs + 1):
            for policy in ("flink", "flink-sql"):
                wall, report = run(root, policy)
                fact = (report["emitted_results"], report["memory_tuples"]["peak"])
                if facts.setdefault(policy, fact) != fact:
                    raise SystemExit(f"{policy}: {fact} != {facts[policy]}")
                if r:   # round 0 warms up
                    t = report["timings_s"]
                    got[policy].append((wall, t["join"], t["join.progress"]))
        for policy, xs in got.items():
            med = [statistics.median(x[i] for x in xs) for i in range(3)]
            print(f"| {rows:,} | {policy} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {facts[policy][0]:,} "
                  f"| {facts[policy][1]:,} |")


def engines(args) -> None:
    """``--engines``: one policy, three engines; results and report numbers must agree."""
    print("| rows per stream | engine | process s | join s | emitted | padded rows | memory peak |")
    print("|---|---|---|---|---|---|---|")
    for rows in (int(r) for r in args.rows.split(",")):
        root = write_input(rows)
        got: dict[str, list] = {e: [] for e in ENGINES}
        facts: dict[str, tuple] = {}
        for r in range(args.runs + 1):
            for engine, extra in ENGINES.items():
                wall, report = run(root, "flink-sql", [*extra, "--join", "full"], engine)
                fact = (report["emitted_results"], report["outer_join"]["rows"], report["memory_tuples"]["peak"])
                if facts.setdefault("all", fact) != fact:
                    raise SystemExit(f"{engine}: {fact} != {facts['all']}")
                if r:   # round 0 warms up
                    got[engine].append((wall, report["timings_s"]["join"]))
        for engine, xs in got.items():
            med = [statistics.median(x[i] for x in xs) for i in range(2)]
            f = facts["all"]
            print(f"| {rows:,} | {engine} | {med[0]:.2f} | {med[1]:.2f} | {f[0]:,} | {f[1]:,} | {f[2]:,} |")


if __name__ == "__main__":
    main()
