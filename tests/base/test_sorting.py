"""stable_order equals numpy's stable argsort on every path.

The one-pass packing, the two-digit (LSD) packing for ranges up to the whole
int64 line, and the boundary between them; duplicates (the stability that the
packing promises), negative values, int64 extremes, empty and single inputs,
narrower dtypes and the int32 order -- each through numpy's and through
polars' value sort (``sort_values``), forced whatever the size.  Last, the
sorted enumeration that uses it (with compacted sparse integer keys) against
the bucket join.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base import sorting
from streamjoin.pipelines.replay.candidates import enumerate_truth
from streamjoin.pipelines.base.sorting import stable_order

SETTINGS = settings(max_examples=300, deadline=None)
I64_MIN, I64_MAX = -2**63, 2**63 - 1


@st.composite
def int64_arrays(draw, max_size: int = 200):
    """int64 arrays over a random range: from one value (all duplicates) to
    the whole int64 line, placed anywhere in it (negative, at the extremes);
    values come from a small pool half the time, so duplicates are common."""
    size = draw(st.integers(0, max_size))
    width = draw(st.sampled_from([0, 1, 5, 1000, 2**20, 2**40, 2**55, 2**62, 2**63, 2**64 - 1]))
    edges = [lo for lo in (I64_MIN, -width // 2, 0, I64_MAX - width) if I64_MIN <= lo <= I64_MAX - width]
    lo = draw(st.one_of(st.integers(I64_MIN, I64_MAX - width), st.sampled_from(edges)))
    value = st.integers(lo, lo + width)
    if draw(st.booleans()):
        pool = draw(st.lists(value, min_size=1, max_size=6))
        value = st.sampled_from(pool)
    return np.array(draw(st.lists(value, min_size=size, max_size=size)), dtype=np.int64)


SORT_NAMES = ["numpy", "polars"]


@contextmanager
def forced_sort(name: str):
    """Every value sort through ``name`` (numpy's or polars'), whatever its size."""
    saved = sorting.SMALL_SORT, sorting._chosen_sort
    sorting.SMALL_SORT, sorting._chosen_sort = 0, name
    try:
        yield
    finally:
        sorting.SMALL_SORT, sorting._chosen_sort = saved


def _check(values: np.ndarray, index_dtype=np.int64, overwrite: bool = False, sort: str = "numpy") -> None:
    original = values.copy()
    expected = np.argsort(original, kind="stable")
    with forced_sort(sort):
        order, ordered = stable_order(values, index_dtype, overwrite=overwrite)
    assert order.dtype == np.dtype(index_dtype) and ordered.dtype == np.int64
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(ordered, original[expected].astype(np.int64))
    if not overwrite:
        np.testing.assert_array_equal(values, original)  # the input is left alone


@SETTINGS
@given(int64_arrays(), st.sampled_from([np.int64, np.int32]), st.booleans(), st.sampled_from(SORT_NAMES))
def test_equals_stable_argsort(values, index_dtype, overwrite, sort):
    _check(values, index_dtype, overwrite, sort)


@SETTINGS
@given(st.sampled_from([np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32]), st.data())
def test_narrow_dtypes(dtype, data):
    info = np.iinfo(dtype)
    raw = data.draw(st.lists(st.integers(int(info.min), int(info.max)), max_size=100))
    _check(np.array(raw, dtype=dtype), np.int32, overwrite=data.draw(st.booleans()),
           sort=data.draw(st.sampled_from(SORT_NAMES)))


def test_empty_and_single():
    for index_dtype in (np.int64, np.int32):
        order, ordered = stable_order(np.empty(0, np.int64), index_dtype)
        assert order.shape == ordered.shape == (0,) and order.dtype == np.dtype(index_dtype)
        for v in (I64_MIN, -1, 0, I64_MAX):
            _check(np.array([v], dtype=np.int64), index_dtype)


@pytest.mark.parametrize("sort", SORT_NAMES)
@pytest.mark.parametrize("size", [2, 3, 1000, 4097])
def test_paths_and_their_boundary(monkeypatch, size, sort):
    """Range ``2**(63 - bits) - 1`` still packs in one pass; one more takes two digits."""
    calls = []
    two = sorting._two_digit_order
    monkeypatch.setattr(sorting, "_two_digit_order", lambda *a: calls.append(1) or two(*a))
    bits = (size - 1).bit_length()
    rng = np.random.default_rng(size)
    for lo in (I64_MIN, -5, 0, I64_MAX - 2**(63 - bits)):
        for width, passes in ((2**(63 - bits) - 1, 1), (2**(63 - bits), 2)):
            values = lo + rng.integers(0, width, size=size, endpoint=True, dtype=np.uint64).astype(object)
            values[: size // 2] = values[size // 2:][: size // 2]  # duplicates
            values[0], values[-1] = lo, lo + width                  # exactly this range
            calls.clear()
            _check(np.array(values.tolist(), dtype=np.int64), np.int32, sort=sort)
            assert len(calls) == passes - 1


@pytest.mark.parametrize("sort", SORT_NAMES)
def test_int64_extremes_and_ties(sort):
    values = np.array([I64_MAX, I64_MIN, 0, I64_MAX, -1, I64_MIN, 1, 0, I64_MAX], dtype=np.int64)
    _check(values, sort=sort)
    _check(np.tile(values, 50), np.int32, overwrite=True, sort=sort)


@SETTINGS
@given(st.sampled_from([np.int8, np.int32, np.uint32, np.int64, np.float64]), st.data(),
       st.sampled_from(SORT_NAMES))
def test_sort_values_sorts_in_place_with_either_sort(dtype, data, sort):
    """``sort_values`` leaves the array equal to ``np.sort`` of it, in its
    own buffer, through numpy's or polars' sort (floats always numpy's)."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    elems = st.integers(int(info.min), int(info.max)) if info else st.floats(-1e9, 1e9)
    values = np.array(data.draw(st.lists(elems, max_size=150)), dtype=dtype)
    if data.draw(st.booleans()) and len(values):
        values = np.tile(values[: max(1, len(values) // 4)], 4)  # duplicates
    want = np.sort(values)
    buffer = values.__array_interface__["data"][0]
    with forced_sort(sort):
        sorting.sort_values(values)
    assert values.__array_interface__["data"][0] == buffer and values.dtype == want.dtype
    np.testing.assert_array_equal(values, want)


def test_value_sort_is_pinned_by_the_environment_or_measured(monkeypatch):
    for name in SORT_NAMES:
        monkeypatch.setenv(sorting.SORT_ENV, name)
        assert sorting._choose_sort(name) == name
    assert sorting._choose_sort("auto") in SORT_NAMES   # measured: one of the two, whichever is faster here
    with pytest.raises(ValueError, match="STREAMJOIN_SORT quick: expected one of auto, numpy, polars"):
        sorting._choose_sort("quick")
    # the process-wide choice is made once and then kept
    saved = sorting._chosen_sort
    try:
        sorting._chosen_sort = None
        monkeypatch.setenv(sorting.SORT_ENV, "polars")
        assert sorting.value_sort() == "polars"
        monkeypatch.setenv(sorting.SORT_ENV, "numpy")
        assert sorting.value_sort() == "polars"
    finally:
        sorting._chosen_sort = saved


def test_rejects_what_it_cannot_order():
    with pytest.raises(TypeError):
        stable_order(np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(TypeError):
        stable_order(np.array([0.5]))
    with pytest.raises(ValueError):
        stable_order(np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError):
        stable_order(np.zeros(200, np.int64), np.int8)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_sorted_enumeration_equals_bucket_join(data):
    """enumerate_sorted (stable sorts, compacted sparse integer keys, many
    ties in key and time) yields the bucket join's set, each combination once."""
    n = data.draw(st.integers(2, 3))
    key_pool = data.draw(st.lists(st.integers(-2**40, 2**40), min_size=1, max_size=4))
    ts, keys = [], []
    for _ in range(n):
        size = data.draw(st.integers(0, 12))
        ts.append(np.array(data.draw(st.lists(st.integers(0, 30), min_size=size, max_size=size)), dtype=np.int64))
        keys.append(pl.DataFrame({"__key0": data.draw(st.lists(st.sampled_from(key_pool), min_size=size,
                                                                max_size=size))}, schema={"__key0": pl.Int64}))
    windows = data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    order = data.draw(st.permutations(range(n)))
    with forced_sort(data.draw(st.sampled_from(SORT_NAMES))):
        got = enumerate_truth(ts, keys, windows, method="sorted", order=order)
    want = enumerate_truth(ts, keys, windows, method="bucket")
    listed = list(zip(*[r.tolist() for r in got.rows]))
    assert len(listed) == len(set(listed))
    assert set(listed) == set(zip(*[r.tolist() for r in want.rows]))


@SETTINGS
@given(st.lists(st.integers(-50, 50), max_size=60), st.lists(st.integers(-60, 60), max_size=80),
       st.integers(0, 6), st.sampled_from(["left", "right"]), st.integers(1, 5))
def test_search_sorted_queries_equals_searchsorted(a, q, disorder, side, block):
    """Blocked searches, for sorted and nearly sorted queries (the block's min
    and max bound its slice of ``a``), equal one ``np.searchsorted``."""
    a = np.sort(np.array(a, dtype=np.int64))
    q = np.sort(np.array(q, dtype=np.int64))
    rng = np.random.default_rng(len(q) + disorder)
    q = q + rng.integers(-disorder, disorder + 1, len(q))   # nearly sorted
    saved = sorting.SEARCH_BLOCK
    sorting.SEARCH_BLOCK = block
    try:
        got = sorting.search_sorted_queries(a, q, side, np.int32)
    finally:
        sorting.SEARCH_BLOCK = saved
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.searchsorted(a, q, side=side))


@SETTINGS
@given(st.lists(st.integers(-40, 40), max_size=60), st.data(), st.integers(1, 5),
       st.sampled_from([np.int32, np.int64]))
def test_band_ranges_finds_exactly_the_values_in_each_band(values, data, block, dtype):
    """``band_ranges`` (the band search of truth enumeration and of the CTR
    kernel): queries in the stable order of their starts, and each query's
    range holds exactly the sorted values in its closed band -- none for an
    empty band (end before start); duplicate values and ties in the starts
    are common; blocked searches (tiny SEARCH_BLOCK) and both dtypes."""
    vs = np.sort(np.array(values, dtype=np.int64))
    bands = data.draw(st.lists(st.tuples(st.integers(-50, 50), st.integers(-8, 12)), max_size=40))
    lo = np.array([a for a, _ in bands], dtype=np.int64)
    hi = np.array([a + w for a, w in bands], dtype=np.int64)   # w < 0: an empty band
    saved = sorting.SEARCH_BLOCK
    sorting.SEARCH_BLOCK = block
    try:
        order, start, count = sorting.band_ranges(vs, lo.copy(), hi, dtype, dtype)
    finally:
        sorting.SEARCH_BLOCK = saved
    assert order.dtype == start.dtype == count.dtype == dtype
    np.testing.assert_array_equal(order, np.argsort(lo, kind="stable"))
    for q, s, c in zip(order, start, count):
        assert c >= 0
        np.testing.assert_array_equal(vs[s:s + c], vs[(vs >= lo[q]) & (vs <= hi[q])])


@SETTINGS
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=50), st.data(), st.integers(1, 7))
def test_gather_ranges_equals_concatenated_slices(values, data, block):
    values = np.array(values, dtype=np.int32)
    n = len(values)
    ranges = data.draw(st.lists(st.tuples(st.integers(0, n), st.integers(0, n)), max_size=20))
    lo = np.array([min(x, y) for x, y in ranges], dtype=np.int64)
    counts = np.array([abs(x - y) for x, y in ranges], dtype=np.int64)
    saved = sorting.GATHER_BLOCK
    sorting.GATHER_BLOCK = block
    try:
        got = sorting.gather_ranges(values, lo, counts)
    finally:
        sorting.GATHER_BLOCK = saved
    want = np.concatenate([values[a:a + c] for a, c in zip(lo, counts)]) if len(lo) else np.empty(0, np.int32)
    assert got.dtype == values.dtype
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(st.data())
def test_emission_order_is_the_lexicographic_results_order(data):
    """``emit.emission_order`` (the results order of every engine and of a
    backfill day) equals ``np.lexsort`` on (emission time, last member's
    arrival, member rows): ties in the first keys are common, member row
    tuples are unique, rows may be int32 or int64."""
    from streamjoin.pipelines.replay.emit import emission_order

    streams = data.draw(st.integers(2, 3))
    n = data.draw(st.integers(0, 120))
    tuples = data.draw(st.lists(st.tuples(*[st.integers(0, 9)] * streams), min_size=n, max_size=n, unique=True))
    rows = [np.array([t[k] for t in tuples], dtype=data.draw(st.sampled_from([np.int32, np.int64])))
            for k in range(streams)]
    emit_us = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), dtype=np.int64)
    last = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.int64)
    got = emission_order(emit_us, last, rows)
    want = np.lexsort([*reversed(rows), last, emit_us])
    assert got.dtype.kind in "iu" and np.array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2**62, 2**62)), max_size=30),
       st.lists(st.tuples(st.integers(0, 4), st.integers(-2**62, 2**62)), max_size=10),
       st.booleans(), st.sampled_from(["left", "right"]))
def test_grouped_codes_search_and_decode_as_a_loop_would(rows, queries, narrow, side):
    """GroupedCodes, packed (narrow values) or by ranks (values spanning 2**63):
    a search among (group, value)-sorted rows finds the first row of the query's
    group with value >= / > q, and codes decode back to their values."""
    if narrow:
        rows = [(g, v % 50) for g, v in rows]
        queries = [(g, v % 60 - 5) for g, v in queries]
    rows = sorted(rows)
    group = np.array([g for g, _ in rows], np.int64)
    values = np.array([v for _, v in rows], np.int64)
    gc = sorting.GroupedCodes(values, int(group[-1]) + 1 if rows else 1)
    if narrow:
        assert gc.uniq is None   # packed; wide draws (span near 2**63) take the ranks
    if not rows:
        return
    assert gc.decode(gc.codes(values)).tolist() == values.tolist()
    packed = group * gc.width + gc.codes(values)
    qg = np.array([g for g, _ in queries], np.int64)
    qv = np.array([v for _, v in queries], np.int64)
    got = np.searchsorted(packed, qg * gc.width + gc.query(qv, side), side="left")
    for (g, q), pos in zip(queries, got.tolist()):
        want = next((i for i, (rg, rv) in enumerate(rows) if rg > g or (rg == g and (rv >= q if side == "left"
                                                                                    else rv > q))), len(rows))
        assert pos == want, (g, q, rows)
