"""``period_code_counts`` looks periods up in a table when it is no larger than
the results (issue 21); the binary search it replaces is the reference: the
counts must be equal for any arrivals, results and period (hypothesis), on
both sides of the size rule."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.analysis.metrics import occupied_periods, period_code_counts


def reference(last: np.ndarray, emitted: np.ndarray, upper: np.ndarray) -> np.ndarray:
    U = len(upper)
    both = np.zeros(2 * U, np.int64)
    for i, e in zip(last.tolist(), emitted.tolist()):
        u = sum(1 for b in upper.tolist() if b <= i)   # periods whose arrivals all come before index i
        if u < U:
            both[2 * u + int(e)] += 1
    return both


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.integers(1, 3_000), st.data())
def test_counts_equal_the_per_result_search(times, period, data) -> None:
    arrival = np.sort(np.array(times, np.int64))
    N = len(arrival)
    # few results (binary search) or at least one per arrival (the table)
    m = data.draw(st.sampled_from([max(0, N // 3), N, 2 * N + 1]))
    last = np.array(data.draw(st.lists(st.integers(0, N - 1), min_size=m, max_size=m)), np.int64)
    emitted = np.array(data.draw(st.lists(st.booleans(), min_size=m, max_size=m)), bool)
    ids, upper = occupied_periods(arrival, int(arrival[0]), period)
    for dtype in (np.int64, np.int32):
        got = period_code_counts(last.astype(dtype), emitted, upper)
        assert got.tolist() == reference(last, emitted, upper).tolist()
