"""The recall-target controllers' model and search (pipelines/policies/controller.py):

* ``ramp_sums`` (the kept weight as a function of a retention) equals the
  per-tuple integer count of kept partner offsets, summed (hypothesis);
* the two-stream searches (qjoin's additive kept weight, qkslack's product of
  survival shares) find the cheapest candidate pair meeting the goal, against
  a dense scan of every pair (hypothesis);
* qkslack remembers each period's need for its steady goal (Q plus the
  period's margin), qjoin for Q itself;
* the partner densities a decision reads (counter ranges found once per run)
  equal a per-tuple count of the partners arrived by the decision time, with
  and without keys (hypothesis);
* the default settings follow the span (``Resolved``), and a year of sparse
  data costs decisions bounded by its arrivals, not its seconds.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.policies.controller import (
    QJoinController, QKSlackController, RecallTarget, Resolved, candidates, ramp_sums, schedule)
from streamjoin.pipelines.replay.progress import build_replay


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 20), st.integers(0, 20), st.floats(0, 5)),
                min_size=1, max_size=30),
       st.lists(st.integers(-60, 120), min_size=1, max_size=20))
def test_ramp_sums_equal_kept_offsets(tuples, ds):
    """Tuple: lag l, partner window W, owned upper U; kept offsets under d are
    ``#{o in [-W, U] : o >= l - d - W}`` out of ``U + W + 1`` (the SPEC's closed form)."""
    lag = np.array([t[0] for t in tuples])
    W = np.array([t[1] for t in tuples])
    U = np.array([t[2] for t in tuples])
    w = np.array([t[3] for t in tuples])
    start, end = lag - W - U - 1, lag
    d = np.array(ds)
    want = []
    for x in d:
        total = 0.0
        for l, wj, u, wt in zip(lag, W, U, w):
            offsets = np.arange(-wj, u + 1)
            total += wt * np.count_nonzero(offsets >= l - x - wj) / len(offsets)
        want.append(total)
    assert np.allclose(ramp_sums(start, end, w, d), want, atol=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.floats(0.1, 3)), min_size=2, max_size=25),
       st.floats(0.3, 1.0), st.floats(0.1, 5), st.floats(0.1, 5))
def test_two_stream_search_is_the_cheapest_feasible_pair(tuples, goal, c0, c1):
    s = np.array([t[0] for t in tuples])
    lag = np.array([t[1] for t in tuples])
    w = np.array([t[2] for t in tuples])
    W = 5
    start = np.stack([lag - W - 3 - 1, lag - W - 3 - 1])
    end = np.stack([lag, lag])
    ctl = QJoinController.__new__(QJoinController)
    ctl.n = 2
    st_ = {"s": s, "w": w, "start": start, "end": end, "rate": np.array([c0, c1])}
    values, est, _ = ctl._choose(st_, goal, int(lag.max()), 1)
    cand = [candidates(np.concatenate([end[j][s != j], start[j][s != j]]), int(lag.max()), 1) for j in range(2)]
    total = w.sum()
    best = None
    for d0 in cand[0]:
        for d1 in cand[1]:
            kept = (w * ctl._share(st_, np.array([d0, d1]))).sum()
            if kept >= goal * total - 1e-9 * total:
                cost = c0 * d0 + c1 * d1
                if best is None or cost < best - 1e-9:
                    best = cost
    if best is None:   # nothing reaches the goal: the largest candidates
        assert list(values) == [cand[0][-1], cand[1][-1]]
    else:
        assert abs(c0 * values[0] + c1 * values[1] - best) < 1e-6
        assert (w * ctl._share(st_, values)).sum() >= goal * total - 1e-6


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.floats(0.1, 3)), min_size=2, max_size=25),
       st.floats(0.3, 1.0), st.floats(0.1, 5), st.floats(0.1, 5))
def test_two_stream_product_search_is_the_cheapest_feasible_pair(tuples, goal, c0, c1):
    """qkslack: a tuple survives iff its delay <= K of its stream; recall = the product
    of the streams' weighted survival shares."""
    s = np.array([t[0] for t in tuples])
    need = np.array([t[1] for t in tuples])
    w = np.array([t[2] for t in tuples])
    ctl = QKSlackController.__new__(QKSlackController)
    ctl.n = 2
    st_ = {"s": s, "w": w, "need": need, "rate": np.array([c0, c1])}
    values, est, _ = ctl._choose(st_, goal, int(need.max()), 1)
    cand = [candidates(need[s == i], int(need.max()), 1) for i in range(2)]

    def recall(k0, k1):
        out = 1.0
        for i, k in enumerate((k0, k1)):
            m = s == i
            if w[m].sum() > 0:
                out *= w[m & (need <= k)].sum() / w[m].sum()
        return out

    best = None
    for k0 in cand[0]:
        for k1 in cand[1]:
            if recall(k0, k1) >= goal - 1e-9:
                cost = c0 * k0 + c1 * k1
                if best is None or cost < best - 1e-9:
                    best = cost
    if best is None:
        assert list(values) == [cand[0][-1], cand[1][-1]]
    else:
        assert abs(c0 * values[0] + c1 * values[1] - best) < 1e-6
        assert recall(*values) >= goal - 1e-6
        assert abs(est - recall(*values)) < 1e-9


def test_qkslack_remembers_needs_for_the_steady_goal_qjoin_for_q():
    """Each period's remembered need is the latest-P solution for the goal the
    policy holds it to: qkslack (steady = Q + margin, at most Q + 3 (1 - Q) / 4) needs at least what qjoin's
    rule (Q itself) gives on the same tuples, and strictly more somewhere."""
    rng = np.random.default_rng(3)
    span = 400_000_000
    ts = [np.sort(rng.integers(0, span, 400)) for _ in range(2)]
    arr = [t + rng.exponential(20e6, len(t)).astype(np.int64) for t in ts]
    replay = build_replay(ts, arr)
    target = RecallTarget(0.9, period_us=40_000_000, granularity_us=1)

    class AtQ(QKSlackController):
        remember_margin = False

    margin = QKSlackController(replay, (5_000_000, 5_000_000), target)
    plain = AtQ(replay, (5_000_000, 5_000_000), target)
    assert QJoinController.remember_margin is False
    # the first period's need comes from the same decisions in both (nothing remembered yet)
    margin.run(), plain.run()
    p0 = min(margin.period_need)
    assert np.all(margin.period_need[p0][0] >= plain.period_need[p0][0])
    assert any(np.any(margin.period_need[p][0] > plain.period_need[p][0])
               for p in margin.period_need if p in plain.period_need)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(0, 30), st.integers(0, 2)),
                min_size=2, max_size=30),
       st.integers(0, 100), st.integers(1, 7), st.integers(0, 9), st.integers(0, 9), st.booleans())
def test_density_counts_the_partners_arrived_by_t(rows, t, b, w0, w1, keyed):
    ts = [np.array([r[1] for r in rows if r[0] == i], dtype=np.int64) for i in range(2)]
    arr = [np.array([r[1] + r[2] for r in rows if r[0] == i], dtype=np.int64) for i in range(2)]
    key = [np.array([r[3] for r in rows if r[0] == i], dtype=np.int64) for i in range(2)]
    if not all(len(x) for x in ts):
        return
    replay = build_replay(ts, arr)
    W = np.array([w0, w1])
    ctl = QJoinController(replay, W, RecallTarget(0.9, basic_window_us=b), keys=key if keyed else None)
    idx = np.arange(replay.N)
    k_all = np.empty(replay.N, dtype=np.int64)
    for i, pos in enumerate(replay.index_of):
        k_all[pos] = key[i]
    # at t and at every arrival time (a partner arriving exactly at t has arrived)
    for t in sorted({t, *replay.arrival.tolist()}):
        _check_density(ctl, replay, idx, k_all, t, W, b, keyed)


def _check_density(ctl, replay, idx, k_all, t, W, b, keyed):
    got = ctl._density(t, idx)
    for x in idx:
        for j in range(2):
            mine = (replay.stream == j) & (replay.arrival <= t)
            if keyed:   # the same key's partners over the tuple's partner window
                below, above = max(W[j], b), max(W[replay.stream[x]], b)
                lo, hi = replay.ts[x] - below, replay.ts[x] + above
                n = np.count_nonzero(mine & (k_all == k_all[x]) & (replay.ts >= lo) & (replay.ts <= hi))
                want = n / (below + above + 1)
            else:       # the basic window the tuple falls in
                lo = (replay.ts[x] // b) * b
                want = np.count_nonzero(mine & (replay.ts >= lo) & (replay.ts < lo + b)) / b
            assert got[j, x] == want


def test_defaults_follow_the_span():
    year = 365 * 86_400_000_000
    r = Resolved.of(RecallTarget(0.9), year, np.array([3_600_000_000, 0]))
    assert (r.period_us, r.interval_us, r.probe_us, r.basic_window_us) == (
        86_400_000_000, 8_640_000_000, 864_000_000, 360_000_000)
    short = Resolved.of(RecallTarget(0.9), 300_000_000, np.array([1_000, 1_000]))
    assert (short.period_us, short.interval_us, short.basic_window_us) == (1_000_000, 1_000_000, 100)
    given_ = Resolved.of(RecallTarget(0.9, period_us=5, interval_us=3, basic_window_us=2), year, np.array([7]))
    assert (given_.period_us, given_.interval_us, given_.basic_window_us) == (5, 3, 2)


def test_a_sparse_year_costs_decisions_per_arrival_not_per_second():
    rng = np.random.default_rng(0)
    year = 365 * 86_400_000_000
    ts = [np.sort(rng.integers(0, year, 300)) for _ in range(2)]
    arr = [t + rng.exponential(600e6, len(t)).astype(np.int64) for t in ts]
    # an explicit 1 s interval over a year: one tick per gap between arrivals at most
    sched = schedule("qjoin", build_replay(ts, arr), (3_600_000_000, 3_600_000_000),
                     RecallTarget(0.9, interval_us=1_000_000))
    assert 0 < len(sched.log) <= 2 * 600
    assert sched.values.shape == (2, 600)
