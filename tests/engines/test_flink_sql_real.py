"""Flink SQL's row-time interval join against the per-event reference
``replay/sql_reference.py``, row for row.

The driver ``tests/engines/flink_job/SqlIntervalJoinReplay.java`` builds Flink's
own ``RowTimeIntervalJoin`` inside a ``KeyedCoProcessOperatorWithWatermarkDelay``
with the arguments the planner gives it (``StreamExecIntervalJoin``:
``allowedLateness`` 0, the min cleanup interval, the join type) and feeds it
through the same deterministic source, gate and watermark generators as the
DataStream test (``test_flink_real.py``): five runs of each job are identical.
Asserted equal to the reference: the joined pairs and the arrival index that
emitted each, and, for LEFT / RIGHT / FULL joins, every null-padded row and
the arrival index at which it came out.  The same for ``--policy flink-sql``
(the column form, replay/sql_interval_join.py: directly with the case's min
cleanup interval, and through the local engine where it is 0).  And the SQL
join is not the DataStream one: on the same records it joins rows the
DataStream join drops as late.  One more job shows what the gated end of input
(the drivers' end markers) rules out: in CASES[3] with the other input's end
first, the last record's pairs are lost and come out null-padded.
"""

from __future__ import annotations

import pytest
from helpers.flink import columns_flink_sql, local_flink, local_flink_sql
from test_flink_real import (DRIVER, MS, REPEATS, S, assert_identical_runs, case_lines, disordered, other_end_first,
                             run_cases)

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import replay_order
from streamjoin.pipelines.replay.sql_reference import replay_sql_interval_join

SQL_DRIVER = DRIVER.parent / "SqlIntervalJoinReplay.java"
CASES = [
    # seed, rows, span (s), windows (µs), out-of-orderness (µs), watermark interval (µs), grid (ms), join,
    # min cleanup interval (µs)
    (51, 60, 8.0, (1 * S, 1 * S), (300 * MS, 300 * MS), 0, 1, "INNER", 0),
    (52, 60, 8.0, (1500 * MS, 500 * MS), (0, 1 * S), 200 * MS, 1, "LEFT", 0),
    (53, 60, 6.0, (500 * MS, 1 * S), (100 * MS, 100 * MS), 0, 50, "RIGHT", 0),
    (54, 60, 6.0, (1 * S, 0), (200 * MS, 0), 100 * MS, 50, "FULL", 300 * MS),
    (55, 60, 4.0, (0, 0), (49 * MS, 49 * MS), 0, 50, "FULL", 0),
]


def case(c: int):
    seed, rows, span, windows, watermark, interval, grid, join, cleanup = CASES[c]
    return (disordered(seed, rows, span, grid), windows,
            PolicySpec("flink", watermark=watermark, watermark_interval_us=interval), join, cleanup)


def sql_case_lines(c: int) -> list[str]:
    """IntervalJoinReplay's case file, its first line followed by the join type and the
    min cleanup interval (ms)."""
    streams, windows, policy, join, cleanup = case(c)
    lines = case_lines(streams, windows, policy)
    lines[0] += f" {join} {cleanup // MS}"
    return lines


RACED = 3   # the case whose runs once differed in CI


@pytest.fixture(scope="module")
def sql_runs(tmp_path_factory):
    """{case: runs}, and at len(CASES) the runs of CASES[RACED] with the other end first."""
    lines = [sql_case_lines(c) for c in range(len(CASES))]
    return run_cases(tmp_path_factory.mktemp("flink_sql"), "SqlIntervalJoinReplay", [DRIVER, SQL_DRIVER],
                     [*lines, other_end_first(lines[RACED])])


@pytest.mark.parametrize("c", range(len(CASES)))
def test_same_pairs_and_padded_rows_as_flink_sql(sql_runs, c):
    streams, windows, policy, join, cleanup = case(c)
    fields = [line.split() for line in sql_runs[c][0]]
    pairs = {(int(f[1]), int(f[2])): int(f[3]) for f in fields if f[0] == "P"}
    padded = {((0 if f[0] == "LP" else 1), int(f[1])): int(f[2]) for f in fields if f[0] in ("LP", "RP")}
    assert len(pairs) + len(padded) == len(fields)                       # nothing twice
    ref = replay_sql_interval_join(streams, windows, policy.watermark, policy.watermark_interval_us,
                                   join.lower(), cleanup)
    assert pairs == ref.emitted
    assert padded == ref.padded
    assert 0 < len(pairs) < len(ref.truth)
    assert bool(padded) == (join != "INNER")


@pytest.mark.parametrize("c", range(len(CASES)))
def test_policy_flink_sql_gives_flink_sqls_pairs_and_padded_rows(sql_runs, c):
    """--policy flink-sql's column form against Flink's own output, row for row: each
    pair with the arrival index that emitted it, each null-padded row with the
    arrival index at which it came out (the local engine reports that index's
    arrival time)."""
    streams, windows, policy, join, cleanup = case(c)
    fields = [line.split() for line in sql_runs[c][0]]
    pairs = {(int(f[1]), int(f[2])): int(f[3]) for f in fields if f[0] == "P"}
    padded = {((0 if f[0] == "LP" else 1), int(f[1])): int(f[2]) for f in fields if f[0] in ("LP", "RP")}
    sql = PolicySpec("flink-sql", watermark=policy.watermark, watermark_interval_us=policy.watermark_interval_us,
                     join=join.lower())
    fast = columns_flink_sql(streams, windows, sql, cleanup)
    assert (fast.emitted, fast.padded) == (pairs, padded)
    if cleanup == 0:   # the policy runs with Flink's default min cleanup interval, 0
        engine = local_flink_sql(streams, windows, sql)
        arrival = [x.arrival for x in replay_order(streams)]
        assert engine.emitted == pairs
        assert engine.padded == {k: arrival[a] for k, a in padded.items()}


@pytest.mark.parametrize("c", range(len(CASES)))
def test_five_runs_of_the_same_sql_job_are_identical(sql_runs, c):
    assert_identical_runs(sql_runs[c])


def test_the_other_inputs_end_before_the_last_record_changes_flinks_answer(sql_runs):
    """Why the drivers gate the end of input: when the join takes the other input's
    end-of-input MAX watermark before the last record, the combined watermark first
    jumps to the last record's own input's watermark, and Flink's answer changes --
    the pairs that record emits are lost, it and its partners come out null-padded
    (the output one CI run in five had).  Deterministic too once gated."""
    streams, windows, policy, join, cleanup = case(RACED)
    ref = replay_sql_interval_join(streams, windows, policy.watermark, policy.watermark_interval_us,
                                   join.lower(), cleanup)
    assert_identical_runs(sql_runs[len(CASES)])
    fields = [line.split() for line in sql_runs[len(CASES)][0]]
    pairs = {(int(f[1]), int(f[2])): int(f[3]) for f in fields if f[0] == "P"}
    padded = {((0 if f[0] == "LP" else 1), int(f[1])) for f in fields if f[0] in ("LP", "RP")}
    last = len(replay_order(streams)) - 1
    lost = set(ref.emitted) - set(pairs)
    assert lost and set(pairs) < set(ref.emitted) and all(ref.emitted[p] == last for p in lost)
    last_row = replay_order(streams)[-1]
    assert {(last_row.stream, last_row.row)} | {(1 - last_row.stream, p[1 - last_row.stream]) for p in lost} <= padded


def test_sql_joins_rows_the_datastream_join_drops_as_late():
    """Same records, same watermarks: SQL has no late-row drop, so some pairs the
    DataStream interval join loses (a member late) come out of the SQL join."""
    streams, windows, policy, _, _ = case(0)
    datastream = local_flink(streams, windows, policy)
    sql = replay_sql_interval_join(streams, windows, policy.watermark, policy.watermark_interval_us)
    late_pairs = {p for p in datastream.truth if (0, p[0]) in datastream.dropped or (1, p[1]) in datastream.dropped}
    assert set(sql.emitted) & late_pairs
