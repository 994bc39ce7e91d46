"""The backbone: the whole-column local engine equals the per-arrival reference.

Random inputs with heavy disorder, ties in arrival and event time, random
windows (asymmetric, zero), optional keys, every policy.  Every observable
is compared: truth, the emitted set with each result's emission time and
latency, memory after every arrival, and the dropped / expired sets.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.adapters import local_engine, local_engine_bucketed
from helpers.strategies import assert_same, problems

from streamjoin.pipelines.replay.reference import RefTuple, brute_force_truth, replay

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problems())
def test_local_engine_equals_reference(problem):
    streams, windows, policy = problem
    assert_same(local_engine(streams, windows, policy), replay(streams, windows, policy))


@SETTINGS
@given(problems(n_streams=st.just(2), max_rows=14))
def test_local_engine_equals_reference_two_streams_larger(problem):
    streams, windows, policy = problem
    assert_same(local_engine(streams, windows, policy), replay(streams, windows, policy))


@SETTINGS
@given(problems(n_streams=st.integers(2, 4)))
def test_truth_equals_brute_force(problem):
    streams, windows, policy = problem
    expected = brute_force_truth(streams, windows)
    assert local_engine(streams, windows, policy).truth == expected
    assert local_engine(streams, windows, policy, method="bucket").truth == expected


@SETTINGS
@given(problems())
def test_bucket_fallback_equals_reference(problem):
    streams, windows, policy = problem
    assert_same(local_engine_bucketed(streams, windows, policy), replay(streams, windows, policy))


@settings(max_examples=100, deadline=None)
@given(problems(n_streams=st.just(2)), st.integers(-10**12, 10**12))
def test_shifting_all_times_changes_nothing_but_times(problem, shift):
    """Negative and huge timestamps: floor-division buckets must not break."""
    streams, windows, policy = problem
    moved = [[RefTuple(t.stream, t.row, t.ts + shift, t.arrival + shift, t.key) for t in s] for s in streams]
    a = local_engine(streams, windows, policy)
    b = local_engine(moved, windows, policy)
    assert a.truth == b.truth
    assert {c: (e + shift, l) for c, (e, l) in a.emitted.items()} == b.emitted
    assert a.memory == b.memory and a.dropped == b.dropped and a.expired == b.expired


@SETTINGS
@given(problems(), st.integers(1, 30))
def test_periods_match_a_direct_count(problem, period):
    """Recall per period: each result counted in the period of its last member's arrival;
    exactly the periods that hold a result are listed (sparse), aligned to the first arrival."""
    import numpy as np

    from streamjoin.pipelines.analysis.metrics import period_counts, periods

    streams, windows, policy = problem
    ref = replay(streams, windows, policy)
    if not ref.order:
        return
    by_id = {(t.stream, t.row): t for s in streams for t in s}
    arrival = np.array([by_id[x].arrival for x in ref.order], dtype=np.int64)
    index = {x: a for a, x in enumerate(ref.order)}
    combos = sorted(ref.truth)
    last = np.array([max(index[(k, r)] for k, r in enumerate(c)) for c in combos], dtype=np.int64)
    mask = np.array([c in ref.emitted for c in combos], dtype=bool)
    got = periods(last, mask, arrival, period, 0.9)
    first = int(arrival[0])
    # the period of each result, counted directly
    holding = {(max(by_id[(k, r)].arrival for k, r in enumerate(c)) - first) // period for c in combos}
    assert [(p["start_us"] - first) // period for p in got] == sorted(holding)
    for p in got:
        assert (p["start_us"] - first) % period == 0 and p["end_us"] == p["start_us"] + period
        inside = [c for c in combos
                  if p["start_us"] <= max(by_id[(k, r)].arrival for k, r in enumerate(c)) < p["end_us"]]
        assert p["truth"] == len(inside) > 0
        assert p["emitted"] == sum(c in ref.emitted for c in inside)
        assert p["target"] == 0.9
    assert sum(p["truth"] for p in got) == len(combos)
    counts = period_counts(first, int(arrival[-1]), period, len(got))
    assert counts["periods_total"] == (int(arrival[-1]) - first) // period + 1
    assert counts["periods_empty"] == counts["periods_total"] - len(holding)


@SETTINGS
@given(problems(n_streams=st.integers(2, 4)))
def test_enumeration_never_repeats_a_combination(problem):
    """Sets hide repeats: count them (SPEC §5 requires duplicates == 0)."""
    import numpy as np

    from streamjoin.pipelines.replay.candidates import enumerate_truth
    from helpers.adapters import key_frames

    streams, windows, _ = problem
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    for method in ("sorted", "bucket"):
        combos = enumerate_truth(ts, key_frames(streams), windows, method=method)
        listed = list(zip(*[r.tolist() for r in combos.rows]))
        assert len(listed) == len(set(listed))
