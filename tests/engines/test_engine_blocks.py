"""The engine's blocked and fast paths equal the plain column forms.

Truth enumeration, emission and the per-period count work a block at a time
(and emission on two threads) once inputs are large; the property tests in
``test_engine_vs_reference.py`` use small inputs, so here the blocks are
made tiny to exercise the same code paths on them.  Also: the exact
duplicate count's grouped fast path against plain hashing, and emission's
one-gather closed forms against the conditions as written.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.adapters import local_engine
from helpers.strategies import assert_same, problems

from streamjoin.pipelines.replay import emit
from streamjoin.pipelines.replay import duplicates
from streamjoin.pipelines.analysis import metrics
from streamjoin.pipelines.base import sorting
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.replay.reference import replay

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def tiny_blocks():
    saved = (emit.BLOCK, emit.WORKERS, sorting.SEARCH_BLOCK, sorting.GATHER_BLOCK, metrics.BLOCK)
    emit.BLOCK, emit.WORKERS, sorting.SEARCH_BLOCK, sorting.GATHER_BLOCK, metrics.BLOCK = 2, 2, 1, 3, 2
    try:
        yield
    finally:
        emit.BLOCK, emit.WORKERS, sorting.SEARCH_BLOCK, sorting.GATHER_BLOCK, metrics.BLOCK = saved


@SETTINGS
@given(problems(max_rows=14))
def test_tiny_blocks_equal_reference(problem):
    streams, windows, policy = problem
    with tiny_blocks():
        fast = local_engine(streams, windows, policy)
    assert_same(fast, replay(streams, windows, policy))


@SETTINGS
@given(problems(max_rows=14))
def test_emission_fast_forms_equal_column_forms(problem):
    """Every field, every combination (emitted or not), with and without the shared expiry index."""
    streams, windows, policy = problem
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    keys = [pl.DataFrame({"__key0": [t.key[0] for t in s]}, schema={"__key0": pl.Int64}) if s and s[0].key
            else None for s in streams]
    if any(k is None for k in keys):
        keys = [None] * len(streams)
    with tiny_blocks():
        out = join(ts, arrival, keys, windows, policy)
        W = np.asarray(windows, dtype=np.int64)
        plain = emit._emission_columns(out.combos, out.replay, W, out.decisions)
        for em in (out.emission, emit.emission(out.combos, out.replay, W, out.decisions)):
            for got, want in [*zip(em.a, plain.a), (em.last, plain.last), (em.emitted, plain.emitted),
                              (em.emit_us, plain.emit_us), (em.latency_us, plain.latency_us)]:
                assert got.dtype == want.dtype and np.array_equal(got, want)
        if out.replay.N:
            blocked = metrics.periods(plain.last, plain.emitted, out.replay.arrival, 7, None)
    if out.replay.N:
        assert blocked == metrics.periods(plain.last, plain.emitted, out.replay.arrival, 7, None)


@st.composite
def row_sets(draw):
    """Combinations with structure (grouped by member 0, others ordered) and without."""
    n = draw(st.integers(2, 3))
    sizes = [draw(st.integers(1, 6)) for _ in range(n)]
    count = draw(st.integers(0, 30))
    layout = draw(st.sampled_from(["none", "grouped", "blocks"]))
    rows = [np.array(draw(st.lists(st.integers(0, s - 1), min_size=count, max_size=count)), dtype=np.int32)
            for s in sizes]
    if layout == "grouped" and count:
        rows[0] = np.sort(rows[0])
        for r in rows[1:]:
            r.sort()
    if layout == "blocks" and count:
        # as a CTR partition returns them: blocks, each grouped by its own member
        # (the probers'), the others increasing within a group; a combination
        # may come back in two blocks
        cuts = sorted(draw(st.lists(st.integers(0, count), max_size=3)))
        for lo, hi in zip([0, *cuts], [*cuts, count]):
            g = draw(st.integers(0, n - 1))
            order = np.lexsort([r[lo:hi] for r in reversed(rows[:g] + rows[g + 1:])] + [rows[g][lo:hi]])
            for r in rows:
                r[lo:hi] = r[lo:hi][order]
    mask = np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool)
    return rows, sizes, mask if draw(st.booleans()) else None


@settings(max_examples=500, deadline=None)
@given(row_sets())
def test_duplicate_count_equals_hashing(problem):
    rows, sizes, mask = problem
    picked = [r[mask] for r in rows] if mask is not None else rows
    want = len(set(zip(*[r.tolist() for r in picked]))) if len(picked[0]) else 0
    assert duplicates.count_duplicates(rows, sizes, mask) == len(picked[0]) - want
    assert duplicates.count_duplicates(picked, sizes) == len(picked[0]) - want


def test_member_indexes_gather_on_first_read():
    """``Emission.a`` of the fused passes: a lazy sequence equal to the gathered columns."""
    ts = [np.array([1, 5, 9], dtype=np.int64), np.array([2, 6], dtype=np.int64)]
    arrival = [np.array([3, 5, 30], dtype=np.int64), np.array([2, 8], dtype=np.int64)]
    from streamjoin.pipelines.policies import PolicySpec

    out = join(ts, arrival, [None, None], [4, 4], PolicySpec(name="static", retention=(0, 0)))
    a = out.emission.a
    assert isinstance(a, emit.MemberIndexes) and len(a) == 2
    want = [out.replay.index_of[k][out.combos.rows[k]] for k in range(2)]
    assert not a._cache  # nothing gathered until read
    for k in range(2):
        assert np.array_equal(a[k], want[k])
    assert a[-1] is a[1] and [x is y for x, y in zip(a[:], list(a))] == [True, True]
    np.testing.assert_array_equal(out.emission.last, np.maximum(want[0], want[1]))
    with pytest.raises(IndexError):
        a[2]
