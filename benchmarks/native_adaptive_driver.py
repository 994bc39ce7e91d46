"""Driver memory of the recall-target controllers on the native Spark path (issue 19):
what :func:`~streamjoin.pipelines.engines.spark.native_adaptive.decide_from_table` holds.

    python benchmarks/native_adaptive_driver.py [--sizes 0.25 0.5 1] [--policy qjoin qkslack]

For each size (million tuples, two keyed streams of equal size, 16 keys, W = 100 ms,
delays exponential with mean 2 ms plus 1 % late by up to 2 s, a 10 s period, Q = 0.95)
the Arrow table the driver collects (``stream``, ``row``, ``ts``, ``arrival``, key) is
built, then ``decide_from_table`` runs under ``tracemalloc``: the peak of the Python heap
(numpy's arrays included) above the collected table, per input tuple, and the wall time.
The collected table's own size is printed apart, and the most tuples one decision's
statistics read (its history window -- the latest ``history_us``, widened back to
``10 / (1 - Q)`` tuples -- plus the tuples arrived since the previous decision, as
``Controller._decide`` slices them, recomputed here from the log's decision times):
what a sliding-window controller would hold instead of all N.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import pyarrow as pa

from streamjoin.pipelines.engines.spark.native_adaptive import decide_from_table
from streamjoin.pipelines.policies import PolicySpec, RecallTarget
from streamjoin.pipelines.policies.recall_target import TAIL_SAMPLES


def table(n_tuples: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    m = n_tuples // 2
    parts = []
    for k in range(2):
        ts = np.sort(rng.integers(0, 600_000_000, m))
        late = rng.random(m) < 0.01
        arrival = ts + rng.exponential(2_000, m).astype(np.int64) + late * rng.integers(0, 2_000_000, m)
        parts.append(pa.table({"stream": np.full(m, k, np.int32), "row": np.arange(m, dtype=np.int64),
                               "ts": ts, "arrival": arrival, "__key0": rng.integers(0, 16, m)}))
    return pa.concat_tables(parts)


def window(arrival: np.ndarray, times, history_us: int, q: float) -> int:
    """The most tuples one decision's statistics read (module docstring)."""
    tail = int(np.ceil(TAIL_SAMPLES / max(1.0 - q, 1e-3)))
    most, committed = 0, 0
    for t in times:
        hi = int(np.searchsorted(arrival, t, side="right"))
        start = max(min(int(np.searchsorted(arrival, t - history_us, side="right")), hi - tail), 0)
        most = max(most, hi - min(start, committed))
        committed = hi
    return most


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    ap.add_argument("--policy", nargs="+", default=["qjoin", "qkslack"])
    args = ap.parse_args()
    print("| policy | input tuples | collected table MB | controller peak MB | bytes per tuple | decisions "
          "| most tuples one decision reads | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.policy:
        for size in args.sizes:
            N = int(size * 1e6) // 2 * 2
            t = table(N)
            policy = PolicySpec(name, target=RecallTarget(0.95, period_us=10_000_000))
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            _, log, settings = decide_from_table(t, n=2, sizes=[N // 2, N // 2], W=[100_000, 100_000], policy=policy,
                                          bad_arrivals=None, keycols=["__key0"])
            wall = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            reads = window(np.sort(t.column("arrival").to_numpy()), [e["time_us"] for e in log],
                           settings["history_us"], policy.target.recall)
            print(f"| {name} | {N:,} | {t.nbytes / 1e6:.1f} | {peak / 1e6:.1f} | {peak / N:.0f} | {len(log)} "
                  f"| {reads:,} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
