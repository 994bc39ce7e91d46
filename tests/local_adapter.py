"""The local (whole-column) engine behind the reference replay's signature."""

from __future__ import annotations

import numpy as np
import polars as pl

from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import SORTING, PolicySpec
from streamjoin.pipelines.reference import RefTuple, ReferenceResult


def _key_frames(streams: list[list[RefTuple]]) -> list[pl.DataFrame | None]:
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
                 method: str = "auto") -> ReferenceResult:
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    keys = _key_frames(streams)
    out = join(ts, arrival, keys, windows, policy, candidates_method=method)
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
