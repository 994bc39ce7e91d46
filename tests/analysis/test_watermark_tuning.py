"""``tune-buffer --policy spark-ss``: the required ``withWatermark`` delay per pair.

* Monotonicity (hypothesis): on the per-batch reference replay
  (``replay_micro_batches``, which shares no code with the derivation), a
  larger delay -- common or per stream, componentwise -- never loses a pair,
  never adds a late drop, and never changes a pair's batch.
* Required delay (hypothesis): replaying the reference at a pair's required
  delay emits it, 1 ms less does not; a pair no delay emits has a member at or
  before the epoch.
* The worked example of the module doc.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.analysis.watermark_tuning import UNREACHABLE, required_watermark
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_micro_batches

from helpers.adapters import key_frames
from helpers.spark_ss import spark_problems

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def at(policy: PolicySpec, watermark) -> PolicySpec:
    return PolicySpec("spark-ss", watermark=tuple(watermark), trigger_us=policy.trigger_us,
                      watermark_policy=policy.watermark_policy)


def required(streams, windows, policy) -> dict[tuple[int, int], int]:
    """Required delay (µs) of every valid pair, keyed by (left row, right row)."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, key_frames(streams), windows, PolicySpec("none"))
    values = required_watermark(out.replay, out.combos, windows, policy.trigger_us, policy.watermark_policy)
    return dict(zip(zip(*(r.tolist() for r in out.combos.rows)), values.tolist()))


@SETTINGS
@given(spark_problems(), st.data())
def test_recall_is_monotone_in_the_delay(problem, data):
    streams, windows, policy = problem
    low = [data.draw(st.integers(0, 15)) * MS for _ in range(2)]
    common = data.draw(st.booleans())
    if common:
        low[1] = low[0]
    more = [data.draw(st.integers(0, 15)) * MS for _ in range(2)]
    if common:
        more[1] = more[0]
    high = [lo + m for lo, m in zip(low, more)]
    a = replay_micro_batches(streams, windows, at(policy, low))
    b = replay_micro_batches(streams, windows, at(policy, high))
    assert set(a.emitted) <= set(b.emitted)
    assert b.dropped <= a.dropped
    assert all(b.emitted[p][0] == a.emitted[p][0] for p in a.emitted)   # the same emitting batch


@SETTINGS
@given(spark_problems())
def test_required_delay_emits_and_one_ms_less_does_not(problem):
    streams, windows, policy = problem
    need = required(streams, windows, policy)
    ref_truth = replay_micro_batches(streams, windows, at(policy, (0, 0))).truth
    assert set(need) == ref_truth
    for d in sorted(set(need.values())):
        if d == UNREACHABLE:
            continue
        assert d % MS == 0
        emitted = set(replay_micro_batches(streams, windows, at(policy, (d, d))).emitted)
        assert {p for p, v in need.items() if v <= d} == emitted
        if d > 0:
            fewer = set(replay_micro_batches(streams, windows, at(policy, (d - MS, d - MS))).emitted)
            assert not {p for p, v in need.items() if v == d} & fewer
    unreachable = {p for p, v in need.items() if v == UNREACHABLE}
    for left, right in unreachable:
        assert min(streams[0][left].ts, streams[1][right].ts) <= 0
    huge = set(replay_micro_batches(streams, windows, at(policy, (10**9 * MS,) * 2)).emitted)
    assert huge == set(need) - unreachable


def test_worked_example_of_the_module_doc():
    """W = 2 s, 1 s batches: batch 0 sees both streams at t0 + 20 s; a left row at
    t0 + 18 s - 1 ms and its right partner (10 µs later) need no delay in one batch
    (batch 1 filters with the watermark before batch 0, 0; members of one batch
    always meet), and 2001 ms with the partner in batch 2 (its late filter runs with
    G(0) = t0 + 20 s - D and must stay below it)."""
    old = T0 + 18 * S - MS
    policy = PolicySpec("spark-ss", watermark=(0, 0), trigger_us=S, watermark_policy="min")
    for partner_arrival, want in ((T0 + S + 2, 0), (T0 + 2 * S + 2, 2001 * MS)):
        streams = [[RefTuple(0, 0, T0 + 20 * S, T0), RefTuple(0, 1, old, T0 + S + 1)],
                   [RefTuple(1, 0, T0 + 20 * S, T0 + 1), RefTuple(1, 1, old + 10, partner_arrival)]]
        need = required(streams, (2 * S, 2 * S), policy)
        assert need[(1, 1)] == want
        for delay, emitted in ((want, True), (want - MS, False)):
            if delay >= 0:
                got = replay_micro_batches(streams, (2 * S, 2 * S), at(policy, (delay, delay))).emitted
                assert ((1, 1) in got) == emitted
    assert need[(0, 0)] == 0
