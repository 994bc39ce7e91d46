"""``--policy spark-ss`` on the local engine: the column form (replay/microbatch.py)
against the per-batch reference (replay/reference.py ``replay_micro_batches``),
and worked examples of each rule (docs/semantics.md "spark-ss")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_micro_batches, replay_micro_batches_files

from helpers.spark_ss import local_spark_ss, local_spark_ss_files, spark_file_problems, spark_problems

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S        # a calendar time, far above Spark's watermark floor of 0


@settings(max_examples=400, deadline=None)
@given(spark_problems())
def test_columns_equal_reference(problem):
    """Emitted set (with batch, emission time, latency), the outer join's
    null-padded rows (likewise), late drops, state rows after every batch and
    the watermark of every batch: the same."""
    streams, windows, policy = problem
    assert_same(local_spark_ss(streams, windows, policy), replay_micro_batches(streams, windows, policy))


@settings(max_examples=300, deadline=None)
@given(spark_file_problems())
def test_file_batches_equal_reference(problem):
    """--trigger-files N: batches cut by files (modification time in ms, then path;
    N per stream per batch), run at their files' times: the same as the per-batch
    reference, which cuts the batches itself."""
    files, windows, policy = problem
    assert_same(local_spark_ss_files(files, windows, policy), replay_micro_batches_files(files, windows, policy))


def assert_same(fast, ref) -> None:
    """Every field of the two answers (:class:`MicroBatchReference`), one by one."""
    for name in ("truth", "emitted", "outer", "dropped", "state_rows", "watermarks"):
        assert getattr(fast, name) == getattr(ref, name), name


@settings(max_examples=150, deadline=None)
@given(spark_problems())
def test_memory_is_state_before_the_batch_plus_its_arrivals(problem):
    """Memory after arrival index a = state rows after the previous batch (reference)
    + the rows of a's batch that have arrived so far."""
    streams, windows, policy = problem
    ref = replay_micro_batches(streams, windows, policy)
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, [None, None], windows, policy)
    batch = out.decisions.batches.batch
    expected = []
    for a in range(len(batch)):
        j = int(batch[a])
        before = sum(ref.state_rows[j - 1]) if j else 0
        expected.append(before + int(np.count_nonzero(batch[:a + 1] == j)))
    assert out.memory.sum(axis=0).tolist() == expected


def _run(left, right, windows, watermark, trigger, wm_policy="min"):
    """``left`` / ``right``: lists of (ts, arrival) in µs."""
    streams = [[RefTuple(i, r, ts, arr) for r, (ts, arr) in enumerate(rows)] for i, rows in enumerate((left, right))]
    policy = PolicySpec("spark-ss", watermark=watermark, trigger_us=trigger, watermark_policy=wm_policy)
    fast = local_spark_ss(streams, windows, policy)
    assert fast.emitted == replay_micro_batches(streams, windows, policy).emitted
    return fast


def test_late_row_is_judged_by_the_previous_batch_watermark():
    """Batch 0 moves the watermark to 10 s - 1 s = 9 s; batch 1 still filters with
    batch 0's watermark (0), so a 5 s row joins; batch 2 filters with 9 s and drops
    a 5 s row (counted per stream, no pair)."""
    b = S  # 1 s batches
    left = [(T0 + 10 * S, T0), (T0 + 5 * S, T0 + 2 * b + 1)]
    right = [(T0 + 10 * S, T0 + 1), (T0 + 5 * S, T0 + b + 1)]
    out = _run(left, right, (10 * S, 10 * S), (S, S), b)
    assert out.watermarks == [0, (T0 + 9 * S) // MS, (T0 + 9 * S) // MS]
    assert out.dropped == {(0, 1)}
    assert set(out.emitted) == {(0, 0), (0, 1)}               # (1, *) lost: left row 1 dropped late
    assert out.emitted[(0, 1)][0] == 1                         # emitted by batch 1, at its end
    assert out.emitted[(0, 1)][1] == T0 + 2 * b


def test_min_policy_waits_for_the_slow_stream_and_max_does_not():
    """Only the left stream has rows before batch 2: min keeps the watermark at 0 (a
    stream without rows counts as 0), max follows the left stream, and batch 2's late
    filter (batch 1's watermark, 60 s) drops the right stream's 1 s row."""
    left = [(T0 + 60 * S, T0), (T0 + 61 * S, T0 + S)]
    right = [(T0 + 1 * S, T0 + 2 * S)]
    low = _run(left, right, (S, S), (0, 0), S, "min")
    high = _run(left, right, (S, S), (0, 0), S, "max")
    assert low.dropped == set() and low.watermarks[-1] == 0
    assert high.dropped == {(1, 0)} and high.watermarks == [0, (T0 + 60 * S) // MS, (T0 + 61 * S) // MS]


def test_same_batch_pair_is_emitted_even_at_the_state_watermark():
    """Inside a batch, left rows probe and are all stored before right rows probe
    (SPARK-49829): a left row at the left state watermark (wm - W - 1 ms) still
    meets the right row of its batch, then leaves at the batch end; a right row
    at its state watermark is not stored but found the stored left one.  Real
    Spark 4 emits (1, 1) in batch 1 in both cases, with 3 state rows after it."""
    W = 2 * S
    warm = [(T0 + 20 * S, T0)]                      # batch 0: the watermark becomes T0 + 20 s
    old = T0 + 20 * S - W - MS                      # batch 1's state watermark, exactly
    a = _run(warm + [(old, T0 + S + 1)], warm + [(old + 10, T0 + S + 2)], (W, W), (0, 0), S)
    b = _run(warm + [(old + 10, T0 + S + 1)], warm + [(old, T0 + S + 2)], (W, W), (0, 0), S)
    assert a.dropped == b.dropped == set()          # batch 1 filters late rows with batch 0's watermark, 0
    assert a.emitted[(1, 1)][:2] == b.emitted[(1, 1)][:2] == (1, T0 + 2 * S)
    # the warm rows, plus the row above the state watermark (10 µs above it) on its side
    assert a.state_rows[1] == (1, 2) and b.state_rows[1] == (2, 1)


def test_state_rows_follow_eviction_at_batch_ends():
    """A stored row leaves at the end of the first batch whose state watermark reaches it."""
    W = S
    left = [(T0 + 10 * S, T0), (T0 + 20 * S, T0 + S), (T0 + 30 * S, T0 + 2 * S)]
    right = [(T0 + 10 * S, T0 + 1), (T0 + 20 * S, T0 + S + 1), (T0 + 30 * S, T0 + 2 * S + 1)]
    out = _run(left, right, (W, W), (0, 0), S)
    # batch 0: wm 0 -> keeps both; batch 1: wm 10 s, state wm 10 s - 1 s - 1 ms: keeps 10 s rows;
    # batch 2: wm 20 s evicts the 10 s rows at its end
    assert out.state_rows == [(1, 1), (2, 2), (2, 2)]
    assert set(out.emitted) == {(0, 0), (1, 1), (2, 2)}


def test_settings_are_checked_with_one_line_errors():
    with pytest.raises(InputError, match="--watermark"):
        PolicySpec("spark-ss", trigger_us=S, watermark_policy="min")
    with pytest.raises(InputError, match="whole milliseconds"):
        PolicySpec("spark-ss", watermark=(1500, 0), trigger_us=S, watermark_policy="min")
    with pytest.raises(InputError, match="--trigger"):
        PolicySpec("spark-ss", watermark=(0, 0), watermark_policy="min")
    with pytest.raises(InputError, match="exactly two streams"):
        PolicySpec("spark-ss", watermark=(0, 0, 0), trigger_us=S, watermark_policy="min")
    with pytest.raises(InputError, match="--watermark-policy"):
        PolicySpec("spark-ss", watermark=(0, 0), trigger_us=S, watermark_policy="median")


@settings(max_examples=200, deadline=None)
@given(spark_problems(max_rows=14), st.lists(st.integers(0, 28), max_size=4))
def test_pieces_cut_anywhere_give_the_whole_replays_facts(problem, cuts):
    """The bounded engine's chunks and the Spark pass's partitions: per-piece batch maxima
    (a micro-batch may be cut between pieces), merged, the batch table, then per-piece tuple
    facts -- the same batches, late drops and removals as the whole replay."""
    from streamjoin.pipelines.replay import microbatch
    from streamjoin.pipelines.replay.progress import build_replay

    streams, windows, policy = problem
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    ar = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    replay = build_replay(ts, ar)
    if replay.N == 0:
        return
    whole, dropped = microbatch.micro_batches(replay.stream, replay.ts, replay.arrival, 2, windows, policy)
    bounds = [0, *sorted(min(c, replay.N) for c in cuts), replay.N]
    pieces = [slice(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    T = policy.trigger_us
    base = int(replay.arrival[0]) // T
    batch = replay.arrival // T - base
    parts = [microbatch.batch_maxima(replay.stream[p], replay.ts[p], batch[p], 2) for p in pieces]
    table = microbatch.batch_table(*microbatch.merge_maxima(parts), policy)
    facts = [microbatch.tuple_facts(table, replay.stream[p], replay.ts[p], batch[p], 2, windows) for p in pieces]
    assert np.array_equal(batch, whole.batch)
    assert np.array_equal(np.concatenate([f[0] for f in facts]), dropped)
    assert np.array_equal(np.concatenate([f[1] for f in facts]), whole.removal)
    assert np.array_equal(table.current, whole.watermark_ms) and np.array_equal(table.occupied, whole.occupied)
