"""Capacity benchmark (issue 20): what a finite machine does to recall and latency.

    python benchmarks/bench_capacity.py [--scale 0.1] [--policy kslack:50ms] [--policy static:50ms]

On the core synthetic data (``streamjoin generate bench``, the set
``bench_core.py`` uses; ``--scale`` multiplies its 2M + 1M tuples over 30 s),
the service capacity goes from 2x the input load down to 0.5x, and for each
step the table gives recall, latency p50 / p95 / p99 (from each tuple's own
arrival) and, for seed 001's flow control (``--flow-control``, max-flow and
min-flow), the delay back-pressure added (p50 / p99 / max over all tuples) and
the model's own time.  Load = input tuples / arrival span; the buffer ``B`` is
two control intervals of the load (``b0 = B/2``, ``interval = 10ms``, the
default gains).  Each row is one fresh ``streamjoin run`` process
(``bench_core.one_run``); the first row of each policy is the run without a
capacity model.  Shedding (``--capacity``) has its own function.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import ensure_data, one_run  # noqa: E402

FACTORS = (2.0, 1.5, 1.25, 1.0, 0.75, 0.5)
INTERVAL_MS = 10


def load_per_s(config: Path) -> float:
    """Input tuples per second of arrival time over both streams."""
    arr = pl.concat([pl.read_parquet(config.parent / f"{s}.parquet", columns=["arrival"]) for s in ("left", "right")])
    lo, hi = arr["arrival"].min(), arr["arrival"].max()
    return arr.height / ((hi - lo) / 1e6)


def _fmt_us(v) -> str:
    if v is None:
        return "-"
    for div, unit in ((1e6, "s"), (1e3, "ms")):
        if abs(v) >= div:
            return f"{v / div:.3g} {unit}"
    return f"{v:.0f} us"


def _policy_args(spec: str) -> list[str]:
    name, _, setting = spec.partition(":")
    flag = {"kslack": "--k", "static": "--retention"}.get(name)
    return ["--policy", name, *([flag, setting] if flag and setting else [])]


def flow_control_rows(config: Path, policies: list[str], factors=FACTORS) -> list[dict]:
    """One row per (policy, forwarding policy, capacity factor): recall, latency and added delay."""
    load = load_per_s(config)
    buffer = max(1, round(2 * load * INTERVAL_MS / 1000))
    rows = []
    for spec in policies:
        base = one_run(config, _policy_args(spec))
        rows.append({"policy": spec, "flow": "off", "capacity": "-", "report": base})
        for forwarding in ("max-flow", "min-flow"):
            for f in factors:
                fc = f"buffer={buffer},rate={f * load:.0f},interval={INTERVAL_MS}ms,policy={forwarding}"
                rows.append({"policy": spec, "flow": forwarding, "capacity": f"{f:g}x",
                             "report": one_run(config, [*_policy_args(spec), "--flow-control", fc])})
    return rows


def print_flow_table(rows: list[dict], load: float) -> None:
    print(f"load {load:,.0f} tuples/s; buffer B = 2 intervals of the load, b0 = B/2, interval {INTERVAL_MS}ms\n")
    print("| policy | flow control | capacity / load | recall | latency p50 | p95 | p99 | added delay p50 | p99 | max "
          "| tuples delayed | flow model s | run wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rep = r["report"]
        lat = rep["latency_us"]
        fc = rep.get("flow_control")
        d = fc["added_delay_us"]["all"] if fc else {}
        print(f"| {r['policy']} | {r['flow']} | {r['capacity']} | {rep['recall']:.4f} | {_fmt_us(lat['p50'])} "
              f"| {_fmt_us(lat['p95'])} | {_fmt_us(lat['p99'])} | {_fmt_us(d.get('p50'))} | {_fmt_us(d.get('p99'))} "
              f"| {_fmt_us(d.get('max'))} | {d.get('delayed', 0):,} "
              f"| {rep['timings_s'].get('flow_control', 0):.2f} | {rep['wall_s']:.2f} |")


def flow_cost(config: Path, spec: str, runs: int, factor: float = 1.0) -> None:
    """Whole-process wall time with and without flow control (capacity = ``factor`` x load),
    alternating runs; medians, and the model's own time (``timings_s.flow_control``)."""
    import statistics

    load = load_per_s(config)
    fc = f"buffer={max(1, round(2 * load * INTERVAL_MS / 1000))},rate={factor * load:.0f},interval={INTERVAL_MS}ms"
    plain, flow = [], []
    for _ in range(runs + 1):   # the first pair is a warm-up
        plain.append(one_run(config, _policy_args(spec)))
        flow.append(one_run(config, [*_policy_args(spec), "--flow-control", fc]))
    plain, flow = plain[1:], flow[1:]
    wp, wf = statistics.median(r["wall_s"] for r in plain), statistics.median(r["wall_s"] for r in flow)
    model = statistics.median(r["timings_s"]["flow_control"] for r in flow)
    print(f"\n{spec}, capacity {factor:g}x load, {runs} alternating runs each (medians): "
          f"wall without {wp:.2f} s, with --flow-control {wf:.2f} s (ratio {wf / wp:.2f}); "
          f"the model itself {model:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.1, help="core data row-count multiplier (1.0: 2M + 1M tuples)")
    ap.add_argument("--policy", action="append", help="NAME[:SETTING], e.g. kslack:50ms, static:50ms, mpkslack "
                                                      "(default: kslack:50ms and static:50ms)")
    ap.add_argument("--runs", type=int, default=5, help="alternating runs for the cost line")
    args = ap.parse_args()
    config = ensure_data(args.scale)
    policies = args.policy or ["kslack:50ms", "static:50ms"]
    print_flow_table(flow_control_rows(config, policies), load_per_s(config))
    flow_cost(config, policies[0], args.runs)


if __name__ == "__main__":
    main()
