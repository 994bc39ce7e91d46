"""Driver memory of the recall-target controllers on the native Spark path (issue 19):
what the driver's Python process holds while deciding, before and after the streaming
controller.

    python benchmarks/native_adaptive_driver.py [--sizes 0.5 1 2] [--policy qjoin qkslack]

For each size (million tuples, two keyed streams of equal size, 16 keys, W = 100 ms,
600 s of event time -- or, ``--rate``, 1,200 s per million tuples: a constant rate --, delays exponential with mean 2 ms plus 1 % late by up to 2 s, a 10 s period, Q = 0.95)
the tuples are built in replay order (Arrow record batches of 10,000 rows, Spark's
``maxRecordsPerBatch``), then, under ``tracemalloc`` (the peak of the Python heap,
numpy's arrays included, above the built input, per input tuple), either

* ``whole`` -- what the native path did before: the batches concatenated into one
  table (the collected frame), the replay built and the whole-array controller run
  (the local engine's ``adaptive_schedule``), or
* ``stream`` -- what it does now: ``native_adaptive.feed_chunks`` feeds the batches to
  the streaming controller (chunks of ``CHUNK_ROWS``), with the per-bucket later-ts
  bounds the driver gets from Spark.

``--rss``: each run in a fresh process instead, reporting the RSS it has before
deciding (input built) and its peak RSS while deciding (``VmHWM``, reset through
``/proc/self/clear_refs`` just before; Linux): the whole process, interpreter and
libraries included.

Both logs must be equal (checked).  ``held`` is the most tuples the streaming
controller held at once (window, partner counters, per-stream arrivals).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
import tracemalloc

import numpy as np
import pyarrow as pa

from streamjoin.pipelines.engines.spark.native_adaptive import FLOOR_BUCKETS, feed_chunks
from streamjoin.pipelines.policies import PolicySpec, RecallTarget, adaptive_schedule
from streamjoin.pipelines.policies.controller import streaming
from streamjoin.pipelines.replay.progress import build_replay

BATCH = 10_000


def replay_batches(n_tuples: int, span_us: int, seed: int = 1) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    m = n_tuples // 2
    stream, ts, arrival, key, row = [], [], [], [], []
    for k in range(2):
        t = np.sort(rng.integers(0, span_us, m))
        late = rng.random(m) < 0.01
        stream.append(np.full(m, k, np.int32))
        ts.append(t)
        arrival.append(t + rng.exponential(2_000, m).astype(np.int64) + late * rng.integers(0, 2_000_000, m))
        key.append(rng.integers(0, 16, m))
        row.append(np.arange(m))
    s, t, a, kid, r = (np.concatenate(x) for x in (stream, ts, arrival, key, row))
    order = np.lexsort([r, s, a])   # replay order: arrival, stream, row
    tab = pa.table({"stream": s[order], "ts": t[order], "arrival": a[order], "__kid": kid[order]})
    return tab.to_batches(max_chunksize=BATCH)


def whole(batches, policy, W, _):
    t = pa.Table.from_batches(batches)
    s, ts, arr, kid = (t.column(c).to_numpy() for c in ("stream", "ts", "arrival", "__kid"))
    replay = build_replay([ts[s == i] for i in range(2)], [arr[s == i] for i in range(2)])
    return adaptive_schedule(replay, W, policy, None, [kid[s == i] for i in range(2)]).log, None


def summaries(batches) -> dict:
    """What the driver gets from Spark before streaming (aggregations, not measured):
    first and last arrival, ts range, largest key id, the per-bucket later-ts bounds."""
    t = pa.Table.from_batches(batches)
    ts, arr = t.column("ts").to_numpy(), t.column("arrival").to_numpy()
    first, last = int(arr[0]), int(arr[-1])
    width = -(-(last - first + 1) // FLOOR_BUCKETS)
    floors = np.full(FLOOR_BUCKETS + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(floors, (arr - first) // width, ts)
    return {"first": first, "last": last, "width": width, "floors": np.minimum.accumulate(floors[::-1])[::-1],
            "ts_range": (int(ts.min()), int(ts.max())), "key_max": int(t.column("__kid").to_numpy().max())}


def stream(batches, policy, W, sm):
    ctl = streaming(policy.name, 2, W, policy.target, first_arrival=sm["first"], last_arrival=sm["last"],
                    ts_range=sm["ts_range"], key_max=sm["key_max"])
    feed_chunks(ctl, iter(batches), sm["floors"], sm["first"], sm["width"])
    return ctl.on_eof().log, ctl.w.held_peak


def rss_run(args) -> tuple:
    """In a fresh process: (RSS before deciding MB, peak RSS MB, log, held) of one mode."""
    mode, name, N, span_us = args
    batches = replay_batches(N, span_us)
    sm = summaries(batches)
    policy = PolicySpec(name, target=RecallTarget(0.95, period_us=10_000_000))
    with open("/proc/self/clear_refs", "w") as f:   # the peak (VmHWM) restarts from the current RSS
        f.write("5")
    before = _status("VmRSS")
    log, held = {"whole": whole, "stream": stream}[mode](batches, policy, np.array([100_000, 100_000]), sm)
    return before, _status("VmHWM"), log, held


def _status(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1e3


def main_rss(args) -> None:
    print("| policy | input tuples | mode | RSS before MB | peak RSS MB | added MB | held tuples |")
    print("|---|---|---|---|---|---|---|")
    ctx = multiprocessing.get_context("spawn")
    for name in args.policy:
        for size in args.sizes:
            N = int(size * 1e6) // 2 * 2
            span = int(1_200e6 * size) if args.rate else 600_000_000
            logs = {}
            for mode in args.modes:
                with ctx.Pool(1) as pool:
                    before, peak, logs[mode], held = pool.apply(rss_run, ((mode, name, N, span),))
                print(f"| {name} | {N:,} | {mode} | {before:.0f} | {peak:.0f} | {peak - before:.0f} "
                      f"| {'' if held is None else f'{held:,}'} |", flush=True)
            if len(logs) == 2:
                assert logs["whole"] == logs["stream"], "the streaming controller must decide as the whole-array one"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--policy", nargs="+", default=["qjoin", "qkslack"])
    ap.add_argument("--rate", action="store_true",
                    help="a constant rate (1,200 s of event time per million tuples) instead of 600 s for every size")
    ap.add_argument("--modes", nargs="+", default=["whole", "stream"])
    ap.add_argument("--rss", action="store_true", help="peak RSS of a fresh process per run (module docstring)")
    args = ap.parse_args()
    if args.rss:
        return main_rss(args)
    W = np.array([100_000, 100_000])
    print("| policy | input tuples | mode | controller peak MB | bytes per tuple | decisions | held tuples | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.policy:
        policy = PolicySpec(name, target=RecallTarget(0.95, period_us=10_000_000))
        for size in args.sizes:
            N = int(size * 1e6) // 2 * 2
            batches = replay_batches(N, int(1_200e6 * size) if args.rate else 600_000_000)
            sm = summaries(batches)
            logs = {}
            for mode, fn in [(m, {"whole": whole, "stream": stream}[m]) for m in args.modes]:
                tracemalloc.start()
                base = tracemalloc.get_traced_memory()[0]
                t0 = time.perf_counter()
                logs[mode], held = fn(batches, policy, W, sm)
                wall = time.perf_counter() - t0
                peak = tracemalloc.get_traced_memory()[1] - base
                tracemalloc.stop()
                print(f"| {name} | {N:,} | {mode} | {peak / 1e6:.1f} | {peak / N:.0f} | {len(logs[mode])} "
                      f"| {'' if held is None else f'{held:,}'} | {wall:.1f} |", flush=True)
            if len(logs) == 2:
                assert logs["whole"] == logs["stream"], "the streaming controller must decide as the whole-array one"


if __name__ == "__main__":
    main()
