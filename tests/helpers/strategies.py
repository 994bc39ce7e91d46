"""Shared hypothesis strategies: random replay problems (streams with heavy
disorder, windows, a policy) and the engine-vs-reference comparison."""

from __future__ import annotations

from hypothesis import strategies as st

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple


#: the policies with fixed settings (no recall target)
FIXED_POLICIES = ("none", "kslack", "mpkslack", "static")


def ref_streams(draw, n: int, max_rows: int, ts_max: int = 40, small_delay: int = 3, keys: int = 3,
                keyed: bool = False, vectors: bool = False, unit: int = 1, base: int = 0,
                jitter: int = 0) -> list[list[RefTuple]]:
    """``n`` streams of up to ``max_rows`` tuples: times ``base`` + ``[0, ts_max]``
    steps of ``unit`` µs, mostly small delays (``<= small_delay`` steps), sometimes
    a long stall (up to ``ts_max`` steps), plus up to ``jitter`` µs: heavy
    disorder; ``keys`` distinct keys when ``keyed``; 2-d integer vectors in
    [-4, 4] when ``vectors``."""
    streams = []
    for i in range(n):
        rows = []
        for r in range(draw(st.integers(0, max_rows))):
            ts = base + draw(st.integers(0, ts_max)) * unit
            delay = draw(st.one_of(st.integers(0, small_delay), st.integers(0, ts_max))) * unit
            if jitter:
                delay += draw(st.integers(0, jitter))
            key = (draw(st.integers(0, keys - 1)),) if keyed else ()
            vec = (draw(st.integers(-4, 4)), draw(st.integers(-4, 4))) if vectors else ()
            rows.append(RefTuple(stream=i, row=r, ts=ts, arrival=ts + delay, key=key, vec=vec))
        streams.append(rows)
    return streams


def fixed_policy(draw, n: int, largest: int) -> PolicySpec:
    """One of :data:`FIXED_POLICIES`, with per-stream K / retention in ``[0, largest]``."""
    name = draw(st.sampled_from(FIXED_POLICIES))
    per_stream = st.lists(st.integers(0, largest), min_size=n, max_size=n).map(tuple)
    if name == "kslack":
        return PolicySpec(name, k=draw(per_stream))
    if name == "static":
        return PolicySpec(name, retention=draw(per_stream))
    return PolicySpec(name)


@st.composite
def problems(draw, n_streams=st.integers(2, 3), max_rows=9):
    n = draw(n_streams)
    keyed = draw(st.booleans())
    streams = ref_streams(draw, n, max_rows, keyed=keyed)
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    return streams, windows, fixed_policy(draw, n, 25)


def assert_same(fast, ref):
    assert fast.order == ref.order
    assert fast.truth == ref.truth
    assert fast.emitted == ref.emitted
    assert fast.memory == ref.memory
    assert fast.dropped == ref.dropped
    assert fast.expired == ref.expired
