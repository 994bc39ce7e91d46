"""Per-task summaries merged on the driver (pipelines/analysis/summary.py) give the
numbers metrics.py / tuning.py / report/build.py compute from every combination."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.analysis import metrics
from streamjoin.pipelines.analysis import summary as sm
from streamjoin.pipelines.analysis.summary import CountedCurve
from streamjoin.pipelines.analysis.tuning import Curve, curve_summary
from streamjoin.pipelines.replay.duplicates import count_duplicates
from streamjoin.pipelines.report.build import latency_histogram, latency_histogram_of_counts


@st.composite
def results(draw):
    N = draw(st.integers(1, 60))
    arrival = np.sort(np.array(draw(st.lists(st.integers(0, 500), min_size=N, max_size=N)), np.int64))
    m = draw(st.integers(0, 80))
    ints = st.lists(st.integers(0, N - 1), min_size=m, max_size=m)
    last = np.array(draw(ints), np.int64)
    r0, r1 = np.array(draw(ints), np.int64), np.array(draw(ints), np.int64)
    emitted = np.array(draw(st.lists(st.booleans(), min_size=m, max_size=m)), bool)
    small = st.lists(st.integers(0, 40) if draw(st.booleans()) else st.just(0), min_size=m, max_size=m)
    latency, need = np.array(draw(small), np.int64), np.array(draw(small), np.int64) * 997
    cuts = sorted(draw(st.lists(st.integers(0, m), max_size=4)))
    period = draw(st.integers(1, 200))
    return arrival, last, [r0, r1], emitted, latency, need, cuts, period


@settings(max_examples=200, deadline=None)
@given(results())
def test_merged_summaries_equal_the_whole_computation(case):
    arrival, last, rows, emitted, latency, need, cuts, period = case
    N = len(arrival)
    ids, upper = metrics.occupied_periods(arrival, int(arrival[0]), period)
    bounds = [0, *cuts, len(last)]
    parts = [sm.summarise([r[a:b] for r in rows], [N, N], emitted[a:b], last[a:b], latency[a:b], need[a:b], upper)
             for a, b in zip(bounds[:-1], bounds[1:])]
    got = sm.merge(parts, len(ids))
    assert (got.truth, got.emitted) == (len(last), int(emitted.sum()))
    e, t = got.periods[1::2], got.periods[0::2] + got.periods[1::2]
    assert metrics.period_entries(int(arrival[0]), period, ids, t, e, 0.9) == \
        metrics.periods(last, emitted, arrival, period, 0.9)
    assert sm.latency_summary(*got.latency) == metrics.latency_summary(latency[emitted])
    assert latency_histogram_of_counts(*got.latency) == latency_histogram(latency[emitted])
    whole = curve_summary(Curve(need, 1000), "static", 0.9, (0.5, 0.99))
    assert curve_summary(CountedCurve(*got.need, 1000), "static", 0.9, (0.5, 0.99)) == whole
    # duplicates: each part's own (a combination repeated across parts is not counted, module doc)
    assert got.duplicates == sum(count_duplicates([r[a:b] for r in rows], [N, N], emitted[a:b]) if b > a else 0
                                 for a, b in zip(bounds[:-1], bounds[1:]))
    if len(bounds) == 2:
        assert got.duplicates == (count_duplicates(rows, [N, N], emitted) if len(last) else 0)


def test_mean_is_the_exact_sum_over_the_count():
    values, counts = np.array([1, 2**40]), np.array([3, 5])
    assert sm.latency_summary(values, counts)["mean"] == (3 + 5 * 2**40) / 8
    assert sm.latency_summary(np.empty(0, np.int64), np.empty(0, np.int64)) == \
        {"mean": None, "p50": None, "p95": None, "p99": None, "max": None}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**62, 2**62), st.integers(1, 2**40)), max_size=40),
       st.sampled_from([1, 3, 1 << 16]))
def test_exact_dot_is_the_python_integer_sum(pairs, chunk):
    """Both branches (int64 when it cannot overflow, Python integers by slices) equal the
    plain Python sum of the products, however large."""
    values = np.array([v for v, _ in pairs], np.int64)
    counts = np.array([c for _, c in pairs], np.int64)
    old = sm.DOT_CHUNK
    sm.DOT_CHUNK = chunk
    try:
        assert sm.exact_dot(values, counts) == sum(v * c for v, c in pairs)
        small = values % 1000   # small values: the int64 branch
        assert sm.exact_dot(small, counts) == sum(int(v) * c for v, (_, c) in zip(small, pairs))
    finally:
        sm.DOT_CHUNK = old


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**62, 2**62), st.integers(1, 2**40)), max_size=40))
def test_exact_dot_with_the_callers_total_is_the_same_sum(pairs):
    """The total count a caller passes (latency_summary's cumulative count) gives the
    same exact sum in both branches as the one exact_dot sums itself."""
    values = np.array([v for v, _ in pairs], np.int64)
    counts = np.array([c for _, c in pairs], np.int64)
    n = sum(c for _, c in pairs)
    for vs in (values, values % 1000):
        assert sm.exact_dot(vs, counts, n) == sm.exact_dot(vs, counts) == sum(int(v) * c for v, (_, c) in zip(vs, pairs))


def test_latency_summary_passes_its_total_to_exact_dot(monkeypatch):
    seen = []
    real = sm.exact_dot
    monkeypatch.setattr(sm, "exact_dot", lambda v, c, n=None: seen.append(n) or real(v, c, n))
    assert sm.latency_summary(np.array([1, 2**40]), np.array([3, 5]))["mean"] == (3 + 5 * 2**40) / 8
    assert seen == [8]
