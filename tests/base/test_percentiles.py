"""base/percentiles.distribution: the count of a small range of integers gives
the nearest-rank percentiles the sort gives (the report's latency and delay
percentiles), for any values, dtype and quantiles."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base import percentiles

QS = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]


def _nearest_rank(values, q):   # the definition: the ceil(q n)-th smallest, 1-based
    return int(sorted(values.tolist())[max(1, math.ceil(q * len(values))) - 1])


@given(values=st.lists(st.integers(-50, 50), min_size=1, max_size=300),
       dtype=st.sampled_from([np.int64, np.int32, np.int16, np.uint8, np.uint32]),
       qs=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=5))
@settings(max_examples=300, deadline=None)
def test_counted_percentiles_are_the_sorted_ones(values, dtype, qs):
    arr = np.asarray(values)
    if np.dtype(dtype).kind == "u":
        arr = arr - arr.min()
    arr = arr.astype(dtype)
    named = [(f"q{i}", q) for i, q in enumerate(qs)]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(percentiles, "COUNT_FROM", 1)
        counted = percentiles.distribution(arr, named)
        # counted wherever the range is below the number of values
        assert (percentiles._by_counts(arr, [0]) is not None) == (int(arr.max()) - int(arr.min()) < len(arr))
    assert counted == {name: _nearest_rank(arr, q) for name, q in named}


def test_a_wide_range_or_floats_are_sorted_not_counted():
    rng = np.random.default_rng(0)
    wide = rng.integers(0, 10**9, 1 << 17)
    assert percentiles._by_counts(wide, [0]) is None
    assert percentiles._by_counts(wide.astype(float), [0]) is None
    narrow = rng.integers(-5000, 5000, 1 << 17)
    assert percentiles._by_counts(narrow, [0, len(narrow) - 1]) == {0: int(narrow.min()),
                                                                   len(narrow) - 1: int(narrow.max())}
    assert percentiles.distribution(narrow, QS) == {n: _nearest_rank(narrow, q) for n, q in QS}


@given(values=st.lists(st.integers(-10**12, 10**12) | st.integers(0, 30), min_size=1, max_size=200),
       data=st.data())
@settings(max_examples=300, deadline=None)
def test_kth_of_counts_is_the_kth_smallest(values, data):
    """kth_of_counts (the one helper behind the counted percentiles, summary's and Tally's):
    from distinct values and their cumulative counts, the k-th smallest (0-based) of the
    data they count -- the sorted list's [k] -- for any k; without values, of a bincount."""
    ordered = sorted(values)
    ks = data.draw(st.lists(st.integers(0, len(values) - 1), min_size=1, max_size=6))
    v, c = np.unique(np.asarray(values, np.int64), return_counts=True)
    assert percentiles.kth_of_counts(np.cumsum(c), ks, v) == [ordered[k] for k in ks]
    lo = ordered[0]
    if ordered[-1] - lo < 1000:
        cum = np.cumsum(np.bincount(np.asarray(values, np.int64) - lo))
        assert [x + lo for x in percentiles.kth_of_counts(cum, ks)] == [ordered[k] for k in ks]
    # rank by the definition, in exact decimals: position k holds the smallest value with at least
    # q of the data at or below it -- k + 1 >= q·n, and k is the first such (k = 0 or k < q·n)
    n = len(values)
    for q in ("0.000000001", "0.25", "0.5", "0.9", "0.95", "0.99", "0.999", "1"):
        k, exact = percentiles.rank(float(q), n), Fraction(q) * n
        assert 0 <= k < n and k + 1 >= exact and (k == 0 or k < exact), (q, n, k)
