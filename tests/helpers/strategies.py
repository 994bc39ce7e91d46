"""Shared hypothesis strategies: random replay problems (streams with heavy
disorder, windows, a policy) and the engine-vs-reference comparison."""

from __future__ import annotations

from hypothesis import strategies as st

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple


@st.composite
def problems(draw, n_streams=st.integers(2, 3), max_rows=9):
    n = draw(n_streams)
    keyed = draw(st.booleans())
    streams = []
    for i in range(n):
        size = draw(st.integers(0, max_rows))
        rows = []
        for r in range(size):
            ts = draw(st.integers(0, 40))
            # mostly small delays, sometimes a long stall: heavy disorder
            delay = draw(st.one_of(st.integers(0, 3), st.integers(0, 40)))
            key = (draw(st.integers(0, 2)),) if keyed else ()
            rows.append(RefTuple(stream=i, row=r, ts=ts, arrival=ts + delay, key=key))
        streams.append(rows)
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    name = draw(st.sampled_from(["none", "kslack", "mpkslack", "static"]))
    per_stream = st.lists(st.integers(0, 25), min_size=n, max_size=n).map(tuple)
    if name == "kslack":
        policy = PolicySpec(name, k=draw(per_stream))
    elif name == "static":
        policy = PolicySpec(name, retention=draw(per_stream))
    else:
        policy = PolicySpec(name)
    return streams, windows, policy


def assert_same(fast, ref):
    assert fast.order == ref.order
    assert fast.truth == ref.truth
    assert fast.emitted == ref.emitted
    assert fast.memory == ref.memory
    assert fast.dropped == ref.dropped
    assert fast.expired == ref.expired
