"""``--policy flink-sql`` on the local engine: the column form
(replay/sql_interval_join.py) against the per-event reference
(replay/sql_reference.py, itself checked against Flink's own operator in
tests/engines/test_flink_sql_real.py), and worked examples of the rules that
differ from ``--policy flink`` (docs/semantics.md "flink-sql")."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple
from streamjoin.pipelines.replay.sql_interval_join import first_above, orbit
from streamjoin.pipelines.replay.sql_reference import replay_sql_interval_join

from helpers.flink import columns_flink_sql, flink_problems, local_flink, local_flink_sql, reference_flink_sql

MS = 1000
S = 1_000_000


@settings(max_examples=500, deadline=None)
@given(flink_problems(sql=True))
def test_engine_equals_reference(problem):
    """Emitted pairs (emitting record, latency 0), null-padded rows (emission time,
    latency) of every join type, and the cached rows of both sides after every
    arrival: the same."""
    streams, windows, policy = problem
    ref = reference_flink_sql(streams, windows, policy)
    fast = local_flink_sql(streams, windows, policy)
    assert fast.truth == ref.truth
    assert fast.emitted == ref.emitted
    assert fast.padded == ref.padded
    assert fast.cached == ref.cached


@settings(max_examples=300, deadline=None)
@given(flink_problems(sql=True), st.sampled_from([1 * MS, 2 * MS, 5 * MS, 30 * MS]))
def test_min_cleanup_interval_equals_reference(problem, cleanup):
    """``table.exec.interval-join.min-cleanup-interval`` > 0 (timers later than the
    rows they clean): the column form's pairs, padded rows and cached rows equal
    the reference's."""
    streams, windows, policy = problem
    ref = replay_sql_interval_join(streams, windows, policy.watermark, policy.watermark_interval_us,
                                   policy.join, cleanup)
    fast = columns_flink_sql(streams, windows, policy, cleanup)
    assert (fast.emitted, fast.padded, fast.cached) == (ref.emitted, ref.padded, ref.cached)
    # the policy's setting (--min-cleanup-interval) through the local engine: the same answer
    engine = local_flink_sql(streams, windows, replace(policy, min_cleanup_us=cleanup))
    timed = reference_flink_sql(streams, windows, policy, cleanup)
    assert (engine.emitted, engine.padded, engine.cached) == (timed.emitted, timed.padded, timed.cached)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-5, 5), max_size=40), st.data())
def test_first_above_is_the_first_larger_value(q, data):
    """The sparse-table descent against a scan."""
    q = np.array(q, dtype=np.int64)
    k = data.draw(st.integers(0, 10))
    start = np.array(data.draw(st.lists(st.integers(0, len(q) + 1), min_size=k, max_size=k)), dtype=np.int64)
    v = np.array(data.draw(st.lists(st.integers(-6, 6), min_size=k, max_size=k)), dtype=np.int64)
    want = [next((i for i in range(s, len(q)) if q[i] > x), len(q)) for s, x in zip(start, v)]
    assert first_above(q, start, v).tolist() == [min(w, len(q)) for w in want]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=30), st.data())
def test_orbit_marks_exactly_the_walks(steps, data):
    """Pointer doubling against walking the chains one step at a time."""
    n = len(steps)
    nxt = np.array([min(i + 1 + s, n) for i, s in enumerate(steps)] + [n], dtype=np.int64)
    starts = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3)), dtype=np.int64)
    want = set()
    for s in starts.tolist():
        while s != n:
            want.add(s)
            s = int(nxt[s])
    assert set(np.flatnonzero(orbit(nxt, starts)).tolist()) == want


def _streams(left, right, key=()):
    """``left`` / ``right``: lists of (ts, arrival) in µs."""
    return [[RefTuple(i, r, ts, arr, key) for r, (ts, arr) in enumerate(rows)] for i, rows in enumerate((left, right))]


def test_a_row_the_datastream_join_drops_as_late_still_joins():
    """W_left = 15 s, W_right = 1 s, D = 0, a watermark per record.  After L1 (30 s)
    G = 20 s - 1 ms; R1 at 12 s is late for the DataStream join (12 s < G) and
    dropped.  SQL: the left expiration time is still -15.001 s (set at R0, when
    OT was 0), below R1's bound 13 s, so R1 probes and finds L0 (10 s, cached until
    its timer at 25.001 s): pair (L0, R1).  R1 is not cached (OT >= 12 s + 1 s)."""
    T = 100 * S
    left = [(T + 10 * S, 0), (T + 30 * S, 2)]
    right = [(T + 20 * S, 1), (T + 12 * S, 3)]
    streams = _streams(left, right)
    windows = (15 * S, 1 * S)
    sql = local_flink_sql(streams, windows, PolicySpec("flink-sql", watermark=(0, 0), watermark_interval_us=0))
    ds = local_flink(streams, windows, PolicySpec("flink", watermark=(0, 0), watermark_interval_us=0))
    assert (0, 1) in sql.emitted and sql.emitted[(0, 1)] == 3
    assert (1, 1) in ds.dropped and (0, 1) not in ds.emitted
    assert sql.cached[-1] == (2, 1)                     # R1 joined but was not kept
    ref = reference_flink_sql(streams, windows, PolicySpec("flink-sql", watermark=(0, 0), watermark_interval_us=0))
    assert (sql.emitted, sql.cached) == (ref.emitted, ref.cached)


def test_left_join_pads_a_row_when_its_timer_removes_it():
    """LEFT join, W = 1 s both, D = 0.  L0 (10 s) registers its cache's timer at
    11.001 s; R0 (30 s) does not match it; after L1 (31 s) G = 30 s - 1 ms passes the
    timer: L0 leaves never joined and comes out null-padded then -- at L1's
    arrival (2 s), latency 2 s.  L1 joined R0: no padded row."""
    T = 100 * S
    streams = _streams([(T + 10 * S, 0), (T + 31 * S, 2 * S)], [(T + 30 * S, 1 * S)])
    policy = PolicySpec("flink-sql", watermark=(0, 0), watermark_interval_us=0, join="left")
    out = local_flink_sql(streams, (S, S), policy)
    assert out.emitted == {(1, 0): 2}
    assert out.padded == {(0, 0): 2 * S}
    assert out.padded == reference_flink_sql(streams, (S, S), policy).padded


def test_full_join_pads_both_sides():
    """FULL join, W = 1 s, D = 0.  L0 (10 s) never matches: R0 (20 s) raises G to
    20 s - 1 ms, past L0's timer (11.001 s), so L0 comes out null-padded at R0's
    arrival.  R1 (5 s) is not cached (OT >= 5 s + 1 s) and joins nothing: padded
    at once, at its own arrival."""
    T = 100 * S
    streams = _streams([(T + 10 * S, 0), (T + 20 * S, 1)], [(T + 20 * S, 2), (T + 5 * S, 3)])
    policy = PolicySpec("flink-sql", watermark=(0, 0), watermark_interval_us=0, join="full")
    out = local_flink_sql(streams, (S, S), policy)
    # after R0 G = 20 s - 1 ms: R1 (5 s) is not cached and joins nothing
    assert out.emitted == {(1, 0): 2}
    assert out.padded == {(0, 0): 2, (1, 1): 3}
    assert out.padded == reference_flink_sql(streams, (S, S), policy).padded


def test_a_larger_delay_can_lose_a_pair():
    """Recall is not monotone in the out-of-orderness delay (why tune-buffer refuses
    flink-sql): on these keyed rows pair (L3, R2) comes out with D = 0 and not with
    D = 1 ms -- the caches, probes and shared expiration times move with every
    watermark.  The reference says the same."""
    rows = [[(13, 46119, 1), (34, 69460, 1), (10, 15961, 0), (28, 49284, 0), (10, 13686, 1), (38, 55963, 1),
             (20, 28467, 0), (24, 27479, 1), (33, 34686, 0), (35, 38732, 0)],
            [(9, 21368, 0), (39, 50415, 0), (23, 60368, 0), (4, 25623, 0), (16, 16870, 0), (6, 14829, 0),
             (15, 17295, 1), (21, 34562, 1), (27, 36934, 1)]]
    streams = [[RefTuple(i, r, ts * MS, arr, (k,)) for r, (ts, arr, k) in enumerate(s)] for i, s in enumerate(rows)]
    windows = (5 * MS, 8 * MS)
    emitted = []
    for d in (0, MS):
        policy = PolicySpec("flink-sql", watermark=(d, d), watermark_interval_us=0)
        out = local_flink_sql(streams, windows, policy)
        assert out.emitted == reference_flink_sql(streams, windows, policy).emitted
        emitted.append(set(out.emitted))
    assert (3, 2) in emitted[0] - emitted[1]


@pytest.mark.parametrize("bad,message", [
    (dict(idleness_us=5 * S, watermark_interval_us=200 * MS), "does not emulate withIdleness"),
    (dict(watermark=None), "policy flink-sql needs --watermark"),
])
def test_settings_refused_in_one_line(bad, message):
    kwargs = dict(watermark=(0, 0), watermark_interval_us=0)
    kwargs.update(bad)
    with pytest.raises(InputError, match=message):
        PolicySpec("flink-sql", **kwargs)


def test_outer_joins_are_the_emulations_only_and_times_must_be_positive():
    with pytest.raises(InputError, match="--join full: outer joins are emulated for --policy spark-ss, flink-sql only"):
        PolicySpec("flink", watermark=(0, 0), watermark_interval_us=0, join="full")
    streams = _streams([(0, 0)], [(MS, 1)])
    with pytest.raises(InputError, match=r"has ts 0us <= 0 .*removeExpiredRows"):
        local_flink_sql(streams, (S, S), PolicySpec("flink-sql", watermark=(0, 0), watermark_interval_us=0))
