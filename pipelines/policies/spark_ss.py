"""``spark-ss``: Spark Structured Streaming's stream-stream inner join (SPEC §4.4).

Settings (validated here): ``--watermark DUR`` per stream (``withWatermark``
delay, whole milliseconds, as Spark keeps it), ``--trigger DUR`` (the
micro-batch interval of arrival time) and ``--watermark-policy min|max``
(``spark.sql.streaming.multipleWatermarkPolicy``).  Two streams: stream 0
is the join's left side, stream 1 its right side, and the join condition is
the SPEC's window as a band, ``right.ts BETWEEN left.ts - W_right AND
left.ts + W_left``, plus the keys (and ``--distance`` / ``--where``).

The rules, each with the Spark source it comes from (the column form is
:mod:`streamjoin.pipelines.replay.microbatch`; docs/semantics.md "spark-ss"
says the same with examples):

1. **Micro-batches** (``ProcessingTimeExecutor`` in TriggerExecutor.scala:
   triggers fire at multiples of the interval).  Batch ``j`` holds the
   arrivals in ``[(b0 + j) T, (b0 + j + 1) T)``, ``b0 = floor(first
   arrival / T)``; every interval from the first arrival's to the last is a
   batch, empty ones included.  A batch is processed, and its results
   emitted, at its end ``(b0 + j + 1) T``.
2. **Operator watermarks** (EventTimeWatermarkExec.scala, WatermarkTracker.scala):
   after batch ``j``, each stream that had rows in it moves its watermark to
   ``max(own, floor(max ts of the batch / 1 ms) - delay)`` -- every row of
   the batch counts, late ones too; a stream without rows yet counts as 0.
3. **Global watermark** (WatermarkTracker.scala, MicroBatchExecution.scala):
   ``min`` (or ``max``) over the streams, in milliseconds; it starts at 0 and
   only moves up.  The value after batch ``j - 1`` is batch ``j``'s watermark
   ``wm[j]``.
4. **Late rows** (WatermarkPropagator.scala, ``getInputWatermarkForLateEvents``;
   statefulOperators.scala ``watermarkExpression``): a row of batch ``j`` is
   dropped iff ``ts <= wm[j - 1] * 1000`` µs (``wm[-1] = 0``): the previous
   batch's watermark.  A dropped row neither joins nor is stored; it counts in
   ``numRowsDroppedByWatermark``.
5. **State watermark** (StreamingJoinHelper.scala ``getStateValueWatermark``):
   from the band, side ``s``'s state watermark in batch ``j`` is
   ``trunc((wm[j] * 1000 - W_s) / 1000) - 1`` ms (the ``- 1`` because the
   band is inclusive).  A row at or below it (``ts <= sw * 1000``) is not
   stored (``AddingProcessedRowToStateCompletionIterator``) and stored rows at
   or below it are removed at the end of the batch (``removeOldState``).
6. **Order inside a batch** (StreamingSymmetricHashJoinExec.scala,
   ``processPartitions``): left rows probe the right state and are stored,
   then right rows probe the left state (which holds this batch's stored left
   rows).  So a pair in one batch is emitted iff its left row was stored.
7. **Memory**: join state rows (Spark's ``numRowsTotal``) after each batch;
   per arrival index the state after the previous batch plus the rows that
   arrived in the current batch so far (waiting for the trigger).
"""

from __future__ import annotations

from ..base.errors import InputError

#: spark.sql.streaming.multipleWatermarkPolicy values (WatermarkTracker.scala)
WATERMARK_POLICIES = ("min", "max")
DEFAULT_WATERMARK_POLICY = "min"
#: Spark keeps watermark delays and watermarks in whole milliseconds
MS = 1000


def check_settings(policy) -> None:
    """One-line errors for a ``spark-ss`` :class:`~streamjoin.pipelines.policies.PolicySpec`."""
    if policy.watermark is None or any(v is None for v in policy.watermark):
        raise InputError("policy spark-ss needs --watermark DURATION (for every stream; NAME=DUR for one), "
                         "the withWatermark delay")
    if len(policy.watermark) != 2:
        raise InputError(f"policy spark-ss joins exactly two streams (Spark's stream-stream join is binary); "
                         f"got {len(policy.watermark)}")
    for v in policy.watermark:
        if v % MS:
            raise InputError(f"--watermark {v}us: Spark watermark delays are whole milliseconds")
    if policy.trigger_us is None:
        raise InputError("policy spark-ss needs --trigger DURATION, the micro-batch interval of arrival time")
    if policy.trigger_us <= 0:
        raise InputError("--trigger must be > 0")
    if policy.watermark_policy not in WATERMARK_POLICIES:
        raise InputError(f"--watermark-policy {policy.watermark_policy}: expected one of "
                         f"{', '.join(WATERMARK_POLICIES)}")
