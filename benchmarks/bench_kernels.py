"""The compiled passes of base/kernels.py against their numpy paths, on the core data (issue 21).

    python benchmarks/bench_kernels.py [--runs 7] [CONFIG]
    python benchmarks/bench_kernels.py --gil [--runs 7] [CONFIG]

One process loads the core data (``bench.toml``: 2M + 1M keyed tuples, W = 100 ms)
and times, alternating the two paths every round (kernel first on even rounds,
numpy first on odd ones; ``$STREAMJOIN_KERNELS=numpy`` selects the numpy path),
after one uncounted round:

* ``candidates``: truth enumeration (``enumerate_truth``, the two-stream band join,
  probe order right -> left as the engine chooses): the key-order kernel (the
  rows are in time order) replaces both value sorts and the band kernel the fill;
* ``progress``: ``build_replay`` (the replay order's sort, then the progress pass);
* ``count plan``: a run without results' band plan (issue 21, eighth pass):
  ``enumerate_sorted(..., plan=True, bounds=True)`` -- the key-order kernel and
  ``plan_bands`` (no packed column outside the call) -- against the numpy path,
  the packed plan and ``searchsorted`` of every band.

Medians of wall and CPU (``time.process_time``: all threads) with min..max.  The
kernels are built first if this machine has none (not timed); where they do
not load (no C compiler, no writable cache) it exits 1 with one line and
reports nothing.

``--gil`` (issue 21, fourth pass) times the local engine's whole ``join``
(static, retention 50 ms: both chains on two threads, as ``streamjoin run``)
with this machine's kernels, which release the GIL while they run, against
twins of the same three kernels built here with ``numba.pycc`` as before
(holding the GIL; built into a temporary directory first, not timed),
alternating every round.  The same arrays either way (checked).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import polars as pl

from streamjoin.pipelines.base import jit, kernels
from streamjoin.pipelines.base.sorting import sorted_band_ranges
from streamjoin.pipelines.replay.candidates import BandPlan, enumerate_sorted, enumerate_truth, key_ids
from streamjoin.pipelines.replay.progress import build_replay

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_core import ensure_data  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="counted rounds after one warm-up round (default 7)")
    ap.add_argument("--gil", action="store_true",
                    help="the engine's join with the kernels releasing the GIL against GIL-holding twins")
    ap.add_argument("config", nargs="?", type=Path, help="a bench.toml (default: the core data, generated if absent)")
    args = ap.parse_args()
    # built (or loaded) before anything is timed -- or no report: "kernel" would time the numpy path
    os.environ.pop(jit.KERNELS_ENV, None)
    kernels.ensure_built()
    how = {f.__name__: jit.how(f) for f in (kernels._band_fill, kernels._key_order, kernels._progress_pass)}
    if not set(how.values()) <= {"aot", "aot-built"}:
        sys.exit(f"bench_kernels: the compiled kernels did not load ({how}); nothing to compare")
    if args.gil:
        gil_ab(args.config or ensure_data(1.0), args.runs)
        return
    root = (args.config or ensure_data(1.0)).parent
    left, right = (pl.read_parquet(root / f"{s}.parquet") for s in ("left", "right"))
    ts = [left["ts"].to_numpy(), right["ts"].to_numpy()]
    arrival = [left["arrival"].to_numpy(), right["arrival"].to_numpy()]
    keys = [left.select(pl.col("key").alias("__key0")), right.select(pl.col("key").alias("__key0"))]
    W = [100_000, 100_000]
    replay = build_replay(ts, arrival, keep_running_max=False)
    combos = enumerate_truth(ts, keys, W, order=[1, 0])
    parts = {
        "candidates": lambda: enumerate_truth(ts, keys, W, order=[1, 0]),
        "progress": lambda: build_replay(ts, arrival, keep_running_max=False),
        "count plan": lambda: count_plan(ts, keys, W),
    }
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for rnd in range(args.runs + 1):
        for side in (("kernel", "numpy") if rnd % 2 == 0 else ("numpy", "kernel")):
            if side == "numpy":
                os.environ[jit.KERNELS_ENV] = "numpy"
            else:
                os.environ.pop(jit.KERNELS_ENV, None)
            for name, fn in parts.items():
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                if rnd:
                    got.setdefault((name, side), []).append((wall, cpu))
    os.environ.pop(jit.KERNELS_ENV, None)
    med = statistics.median
    print(f"kernels: {how}; {len(combos):,} combinations, {replay.N:,} arrivals; {args.runs} rounds after a warm-up, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    head(f"{'part':<11} {'path':<7} {'wall s':>7} {'spread':>13} {'CPU s':>6} {'spread':>13}")
    for name in parts:
        for side in ("numpy", "kernel"):
            w = [x[0] for x in got[(name, side)]]
            c = [x[1] for x in got[(name, side)]]
            print(f"{name:<11} {side:<7} {med(w):>7.3f} {min(w):>6.3f}..{max(w):<6.3f} {med(c):>6.3f} "
                  f"{min(c):>6.3f}..{max(c):<6.3f}")


def count_plan(ts, keys, W):
    """The counted join's plan with its bands located (the engine's call, probe order right -> left)."""
    plan = enumerate_sorted(ts, key_ids(keys), W, None, [1, 0], plan=True, bounds=True)
    if isinstance(plan, BandPlan):   # the numpy path (or a stream out of time order)
        return plan, sorted_band_ranges(plan.sorted_values, plan.lo, plan.hi)
    return plan


def head(hdr: str) -> None:
    """A table's header line and its rule."""
    print(hdr)
    print("-" * len(hdr))


KERNELS = ((kernels._band_fill, kernels.BAND_SIGNATURE), (kernels._key_order, kernels.KEY_ORDER_SIGNATURE),
           (kernels._progress_pass, kernels.REPLAY_SIGNATURE))


def holding_twins(out_dir: str) -> dict:
    """The three kernels built with ``numba.pycc``'s defaults (the GIL held during a call), loaded."""
    import importlib.machinery
    import importlib.util
    import warnings

    from numba.pycc import CC

    twins = {}
    for fn, signature in KERNELS:
        name = "_bench_gil_" + fn.__name__.strip("_")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cc = CC(name)
            cc.output_dir = out_dir
            cc.verbose = False
            cc.export("kernel", signature)(fn)
            cc.compile()
        path = Path(out_dir) / (name + importlib.machinery.EXTENSION_SUFFIXES[0])
        assert b"PyEval_SaveThread" not in path.read_bytes()
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        twins[fn] = module.kernel
    return twins


def gil_ab(config: Path, runs: int) -> None:
    import tempfile

    import numpy as np

    from streamjoin.pipelines.base.allocator import no_huge_page_advice, reuse_freed_memory

    reuse_freed_memory()   # as the CLI does
    no_huge_page_advice()
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.engines.local import join
    from streamjoin.pipelines.io.load import load_all

    cfg = resolve(config, Flags(engine="local", policy="static", retention=["50ms"], out=None), check_out=False)
    streams = load_all(list(cfg.streams))
    args = ([s.ts for s in streams], [s.arrival for s in streams], [s.keys for s in streams], cfg.windows, cfg.policy)
    releasing = {fn: jit.prebuilt(fn, sig) for fn, sig in KERNELS}
    with tempfile.TemporaryDirectory() as tmp:
        holding = holding_twins(tmp)
        sides = {"releases GIL": releasing, "holds GIL": holding}
        got: dict[str, list[tuple[float, float, float, float]]] = {side: [] for side in sides}
        first = {}
        for rnd in range(runs + 1):
            for side in (list(sides) if rnd % 2 == 0 else list(sides)[::-1]):
                jit._KERNELS.update(sides[side])
                c0, t0 = time.process_time(), time.perf_counter()
                outcome = join(*args)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                t = outcome.timings_s
                key = (len(outcome.combos), int(np.count_nonzero(outcome.emission.emitted)))
                assert first.setdefault("key", key) == key
                del outcome
                if rnd:
                    got[side].append((wall, cpu, t["candidates"], t["progress"]))
        jit._KERNELS.update(releasing)
    med = statistics.median
    print(f"engine join (static 50ms), {first['key'][0]:,} combinations, {first['key'][1]:,} emitted; {runs} rounds "
          f"after a warm-up, load average {os.getloadavg()[0]:.1f} at the end")
    head(f"{'kernels':<13} {'wall s':>7} {'spread':>13} {'CPU s':>6} {'candidates s':>12} {'progress s':>10}  walls")
    for side, rs in got.items():
        w = [r[0] for r in rs]
        print(f"{side:<13} {med(w):>7.3f} {min(w):>6.3f}..{max(w):<6.3f} {med([r[1] for r in rs]):>6.3f} "
              f"{med([r[2] for r in rs]):>12.3f} {med([r[3] for r in rs]):>10.3f}  " + " ".join(f"{x:.2f}" for x in w))
    ratios = [a[0] / b[0] for a, b in zip(got["releases GIL"], got["holds GIL"])]
    print(f"releases / holds, wall: median {med(ratios):.2f} (rounds: " + ", ".join(f"{x:.2f}" for x in ratios) + ")")


if __name__ == "__main__":
    main()
