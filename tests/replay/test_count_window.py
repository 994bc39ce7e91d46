"""Count windows ``S_i[N]`` (seed 000): the local engine equals the per-arrival reference.

Golden cases computed by hand (N = 2 and 3), then a hypothesis property over
random small inputs -- disorder, ties in arrival and event time, keys, a
distance predicate, count and duration windows mixed, two and three streams --
comparing every observable: truth, the emitted set with emission times and
latency, memory after every arrival, expired-on-arrival counts.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.candidates import Space
from streamjoin.pipelines.replay.count_reference import Tup, replay_counted
from streamjoin.pipelines.replay.count_window import count_expiry, enumerate_counted
from streamjoin.pipelines.replay.progress import build_replay


def fast(streams, windows, counts, retention, distance=None):
    """The local engine's answer in the reference's shapes."""
    ts = [np.array([t.ts for t in s], np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], np.int64) for s in streams]
    keyed = any(t.key is not None for s in streams for t in s)
    keys = [pl.DataFrame({"__key0": [t.key for t in s]}, schema={"__key0": pl.Int64}) if keyed else None
            for s in streams]
    space = Space([t.astype(np.float64).reshape(-1, 1) for t in ts], float(distance)) if distance is not None else None
    out = join(ts, arrival, keys, windows, PolicySpec(name="static", retention=tuple(retention)),
               space=space, counts=counts)
    rows = [r.tolist() for r in out.combos.rows]
    truth = list(zip(*rows)) if rows and rows[0] else []
    em = out.emission
    emitted = {c: int(em.emit_us[i]) for i, c in enumerate(truth) if em.emitted[i]}
    latency = {int(em.latency_us[i]) for i in range(len(truth)) if em.emitted[i]}
    expired = [int(np.count_nonzero(out.decisions.expired[pos])) for pos in out.replay.index_of]
    return set(truth), len(truth), emitted, latency, out.memory.T.tolist(), expired


def assert_same(streams, windows, counts, retention, distance=None):
    predicate = (lambda ms: all(abs(a.ts - b.ts) <= distance for a in ms for b in ms)) if distance is not None else None
    ref = replay_counted(streams, windows, counts, retention, predicate)
    truth, size, emitted, latency, memory, expired = fast(streams, windows, counts, retention, distance)
    assert size == len(truth)             # no combination twice
    assert truth == ref.truth
    assert emitted == ref.emitted         # the emitted set and each emission time
    assert latency <= {0}                 # symmetric: emitted on the last member's arrival
    assert memory == ref.memory
    assert expired == ref.expired


def stream(i, pairs, keys=None):
    return [Tup(i, r, ts, arr, None if keys is None else keys[r]) for r, (ts, arr) in enumerate(pairs)]


# ---------------------------------------------------------------------------
# golden cases, by hand


def test_golden_last_two_frames_against_a_zero_window():
    """S0 counted (N = 2), S1 a 0 window; in order.  Replay: a0 S0@0, a1 S1@5,
    a2 S0@10, a3 S1@15, a4 S0@20, a5 S1@25, a6 S0@30.  A pair (x, y) needs
    y.ts >= x.ts (y's window 0) and x among S0's last 2 when the later arrives:
    (0,5) at a1, (0,15) at a3 (S0 so far: 0, 10), (10,15), (10,25) at a5
    (S0: 0, 10, 20 -> last two 10, 20), (20,25); not (0,25): 0 was pushed out
    by 20 at a4.  S1's buffer: 5 leaves at a3 (T = min(10, 15) = 10 > 5)."""
    s0 = stream(0, [(0, 0), (10, 10), (20, 20), (30, 30)])
    s1 = stream(1, [(5, 5), (15, 15), (25, 25)])
    truth, size, emitted, latency, memory, expired = fast([s0, s1], [0, 0], [2, None], [0, 0])
    assert truth == {(0, 0), (0, 1), (1, 1), (1, 2), (2, 2)}
    assert emitted == {(0, 0): 5, (0, 1): 15, (1, 1): 15, (1, 2): 25, (2, 2): 25}
    assert memory == [[1, 0], [1, 1], [2, 1], [2, 1], [2, 1], [2, 1], [2, 1]]
    assert expired == [0, 0]
    assert_same([s0, s1], [0, 0], [2, None], [0, 0])


def test_golden_three_tuples_counted_in_arrival_order_not_event_time():
    """Both streams counted, N = 3 and N = 1, with disorder and a tie in arrival.
    S0 arrives ts 40@1, 10@2, 30@3, 20@4 (arrival order != ts order); S1 one
    tuple ts 0@4 (ties S0's 20@4: the replay puts S0 first, by stream).
    At S1's arrival (a4) S0's last 3 arrivals are ts 10, 30, 20: they pair
    with it, 40 (the first arrival) does not, though no window in time exists.
    S1's N = 1 never matters here (S1 arrives last)."""
    s0 = stream(0, [(40, 1), (10, 2), (30, 3), (20, 4)])
    s1 = stream(1, [(0, 4)])
    truth, _, emitted, _, memory, _ = fast([s0, s1], [0, 0], [3, 1], [0, 0])
    assert truth == {(1, 0), (2, 0), (3, 0)}
    assert emitted == {(1, 0): 4, (2, 0): 4, (3, 0): 4}
    assert [m[0] for m in memory] == [1, 2, 3, 3, 3]
    assert_same([s0, s1], [0, 0], [3, 1], [0, 0])


def test_golden_late_count_tuple_misses_a_purged_duration_partner_unless_retained():
    """S0 counted N = 2, S1 a 10 window.  Replay: a0 S1 ts10@10, a1 S0 ts38@38,
    a2 S1 ts40@40, a3 S0 ts12@50 (late).  Truth: (38, 40) and (12, 40)
    (newest 40, S1's 40 within 0 <= 10) and (12, 10) (newest 12, 12 - 10 <= 10;
    at a3 S0's last two are 38, 12).  Retention 0: at a2 T = min(38, 40) = 38
    purges S1's 10 (10 + 10 < 38), so (12, 10) is lost when 12 arrives at a3;
    retention 30 keeps it (10 + 10 >= 38 - 30) and all three are emitted."""
    s0 = stream(0, [(38, 38), (12, 50)])
    s1 = stream(1, [(10, 10), (40, 40)])
    truth, _, emitted, _, memory, expired = fast([s0, s1], [0, 10], [2, None], [0, 0])
    assert truth == {(0, 1), (1, 0), (1, 1)}
    assert emitted == {(0, 1): 40, (1, 1): 50}
    assert memory == [[0, 1], [1, 1], [1, 1], [2, 1]]
    assert expired == [0, 0]
    _, _, kept, _, _, _ = fast([s0, s1], [0, 10], [2, None], [0, 30])
    assert kept == {(0, 1): 40, (1, 0): 50, (1, 1): 50}
    assert_same([s0, s1], [0, 10], [2, None], [0, 0])
    assert_same([s0, s1], [0, 10], [2, None], [0, 30])


def test_count_expiry_is_the_arrival_that_pushes_the_tuple_out():
    ts = [np.array([5, 1, 9, 3], np.int64), np.array([2], np.int64)]
    arrival = [np.array([1, 2, 3, 4], np.int64), np.array([0], np.int64)]
    replay = build_replay(ts, arrival)
    # stream 0 sits at indexes 1, 2, 3, 4; with N = 2 row r leaves at row r + 2's index
    assert count_expiry(replay, 0, 2).tolist() == [3, 4, 5, 5]
    assert count_expiry(replay, 0, 9).tolist() == [5, 5, 5, 5]


def test_enumerate_counted_refuses_without_a_count_window():
    replay = build_replay([np.array([1]), np.array([1])], [np.array([1]), np.array([1])])
    try:
        enumerate_counted(replay, None, [1, 1], [None, None])
    except ValueError as exc:
        assert "count window" in str(exc)
    else:
        raise AssertionError("no error")


# ---------------------------------------------------------------------------
# the property


@st.composite
def problems(draw, n_streams=st.integers(2, 3), max_rows=6, scale=1, key_count=3):
    """Small inputs; ``scale`` multiplies every time (``2**55``: spans times
    key counts past int64's packing, so the fallbacks run)."""
    n = draw(n_streams)
    keyed = draw(st.booleans())
    streams = []
    for i in range(n):
        rows = draw(st.integers(0, max_rows))
        pairs = [(draw(st.integers(0, 30)) * scale, draw(st.integers(0, 30)) * scale) for _ in range(rows)]
        keys = [draw(st.integers(0, key_count - 1)) for _ in range(rows)] if keyed else None
        streams.append(stream(i, pairs, keys))
    counts = [draw(st.one_of(st.none(), st.integers(1, 4))) for _ in range(n)]
    if all(c is None for c in counts):
        counts[draw(st.integers(0, n - 1))] = draw(st.integers(1, 4))
    windows = [draw(st.integers(0, 12)) * scale for _ in range(n)]
    retention = [draw(st.integers(0, 10)) * scale for _ in range(n)]
    distance = draw(st.one_of(st.none(), st.integers(0, 8))) if scale == 1 else None
    return streams, windows, counts, retention, distance


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problems())
def test_local_engine_equals_the_count_reference(problem):
    assert_same(*problem)


@SETTINGS
@given(problems(n_streams=st.just(2), max_rows=12))
def test_local_engine_equals_the_count_reference_two_streams_larger(problem):
    assert_same(*problem)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(n_streams=st.just(2), max_rows=12, scale=2**55, key_count=6))
def test_local_engine_equals_the_count_reference_on_enormous_spans(problem):
    assert_same(*problem)
