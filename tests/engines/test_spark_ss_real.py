"""``--policy spark-ss`` against real Spark Structured Streaming, row for row.

Each case writes each micro-batch's arrivals (batch j = trigger interval j of
arrival time, docs/semantics.md "spark-ss") as one Parquet file per stream,
empty batches included, with modification times in batch order; Spark reads
both directories with ``maxFilesPerTrigger = 1`` and ``trigger(availableNow=True)``,
so Spark's batch j is exactly batch j of both streams (asserted from the
progress).  Each side gets ``withWatermark``, the join condition is the key
plus the band ``r_ts BETWEEN l_ts - W_r AND l_ts + W_l``, and a
``foreachBatch`` sink collects ``(batch id, left row, right row)``.

Asserted equal to the local engine's ``spark-ss`` answer: the emitted pairs
with their batch ids (for left / right / full outer joins also the null-padded rows,
with theirs), ``numRowsDroppedByWatermark`` (per batch), and the join
state rows ``numRowsTotal`` after every batch.  One ``local[2]`` session for
the module; small inputs with heavy disorder.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.spark_ss import local_spark_ss, local_spark_ss_files

from streamjoin.pipelines.engines.spark.session import spark_session
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_micro_batches, replay_micro_batches_files

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S


@pytest.fixture(scope="module")
def spark():
    conf = [("spark.sql.shuffle.partitions", "2"), ("spark.driver.memory", "1g"),
            ("spark.sql.streaming.numRecentProgressUpdates", "1000"),
            ("spark.sql.session.timeZone", "UTC")]
    with spark_session("local[2]", 2, conf) as s:
        yield s


def disordered(seed: int, rows: int, span_s: float, keys: int = 3) -> list[list[RefTuple]]:
    """Two keyed streams (``keys`` keys) over ``span_s`` seconds of event time: most
    rows a little late, a fifth very late (up to half the span): heavy disorder."""
    rng = np.random.default_rng(seed)
    streams = []
    for i in range(2):
        ts = T0 + rng.integers(0, int(span_s * S), rows)
        small = rng.integers(0, 300 * MS, rows)
        large = rng.integers(0, int(span_s * S / 2), rows)
        delay = np.where(rng.random(rows) < 0.2, large, small)
        key = rng.integers(0, keys, rows)
        streams.append([RefTuple(i, r, int(t), int(t + d), (int(k),))
                        for r, (t, d, k) in enumerate(zip(ts, delay, key))])
    return streams


def write_batches(root: Path, streams, trigger_us: int) -> int:
    """One Parquet file per stream per batch (empty ones too), mtimes in batch order."""
    first = min(t.arrival for s in streams for t in s)
    last = max(t.arrival for s in streams for t in s)
    batches = last // trigger_us - first // trigger_us + 1
    now = time.time() - 10 * batches
    for i, s in enumerate(streams):
        side = root / f"s{i}"
        side.mkdir(parents=True)
        frame = pl.DataFrame({"row": [t.row for t in s], "key": [t.key[0] for t in s], "ts": [t.ts for t in s],
                              "b": [t.arrival // trigger_us - first // trigger_us for t in s]},
                             schema={"row": pl.Int64, "key": pl.Int64, "ts": pl.Int64, "b": pl.Int64})
        for j in range(batches):
            f = side / f"batch-{j:05d}.parquet"
            frame.filter(pl.col("b") == j).drop("b").write_parquet(f)
            os.utime(f, (now + 10 * j, now + 10 * j))        # FileStreamSource takes files by mtime
    return batches


def real_spark(spark, root: Path, windows, policy: PolicySpec, max_files: int = 1) -> dict:
    """Run the join (``policy.join``: inner, left, right or full outer) through Spark;
    ``emitted``: ``(batch id, left row, right row)``, ``None`` for a null-padded side."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", policy.watermark_policy)

    def side(i: int, p: str):
        return (spark.readStream.schema("row BIGINT, key BIGINT, ts BIGINT").option("maxFilesPerTrigger", max_files)
                .parquet(str(root / f"s{i}"))
                .select(F.col("row").alias(f"{p}row"), F.col("key").alias(f"{p}key"),
                        F.expr("timestamp_micros(ts)").alias(f"{p}ts"))
                .withWatermark(f"{p}ts", f"{policy.watermark[i] // MS} milliseconds"))

    w_left, w_right = windows
    joined = side(0, "l_").join(side(1, "r_"), F.expr(
        f"l_key = r_key AND r_ts BETWEEN l_ts - INTERVAL {w_right} MICROSECONDS "
        f"AND l_ts + INTERVAL {w_left} MICROSECONDS"), {"inner": "inner", "left": "left_outer",
                                                        "right": "right_outer", "full": "full_outer"}[policy.join])
    got: list[tuple[int, int, int]] = []

    def collect(df, batch_id):
        got.extend((batch_id, r["l_row"], r["r_row"]) for r in df.select("l_row", "r_row").collect())

    q = (joined.writeStream.foreachBatch(collect).option("checkpointLocation", str(root / "checkpoint"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    progress = {p["batchId"]: p for p in q.recentProgress}
    return {"emitted": set(got), "progress": progress}


CASES = [
    # seed, rows per stream, event span (s), windows (µs), watermark delays (µs), trigger (µs), policy
    (11, 40, 8.0, (1 * S, 1 * S), (500 * MS, 500 * MS), 1 * S, "min"),
    (12, 40, 8.0, (1500 * MS + 250, 700 * MS), (0, 2 * S), 700 * MS, "min"),
    (13, 40, 8.0, (800 * MS, 1200 * MS), (300 * MS, 0), 1 * S, "max"),
    (14, 40, 6.0, (2 * S, 500 * MS), (1 * S, 100 * MS), 400 * MS, "max"),
]


@pytest.mark.parametrize("seed,rows,span,windows,watermark,trigger,wm_policy", CASES)
def test_same_rows_drops_and_state_as_spark(spark, tmp_path, seed, rows, span, windows, watermark, trigger,
                                             wm_policy):
    check_against_spark(spark, tmp_path, disordered(seed, rows, span),
                        PolicySpec("spark-ss", watermark=watermark, trigger_us=trigger, watermark_policy=wm_policy),
                        windows)


OUTER_CASES = [
    # seed, rows per stream, event span (s), windows (µs), watermark delays (µs), trigger (µs), policy, join;
    # six keys: many unmatched rows.  Each case has a null-padded row evicted in its own batch and one
    # evicted by the no-data batch after the last (asserted below).
    (46, 30, 6.0, (400 * MS, 300 * MS), (200 * MS, 100 * MS), 1 * S, "min", "left"),
    (38, 30, 6.0, (300 * MS, 200 * MS), (100 * MS, 0), 1 * S, "max", "right"),
    (46, 30, 6.0, (400 * MS, 300 * MS), (200 * MS, 100 * MS), 1 * S, "min", "full"),
]


@pytest.mark.parametrize("seed,rows,span,windows,watermark,trigger,wm_policy,join", OUTER_CASES)
def test_outer_join_null_padded_rows_and_their_batches_as_spark(spark, tmp_path, seed, rows, span, windows,
                                                                 watermark, trigger, wm_policy, join):
    """Left / right / full outer: the pairs and the null-padded rows (of both
    streams for a full join), each with the batch id that emitted it (a
    null-padded row leaves with its state eviction; the batch after the last
    one, a no-data batch, evicts too)."""
    policy = PolicySpec("spark-ss", watermark=watermark, trigger_us=trigger, watermark_policy=wm_policy, join=join)
    streams = disordered(seed, rows, span, keys=6)
    ours = check_against_spark(spark, tmp_path, streams, policy, windows)
    sides = {"left": {0}, "right": {1}, "full": {0, 1}}[join]
    assert ours.outer and {stream for stream, _ in ours.outer} == sides
    assert all(latency > 0 for _, _, latency in ours.outer.values())
    first = streams_first(streams) // trigger
    own = [b for (s, r), (b, _, _) in ours.outer.items() if b == streams[s][r].arrival // trigger - first]
    last = max(t.arrival for s in streams for t in s) // trigger - first
    assert own and any(b == last + 1 for b, _, _ in ours.outer.values())


def check_against_spark(spark, tmp_path: Path, streams, policy: PolicySpec, windows):
    """Asserts the local engine's answer is Spark's (emitted rows with their batch
    ids, late drops and state rows per batch) and the reference's; returns it."""
    trigger = policy.trigger_us
    batches = write_batches(tmp_path, streams, trigger)
    real = real_spark(spark, tmp_path, windows, policy)
    ours = local_spark_ss(streams, windows, policy)
    progress = real["progress"]
    # Spark's batch j read batch j's file of both streams (a trailing no-data batch may follow)
    for j in range(batches):
        want = [sum(1 for t in s if t.arrival // trigger - streams_first(streams) // trigger == j) for s in streams]
        sources = progress[j]["sources"]
        assert sorted(src["numInputRows"] for src in sources) == sorted(want)
    assert all(not any(src["numInputRows"] for src in p["sources"]) for b, p in progress.items() if b >= batches)
    # the emitted pairs, row for row, with the batch that emitted them
    ours_rows = {(b, left, right) for (left, right), (b, _, _) in ours.emitted.items()}
    assert 0 < len(ours_rows) < len(ours.truth)                 # the case loses some pairs, and keeps some
    ours_rows |= {(b, row, None) if stream == 0 else (b, None, row) for (stream, row), (b, _, _) in ours.outer.items()}
    assert real["emitted"] == ours_rows
    # late drops and state rows after every batch
    ops = [progress[j]["stateOperators"][0] for j in range(batches)]
    dropped_per_batch = [0] * batches
    for stream, row in ours.dropped:
        t = streams[stream][row]
        dropped_per_batch[t.arrival // trigger - streams_first(streams) // trigger] += 1
    assert [op["numRowsDroppedByWatermark"] for op in ops] == dropped_per_batch
    assert [op["numRowsTotal"] for op in ops] == [left + right for left, right in ours.state_rows]
    ref = replay_micro_batches(streams, windows, policy)       # and the reference agrees
    assert (ours.emitted, ours.outer) == (ref.emitted, ref.outer)
    return ours


def streams_first(streams) -> int:
    return min(t.arrival for s in streams for t in s)


def test_left_row_at_its_state_watermark_meets_the_right_row_of_its_batch(spark, tmp_path):
    """Spark stores every left row before the right rows of its batch probe
    (SPARK-49829): a left row exactly at its state watermark still joins the
    right row of its batch, then leaves the state at the batch end."""
    W = 2 * S
    old = T0 + 20 * S - W - MS                      # batch 1's left state watermark, exactly
    streams = [[RefTuple(0, 0, T0 + 20 * S, T0, (0,)), RefTuple(0, 1, old, T0 + S + 1, (0,))],
               [RefTuple(1, 0, T0 + 20 * S, T0 + 1, (0,)), RefTuple(1, 1, old + 10, T0 + S + 2, (0,))]]
    policy = PolicySpec("spark-ss", watermark=(0, 0), trigger_us=S, watermark_policy="min")
    write_batches(tmp_path, streams, S)
    real = real_spark(spark, tmp_path, (W, W), policy)
    ours = local_spark_ss(streams, (W, W), policy)
    assert real["emitted"] == {(b, left, right) for (left, right), (b, _, _) in ours.emitted.items()} \
        == {(0, 0, 0), (1, 1, 1)}
    assert real["progress"][1]["stateOperators"][0]["numRowsTotal"] == sum(ours.state_rows[1]) == 3


def test_trigger_files_batches_as_spark_max_files_per_trigger(spark, tmp_path):
    """--trigger-files 2 against maxFilesPerTrigger = 2 on the same files (one per
    stream per second of arrival, modification times in that order): the same
    rows with the same batch ids, drops and state rows per batch; a left outer
    join, so the null-padded rows too."""
    streams = disordered(31, 40, 8.0)
    per_second = PolicySpec("spark-ss", watermark=(300 * MS, 300 * MS), trigger_us=S, watermark_policy="min",
                            join="left")
    write_batches(tmp_path, streams, S)
    files = []
    for i, s in enumerate(streams):
        side = []
        for f in sorted((tmp_path / f"s{i}").glob("*.parquet")):
            rows = set(pl.read_parquet(f)["row"].to_list())
            side.append((str(f), f.stat().st_mtime_ns // 1000, [t for t in s if t.row in rows]))
        files.append(side)
    policy = replace(per_second, trigger_us=None, trigger_files=2)
    real = real_spark(spark, tmp_path, (800 * MS, 800 * MS), policy, max_files=2)
    ours = local_spark_ss_files(files, (800 * MS, 800 * MS), policy)
    rows = {(b, left, right) for (left, right), (b, _, _) in ours.emitted.items()}
    rows |= {(b, row, None) for (_, row), (b, _, _) in ours.outer.items()}
    assert real["emitted"] == rows and ours.outer and 0 < len(ours.emitted) < len(ours.truth)
    batches = len(ours.state_rows)
    ops = [real["progress"][j]["stateOperators"][0] for j in range(batches)]
    assert [op["numRowsTotal"] for op in ops] == [left + right for left, right in ours.state_rows]
    assert sum(op["numRowsDroppedByWatermark"] for op in ops) == len(ours.dropped) > 0
    assert ours.emitted == replay_micro_batches_files(files, (800 * MS, 800 * MS), policy).emitted
