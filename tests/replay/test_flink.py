"""``--policy flink`` on the local engine: the column form (replay/interval_join.py)
against the per-event reference (replay/reference.py ``replay_interval_join``),
and worked examples of each rule (docs/semantics.md "flink")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_interval_join

from helpers.flink import flink_problems, local_flink

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S


@settings(max_examples=500, deadline=None)
@given(flink_problems())
def test_columns_equal_reference(problem):
    """Emitted set (with emission time and latency), late drops per record and the
    buffered rows of both sides after every arrival: the same."""
    streams, windows, policy = problem
    ref = replay_interval_join(streams, windows, policy)
    fast = local_flink(streams, windows, policy)
    assert fast.truth == ref.truth
    assert fast.emitted == ref.emitted
    assert fast.dropped == ref.dropped
    assert fast.buffered == ref.buffered


def _run(left, right, windows, watermark, interval=0):
    """``left`` / ``right``: lists of (ts, arrival) in µs."""
    streams = [[RefTuple(i, r, ts, arr) for r, (ts, arr) in enumerate(rows)] for i, rows in enumerate((left, right))]
    policy = PolicySpec("flink", watermark=watermark, watermark_interval_us=interval)
    fast = local_flink(streams, windows, policy)
    ref = replay_interval_join(streams, windows, policy)
    assert (fast.emitted, fast.dropped, fast.buffered) == (ref.emitted, ref.dropped, ref.buffered)
    return fast


def test_late_is_strictly_below_the_operator_watermark_minus_one_ms():
    """Both inputs at 10 s with D = 1 s: G = 10 s - 1 s - 1 ms.  A record exactly at G
    is not late (ts < G is); one 1 ms below it is dropped and counted."""
    g = T0 + 9 * S - MS
    left = [(T0 + 10 * S, T0), (g, T0 + 2), (g - MS, T0 + 3)]
    right = [(T0 + 10 * S, T0 + 1)]
    out = _run(left, right, (S, S), (S, S))
    assert out.dropped == {(0, 2)}
    assert set(out.emitted) == {(0, 0)}


def test_operator_watermark_waits_for_both_inputs():
    """Only the left input has records: its watermark alone does not move G (the
    right input is still at Long.MIN_VALUE), so a very old right record joins."""
    left = [(T0 + 60 * S, T0), (T0 + 61 * S, T0 + S)]
    right = [(T0 + 60 * S - 500 * MS, T0 + 2 * S)]
    out = _run(left, right, (S, S), (0, 0))
    assert out.dropped == set() and set(out.emitted) == {(0, 0)}


def test_cleanup_at_ts_plus_own_window_and_emission_on_arrival():
    """A left record at 10 s with W_left = 2 s leaves the buffer when G reaches 12 s.
    Every partner it could still meet has ts <= 12 s, so only one at exactly G = 12 s
    (not late: late is ts < G) misses it; one at 11.999 s is late.  Pairs are
    emitted at the later member's arrival, latency 0."""
    left = [(T0 + 10 * S, T0), (T0 + 12 * S + MS, T0 + 2)]
    right = [(T0 + 12 * S + MS, T0 + 1), (T0 + 12 * S, T0 + 3), (T0 + 12 * S - MS, T0 + 4)]
    out = _run(left, right, (2 * S, 2 * S), (0, 0))
    # after left row 1, G = min(12.001 s, 12.001 s) - 1 ms = 12 s: left row 0's timer fires
    assert out.buffered == [(1, 0), (1, 1), (1, 1), (1, 2), (1, 2)]
    assert {(0, 1), (0, 2)} <= out.truth
    assert out.dropped == {(1, 2)}
    assert out.emitted == {(1, 0): (T0 + 2, 0), (1, 1): (T0 + 3, 0)}


def test_periodic_watermarks_lag_the_records():
    """With a 1 s interval the watermark moves only at ticks: a record that is late
    per record (G moved right after the 10 s records) is on time before the first tick."""
    left = [(T0 + 10 * S, T0), (T0 + 5 * S, T0 + 500 * MS)]
    right = [(T0 + 10 * S, T0 + 1), (T0 + 5 * S, T0 + 1500 * MS)]
    per_record = _run(left, right, (S, S), (S, S), 0)
    periodic = _run(left, right, (S, S), (S, S), S)
    assert per_record.dropped == {(0, 1), (1, 1)}
    assert periodic.dropped == {(1, 1)}          # the 1 s tick came between: G = 9 s - 1 ms
    assert (1, 0) not in periodic.emitted and (0, 0) in periodic.emitted


def test_settings_are_checked_with_one_line_errors():
    with pytest.raises(InputError, match="--watermark"):
        PolicySpec("flink", watermark_interval_us=0)
    with pytest.raises(InputError, match="whole milliseconds"):
        PolicySpec("flink", watermark=(1500, 0), watermark_interval_us=0)
    with pytest.raises(InputError, match="exactly two streams"):
        PolicySpec("flink", watermark=(0, 0, 0), watermark_interval_us=0)
    with pytest.raises(InputError, match="--watermark-interval"):
        PolicySpec("flink", watermark=(0, 0), watermark_interval_us=-1)
    policy = PolicySpec("flink", watermark=(0, 0), watermark_interval_us=0)
    with pytest.raises(InputError, match="whole-millisecond windows"):
        local_flink([[RefTuple(0, 0, 0, 0)], [RefTuple(1, 0, 0, 0)]], (1500, 0), policy)
    with pytest.raises(InputError, match="stream 1 row 0 has ts 1500us"):
        local_flink([[RefTuple(0, 0, 0, 0)], [RefTuple(1, 0, 1500, 0)]], (0, 0), policy)


def _idle_case(second_right_ts):
    """Left: a record every second (arrival T0 + k s, ts T0 + 10 s + k s, k = 0..9).
    Right: one record at T0 + 0.5 s (ts 10 s), then silence until T0 + 5.5 s
    (ts ``second_right_ts``), then one at T0 + 7.5 s with ts 15.5 s.  W = 1 s, D = 0,
    ticks every 1 s, idleness 2 s."""
    left = [(T0 + (10 + k) * S, T0 + k * S) for k in range(10)]
    right = [(T0 + 10 * S, T0 + 500 * MS), (second_right_ts, T0 + 5500 * MS), (T0 + 15500 * MS, T0 + 7500 * MS)]
    return left, right


def _run_idle(left, right, idleness):
    streams = [[RefTuple(i, r, ts, arr) for r, (ts, arr) in enumerate(rows)] for i, rows in enumerate((left, right))]
    policy = PolicySpec("flink", watermark=(0, 0), watermark_interval_us=S, idleness_us=idleness)
    fast = local_flink(streams, (S, S), policy)
    ref = replay_interval_join(streams, (S, S), policy)
    assert (fast.emitted, fast.dropped, fast.buffered) == (ref.emitted, ref.dropped, ref.buffered)
    return fast


def test_an_idle_input_leaves_the_minimum():
    """The right input is active at the 1 s tick (its record came before it); the 2 s
    tick sees no new record and starts the idleness timer; it is idle at the first tick
    more than 2 s later, 5 s.  From then G is the left input's watermark alone: 14 s - 1 ms
    (left records up to ts 14 s came before 5 s), so the right record at 5.5 s with
    ts 12 s is late.  Without idleness G stays at the right input's 10 s - 1 ms, and
    that record joins the buffered left records at 11, 12 and 13 s."""
    left, right = _idle_case(T0 + 12 * S)
    idle = _run_idle(left, right, 2 * S)
    busy = _run_idle(left, right, None)
    assert (1, 1) in idle.dropped and (1, 1) not in busy.dropped
    assert {(1, 1), (2, 1), (3, 1)} <= set(busy.emitted) and not any(r == 1 for _, r in idle.emitted)
    # one tick less of timeout (1.999 s): idle at 4 s already, G = 13 s - 1 ms: ts 12 s is late too;
    # a timeout of 3 s: idle at the 6 s tick, after the record at 5.5 s -- on time, joined
    assert (1, 1) in _run_idle(left, right, 2 * S - 1).dropped
    assert (1, 1) not in _run_idle(left, right, 3 * S).dropped


def test_an_idle_input_is_active_again_only_when_its_watermark_rises():
    """WatermarkEmitter marks an idle input active only when it emits a higher
    watermark.  A record at 5.5 s with ts 9 s (late, and below the input's largest
    10 s) does not raise it: the input stays idle, G follows the left input to
    16 s - 1 ms by the 7 s tick, and the right record at 7.5 s (ts 15.5 s) is late.
    With ts 12 s instead (late too, but it raises the input's largest timestamp) the
    6 s tick marks the input active with 12 s - 1 ms: G stays at 14 s - 1 ms and the
    7.5 s record is on time."""
    left, right = _idle_case(T0 + 9 * S)
    stays_idle = _run_idle(left, right, 2 * S)
    assert {(1, 1), (1, 2)} <= stays_idle.dropped
    left, right = _idle_case(T0 + 12 * S)
    active_again = _run_idle(left, right, 2 * S)
    assert (1, 1) in active_again.dropped and (1, 2) not in active_again.dropped
    assert {(5, 2), (6, 2)} <= set(active_again.emitted)


def test_idleness_needs_periodic_watermarks():
    with pytest.raises(InputError, match="--idleness needs --watermark-interval > 0"):
        PolicySpec("flink", watermark=(0, 0), watermark_interval_us=0, idleness_us=S)
    with pytest.raises(InputError, match="--idleness must be > 0"):
        PolicySpec("flink", watermark=(0, 0), watermark_interval_us=S, idleness_us=0)
