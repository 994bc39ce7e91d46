"""Property tests of the reference replay itself (SPEC §2–§4).

The golden cases pin exact answers on a handful of inputs; these check the
guarantees the SPEC implies on many small random inputs (2–3 streams, a few
tuples each, small integer times so that ties and window edges are common).
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, brute_force_truth, replay, replay_order

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def inputs(draw, in_order: bool = False, max_rows: int = 5):
    """Random ``(streams, windows)``: ts in 0..20, arrival = ts + delay (delay 0..8, 0 if in_order)."""
    n = draw(st.integers(2, 3))
    rows = max_rows if n == 2 else 4  # keep the brute-force product tiny
    keys = draw(st.sampled_from([[()], [("x",), ("y",)]]))
    streams = []
    for i in range(n):
        raw = draw(
            st.lists(
                st.tuples(st.integers(0, 20), st.integers(0, 0 if in_order else 8), st.sampled_from(keys)),
                max_size=rows,
            )
        )
        streams.append([RefTuple(i, r, ts, ts + delay, key) for r, (ts, delay, key) in enumerate(raw)])
    windows = tuple(draw(st.lists(st.integers(0, 10), min_size=n, max_size=n)))
    return streams, windows


def policies(n: int):
    """Any policy of SPEC §4 with parameters for ``n`` streams."""
    small = st.lists(st.integers(0, 10), min_size=n, max_size=n).map(tuple)
    return st.one_of(
        st.just(PolicySpec("none")),
        st.just(PolicySpec("mpkslack")),
        small.map(lambda k: PolicySpec("kslack", k=k)),
        small.map(lambda d: PolicySpec("static", retention=d)),
    )


def delays(streams) -> dict[tuple[int, int], int]:
    """δ(x) = M_i(a_x) − x.ts for every tuple, recomputed here from SPEC §2."""
    seen_max: dict[int, int] = {}
    out = {}
    for x in replay_order(streams):
        seen_max[x.stream] = max(seen_max.get(x.stream, x.ts), x.ts)
        out[(x.stream, x.row)] = seen_max[x.stream] - x.ts
    return out


def pairwise_truth(streams, windows) -> set[tuple[int, ...]]:
    """SPEC §3 restated pairwise: every member k is within W_k of every other member
    (equivalent to ``max_ts − t_k.ts <= W_k``), and all keys are equal."""
    return {
        tuple(m.row for m in c)
        for c in itertools.product(*streams)
        if all(j.ts - k.ts <= windows[k.stream] and j.key == k.key for j in c for k in c)
    }


@SETTINGS
@given(data=st.data())
def test_truth_and_basic_invariants(data):
    streams, windows = data.draw(inputs())
    policy = data.draw(policies(len(streams)))
    result = replay(streams, windows, policy)
    n_tuples = sum(len(s) for s in streams)
    by_id = {(x.stream, x.row): x for s in streams for x in s}

    assert result.truth == brute_force_truth(streams, windows)
    assert result.truth == pairwise_truth(streams, windows)
    assert set(result.emitted) <= result.truth  # precision 1
    for combo, (when, latency) in result.emitted.items():
        last = max(by_id[(i, r)].arrival for i, r in enumerate(combo))
        assert latency == when - last >= 0
        if policy.family == "symmetric":
            assert latency == 0
    # memory: one entry per arrival, never negative, never more than has arrived
    assert len(result.memory) == n_tuples
    assert all(0 <= m <= a + 1 for a, m in enumerate(result.memory))
    assert sorted(result.order) == sorted(by_id)
    # each family reports only its own kind of loss
    if policy.family == "sorting":
        assert not result.expired
    else:
        assert not result.dropped


@SETTINGS
@given(data=st.data())
def test_none_in_order_emits_everything(data):
    """In-order input (arrival == ts) under `none`: nothing is late, everything is emitted.

    Latency is *not* always 0: the synchronising merge holds a tuple until every stream
    has reached its ts, so a result is emitted at the first arrival (at or after its last
    member) where the frontier T has reached its newest ts -- or at the end of input.
    """
    streams, windows = data.draw(inputs(in_order=True))
    result = replay(streams, windows, PolicySpec("none"))
    assert not result.dropped
    assert set(result.emitted) == result.truth

    order = replay_order(streams)
    index = {(x.stream, x.row): a for a, x in enumerate(order)}
    frontier, seen = [], {}
    for x in order:
        seen[x.stream] = max(seen.get(x.stream, x.ts), x.ts)
        frontier.append(min(seen.values()) if len(seen) == len(streams) else float("-inf"))
    for combo, (when, _latency) in result.emitted.items():
        members = [streams[i][r] for i, r in enumerate(combo)]
        first = max(index[(m.stream, m.row)] for m in members)
        newest = max(m.ts for m in members)
        ready = [a for a in range(first, len(order)) if frontier[a] >= newest]
        assert when == (order[ready[0]].arrival if ready else order[-1].arrival)


@SETTINGS
@given(data=st.data())
def test_static_with_enough_retention_has_full_recall(data):
    """static with every d_i >= the largest delay of any stream: recall 1 (SPEC §4.1)."""
    streams, windows = data.draw(inputs())
    worst = max(delays(streams).values(), default=0)
    extra = data.draw(st.lists(st.integers(0, 5), min_size=len(streams), max_size=len(streams)))
    result = replay(streams, windows, PolicySpec("static", retention=tuple(worst + e for e in extra)))
    assert set(result.emitted) == result.truth


@SETTINGS
@given(data=st.data())
def test_kslack_with_enough_k_emits_everything(data):
    """kslack with K_i >= the largest delay of stream i: nothing is dropped, recall 1."""
    streams, windows = data.draw(inputs())
    d = delays(streams)
    k = tuple(
        max((d[(i, x.row)] for x in s), default=0) + data.draw(st.integers(0, 5)) for i, s in enumerate(streams)
    )
    result = replay(streams, windows, PolicySpec("kslack", k=k))
    assert not result.dropped
    assert set(result.emitted) == result.truth


@SETTINGS
@given(data=st.data())
def test_zero_slack_policies_agree(data):
    """`kslack` with K=0 is `none`; mpkslack on in-order input never grows K, so it is `none` too."""
    streams, windows = data.draw(inputs())
    none = replay(streams, windows, PolicySpec("none"))
    k0 = replay(streams, windows, PolicySpec("kslack", k=(0,) * len(streams)))
    assert (none.emitted, none.memory, none.dropped) == (k0.emitted, k0.memory, k0.dropped)

    in_order, w = data.draw(inputs(in_order=True))
    a = replay(in_order, w, PolicySpec("none"))
    b = replay(in_order, w, PolicySpec("mpkslack"))
    assert (a.emitted, a.memory, a.dropped) == (b.emitted, b.memory, b.dropped)
