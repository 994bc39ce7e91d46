"""The local (whole-column) engine behind the reference replay's signature."""

from __future__ import annotations

import numpy as np
import polars as pl

from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import SORTING, PolicySpec
from streamjoin.pipelines.reference import RefTuple, ReferenceResult


def _keys_frame(stream: list[RefTuple]) -> pl.DataFrame | None:
    width = len(stream[0].key) if stream else 0
    if width == 0:
        return None
    return pl.DataFrame({f"__key{i}": pl.Series([t.key[i] for t in stream], dtype=pl.Int64) for i in range(width)})


def local_engine(streams: list[list[RefTuple]], windows: tuple[int, ...], policy: PolicySpec) -> ReferenceResult:
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    key_width = max((len(t.key) for s in streams for t in s), default=0)
    if key_width:
        keys = [
            _keys_frame(s) if s else pl.DataFrame({f"__key{i}": pl.Series([], dtype=pl.Int64) for i in range(key_width)})
            for s in streams
        ]
    else:
        keys = [None] * len(streams)
    out = join(ts, arrival, keys, windows, policy)
    n = len(streams)
    rows = [out.combos[f"r{k}"].to_list() for k in range(n)]
    combos = list(zip(*rows)) if n else []
    emitted_mask = out.combos["emitted"].to_list()
    emit_us = out.combos["emit_us"].to_list()
    latency = out.combos["latency_us"].to_list()
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
