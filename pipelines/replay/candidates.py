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
(or one compiled pass that walks the sorted bands with two pointers,
:func:`~streamjoin.pipelines.base.kernels.band_pairs`, where it is built: the
same arrays) with no filtering at all for two streams, and for ``n >= 3`` only the bands
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

from ..base import kernels
from ..base.sorting import PACK_LIMIT, gather_ranges, sorted_band_ranges, stable_order


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

    def filter(self, mask: np.ndarray) -> Combos:
        """The combinations where ``mask`` is true."""
        return Combos([r[mask] for r in self.rows], self.stream_ts)


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
    direct = _integer_ids(keys)
    if direct is not None:
        return direct
    allk = pl.concat(list(keys), how="vertical")
    if allk.width == 1 and allk.dtypes[0].is_integer() and allk.height:
        col = allk.to_series()
        lo, hi = col.min(), col.max()
        if hi - lo < 2**31:  # small integer range: the values are ids already
            ids = (col - lo).cast(pl.Int64).to_numpy()  # subtract first: a UInt64 above 2^63 does not fit Int64
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


def _integer_ids(keys: Sequence[pl.DataFrame]) -> list[np.ndarray] | None:
    """One integer key column over a small range: ``value - min`` per stream,
    straight from each stream's column (what :func:`key_ids` computes on the
    concatenation, without building it).  None when that does not apply."""
    if any(k.width != 1 for k in keys) or not any(k.height for k in keys):
        return None
    cols = [k.to_series() for k in keys]
    dtype = cols[0].dtype
    if not (dtype.is_signed_integer() or dtype in (pl.UInt8, pl.UInt16, pl.UInt32)):
        return None
    if any(c.dtype != dtype or c.null_count() for c in cols):
        return None
    values = [c.to_numpy() for c in cols]
    nonempty = [v for v in values if len(v)]
    lo = min(int(v.min()) for v in nonempty)
    hi = max(int(v.max()) for v in nonempty)
    if hi - lo >= 2**31:
        return None
    return [np.subtract(v, lo, dtype=np.int64) for v in values]


def index_dtype(*sizes: int):
    """int32 row indexes when they fit: half the memory traffic of int64."""
    return np.int32 if max(sizes, default=0) < 2**31 else np.int64


@dataclass(frozen=True)
class Space:
    """The distance predicate on vector columns, and its grid.

    Members must be within ``threshold`` (Euclidean) of each other.  The grid
    cell is a hair larger than the threshold, so two points within the
    threshold lie in the same or adjacent cells along every axis even after
    floating-point rounding; candidates are looked up in the ``3^d`` cells
    around one member and then checked exactly.
    """

    vectors: list[np.ndarray]        # per stream, float64 (rows, d)
    threshold: float

    @property
    def dims(self) -> int:
        return self.vectors[0].shape[1]

    @property
    def cell(self) -> float:
        return self.threshold * (1 + 1e-6) if self.threshold > 0 else 1.0

    def cells(self, k: int) -> np.ndarray:
        return np.floor(self.vectors[k] / self.cell).astype(np.int64)

    def offsets(self) -> np.ndarray:
        grid = np.array(np.meshgrid(*[[-1, 0, 1]] * self.dims, indexing="ij")).reshape(self.dims, -1).T
        return grid.astype(np.int64)

    def within(self, k: int, rows_k: np.ndarray, m: int, rows_m: np.ndarray) -> np.ndarray:
        """Exact check: squared distance between members ``k`` and ``m`` <= threshold^2."""
        a, b = self.vectors[k], self.vectors[m]
        sq = np.zeros(len(rows_k), dtype=np.float64)
        for d in range(self.dims):
            diff = a[rows_k, d] - b[rows_m, d]
            sq += diff * diff
        return sq <= self.threshold * self.threshold


def _grid_radix(space: Space | None) -> tuple[list[np.ndarray] | None, np.ndarray, list[int]]:
    """Cells per stream, the origin (min cell - 1) and the radix per axis."""
    if space is None:
        return None, np.zeros(0, np.int64), []
    cells = [space.cells(k) for k in range(len(space.vectors))]
    nonempty = [c for c in cells if len(c)]
    if not nonempty:
        return cells, np.zeros(space.dims, np.int64), [1] * space.dims
    lo = np.min([c.min(axis=0) for c in nonempty], axis=0) - 1
    hi = np.max([c.max(axis=0) for c in nonempty], axis=0) + 1
    return cells, lo, [int(h - l) + 1 for h, l in zip(hi, lo)]


def compact_ids(ids: list[np.ndarray]) -> list[np.ndarray]:
    """The key ids renumbered ``0..K-1`` over the ids present (same equalities).

    Integer keys arrive from :func:`key_ids` as ``value - min``, which can be
    sparse (the benchmark's keys are multiples of 1009).  Compact ids pack
    ``(key, ts)`` into fewer bits, so :func:`enumerate_sorted`'s sorts stay
    on the one-pass path of :func:`~streamjoin.pipelines.base.sorting.stable_order`
    (and the packing overflows less often).  A lookup table makes it
    ``O(rows + id range)``, so it is only done when the id range is at most
    a few times the row count; otherwise (or for negative or already
    compact ids) ``ids`` are returned unchanged.
    """
    nonempty = [i for i in ids if len(i)]
    if not nonempty:
        return ids
    rows = sum(len(i) for i in nonempty)
    if min(int(i.min()) for i in nonempty) < 0:
        return ids
    radix = max(int(i.max()) for i in nonempty) + 1
    if radix > 2 * rows + 4096:
        return ids
    present = np.zeros(radix, dtype=bool)
    for i in nonempty:
        present[i] = True
    rank = np.cumsum(present, dtype=index_dtype(radix))  # id -> 1 + its rank among the ids present
    if int(rank[-1]) == radix:
        return ids
    rank -= 1
    return [rank[i] for i in ids]


@dataclass
class BandPlan:
    """A two-stream band join before its fill: the queries (rows of stream
    ``query_stream``, in the stable order of their band starts) with their bands
    ``[lo, hi]`` over the sorted codes of stream ``stored_stream`` (the row of
    each code in ``stored_rows``).  :func:`band_pairs` fills it into the pairs;
    :func:`~streamjoin.pipelines.replay.counting.count_pairs` counts them in
    the same order without building them."""

    query_stream: int
    stored_stream: int
    sorted_values: np.ndarray
    stored_rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    query_rows: np.ndarray


@dataclass
class BandBounds:
    """A :class:`BandPlan` with its bands located and its packed codes gone: the
    queries (rows of ``query_stream``, int32, in the stable order of their band
    starts), the stored rows of ``stored_stream`` in the stable order of their
    codes (int32), and each query's band as the positions ``[start, end)`` of
    that order (int32; ``total`` pairs) -- what :func:`~streamjoin.pipelines.base.kernels.bands`
    gives for the plan, from :func:`~streamjoin.pipelines.base.kernels.plan_bands`."""

    query_stream: int
    stored_stream: int
    stored_rows: np.ndarray
    query_rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    total: int


def enumerate_sorted(ts: Sequence[np.ndarray], ids: list[np.ndarray] | None, windows: Sequence[int],
                     space: Space | None = None, order: Sequence[int] | None = None, *,
                     plan: bool = False, bounds: bool = False) -> Combos | BandPlan | BandBounds | None:
    """Sorted-range enumeration; ``None`` if ``(key, cell, ts)`` cannot be packed into int64.

    ``plan`` (two streams, no distance predicate, no empty stream): the
    :class:`BandPlan` whose fill would be the combinations, not the fill
    (``None`` where it does not apply); with ``bounds`` too, its
    :class:`BandBounds` where both streams' rows are in time order within each
    key and the kernels are built (the counting sorts and
    :func:`~streamjoin.pipelines.base.kernels.plan_bands`: no packed column is
    built), the :class:`BandPlan` otherwise.

    Partial combinations grow one stream at a time in ``order``.  Every
    member of a partial combination has the same key, and the band
    conditions with all of them intersect into one time range for the next
    stream ``k``::

        t_k in [ max_j t_j - W_k ,  min_j (t_j + W_j) ]

    so a single binary-searched range per partial combination (per
    neighbouring cell with a distance predicate) yields exactly the
    time-and-key-valid extensions; only distances are checked afterwards.

    Guarantees: the same set for every ``order``, and a deterministic output
    order (both sorts are stable: tied members in row order, tied partial
    combinations in the order they were produced).
    """
    n = len(ts)
    W = [int(w) for w in windows]
    order = list(order) if order is not None else list(range(n))
    idx = index_dtype(*(len(t) for t in ts))
    if plan and (n != 2 or space is not None or any(len(t) == 0 for t in ts)):
        return None
    if any(len(t) == 0 for t in ts):
        return Combos([np.empty(0, idx) for _ in range(n)], ts)
    input_rows = sum(len(t) for t in ts)   # the kernels' size gate: the run's rows, not its partial combinations
    tmin = min(int(t.min()) for t in ts)
    tmax = max(int(t.max()) for t in ts)
    wmax = max(W)
    base = tmin - wmax - 1
    span = tmax - tmin + 2 * wmax + 3
    if ids is not None:
        ids = compact_ids(ids)
    kradix = (max(int(i.max()) for i in ids) + 1) if ids is not None else 1
    cells, origin, radix = _grid_radix(space)
    ncodes = kradix
    for r in radix:
        ncodes *= r
    if ncodes * span >= PACK_LIMIT:
        return None

    def code(key: np.ndarray | None, cell: np.ndarray | None, size: int) -> np.ndarray:
        c = key.astype(np.int64) if key is not None else np.zeros(size, np.int64)
        if cell is not None:
            for d, r in enumerate(radix):
                c = c * r + (cell[:, d] - origin[d])
        return c

    first = order[0]
    if plan and bounds and idx == np.int32:
        got = _band_bounds(ts, ids, W, first, order[1], kradix, span, base)
        if got is not None:
            return got
    n_first = len(ts[first])
    rows: dict[int, np.ndarray] = {first: np.arange(n_first, dtype=idx)}
    p_key = ids[first] if ids is not None else None
    p_cell = cells[first] if cells is not None else None
    p_tmax = ts[first]
    p_tlim = ts[first] + W[first]
    offsets = space.offsets() if space is not None else [None]
    for step, k in enumerate(order[1:], start=1):
        # vk = code * span + (ts - base), in place in code()'s fresh array;
        # int64 arithmetic wraps, so the final value (which fits) is exact
        # even if a partial sum overflows
        vk = code(ids[k] if ids is not None else None, cells[k] if cells is not None else None, len(ts[k]))
        vk *= span
        vk += ts[k]
        vk -= base
        # stable order (ties -- same key, cell and ts -- in row order), by a
        # value sort: several times faster than np.argsort (see sorting.py)
        # rows already in time order within each key: a counting sort by key gives the same order
        by_key = kernels.key_order(ids[k] if ids is not None else None, ts[k], kradix) \
            if cells is None and idx == np.int32 else None
        korder, vs = (by_key, vk[by_key]) if by_key is not None else stable_order(vk, idx, overwrite=True)
        del vk, by_key
        size = len(p_tmax)
        qidx = index_dtype(size)
        # the first stream's bands start at (key, ts) shifted: the same shortcut orders them
        q_order = kernels.key_order(p_key, ts[first], kradix) \
            if step == 1 and cells is None and qidx == np.int32 else None
        parents, members = [], []
        for off in offsets:
            cell = None if off is None else p_cell + off
            qcode = code(p_key, cell, size)  # a fresh array: shifted in place, as vk
            qcode *= span
            hi_q = qcode + p_tlim
            hi_q -= base
            lo_q = qcode
            lo_q += p_tmax
            lo_q -= W[k] + base
            del qcode
            if plan:   # two streams: this is the only band join
                return BandPlan(first, k, vs, korder, *band_queries(lo_q, hi_q, qidx, q_order))
            pairs = band_pairs(vs, korder, lo_q, hi_q, qidx, lo_order=q_order, input_rows=input_rows)
            del lo_q, hi_q
            parents.append(pairs[0])
            members.append(pairs[1])
            del pairs
        parent = np.concatenate(parents) if len(parents) > 1 else parents[0]
        new_rows = np.concatenate(members) if len(members) > 1 else members[0]
        del parents, members
        if space is not None:
            ok = np.ones(len(parent), dtype=bool)
            for m, r in rows.items():
                ok &= space.within(k, new_rows, m, r[parent])
            parent, new_rows = parent[ok], new_rows[ok]
        if step == 1:  # the first stream's rows are 0..n-1: the parents themselves
            rows = {first: parent.astype(idx, copy=False)}
        else:
            rows = {m: r[parent] for m, r in rows.items()}
        rows[k] = new_rows
        if step < n - 1:  # carry the partial combinations' state to the next stream
            tk = ts[k][new_rows]
            p_tmax = np.maximum(p_tmax[parent], tk)
            p_tlim = np.minimum(p_tlim[parent], tk + W[k])
            p_key = p_key[parent] if p_key is not None else None
            p_cell = p_cell[parent] if p_cell is not None else None
    return Combos([rows[k] for k in range(n)], ts)


def _band_bounds(ts, ids, W, first: int, k: int, kradix: int, span: int, base: int) -> BandBounds | None:
    """:class:`BandBounds` of the two-stream band join (``first`` queries ``k``), or
    ``None`` where a stream's times go back within a key or a kernel is not built."""
    if kradix >= 2**31:   # the kernel reads int32 key ids
        return None
    key_of = [None if ids is None else ids[s] for s in (first, k)]
    query_rows = kernels.key_order(key_of[0], ts[first], kradix)
    if query_rows is None:
        return None
    stored_rows = kernels.key_order(key_of[1], ts[k], kradix)
    if stored_rows is None:
        return None
    empty = np.empty(0, np.int32)
    keys = [empty if key is None else key.astype(np.int32, copy=False) for key in key_of]
    got = kernels.plan_bands(keys[1], ts[k], stored_rows, keys[0], ts[first], query_rows, span, base, W[k], W[first])
    if got is None:
        return None
    start, end, total = got
    return BandBounds(first, k, stored_rows, query_rows, start, end, int(total))


def band_pairs(sorted_values: np.ndarray, stored_rows: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               query_dtype, *, input_rows: int,
               lo_order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(query, stored row)`` pair of a band join: the queries (in the
    stable order of their band starts, ``query_dtype``) and the stored rows
    whose values lie in each band ``[lo, hi]`` (in sorted order).  ``lo`` is
    scratch (its contents are undefined afterwards); ``lo_order``: its stable
    order, if known.  The compiled fill
    (:func:`~streamjoin.pipelines.base.kernels.band_pairs`) where it is
    built and the join has ``input_rows`` (all streams' rows) of at least
    :data:`~streamjoin.pipelines.base.kernels.MIN_ROWS`, numpy otherwise:
    the same arrays."""
    lo_sorted, hi_ordered, qorder = band_queries(lo, hi, query_dtype, lo_order)
    got = kernels.band_pairs(sorted_values, stored_rows, lo_sorted, hi_ordered, qorder, input_rows=input_rows)
    if got is not None:
        return got
    start, count = sorted_band_ranges(sorted_values, lo_sorted, hi_ordered)
    del lo_sorted, hi_ordered
    return np.repeat(qorder, count), gather_ranges(stored_rows, start, count)


def band_queries(lo: np.ndarray, hi: np.ndarray, query_dtype,
                 lo_order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bands in the stable order of their starts: ``(lo, hi, query)`` sorted
    (``lo`` is scratch; ``lo_order``: its stable order, if known)."""
    if lo_order is not None:
        qorder, lo_sorted = lo_order, lo[lo_order]
    else:
        qorder, lo_sorted = stable_order(lo, query_dtype, overwrite=True)
    return lo_sorted, hi[qorder], qorder


def enumerate_bucketed(ts: Sequence[np.ndarray], ids: list[np.ndarray] | None, windows: Sequence[int],
                       space: Space | None = None) -> Combos:
    """Bucket equi-join enumeration (any key count, time span or grid size)."""
    n = len(ts)
    W = [int(w) for w in windows]
    cells, _, _ = _grid_radix(space)
    dims = space.dims if space is not None else 0
    cell_cols = [f"_c{d}" for d in range(dims)]

    def frame(k):
        cols = {f"r{k}": np.arange(len(ts[k]), dtype=np.int64), f"t{k}": ts[k]}
        if ids is not None:
            cols["_key"] = ids[k]
        for d in range(dims):
            cols[cell_cols[d]] = cells[k][:, d]
        return pl.DataFrame(cols)

    on = (["_key"] if ids is not None else []) + cell_cols + ["_b"]
    combos = frame(0)
    for k in range(1, n):
        B = W[0] + W[k] + 1
        right = frame(k).with_columns(((pl.col(f"t{k}") + W[k]) // B).alias("_b"))
        left_b = pl.col("t0") // B
        left = pl.concat([combos.with_columns(left_b.alias("_b")), combos.with_columns((left_b + 1).alias("_b"))])
        if space is not None:  # member 0's neighbouring cells
            left = pl.concat([
                left.with_columns([(pl.col(c) + int(o)).alias(c) for c, o in zip(cell_cols, off)])
                for off in space.offsets()
            ])
        joined = left.join(right, on=on, how="inner").drop("_b")
        band = [
            ((pl.col(f"t{k}") - pl.col(f"t{j}")) <= W[j]) & ((pl.col(f"t{j}") - pl.col(f"t{k}")) <= W[k])
            for j in range(k)
        ]
        combos = joined.filter(pl.all_horizontal(band))
        if space is not None:
            rk = combos[f"r{k}"].to_numpy()
            ok = np.ones(combos.height, dtype=bool)
            for j in range(k):
                ok &= space.within(k, rk, j, combos[f"r{j}"].to_numpy())
            combos = combos.filter(pl.Series(ok))
        # restore member 0's own cell for the next stream's neighbourhood
        if space is not None and k < n - 1:
            r0 = combos["r0"].to_numpy()
            combos = combos.with_columns([pl.Series(c, cells[0][r0, d]) for d, c in enumerate(cell_cols)])
    idx = index_dtype(*(len(t) for t in ts))
    return Combos([combos[f"r{k}"].to_numpy().astype(idx) for k in range(n)], ts)


def enumerate_truth(ts: Sequence[np.ndarray], keys: Sequence[pl.DataFrame | None], windows: Sequence[int],
                    method: str = "auto", *, space: Space | None = None,
                    order: Sequence[int] | None = None) -> Combos:
    """All combinations that are valid on time, keys and distance (see :class:`Combos`).

    Args:
        ts: per stream, event times (int64 us) in row order.
        keys: per stream, key columns ``__key0..`` or ``None`` (time only).
        windows: ``W_k`` in microseconds.
        method: ``"auto"`` (sorted ranges, bucket join if packing overflows),
            ``"sorted"`` or ``"bucket"``.
        space: the distance predicate, if any.
        order: the probe order (a permutation of the streams; see
            :mod:`~streamjoin.pipelines.replay.probe_order`); it changes the work, never the set.
    Guarantees: each valid combination appears exactly once.
    """
    ts = [np.asarray(t, dtype=np.int64) for t in ts]
    ids = key_ids(keys)
    if method in ("auto", "sorted"):
        out = enumerate_sorted(ts, ids, windows, space, order)
        if out is not None:
            return out
        if method == "sorted":
            raise OverflowError("(key, cell, ts) cannot be packed into int64 for this input")
    return enumerate_bucketed(ts, ids, windows, space)
