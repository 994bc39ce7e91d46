"""Routing benchmark (issue 4): ATR vs CTR replication and load balance.

    python benchmarks/bench_routing.py            # synthetic sweeps (no JVM, ~10 s)
    python benchmarks/bench_routing.py --soccer   # + the bundled soccer sample, 4 partitions

Synthetic streams are stationary (uniform event times, in-order arrival,
1000 keys so the join result stays small; replication does not depend on the
keys).  Routing, ownership and kernels are the Spark engine's, executed
in-process (``plane="local"``): the numbers are the engine's own
``report.json`` routing section.  Results are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

from streamjoin.pipelines.engines.spark.engine import spark_join
from streamjoin.pipelines.engines.spark.routing import RouteSettings
from streamjoin.pipelines.policies import PolicySpec

ROOT = Path(__file__).resolve().parents[1]


def stationary(rates, seconds, seed=4, keys=1000):
    rng = np.random.default_rng(seed)
    ts, kf = [], []
    for r in rates:
        m = int(r * seconds)
        ts.append(np.sort(rng.integers(0, int(seconds * 1e6), m)).astype(np.int64))
        kf.append(pl.DataFrame({"__key0": rng.integers(0, keys, m)}))
    return ts, kf


def row(label, g):
    print(f"{label:44s} {g['router']:4s} repl {g['replication_factor']:6.3f}  extra/s meas {g['overhead_measured']:8.1f}"
          f"  pred {g['overhead_predicted']:8.1f}  imbalance {g['load_imbalance']:.3f}")


def synthetic() -> None:
    cases = [
        ("3 x 300/s, W 1 s, T 0.5 s", [300] * 3, 1_000_000, 500_000),
        ("3 x 300/s, W 1 s, T 0.25 s", [300] * 3, 1_000_000, 250_000),
        ("3 x 300/s, W 0.2 s, T 0.5 s", [300] * 3, 200_000, 500_000),
        ("2000/s + 300/s, W 5/20 ms, T 0.5 s", [2000, 300], [5_000, 20_000], 500_000),
    ]
    for P in (4, 8):
        for label, rates, W, T in cases:
            ts, keys = stationary(rates, 20)
            Wl = W if isinstance(W, list) else [W] * len(rates)
            for router in ("atr", "ctr"):
                out = spark_join(ts, ts, keys, Wl, PolicySpec("none"), plane="local",
                                 settings=RouteSettings(router, P, T))
                row(f"P={P} {label}", out.routing)


def soccer() -> None:
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.io.load import load_all

    cfg = resolve(ROOT / "samples/soccer/soccer.toml", Flags(out="/tmp/bench_routing_unused"), check_out=False)
    streams = load_all(list(cfg.streams))
    ts = [s.ts for s in streams]
    ar = [s.arrival for s in streams]
    for router in ("atr", "ctr"):
        out = spark_join(ts, ar, [None, None], cfg.windows, cfg.policy, plane="local",
                         settings=RouteSettings(router, 4))
        row("soccer, mpkslack, 4 partitions", out.routing)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--soccer", action="store_true")
    args = ap.parse_args()
    synthetic()
    if args.soccer:
        soccer()


if __name__ == "__main__":
    sys.exit(main())
