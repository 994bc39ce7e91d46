"""The recall-target controllers' streaming form (pipelines/policies/controller.py,
"Streaming"; issue 19):

* fed the replay in arrival order, chunk by chunk -- chunks of one tuple, random
  cuts, cuts through runs of equal arrivals -- ``Controller.streaming`` makes
  exactly the whole-array controller's decisions: the same log (times, values,
  triggers, goals, estimates, backlogs), the same settings, and the values the
  log puts in force equal the whole-array ``Schedule.values`` (hypothesis: two
  or three streams, keyed and not, stalls, bad rows, both policies, several
  targets and memories);
* what it holds stays bounded: doubling the input at the same rate does not
  grow its largest held state (window tuples, partner counters, per-stream
  arrivals);
* chunks out of replay order are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.timeunits import NEG_INF
from streamjoin.pipelines.policies import RecallTarget, Triggers
from streamjoin.pipelines.policies.controller import QJoinController, QKSlackController, schedule
from streamjoin.pipelines.policies.recall_target import decision_table, in_force
from streamjoin.pipelines.replay.progress import build_replay

CLASSES = {"qjoin": QJoinController, "qkslack": QKSlackController}


def make_input(seed: int, n: int, size: int, keyed: bool, stall: bool, bad: bool, tick: int):
    """Streams over ~20,000 us with exponential delays, a few very late tuples,
    arrivals rounded to ``tick`` us (runs of equal arrivals), optionally a stall
    of stream 1 (its tuples held back, then delivered in a burst) and bursts of
    bad rows."""
    rng = np.random.default_rng(seed)
    ts, arr, keys, bads = [], [], [], []
    for i in range(n):
        m = int(rng.integers(max(size // 2, 1), size + 1))
        t = np.sort(rng.integers(0, 20_000, m))
        d = rng.exponential(rng.choice([20, 200]), m).astype(np.int64)
        d[rng.random(m) < 0.03] += rng.integers(500, 4000)
        a = t + d
        if stall and i == 1:
            lo, hi = 8_000, 11_000
            inside = (a >= lo) & (a < hi)
            a[inside] = hi + rng.integers(0, 300, inside.sum())
        a = -(-a // tick) * tick
        ts.append(t)
        arr.append(a)
        keys.append(rng.integers(0, 4, m))
        b = np.sort(rng.integers(0, 20_000, int(rng.integers(0, 12)))) if bad else np.empty(0, np.int64)
        if bad and rng.random() < 0.5:
            b = np.sort(np.concatenate([b, np.full(8, int(rng.integers(0, 20_000)))]))
        bads.append(b)
    return ts, arr, (keys if keyed else None), bads


def cuts_for(mode: str, arrival: np.ndarray, seed: int) -> list[int]:
    """Chunk boundaries (replay indexes): one tuple each, random, or through runs of equal arrivals."""
    N = len(arrival)
    rng = np.random.default_rng(seed)
    if mode == "ones":
        inner = list(range(1, N))
    elif mode == "ties":   # the middle of every run of equal arrivals (and a few more)
        start = np.flatnonzero(np.diff(arrival, prepend=arrival[0] - 1))
        stop = np.append(start[1:], N)
        inner = sorted({int((a + z) // 2) for a, z in zip(start, stop) if z - a > 1}
                       | set(rng.integers(1, max(N, 2), 5).tolist()))
    else:
        inner = sorted(set(rng.integers(1, max(N, 2), int(rng.integers(1, 12))).tolist()))
    return [0, *[c for c in inner if 0 < c < N], N]


def streamed(kind, replay, W, target, bads, keys, cuts, *, with_bound=True):
    """Feed the replay to ``Controller.streaming`` in chunks cut at ``cuts``; the
    controller and its schedule."""
    N = replay.N
    key = None
    if keys is not None:
        key = np.empty(N, dtype=np.int64)
        for i, pos in enumerate(replay.index_of):
            key[pos] = keys[i]
    ctl = CLASSES[kind].streaming(
        replay.n, W, target, first_arrival=int(replay.arrival[0]), last_arrival=int(replay.arrival[-1]),
        ts_range=(int(replay.ts.min()), int(replay.ts.max())),
        key_max=None if key is None else int(key.max(initial=0)), bad_arrivals=bads)
    later = np.minimum.accumulate(replay.ts[::-1])[::-1]    # smallest ts from each index on
    for a, z in zip(cuts[:-1], cuts[1:]):
        bound = (int(later[z]) if z < N else None) if with_bound else NEG_INF
        ctl.on_chunk(replay.stream[a:z], replay.ts[a:z], replay.arrival[a:z],
                     None if key is None else key[a:z], later_ts_min=bound)
    return ctl, ctl.on_eof()


def initial(kind, replay):
    """MP-K-slack's bound, in force before the first decision: the running maximum
    delay (qjoin) or each stream's own running maximum delay (qkslack)."""
    if kind == "qjoin":
        return np.broadcast_to(np.maximum.accumulate(replay.delay), (replay.n, replay.N))
    return np.stack([np.maximum.accumulate(np.where(replay.stream == i, replay.delay, 0)) for i in range(replay.n)])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n=st.integers(2, 3), size=st.integers(1, 160), keyed=st.booleans(),
       stall=st.booleans(), bad=st.booleans(), tick=st.sampled_from([1, 7, 50]),
       kind=st.sampled_from(["qjoin", "qkslack"]), recall=st.sampled_from([0.5, 0.8, 0.9, 0.99]),
       memory=st.sampled_from([None, 0, 2]), history=st.sampled_from(["recent", "run"]),
       mode=st.sampled_from(["ones", "random", "ties"]), W=st.tuples(st.integers(0, 300), st.integers(0, 300),
                                                                       st.integers(0, 300)))
def test_streaming_equals_the_whole_array_controller(seed, n, size, keyed, stall, bad, tick, kind, recall, memory,
                                                     history, mode, W):
    ts, arr, keys, bads = make_input(seed, n, size, keyed, stall, bad, tick)
    replay = build_replay(ts, arr)
    W = np.array(W[:n])
    target = RecallTarget(recall, period_us=2_000, interval_us=200, memory_periods=memory,
                          triggers=Triggers(rate_min_count=2, bad_rows_min=2, rate_history=history))
    whole = schedule(kind, replay, W, target, bads, keys)
    ctl, got = streamed(kind, replay, W, target, bads, keys, cuts_for(mode, replay.arrival, seed))
    assert got.log == whole.log
    assert got.settings == whole.settings
    times, values = decision_table(got.log, n)
    assert np.array_equal(in_force(times, values, replay.arrival, initial(kind, replay)), whole.values)


def test_streaming_state_stays_bounded():
    """Twice the tuples at the same rate (twice the span): the largest state held
    (window tuples + partner counters + per-stream arrivals) does not grow, and is
    a small share of the input; and the decisions are the whole-array ones."""
    peaks = []
    for periods in (25, 50):
        rng = np.random.default_rng(5)
        span = periods * 10_000
        ts = [np.sort(rng.integers(0, span, periods * 400)) for _ in range(2)]
        arr = [t + rng.exponential(50, len(t)).astype(np.int64) for t in ts]
        keys = [rng.integers(0, 8, len(t)) for t in ts]
        replay = build_replay(ts, arr)
        target = RecallTarget(0.9, period_us=10_000, interval_us=1_000)
        cuts = list(range(0, replay.N, 500)) + [replay.N]
        ctl, got = streamed("qjoin", replay, (300, 300), target, None, keys, cuts)
        assert got.log == schedule("qjoin", replay, (300, 300), target, None, keys).log
        peaks.append(ctl.w.held_peak)
        assert ctl.w.held_peak < replay.N / 4
    assert peaks[1] <= peaks[0] * 1.1


def test_unknown_later_ts_keeps_every_partner_and_decides_the_same():
    """``later_ts_min=NEG_INF`` (no bound known): nothing is forgotten from the
    partner counters, the decisions are unchanged."""
    ts, arr, keys, bads = make_input(3, 2, 150, True, True, True, 7)
    replay = build_replay(ts, arr)
    target = RecallTarget(0.8, period_us=2_000, interval_us=200)
    whole = schedule("qkslack", replay, (100, 100), target, bads, keys)
    ctl, got = streamed("qkslack", replay, (100, 100), target, bads, keys,
                        cuts_for("random", replay.arrival, 3), with_bound=False)
    assert got.log == whole.log
    assert sum(len(c[0]) for c in ctl.w.by_ts) == replay.N


def test_chunks_out_of_replay_order_are_refused():
    ts, arr, _, _ = make_input(1, 2, 50, False, False, False, 1)
    replay = build_replay(ts, arr)

    def fresh():
        return QJoinController.streaming(2, (10, 10), RecallTarget(0.9, period_us=2_000, interval_us=200),
                                         first_arrival=int(replay.arrival[0]), last_arrival=int(replay.arrival[-1]),
                                         ts_range=(int(replay.ts.min()), int(replay.ts.max())))

    assert replay.arrival[30] > replay.arrival[0] and replay.arrival[19] > replay.arrival[0]
    with pytest.raises(ValueError, match="replay order"):   # not from the first arrival
        fresh().on_chunk(replay.stream[30:40], replay.ts[30:40], replay.arrival[30:40], later_ts_min=NEG_INF)
    ctl = fresh()
    ctl.on_chunk(replay.stream[:20], replay.ts[:20], replay.arrival[:20], later_ts_min=NEG_INF)
    with pytest.raises(ValueError, match="replay order"):   # back in time
        ctl.on_chunk(replay.stream[:5], replay.ts[:5], replay.arrival[:5], later_ts_min=NEG_INF)


@pytest.mark.parametrize("kind", ["qjoin", "qkslack"])
@pytest.mark.parametrize("keyed", [False, True])
def test_streaming_with_one_stream_empty_equals_the_whole_array_controller(kind, keyed):
    """One of three streams has no tuple (``make_input`` never draws one): the
    streamed log and values are still the whole-array ones, chunk by chunk."""
    ts, arr, keys, bads = make_input(11, 3, 120, keyed, True, True, 7)
    ts[2], arr[2], bads[2] = ts[2][:0], arr[2][:0], bads[2][:0]
    if keys is not None:
        keys[2] = keys[2][:0]
    replay = build_replay(ts, arr)
    target = RecallTarget(0.9, period_us=2_000, interval_us=200,
                          triggers=Triggers(rate_min_count=2, bad_rows_min=2))
    W = np.array([150, 150, 150])
    whole = schedule(kind, replay, W, target, bads, keys)
    for mode in ("ones", "ties"):
        _, got = streamed(kind, replay, W, target, bads, keys, cuts_for(mode, replay.arrival, 11))
        assert got.log == whole.log and len(got.log) > 0
        times, values = decision_table(got.log, 3)
        assert np.array_equal(in_force(times, values, replay.arrival, initial(kind, replay)), whole.values)
