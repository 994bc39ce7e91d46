"""Recall-target policies under shedding: the model re-decides the policy over
the survivors (rows renumbered, key ids and quarantine bursts carried over).
The per-arrival reference has no controller, so this checks the model
against the whole local engine run on the survivor rows as an input of their
own: the same decisions, the same emitted set, the same memory."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from streamjoin.pipelines.capacity.spec import CapacitySpec
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec, RecallTarget
from streamjoin.pipelines.policies.triggers import Triggers

from helpers.adapters import key_frames
from helpers.strategies import ref_streams
from test_model_vs_reference import fast


@st.composite
def problems(draw):
    n = draw(st.integers(2, 3))
    streams = ref_streams(draw, n, 8, keyed=draw(st.booleans()))
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    target = RecallTarget(recall=draw(st.sampled_from([0.5, 0.9, 1.0])), interval_us=draw(st.integers(1, 10)),
                          granularity_us=1, basic_window_us=2, period_us=draw(st.integers(3, 30)), probe_us=2,
                          rate_history_us=10, triggers=Triggers(rate_min_count=1, bad_rows_min=1))
    policy = PolicySpec(draw(st.sampled_from(["qjoin", "qkslack"])), target=target)
    spec = CapacitySpec(tuple_ns=draw(st.integers(500, 6000)), queue=draw(st.integers(1, 2)),
                        shed=draw(st.sampled_from(["drop-new", "replace-oldest"])))
    return streams, windows, policy, spec


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_survivors_replay_like_an_input_of_their_own(problem):
    streams, windows, policy, spec = problem
    out, cap = fast(streams, windows, policy, spec)
    r = out.replay
    kept = cap.queue.kept
    survivors = [[t for t in s if kept[r.index_of[i][t.row]]] for i, s in enumerate(streams)]
    alone = join([np.array([t.ts for t in s], dtype=np.int64) for s in survivors],
                 [np.array([t.arrival for t in s], dtype=np.int64) for s in survivors],
                 key_frames(survivors), windows, policy)
    back = [np.array([t.row for t in s], dtype=np.int64) for s in survivors]
    expected = {tuple(int(back[k][alone.combos.rows[k][c]]) for k in range(r.n))
                for c in np.flatnonzero(alone.emission.emitted)}
    got = {tuple(int(out.combos.rows[k][c]) for k in range(r.n)) for c in np.flatnonzero(cap.emission.emitted)}
    assert got == expected
    assert (cap.decisions.policy_log or []) == (alone.decisions.policy_log or [])
    assert cap.memory[:, kept].sum(axis=0).tolist() == alone.memory.sum(axis=0).tolist()
