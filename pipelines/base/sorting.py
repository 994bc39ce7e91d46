"""Stable sort orders of integer columns from a value sort.

numpy sorts int64 *values* with a vectorized (SIMD) sort, while
``np.argsort`` has to carry an index along with every value and is several
times slower: on the benchmark VM, 2M int64 values take ~0.02 s to
``np.sort``, ~0.1 s to ``np.argsort`` and ~0.3 s to
``np.argsort(kind="stable")``.

:func:`stable_order` therefore sorts values that carry their own position::

    packed = (value - min) << bits | position      bits = bit length of N - 1

The packed values are *distinct* (the positions are), so any sort of them --
including numpy's fast unstable one -- puts them in exactly one order: by
value, and among equal values by position.  That is the stable order, and
both it and the sorted values are read back from the low and high bits.

Packing needs ``(max - min) << bits | (N - 1)`` to fit in a non-negative
int64, i.e. ``max - min < 2 ** (63 - bits)``.  The range is computed in
Python integers: ``max - min`` of an int64 column can overflow int64 itself
(``2**63 - 1 - (-2**63)``).  Within that path nothing overflows:
``value - min`` lies in ``[0, max - min]``.

When the range does not fit (for 2M values: a range of 2**42 or more), the
difference ``value - min`` is split into two digits and sorted twice, least
significant digit first, each pass a packed value sort.  That is still
exactly stable, at ~0.12-0.16 s for 2M random values: a little slower than
an unstable ``np.argsort``, about half of ``np.argsort(kind="stable")``.
Only beyond 2**31 values (the digits no longer fit beside the positions) is
numpy's stable argsort used.

Which sort sorts the packed values depends on the CPU: numpy's in-place
sort is a SIMD sort (x86-simd-sort), fastest on the Intel host where the
numbers above were measured, but on an AMD EPYC host with AVX-512 the same
call took 0.54 s for 8.1M int64 -- no faster than numpy's heapsort -- while
polars' sort (Rust pdqsort, one thread) took 0.15 s.  The sorted array is the
same whichever sort runs, so :func:`sort_values` picks the faster of the two
once per process, by timing both on an in-cache sample (``STREAMJOIN_SORT``
= ``numpy`` | ``polars`` pins it).

Primitives on sorted arrays live here too, shared by truth enumeration,
the expiry index and the Spark kernels: :func:`search_sorted_queries`
(``searchsorted`` for nearly sorted queries, a block at a time),
:func:`band_ranges` (the range of a sorted array inside each of many bands:
the band search of truth enumeration and of the CTR kernel) and
:func:`gather_ranges` (many ranges of one array, concatenated, without an
index array the size of the output), and :class:`GroupedCodes`:
``(group, value)`` as one int64, or through the values' ranks when that
could overflow (count windows' searches and running maxima within a key).
:data:`PACK_LIMIT` bounds every such packing (also the exact pair count of
``tools/generate.py``, through :class:`GroupedCodes`, and the duplicate
detector's mixed-radix row codes in ``replay/duplicates.py``); truth enumeration's
multi-digit code (key, grid cells, ts) and the qjoin controller's (key,
padded ts) positions use it but not the rank fallback: the first falls back
to another enumerator, the second shifts positions by durations, which
ranks would not keep.
"""

from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import polars as pl


def stable_order(values: np.ndarray, index_dtype=np.int64, *,
                 overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The stable sort of ``values``: ``(order, values[order])``.

    Args:
        values: 1-D integers (any signed dtype, or unsigned up to 32 bits).
        index_dtype: dtype of ``order`` (``np.int32`` halves it when
            ``len(values) < 2**31``).
        overwrite: ``values`` is a scratch int64 array the caller no longer
            needs: it is reused as the sorted values' buffer (no full-size
            temporary), and its contents are undefined afterwards.
    Returns: ``order`` (``index_dtype``) and the sorted values (int64).
    Guarantees: ``order`` equals ``np.argsort(values, kind="stable")`` --
    equal values keep their positions' order -- whichever path is taken.
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"stable_order needs a 1-D array, got shape {values.shape}")
    if values.dtype.kind not in "iu" or (values.dtype.kind == "u" and values.dtype.itemsize > 4):
        raise TypeError(f"stable_order needs integers that fit in int64, got {values.dtype}")
    N = values.shape[0]
    if N and N - 1 > np.iinfo(index_dtype).max:
        raise ValueError(f"{N} positions do not fit in {np.dtype(index_dtype)}")
    if N == 0:
        return np.empty(0, index_dtype), np.empty(0, np.int64)
    lo, hi = int(values.min()), int(values.max())  # Python ints: hi - lo cannot overflow
    bits = max(N - 1, 1).bit_length()
    if hi - lo < 1 << (63 - bits):  # one pass: (value - lo, position) packs
        if overwrite and values.dtype == np.int64:
            packed = values
            packed -= lo
        else:
            packed = np.subtract(values, lo, dtype=np.int64)
        order = _sort_with_positions(packed, bits, index_dtype)
        packed += lo
        return order, packed
    if 2 * bits + 1 <= 63:  # two passes (LSD): low digit, then high digit
        return _two_digit_order(values, lo, bits, index_dtype)
    order = np.argsort(values, kind="stable")  # over 2**31 values: numpy's own
    return order.astype(index_dtype, copy=False), values[order].astype(np.int64, copy=False)


#: environment variable that pins :func:`sort_values`' sort; see :data:`SORTS`
SORT_ENV = "STREAMJOIN_SORT"
#: ``auto``: the faster on this CPU, measured once per process
SORTS = ("auto", "numpy", "polars")
#: below this many values numpy sorts (no calibration; the choice only pays on large arrays)
SMALL_SORT = 1 << 16
#: int64 values timed by the calibration (128 kB, in cache: it measures the
#: sort, not memory; at this size the two sorts' ratio is the large arrays')
CALIBRATION_ROWS = 1 << 14

_chosen_sort: str | None = None
_choose_lock = threading.Lock()


def sort_values(values: np.ndarray) -> None:
    """Sort a 1-D array in place, ascending.

    Args:
        values: any numeric dtype; integer arrays of :data:`SMALL_SORT` or
            more values go to the sort :func:`value_sort` chose, the rest to
            numpy's.
    Guarantees: ``values`` ends as ``np.sort(values)`` -- a sorted array has
    one value per position whichever sort produced it (equal values are
    indistinguishable), so the choice changes the time only.
    """
    if len(values) < SMALL_SORT or values.dtype.kind not in "iu" or value_sort() == "numpy":
        values.sort()
    else:
        _polars_sort(values)


def _polars_sort(values: np.ndarray) -> None:
    # pl.Series reads numpy's buffer without a copy; the sorted result is
    # copied back so that callers keep their buffer (stable_order(overwrite=True))
    np.copyto(values, pl.Series(values).sort(multithreaded=False).to_numpy())


def value_sort() -> str:
    """``"numpy"`` or ``"polars"``: the sort :func:`sort_values` uses in this process.

    ``$STREAMJOIN_SORT`` if set to one of them; otherwise both are timed once
    (best of 3 on :data:`CALIBRATION_ROWS` scrambled int64: a few ms once
    polars is loaded) and polars is chosen only if clearly faster (by a
    fifth): numpy's stays the default where they are close.  Raises
    ``ValueError`` for a setting not in :data:`SORTS`.
    """
    global _chosen_sort
    if _chosen_sort is None:
        with _choose_lock:  # the engine's two threads may both ask first
            if _chosen_sort is None:
                _chosen_sort = _choose_sort(os.environ.get(SORT_ENV) or "auto")
    return _chosen_sort


def _choose_sort(setting: str) -> str:
    if setting not in SORTS:
        raise ValueError(f"${SORT_ENV} {setting}: expected one of {', '.join(SORTS)}")
    if setting != "auto":
        return setting
    # distinct values in scrambled order (multiplicative hashing, wrapping):
    # what the packed sorts see, without a random generator's set-up cost
    sample = np.arange(1, CALIBRATION_ROWS + 1, dtype=np.int64) * np.int64(-7046029254386353131)

    def best_of_3(sort) -> float:
        best = math.inf
        for _ in range(3):
            scratch = sample.copy()
            t0 = time.perf_counter()
            sort(scratch)
            best = min(best, time.perf_counter() - t0)
        return best

    return "polars" if best_of_3(_polars_sort) < 0.8 * best_of_3(np.ndarray.sort) else "numpy"


def _positions_dtype(N: int):
    """The narrowest dtype that holds positions ``0..N-1``: half the traffic of int64."""
    return np.int32 if N <= 2**31 else np.int64


def _sort_with_positions(packed: np.ndarray, bits: int, index_dtype) -> np.ndarray:
    """The stable order of ``packed`` (int64 in ``[0, 2**(63 - bits))``, sorted in place).

    ``bits`` must hold ``len(packed) - 1``.  Returns the order in ``index_dtype``;
    ``packed`` holds the sorted values afterwards.
    """
    N = packed.shape[0]
    packed <<= bits
    packed |= np.arange(N, dtype=_positions_dtype(N))
    sort_values(packed)  # distinct values: any (unstable) sort yields the one order
    order = np.empty(N, dtype=index_dtype)
    np.bitwise_and(packed, (1 << bits) - 1, out=order, casting="unsafe")  # < N: fits index_dtype
    packed >>= bits
    return order


def _two_digit_order(values: np.ndarray, lo: int, bits: int, index_dtype) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stable_order` for any int64 range, as two packed sorts (LSD radix).

    ``value - lo`` (up to ``2**64 - 1``: computed modulo ``2**64`` and read as
    uint64) is split into a low digit of ``63 - bits`` bits and a high digit
    of at most ``bits + 1`` bits; each fits beside a position when
    ``2 * bits + 1 <= 63``.  Sorting stably by the low digit and then stably
    by the high digit is the stable sort by value.
    """
    N = values.shape[0]
    shift = 63 - bits
    diff = np.subtract(values, lo, dtype=np.int64).view(np.uint64)  # wraps: the true difference as uint64
    high = (diff >> shift).view(np.int64)
    diff &= (1 << shift) - 1                                   # the low digit, in place
    first = _sort_with_positions(diff.view(np.int64), bits, _positions_dtype(N))
    del diff
    packed = high[first]                                       # high digits in low-digit order
    del high
    second = _sort_with_positions(packed, bits, _positions_dtype(N))
    del packed
    order = first[second].astype(index_dtype, copy=False)
    return order, values[order].astype(np.int64, copy=False)


# ---------------------------------------------------------------- on sorted arrays

#: queries per block of :func:`search_sorted_queries`
SEARCH_BLOCK = 8192
#: outputs per block of :func:`gather_ranges`
GATHER_BLOCK = 1 << 20


def search_sorted_queries(a: np.ndarray, q: np.ndarray, side: str, dtype=np.int64) -> np.ndarray:
    """``np.searchsorted(a, q, side)`` for (nearly) sorted queries, block by block.

    Each block of queries only searches the slice of ``a`` between its
    smallest and largest query, so the binary searches stay short and in
    cache instead of starting over the whole array for every query.
    ``dtype``: of the result (``int32`` when ``len(a) < 2**31`` halves it).
    """
    n = len(q)
    if n <= 4 * SEARCH_BLOCK:
        return np.searchsorted(a, q, side=side).astype(dtype, copy=False)
    out = np.empty(n, dtype=dtype)
    for s in range(0, n, SEARCH_BLOCK):
        qb = q[s:s + SEARCH_BLOCK]
        lo = int(np.searchsorted(a, qb.min(), side="left"))
        hi = int(np.searchsorted(a, qb.max(), side="right"))
        np.add(np.searchsorted(a[lo:hi], qb, side=side), lo, out=out[s:s + SEARCH_BLOCK])
    return out


def band_ranges(sorted_values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                order_dtype=np.int64, pos_dtype=np.int64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where many closed bands ``[lo[q], hi[q]]`` fall in one sorted array.

    Args:
        sorted_values: ascending int64 codes (the stored side of a band join).
        lo: int64 band starts, one per query -- a scratch array: it becomes
            the sorted starts' buffer, its contents are undefined afterwards.
        hi: band ends (inclusive); a band with ``hi < lo`` is empty.
        order_dtype: dtype of the query order (``np.int32`` below 2**31 queries).
        pos_dtype: dtype of the positions (``np.int32`` below 2**31 values).
    Returns: ``(order, start, count)``: the queries in the stable order of
    their starts, and for query ``order[i]`` the values in its band are
    exactly ``sorted_values[start[i] : start[i] + count[i]]`` (``count`` 0 for
    an empty band).
    Why sorted: queries in ascending order make :func:`search_sorted_queries`
    walk ``sorted_values`` monotonically, several times faster than random
    probes -- and callers extend their queries in this order.
    """
    order, lo_sorted = stable_order(lo, order_dtype, overwrite=True)
    start, count = sorted_band_ranges(sorted_values, lo_sorted, hi[order], pos_dtype)
    return order, start, count


def sorted_band_ranges(sorted_values: np.ndarray, lo_sorted: np.ndarray, hi: np.ndarray,
                       pos_dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """:func:`band_ranges` for bands already in ascending order of their
    starts (``hi`` in the same order): ``(start, count)`` per band."""
    start = search_sorted_queries(sorted_values, lo_sorted, "left", pos_dtype)
    count = search_sorted_queries(sorted_values, hi, "right", pos_dtype)
    count -= start
    np.maximum(count, 0, out=count)
    return start, count


def range_blocks(counts: np.ndarray, block: int, ends: np.ndarray | None = None):
    """Consecutive groups of ranges, each with about ``block`` outputs: yields
    ``(q0, q1, o0, o1)`` -- ranges ``q0 .. q1 - 1``, whose outputs (``counts``
    each, concatenated) are ``o0 .. o1 - 1``.  Groups without outputs are
    skipped; a single range longer than ``block`` is a group of its own.
    ``ends``: ``np.cumsum(counts)``, if at hand."""
    ends = np.cumsum(counts) if ends is None else ends
    total = int(ends[-1]) if len(ends) else 0
    cuts = np.unique(np.searchsorted(ends, np.arange(block, total, block), side="left"))
    q0 = 0
    for q1 in [*cuts.tolist(), len(counts)]:
        if q1 <= q0:
            continue
        o0 = int(ends[q0 - 1]) if q0 else 0
        o1 = int(ends[q1 - 1])
        if o1 > o0:
            yield q0, q1, o0, o1
        q0 = q1


def gather_ranges(values: np.ndarray, lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``values[lo[0] : lo[0] + counts[0]]``, ``values[lo[1] : ...]``, ... concatenated.

    Output ``c`` of range ``q`` is ``values[lo[q] + (c - first output of q)]``:
    the positions are built and gathered a block of outputs at a time (in the
    index dtype), so no position array the size of the output exists.
    """
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    out = np.empty(total, dtype=values.dtype)
    pdt = np.int32 if total < 2**31 and len(values) < 2**31 else np.int64
    shift = lo - ends
    shift += counts                          # lo - (first output of the range)
    for q0, q1, o0, o1 in range_blocks(counts, GATHER_BLOCK, ends):
        pos = np.repeat(shift[q0:q1].astype(pdt), counts[q0:q1])
        pos += np.arange(o0, o1, dtype=pdt)
        np.take(values, pos, out=out[o0:o1], mode="clip")  # in range by construction
    return out


#: the bound below which ``group * width + code`` packings are built (int64,
#: with a factor of 2 to spare for the offsets added around them)
PACK_LIMIT = 2**62


class GroupedCodes:
    """``(group, value)`` as one int64, ``group * width + code(value)``, for
    searches and running maxima within groups of a sorted array.

    Precondition: ``values`` (and queries) within +-2**62 (the loader keeps
    times within ``MAX_ABS_TS`` = 2**60), so ``value - lo + 1`` and the
    clipped queries stay in int64.  ``code`` is order-preserving: ``value - lo + 1`` when
    ``groups`` times the values' span fits below :data:`PACK_LIMIT`, the
    value's rank among the distinct ``values`` otherwise (at most the rows,
    so the packing fits while ``groups`` x (rows + 1) stays below it).
    Queries get the code of the first value ``>= q`` (``side="left"``) or
    ``> q`` (``"right"``), clipped to one past either end, which changes no
    answer of a ``side="left"`` search among the rows' codes.
    """

    def __init__(self, values: np.ndarray, groups: int):
        lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
        self.lo, self.hi = lo, hi
        self.width = hi - lo + 3
        self.uniq = None
        if self.width * max(groups, 1) >= PACK_LIMIT:
            self.uniq = np.unique(values)
            self.width = len(self.uniq) + 1

    def codes(self, values: np.ndarray) -> np.ndarray:
        """The code of each of ``values`` (values of the array it was built from)."""
        if self.uniq is None:
            return (values - (self.lo - 1)).astype(np.int64)
        return np.searchsorted(self.uniq, values).astype(np.int64)

    def query(self, q: np.ndarray, side: str) -> np.ndarray:
        """The code of the first value ``>= q`` (``"left"``) or ``> q`` (``"right"``)."""
        if self.uniq is None:
            c = np.clip(q, self.lo - 1, self.hi + 1) - (self.lo - 1)
            return (c + 1 if side == "right" else c).astype(np.int64)
        return np.searchsorted(self.uniq, q, side=side).astype(np.int64)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The values of ``codes`` (of :meth:`codes`)."""
        return codes + (self.lo - 1) if self.uniq is None else self.uniq[codes]
