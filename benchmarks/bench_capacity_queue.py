"""The capacity model's queue and state cap (issue 20 items 1, 2): what it costs.

    python benchmarks/bench_capacity_queue.py [--runs 5] [--config samples/sensors/sensors.toml]
    python benchmarks/bench_capacity_queue.py --sweep     # recall / latency / shed vs CPU share

1. Whole process: ``streamjoin run CONFIG --engine local --no-results`` with and
   without ``--capacity`` (runs alternate: plain, capacity, capacity, plain, ...),
   median wall time of each, and the median ``join.capacity`` stage.
2. Kernels on the same replay (N arrivals): the bounded queue compiled (numba)
   against the same loop in plain Python, and the Lindley closed form (numpy)
   for the unbounded queue -- the measurement behind the numba decision
   (docs/performance.md, "Capacity model").
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: with a queue cap and a state cap (both compiled kernels), and the unbounded queue alone (numpy only)
CAPACITY = {"bounded": "tuple=700us,result=50us,queue=50,shed=replace-oldest,state=2000",
            "unbounded": "tuple=700us,result=50us"}


def whole_process(config: Path, runs: int, option: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"plain": [], "capacity": [], "join.capacity": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(runs):
            for kind in (("plain", "capacity") if r % 2 == 0 else ("capacity", "plain")):
                out = Path(tmp) / kind
                extra = ["--capacity", option] if kind == "capacity" else []
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "streamjoin.cli.main", "run", str(config), "--engine", "local",
                                "--no-results", "--out", str(out), *extra], check=True, capture_output=True,
                               cwd=config.parent)
                times[kind].append(time.perf_counter() - t0)
                if kind == "capacity":
                    rep = json.loads((out / "report.json").read_text())
                    times["join.capacity"].append(rep["timings_s"]["join.capacity"])
    return times


def python_bounded(arrival, stream, service, n, cap, replace):
    """The compiled kernel's body run by the Python interpreter (for the comparison only)."""
    from streamjoin.pipelines.capacity.queueing import _bounded_kernel  # noqa: PLC2701 - benchmark only
    return _bounded_kernel(arrival, stream, service, n, cap, replace)


def kernels(config: Path) -> dict[str, float]:
    from streamjoin.pipelines.capacity import queueing
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.io.load import load_all
    from streamjoin.pipelines.replay.progress import build_replay

    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve(config, Flags(out=str(Path(tmp) / "o"), engine="local"))
        streams = load_all(list(cfg.streams), cfg.max_quarantine)
    replay = build_replay([s.ts for s in streams], [s.arrival for s in streams])
    t_ns = queueing.relative_ns(replay.arrival)
    stream = replay.stream.astype(np.int64)
    service = np.full(replay.N, 700_000, np.int64)
    queueing.bounded_queue(t_ns[:10], stream[:10], service[:10], replay.n, 50, True)   # compile / load the cache
    out = {"N": replay.N}
    for name, fn in (("numba", queueing.bounded_queue), ("python", python_bounded)):
        t0 = time.perf_counter()
        fn(t_ns, stream, service, replay.n, 50, True)
        out[f"bounded_{name}_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    queueing.lindley(t_ns, service)
    out["lindley_numpy_s"] = time.perf_counter() - t0
    return out


#: the sweep: 350us + 25us per result is about half of one operator on samples/sensors;
#: CPU shares from 1 (capacity 2x the load) to 0.25 (0.5x)
SWEEP_BASE = "tuple=350us,result=25us"
SWEEP_CPU = (1.0, 0.667, 0.5, 0.333, 0.25)
SWEEP_QUEUES = ("", ",queue=1000,shed=drop-new", ",queue=1000,shed=replace-oldest")


def sweep(config: Path) -> None:
    """One run per CPU share and queue mode: offered load, recall, latency, shed tuples (a markdown table)."""
    print("| cpu | offered load | queue | recall | lost to capacity | latency p50 | latency p99 | "
          "queueing p99 | shed |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for cpu in SWEEP_CPU:
            for queue in SWEEP_QUEUES:
                option = f"{SWEEP_BASE},cpu={cpu}{queue}"
                done = subprocess.run([sys.executable, "-m", "streamjoin.cli.main", "run", str(config), "--engine",
                                       "local", "--no-results", "--json", "--out", str(Path(tmp) / "o"),
                                       "--capacity", option], check=True, capture_output=True, cwd=config.parent)
                r = json.loads(done.stdout)
                c = r["capacity"]
                shed = c["shed"]["queue_drop_new"] + c["shed"]["queue_replaced"]
                print(f"| {cpu} | {c['offered_load']:.2f} | {queue.split('shed=')[-1] or 'unbounded'} | "
                      f"{r['recall']:.4f} | {c['recall_lost_to_capacity']:.4f} | {r['latency_us']['p50'] / 1000:.1f} ms | "
                      f"{r['latency_us']['p99'] / 1000:.1f} ms | {c['queueing_delay_us']['p99'] / 1000:.1f} ms | "
                      f"{shed:,} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--config", type=Path, default=ROOT / "samples" / "sensors" / "sensors.toml")
    ap.add_argument("--sweep", action="store_true", help="recall / latency / shed tuples against the CPU share")
    a = ap.parse_args()
    config = a.config.resolve()
    if a.sweep:
        sweep(config)
        return
    k = kernels(config)
    print(f"kernels over N={k['N']:,} arrivals: bounded queue numba {k['bounded_numba_s']:.4f} s, "
          f"plain Python {k['bounded_python_s']:.3f} s, Lindley numpy {k['lindley_numpy_s']:.4f} s")
    for option in CAPACITY.values():
        t = whole_process(config, a.runs, option)
        med = {key: statistics.median(v) for key, v in t.items()}
        print(f"whole process, median of {a.runs} alternating runs: plain {med['plain']:.2f} s, "
              f"--capacity {option} {med['capacity']:.2f} s (ratio {med['capacity'] / med['plain']:.2f}); "
              f"join.capacity stage {med['join.capacity']:.3f} s")


if __name__ == "__main__":
    main()
