"""Why results are lost (analysis/losses.py, docs/semantics.md "Why results are lost"):
the causes the columns give every lost combination equal an independent per-pair
classification built from the per-arrival / per-batch reference replays, and
they add up to truth - emitted."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from streamjoin.pipelines.analysis.losses import BATCH, EMITTED, EVICTED, LATE, loss_causes, loss_counts
from streamjoin.pipelines.analysis.tuning import member_indexes
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.replay.reference import replay, replay_interval_join, replay_micro_batches

from helpers.adapters import key_frames
from helpers.flink import flink_problems
from helpers.spark_ss import spark_problems
from helpers.strategies import problems

MS = 1000
NAMES = {EMITTED: "emitted", LATE: "late", EVICTED: "evicted", BATCH: "batch"}


def fast_causes(streams, windows, policy) -> dict[tuple[int, ...], str]:
    """The columns' cause of every valid combination (keyed by its members' rows)."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, key_frames(streams), windows, policy)
    codes = loss_causes(member_indexes(out.replay, out.combos)[0], out.emission.emitted, out.decisions)
    counts = loss_counts(codes)
    lost = len(out.combos) - int(np.count_nonzero(out.emission.emitted))
    assert sum(counts.values()) == lost                     # the causes partition the lost combinations
    combos = list(zip(*[r.tolist() for r in out.combos.rows])) if len(out.combos) else []
    return {c: NAMES[int(k)] for c, k in zip(combos, codes.tolist())}


def spark_reference_causes(streams, windows, policy) -> dict[tuple[int, int], str]:
    """Per pair, from the per-batch reference: emitted; late if a member was dropped;
    else the member Spark processes first (earlier batch, left on a tie) -- batch if it
    was never stored (``ts`` at or below its side's state watermark of its batch,
    the reference's watermark list), evicted otherwise."""
    ref = replay_micro_batches(streams, windows, policy)
    rows = [t for s in streams for t in s]
    base = min(t.arrival for t in rows) // policy.trigger_us if rows else 0
    batch = {(t.stream, t.row): t.arrival // policy.trigger_us - base for t in rows}
    ts = {(t.stream, t.row): t.ts for t in rows}

    def stored(x) -> bool:
        wm = ref.watermarks[batch[x]] * MS
        v = wm - windows[x[0]]
        state_wm = ((abs(v) // MS) * (1 if v >= 0 else -1) - 1) * MS   # toward zero, as Scala's toLong
        return x not in ref.dropped and ts[x] > state_wm

    out = {}
    for l, r in ref.truth:
        x, y = (0, l), (1, r)
        if (l, r) in ref.emitted:
            out[(l, r)] = "emitted"
        elif x in ref.dropped or y in ref.dropped:
            out[(l, r)] = "late"
        else:
            first = x if batch[x] <= batch[y] else y
            out[(l, r)] = "evicted" if stored(first) else "batch"
    return out


@settings(max_examples=300, deadline=None)
@given(spark_problems())
def test_spark_ss_causes_equal_the_per_batch_reference(problem):
    """... and every loss is a late drop: the state watermark removes only rows that no
    later row that is not late can join (docs/semantics.md, "Why results are lost")."""
    streams, windows, policy = problem
    causes = fast_causes(streams, windows, policy)
    assert causes == spark_reference_causes(streams, windows, policy)
    assert set(causes.values()) <= {"emitted", "late"}


@settings(max_examples=200, deadline=None)
@given(flink_problems())
def test_flink_causes_equal_the_per_record_reference(problem):
    """Flink buffers every record that is not late, so a lost pair without a late member lost
    its earlier member to a cleanup timer."""
    streams, windows, policy = problem
    ref = replay_interval_join(streams, windows, policy)
    expected = {p: "emitted" if p in ref.emitted else
                "late" if (0, p[0]) in ref.dropped or (1, p[1]) in ref.dropped else "evicted" for p in ref.truth}
    assert fast_causes(streams, windows, policy) == expected


@settings(max_examples=200, deadline=None)
@given(problems())
def test_fixed_policies_causes_equal_the_per_arrival_reference(problem):
    """Sorting family: every lost combination has a member the reference dropped as late;
    symmetric family: none is dropped, the horizon passed a member (evicted)."""
    streams, windows, policy = problem
    ref = replay(streams, windows, policy)
    expected = {}
    for c in ref.truth:
        late = any((i, row) in ref.dropped for i, row in enumerate(c))
        expected[c] = "emitted" if c in ref.emitted else "late" if late else "evicted"
    fast = fast_causes(streams, windows, policy)
    assert fast == expected
    if policy.family == "symmetric":
        assert "late" not in fast.values()
    else:
        assert "evicted" not in fast.values()


def test_a_row_at_the_state_watermark_meets_its_batch_and_its_later_partners_are_late():
    """docs/semantics.md's example: batch 0 moves the watermark to 20 s; in batch 1 a left
    row at exactly its state watermark (20 s - W - 1 ms) is not late (batch 1's late filter
    uses batch 0's watermark, 0): it meets the right row of its own batch (stored before
    the right rows probe) and leaves at the batch end.  A right partner arriving in batch 2
    has ``ts <= 20 s - 1 ms``, below the watermark batch 2 filters with: late, not evicted."""
    from streamjoin.pipelines.policies import PolicySpec
    from streamjoin.pipelines.replay.reference import RefTuple

    S, T0, W = 1_000_000, 1_700_000_000 * 1_000_000, 2_000_000
    old = T0 + 20 * S - W - MS
    policy = PolicySpec("spark-ss", watermark=(0, 0), trigger_us=S, watermark_policy="min")
    warm = [(T0 + 20 * S, T0)]
    left = warm + [(old, T0 + S + 1)]
    right = warm + [(old + 10, T0 + S + 2), (old + W, T0 + 2 * S + 1)]
    streams = [[RefTuple(i, r, ts, arr) for r, (ts, arr) in enumerate(rows)] for i, rows in enumerate((left, right))]
    causes = fast_causes(streams, (W, W), policy)
    assert causes[(1, 1)] == "emitted" and causes[(1, 2)] == "late"
