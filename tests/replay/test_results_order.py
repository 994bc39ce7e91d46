"""The results order of two-stream combinations emitted on arrival: the compiled
counting sort (``kernels.last_order``) gives exactly the positions of polars'
sort of the packed key ``last * M + r0 + r1`` (``emit.emission_order``'s
fallback, ``$STREAMJOIN_KERNELS=numpy``), element for element.

The combinations are drawn as a replay makes them: two streams' rows with
arrival indexes, pairs of rows, ``last`` the later member's arrival index,
``emit_us = arrival[last]`` -- and one row paired with every row of the other
stream, so one bucket (one ``last``) is far larger than the insertion sort's.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base import jit, kernels
from streamjoin.pipelines.replay.emit import emission_order

SETTINGS = settings(max_examples=200, deadline=None)


@pytest.fixture(autouse=True, scope="module")
def small_inputs_too():
    """The kernel used on inputs of any size (a run uses it from ``MIN_ROWS``)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, "MIN_ROWS", 0)
        one = np.zeros(1, np.int32)
        assert kernels.last_order(one, one, one) is not None
        assert jit.how(kernels._last_order) in ("aot", "aot-built")
        yield


@st.composite
def combinations(draw):
    """``(emit_us, last, r0, r1)`` of distinct pairs of two streams' rows, in random order."""
    n0 = draw(st.integers(1, 40))
    n1 = draw(st.integers(1, 40))
    arrival_of = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(n0 + n1).astype(np.int32)
    at0, at1 = arrival_of[:n0], arrival_of[n0:]
    pairs = set(draw(st.lists(st.tuples(st.integers(0, n0 - 1), st.integers(0, n1 - 1)), max_size=200)))
    if draw(st.booleans()):   # one huge bucket: the last-arriving row of stream 0 with every row of stream 1
        r = int(np.argmax(at0))
        pairs |= {(r, j) for j in range(n1) if at1[j] < at0[r]}
    pairs = draw(st.permutations(sorted(pairs)))
    r0 = np.array([p[0] for p in pairs], np.int32)
    r1 = np.array([p[1] for p in pairs], np.int32)
    last = np.maximum(at0[r0], at1[r1]).astype(np.int32)
    arrival = np.cumsum(np.array(draw(st.lists(st.integers(0, 3), min_size=n0 + n1, max_size=n0 + n1)), np.int64))
    return arrival[last], last, r0, r1


def polars_order(last, r0, r1):
    """The fallback's sort: polars' arg_sort of ``last * M + r0 + r1``."""
    M = int(r0.max()) + int(r1.max()) + 1
    return pl.Series(last.astype(np.int64) * M + r0 + r1).arg_sort().to_numpy()


@SETTINGS
@given(combinations())
def test_the_kernel_orders_as_polars_sorts_the_packed_key(case):
    """``last_order`` against polars' sort of the key, element for element (every
    combination in one bucket, tiny buckets, one bucket larger than ``SMALL_BUCKET``)."""
    _, last, r0, r1 = case
    got = kernels.last_order(last, r0, r1)
    if not len(last):
        assert got is None
        return
    assert got is not None and got.dtype == np.int64
    np.testing.assert_array_equal(got, polars_order(last, r0, r1))


@SETTINGS
@given(combinations())
def test_emission_order_with_the_kernel_equals_the_fallback(case):
    """``emission_order(by_last=True)`` with the kernel and with ``$STREAMJOIN_KERNELS=numpy``
    (polars): the same positions, which are the general sort's too (empty input included)."""
    emit_us, last, r0, r1 = case
    with pytest.MonkeyPatch.context() as m:
        m.delenv(jit.KERNELS_ENV, raising=False)
        calls = []
        real = kernels.last_order
        m.setattr(kernels, "last_order", lambda *a: (calls.append(real(*a)), calls[-1])[1])
        fast = emission_order(emit_us, last, [r0, r1], by_last=True)
    assert not len(last) or (calls and calls[0] is not None)   # the kernel answered
    with pytest.MonkeyPatch.context() as m:
        m.setenv(jit.KERNELS_ENV, "numpy")
        slow = emission_order(emit_us, last, [r0, r1], by_last=True)
        general = emission_order(emit_us, last, [r0, r1])
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast, general)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=300))
def test_ties_keep_the_positions_order(triples):
    """Equal ``(last, r0 + r1)`` (not a replay's, whose pairs are distinct) keep their
    positions' order: a stable sort, in small buckets and in large ones."""
    last, r0, r1 = (np.array(c, np.int32) for c in zip(*triples))
    key = last.astype(np.int64) * 11 + r0 + r1
    np.testing.assert_array_equal(kernels.last_order(last, r0, r1), np.argsort(key, kind="stable"))


def test_out_of_range_or_other_types_take_the_fallback():
    """A ``last`` below 0 or far above the count (the counting sort's buckets), or int64 arrays: ``None``."""
    rows = np.arange(4, dtype=np.int32)
    assert kernels.last_order(np.array([0, -1, 2, 3], np.int32), rows, rows) is None
    assert kernels.last_order(np.array([0, 1, 2, 10**6], np.int32), rows, rows) is None
    assert kernels.last_order(rows.astype(np.int64), rows, rows) is None
    assert kernels.last_order(np.array([0, 1, 2, 4 * 4 + 4095], np.int32), rows, rows) is not None
