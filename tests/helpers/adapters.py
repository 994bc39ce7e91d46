"""The local (whole-column) engine behind the reference replay's signature."""

from __future__ import annotations

import numpy as np
import polars as pl

from streamjoin.pipelines.replay.candidates import Space
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.replay.predicates import compile_where, prefixed_columns, where_mask
from streamjoin.pipelines.policies import SORTING, PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, ReferenceResult


def parquet_ref_streams(data, names=("left", "right")) -> list[list[RefTuple]]:
    """The CLI tests' Parquet streams (``ts``, ``arrival``, ``key`` columns) under
    ``data`` as reference tuples, rows numbered in file order."""
    frames = [pl.read_parquet(data / f"{s}.parquet").with_columns(pl.col("ts", "arrival").cast(pl.Int64))
              for s in names]
    return [[RefTuple(i, r, t, a, (k,)) for r, (t, a, k) in enumerate(f.select("ts", "arrival", "key").rows())]
            for i, f in enumerate(frames)]


def key_frames(streams: list[list[RefTuple]]) -> list[pl.DataFrame | None]:
    """Key columns ``__key0..`` per stream, one dtype across streams (inferred)."""
    width = max((len(t.key) for s in streams for t in s), default=0)
    if width == 0:
        return [None] * len(streams)
    every = pl.DataFrame({f"__key{i}": [t.key[i] for s in streams for t in s] for i in range(width)})
    out, offset = [], 0
    for s in streams:
        out.append(every.slice(offset, len(s)))
        offset += len(s)
    return out


def local_engine(streams: list[list[RefTuple]], windows: tuple[int, ...], policy: PolicySpec,
                 method: str = "auto", *, distance: float | None = None, where: str | None = None,
                 order=None) -> ReferenceResult:
    """Run the local engine on reference tuples.

    ``distance``: every pair of members within this Euclidean distance on
    ``vec``; ``where``: a SQL expression over ``s{k}_v{d}``, ``s{k}_ts_us``,
    ``s{k}_arrival_us``, ``s{k}_row`` (stream ``k`` is named ``s{k}``).
    """
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    keys = key_frames(streams)
    dims = max((len(t.vec) for s in streams for t in s), default=0) or 2  # empty streams still have columns
    space = None
    if distance is not None:
        vectors = [np.array([t.vec for t in s], dtype=np.float64).reshape(len(s), dims) for s in streams]
        space = Space(vectors, float(distance))
    where_fn = None
    if where is not None:
        names = [f"s{k}" for k in range(len(streams))]
        payloads = [pl.DataFrame({f"v{d}": pl.Series([t.vec[d] for t in s], dtype=pl.Int64) for d in range(dims)})
                    for s in streams]
        compiled = compile_where(where, prefixed_columns(names, [p.columns for p in payloads]))

        def where_fn(combos):
            return where_mask(compiled, combos.rows, names, ts, arrival, payloads)
    out = join(ts, arrival, keys, windows, policy, candidates_method=method, space=space, where=where_fn,
               order=order)
    n = len(streams)
    rows = [r.tolist() for r in out.combos.rows]
    combos = list(zip(*rows)) if n else []
    emitted_mask = out.emission.emitted.tolist()
    emit_us = out.emission.emit_us.tolist()
    latency = out.emission.latency_us.tolist()
    emitted = {c: (e, l) for c, m, e, l in zip(combos, emitted_mask, emit_us, latency) if m}
    order = list(zip(out.replay.stream.tolist(), out.replay.row.tolist()))
    d = out.decisions
    flagged = d.dropped if d.family == SORTING else d.expired
    marked = {order[a] for a in np.flatnonzero(flagged).tolist()}
    return ReferenceResult(
        truth=set(combos),
        emitted=emitted,
        memory=out.memory.sum(axis=0).tolist(),
        dropped=marked if d.family == SORTING else set(),
        expired=marked if d.family != SORTING else set(),
        order=order,
    )


def local_engine_bucketed(streams, windows, policy) -> ReferenceResult:
    """The local engine forced onto the bucket-join enumeration (the overflow fallback)."""
    return local_engine(streams, windows, policy, method="bucket")
