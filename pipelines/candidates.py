"""Truth: every valid combination (SPEC §3), enumerated on whole columns.

A combination ``c = (t_0 in S_0, ..., t_{n-1} in S_{n-1})`` is valid iff its
members agree on every key column and, for every member ``k``,
``max_ts(c) - t_k.ts <= W_k``.  That window condition is exactly the set of
pairwise *band* conditions

    for every pair j, k:   -W_k  <=  t_k.ts - t_j.ts  <=  W_j

(the newest member is one of the pair, so pairwise bands imply the n-way
condition, and the n-way condition implies every pair's band).

Combinations are grown one stream at a time around member 0 (the *anchor*).
For stream ``k`` the band with the anchor is a contiguous range once stream
``k`` is sorted by ``(key, ts)``::

    stream k sorted:  ... | key 7: 3 8 12 15 19 27 ... | key 8: ...
    anchor (key 7, t_0 = 14), W_k = 4, W_0 = 5:  t_k in [10, 19]
                                    ^^^^^^^^^^ lo..hi by two binary searches

so every candidate is produced exactly once by ``searchsorted`` + ``repeat``
with no filtering at all for two streams, and for ``n >= 3`` only the bands
between non-anchor members remain to be checked.  Work is linear in the
output plus ``O(N log N)`` for the sorts: never a cross product.

``(key, ts)`` is packed into one int64 (``key_id * span + ts - base``) so a
single sorted array serves both.  When that packing would overflow (enormous
key counts times enormous time spans) the *bucket join* is used instead: an
equi-join on ``(key, floor((t_k + W_k) / B))`` against both buckets
``floor(t_0 / B)`` and ``+1`` with ``B = W_0 + W_k + 1``, then a band filter.
Both methods are property-tested against the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

PACK_LIMIT = 2**62


@dataclass
class Combos:
    """Valid combinations as parallel int64 columns.

    ``rows[k][c]`` is the row (in stream ``k``) of combination ``c``'s member
    ``k`` (int32 where rows fit); :meth:`ts` gathers members' event times on
    demand, since not every consumer needs them.
    """

    rows: list[np.ndarray]
    stream_ts: Sequence[np.ndarray]

    def __len__(self) -> int:
        return int(self.rows[0].shape[0]) if self.rows else 0

    def ts(self, k: int) -> np.ndarray:
        """Event time of member ``k`` of every combination."""
        return self.stream_ts[k][self.rows[k]]


def key_ids(keys: Sequence[pl.DataFrame | None]) -> list[np.ndarray] | None:
    """Dense int64 ids for the key columns, shared by every stream.

    Args:
        keys: per stream, key columns ``__key0..`` (same dtypes everywhere),
            or all ``None`` for a time-only join.
    Returns: per stream an int64 array of key ids, or ``None`` without keys.
    """
    if not keys or keys[0] is None or keys[0].width == 0:
        return None
    sizes = [k.height for k in keys]
    allk = pl.concat(list(keys), how="vertical")
    if allk.width == 1 and allk.dtypes[0].is_integer() and allk.height:
        col = allk.to_series()
        lo, hi = col.min(), col.max()
        if hi - lo < 2**31:  # small integer range: the values are ids already
            ids = (col.cast(pl.Int64) - lo).to_numpy()
        else:
            ids = col.rank("dense").cast(pl.Int64).to_numpy()
    else:
        expr = pl.struct(allk.columns) if allk.width > 1 else pl.col(allk.columns[0])
        ids = allk.select(expr.rank("dense").cast(pl.Int64)).to_series().to_numpy() if allk.height else np.empty(0, np.int64)
    out, offset = [], 0
    for s in sizes:
        out.append(np.ascontiguousarray(ids[offset:offset + s]))
        offset += s
    return out


def _band_ok(rows, ts, W, k) -> np.ndarray:
    """Bands between member k and members 1..k-1 (the anchor's band holds)."""
    ok = np.ones(len(rows[0]), dtype=bool)
    tk = ts[k][rows[k]]  # gathered here only for n >= 3
    for j in range(1, k):
        tj = ts[j][rows[j]]
        ok &= (tk - tj <= W[j]) & (tj - tk <= W[k])
    return ok


def index_dtype(*sizes: int):
    """int32 row indexes when they fit: half the memory traffic of int64."""
    return np.int32 if max(sizes, default=0) < 2**31 else np.int64


def enumerate_sorted(ts: Sequence[np.ndarray], ids: list[np.ndarray] | None, windows: Sequence[int]) -> Combos | None:
    """Sorted-range enumeration; ``None`` if ``(key, ts)`` cannot be packed."""
    n = len(ts)
    W = [int(w) for w in windows]
    idx = index_dtype(*(len(t) for t in ts))
    if any(len(t) == 0 for t in ts):
        return Combos([np.empty(0, idx) for _ in range(n)], ts)
    tmin = min(int(t.min()) for t in ts)
    tmax = max(int(t.max()) for t in ts)
    wmax = max(W)
    base = tmin - wmax - 1
    span = tmax - tmin + 2 * wmax + 3
    kmax = max(int(i.max()) for i in ids) if ids is not None else 0
    if (kmax + 1) * span >= PACK_LIMIT:
        return None

    def packed(k: int) -> np.ndarray:
        v = ts[k] - base
        return v if ids is None else ids[k] * span + v

    # Anchors in (key, ts) order: the binary searches then walk the sorted
    # array monotonically, which is several times faster than random probes.
    v0 = packed(0)
    # ties (same key and ts) may come in any order: the set is the same, and
    # the unstable sort is twice as fast (and still deterministic)
    anchor_order = np.argsort(v0).astype(idx, copy=False)
    rows = [anchor_order]
    anchor_v = v0[anchor_order]
    for k in range(1, n):
        vk = packed(k)
        order = np.argsort(vk).astype(idx, copy=False)
        vs = vk[order]
        lo = np.searchsorted(vs, anchor_v - W[k], side="left")
        hi = np.searchsorted(vs, anchor_v + W[0], side="right")
        counts = hi - lo
        total = int(counts.sum())
        parent = np.repeat(np.arange(len(counts), dtype=index_dtype(len(counts))), counts)
        # position in `vs` of each output: lo of its anchor + its rank in the run
        shift = lo - (np.cumsum(counts) - counts)
        pos = np.arange(total, dtype=np.int64)
        pos += shift[parent]
        rows = [r[parent] for r in rows] + [order[pos]]
        if k < n - 1:
            anchor_v = anchor_v[parent]
        if k >= 2:
            ok = _band_ok(rows, ts, W, k)
            rows = [r[ok] for r in rows]
            if k < n - 1:
                anchor_v = anchor_v[ok]
    return Combos(rows, ts)


def enumerate_bucketed(ts: Sequence[np.ndarray], ids: list[np.ndarray] | None, windows: Sequence[int]) -> Combos:
    """Bucket equi-join enumeration (works for any key count and time span)."""
    n = len(ts)
    W = [int(w) for w in windows]

    def frame(k):
        cols = {f"r{k}": np.arange(len(ts[k]), dtype=np.int64), f"t{k}": ts[k]}
        if ids is not None:
            cols["_key"] = ids[k]
        return pl.DataFrame(cols)

    on = ["_key", "_b"] if ids is not None else ["_b"]
    combos = frame(0)
    for k in range(1, n):
        B = W[0] + W[k] + 1
        right = frame(k).with_columns(((pl.col(f"t{k}") + W[k]) // B).alias("_b"))
        left_b = pl.col("t0") // B
        left = pl.concat([combos.with_columns(left_b.alias("_b")), combos.with_columns((left_b + 1).alias("_b"))])
        joined = left.join(right, on=on, how="inner").drop("_b")
        band = [
            ((pl.col(f"t{k}") - pl.col(f"t{j}")) <= W[j]) & ((pl.col(f"t{j}") - pl.col(f"t{k}")) <= W[k])
            for j in range(k)
        ]
        combos = joined.filter(pl.all_horizontal(band))
    idx = index_dtype(*(len(t) for t in ts))
    return Combos([combos[f"r{k}"].to_numpy().astype(idx) for k in range(n)], ts)


def enumerate_truth(ts: Sequence[np.ndarray], keys: Sequence[pl.DataFrame | None], windows: Sequence[int],
                    method: str = "auto") -> Combos:
    """All valid combinations (see :class:`Combos`).

    Args:
        ts: per stream, event times (int64 us) in row order.
        keys: per stream, key columns ``__key0..`` or ``None`` (time only).
        windows: ``W_k`` in microseconds.
        method: ``"auto"`` (sorted ranges, bucket join if packing overflows),
            ``"sorted"`` or ``"bucket"``.
    Guarantees: each valid combination appears exactly once.
    """
    ts = [np.asarray(t, dtype=np.int64) for t in ts]
    ids = key_ids(keys)
    if method in ("auto", "sorted"):
        out = enumerate_sorted(ts, ids, windows)
        if out is not None:
            return out
        if method == "sorted":
            raise OverflowError("(key, ts) cannot be packed into int64 for this input")
    return enumerate_bucketed(ts, ids, windows)
