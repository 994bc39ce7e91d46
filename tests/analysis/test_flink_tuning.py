"""``tune-buffer --policy flink``: the required ``forBoundedOutOfOrderness`` delay per pair.

Every check replays the per-event reference ``replay_interval_join`` (Flink's
generators, watermarks, buffers and timers one event at a time), which shares
no code with the closed form of ``analysis/flink_tuning.py``:

* monotonicity (hypothesis): a larger delay -- common or per stream,
  componentwise -- never loses a pair, never adds a late drop, never changes
  a pair's emission time;
* required delay (hypothesis): the reference at a pair's required delay emits
  it, 1 ms less does not;
* the tuned delay (hypothesis): for a random target Q, the exact minimum ``D``
  replayed gives recall >= Q, ``D - 1 ms`` gives less;
* the worked example of the module doc.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.analysis.flink_tuning import required_flink
from streamjoin.pipelines.analysis.tuning import exact_quantile
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_interval_join

from helpers.adapters import key_frames
from helpers.flink import flink_problems

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def at(policy: PolicySpec, watermark) -> PolicySpec:
    return PolicySpec("flink", watermark=tuple(watermark), watermark_interval_us=policy.watermark_interval_us,
                      idleness_us=policy.idleness_us)


def required(streams, windows, policy) -> dict[tuple[int, int], int]:
    """Required delay (µs) of every valid pair, keyed by (left row, right row)."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, key_frames(streams), windows, PolicySpec("none"))
    values = required_flink(out.replay, out.combos, windows, policy)
    return dict(zip(zip(*(r.tolist() for r in out.combos.rows)), values.tolist()))


@SETTINGS
@given(flink_problems(), st.data())
def test_recall_is_monotone_in_the_delay(problem, data):
    streams, windows, policy = problem
    common = data.draw(st.booleans())
    low = [data.draw(st.integers(0, 15)) * MS for _ in range(2)]
    more = [data.draw(st.integers(0, 15)) * MS for _ in range(2)]
    if common:
        low[1], more[1] = low[0], more[0]
    a = replay_interval_join(streams, windows, at(policy, low))
    b = replay_interval_join(streams, windows, at(policy, [lo + m for lo, m in zip(low, more)]))
    assert set(a.emitted) <= set(b.emitted)
    assert b.dropped <= a.dropped
    assert all(b.emitted[p] == a.emitted[p] for p in a.emitted)   # the same arrival emits it


@SETTINGS
@given(flink_problems())
def test_required_delay_emits_and_one_ms_less_does_not(problem):
    streams, windows, policy = problem
    need = required(streams, windows, policy)
    assert set(need) == replay_interval_join(streams, windows, at(policy, (0, 0))).truth
    for d in sorted(set(need.values())):
        assert d % MS == 0
        emitted = set(replay_interval_join(streams, windows, at(policy, (d, d))).emitted)
        assert {p for p, v in need.items() if v <= d} == emitted
        if d > 0:
            fewer = set(replay_interval_join(streams, windows, at(policy, (d - MS, d - MS))).emitted)
            assert not {p for p, v in need.items() if v == d} & fewer


@SETTINGS
@given(flink_problems(max_rows=14), st.floats(0.01, 1.0))
def test_tuned_delay_meets_the_target_and_one_ms_less_does_not(problem, q):
    streams, windows, policy = problem
    need = required(streams, windows, policy)
    if not need:
        return
    d = exact_quantile(np.array(list(need.values()), dtype=np.int64), q)

    def recall(delay: int) -> float:
        return len(replay_interval_join(streams, windows, at(policy, (delay, delay))).emitted) / len(need)

    assert recall(d) >= q
    if d > 0:
        assert recall(d - MS) < q


def test_worked_example_of_the_module_doc():
    """W = 2 s, a watermark after every record, both inputs at t0 + 10 s: a left
    record at t0 + 8 s arriving next is late unless D >= 2 s - 1 ms."""
    streams = [[RefTuple(0, 0, T0 + 10 * S, T0), RefTuple(0, 1, T0 + 8 * S, T0 + 2)],
               [RefTuple(1, 0, T0 + 10 * S, T0 + 1), RefTuple(1, 1, T0 + 8 * S + MS, T0 + 3)]]
    policy = PolicySpec("flink", watermark=(0, 0), watermark_interval_us=0)
    need = required(streams, (2 * S, 2 * S), policy)
    assert need[(1, 1)] == 2 * S - MS
    assert need[(0, 0)] == 0
    # (0, 1): right row 1 arrives after G = t0 + 10 s - D - 1 ms; on time iff D >= 2 s - 2 ms
    assert need[(0, 1)] == 2 * S - 2 * MS


def test_a_record_at_the_watermark_with_no_window_stays_until_the_watermark_moves():
    """W = 0, both inputs at t0 + 10 s, then a left and a right record at t0 + 9 s with
    no watermark move between them.  At D = 999 ms, G = t0 + 9 s: the left record is on
    time (ts = G), its cleanup timer (ts + 0 <= G) fires only when G next moves, so the
    right record still finds it.  The required delay is the late filter's 999 ms, not
    the 1 s that "G < ts + W" alone would ask for."""
    streams = [[RefTuple(0, 0, T0 + 10 * S, T0), RefTuple(0, 1, T0 + 9 * S, T0 + 2)],
               [RefTuple(1, 0, T0 + 10 * S, T0 + 1), RefTuple(1, 1, T0 + 9 * S, T0 + 3)]]
    policy = PolicySpec("flink", watermark=(0, 0), watermark_interval_us=0)
    need = required(streams, (0, 0), policy)
    assert need[(1, 1)] == 999 * MS
    assert (1, 1) in replay_interval_join(streams, (0, 0), at(policy, (999 * MS,) * 2)).emitted
    assert (1, 1) not in replay_interval_join(streams, (0, 0), at(policy, (998 * MS,) * 2)).emitted
