"""The Spark CTR kernel's two-stream last hop (``_pair_emitted``) against the
general path (full partial combinations + ``emitted_partials``), without Spark.

Small time ranges make ties and exact boundaries (``t + W == H``) common."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.engines.spark import kernels as spark_kernels
from streamjoin.pipelines.engines.spark.kernels import emitted_partials, extend_probers, lean_partial_columns
from streamjoin.pipelines.policies import SORTING, SYMMETRIC


@st.composite
def two_streams(draw):
    sizes = [draw(st.integers(0, 25)), draw(st.integers(0, 25))]
    N = sum(sizes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    stream = np.repeat(np.arange(2), sizes).astype(np.int64)
    tab = {
        "stream": stream,
        "row": np.concatenate([np.arange(s) for s in sizes]).astype(np.int64),
        "ts": rng.integers(0, 12, N).astype(np.int64),
        "kid": rng.integers(0, 2, N).astype(np.int64),
        "a": rng.permutation(N).astype(np.int64),            # arrival indexes: distinct
        "dropped": rng.random(N) < 0.3,
    }
    for j in range(2):
        tab[f"H{j}"] = rng.integers(-3, 16, N).astype(np.int64)
    if draw(st.booleans()):  # ids as the driver narrows them (the kernels take either width)
        tab.update({c: tab[c].astype(np.int32) for c in ("stream", "row", "kid", "a")})
    W = [draw(st.integers(0, 5)), draw(st.integers(0, 5))]
    return tab, W


def _plan():
    # one segment: every tuple probes the other stream (orders[p] = [the other stream])
    return SimpleNamespace(slot=lambda ts: np.zeros(len(ts), np.int64), orders=[[1], [0]])


@settings(max_examples=300, deadline=None)
@given(two_streams(), st.sampled_from([SYMMETRIC, SORTING]), st.booleans(), st.sampled_from([1, 2, 5, 1 << 19]))
def test_pair_fast_path_equals_general_path(case, family, keyed, block):
    tab, W = case
    plan = _plan()
    # the fast path builds its extensions a block at a time (tiny blocks: many boundaries)
    saved = spark_kernels.PROBE_BLOCK, spark_kernels.PAIR_BLOCK
    spark_kernels.PROBE_BLOCK = spark_kernels.PAIR_BLOCK = block
    try:
        fast = extend_probers(tab, tab, 2, W, plan.orders, keyed, plan, family,
                              keep=lean_partial_columns(2, family, True))
        full = extend_probers(tab, tab, 2, W, plan.orders, keyed, plan, None,
                              keep=lean_partial_columns(2, family, False))
    finally:
        spark_kernels.PROBE_BLOCK, spark_kernels.PAIR_BLOCK = saved
    want = emitted_partials(full, 2, W, family)
    got = list(zip(fast["r0"].tolist(), fast["r1"].tolist(), fast["emitted"].tolist()))
    exp = list(zip(full["r0"].tolist(), full["r1"].tolist(), want.tolist()))
    assert got == exp  # same combinations, in the same order
