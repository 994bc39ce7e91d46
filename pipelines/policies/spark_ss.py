"""``spark-ss``: Spark Structured Streaming's stream-stream join, inner or outer (SPEC §4.4).

Settings (validated here): ``--watermark DUR`` per stream (``withWatermark``
delay, whole milliseconds, as Spark keeps it), ``--trigger DUR`` (the
micro-batch interval of arrival time) or ``--trigger-files N`` (N input files
per stream per batch), ``--watermark-policy min|max``
(``spark.sql.streaming.multipleWatermarkPolicy``) and ``--join
inner|left|right|full`` (``df.join(other, cond, "left_outer")``, ..., ``"full_outer"``).  Two streams: stream 0
is the join's left side, stream 1 its right side, and the join condition is
the SPEC's window as a band, ``right.ts BETWEEN left.ts - W_right AND
left.ts + W_left``, plus the keys (and ``--distance`` / ``--where``).

The rules, each with the Spark source it comes from (the column form is
:mod:`streamjoin.pipelines.replay.microbatch`; docs/semantics.md "spark-ss"
says the same with examples):

1. **Micro-batches** (``ProcessingTimeExecutor`` in TriggerExecutor.scala:
   triggers fire at multiples of the interval; with ``--trigger-files N``
   instead, FileStreamSource.scala's ``maxFilesPerTrigger``:
   :func:`file_batches`, :func:`file_batch_times`).  Batch ``j`` holds the
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
5. **State watermark** (StreamingJoinHelper.scala ``getStateValueWatermark``;
   both sides get one whatever the join type,
   StreamingSymmetricHashJoinHelper.scala ``getStateWatermarkPredicates``):
   from the band, side ``s``'s state watermark in batch ``j`` is
   ``trunc((wm[j] * 1000 - W_s) / 1000) - 1`` ms (the ``- 1`` because the
   band is inclusive).  State rows at or below it (``ts <= sw * 1000``) are
   removed at the end of the batch (``removeOldState``).  After the last
   batch with rows one more, no-data, batch runs with the watermark that
   batch produced (MicroBatchExecution.scala runs it when
   ``shouldRunAnotherBatch``: the watermark moved; otherwise it would evict
   nothing); nothing runs after it.
6. **Order inside a batch** (StreamingSymmetricHashJoinExec.scala,
   ``processPartitions`` and ``AddingProcessedRowToStateCompletionIterator``,
   Spark >= 3.5.4 / 4.0, SPARK-49829): left rows probe the right state and
   are *all* stored, then right rows probe the left state (which holds this
   batch's left rows) and are stored unless at or below their state
   watermark.  So the two members of a pair in one batch always meet (a left
   row at its state watermark leaves at the batch end, after the right rows
   probed it).
7. **Memory**: join state rows (Spark's ``numRowsTotal``) after each batch;
   per arrival index the state after the previous batch plus the rows that
   arrived in the current batch so far (waiting for the trigger).
8. **Outer joins** (``--join left|right|full``; StreamingSymmetricHashJoinExec.scala
   ``processPartitions``, SymmetricHashJoinStateManager.scala
   ``getJoinedRows`` / ``append``; state format 2 keeps a ``matched`` flag
   per state row, SPARK-26154): a stored row is matched if its own probe found
   a partner, or a later probe of the other side finds it.  When the outer
   side's state eviction (rule 5) removes an unmatched row, the row is
   emitted null-padded, at the end of that batch -- in the no-data batch after
   the last one too; rows still in state after it are never emitted.  In a
   right (or full) outer join an unmatched right row at or below its state
   watermark is stored anyway, so it is emitted null-padded at the end of its
   own batch.  A full outer join pads the unmatched rows of both sides
   (``case FullOuter``: the left side's eviction, then the right side's).
   Late rows of the outer side (rule 4) are dropped by the late filter and
   never emitted.  Matched pairs are those of the inner join (the same state,
   the same evictions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
    if policy.trigger_us is None and policy.trigger_files is None:
        raise InputError("policy spark-ss needs --trigger DURATION, the micro-batch interval of arrival time "
                         "(or --trigger-files N: N input files per stream per micro-batch)")
    if policy.trigger_us is not None and policy.trigger_files is not None:
        raise InputError("--trigger and --trigger-files: micro-batches are cut by arrival time or by input "
                         "files, not both")
    if policy.trigger_us is not None and policy.trigger_us <= 0:
        raise InputError("--trigger must be > 0")
    if policy.trigger_files is not None and (isinstance(policy.trigger_files, bool)
                                             or not isinstance(policy.trigger_files, int)
                                             or policy.trigger_files < 1):
        raise InputError(f"--trigger-files {policy.trigger_files}: expected a whole number of files >= 1")
    if policy.watermark_policy not in WATERMARK_POLICIES:
        raise InputError(f"--watermark-policy {policy.watermark_policy}: expected one of "
                         f"{', '.join(WATERMARK_POLICIES)}")


def file_batches(mtime_us: Sequence[int], paths: Sequence[str], per_batch: int) -> np.ndarray:
    """``--trigger-files N`` (``maxFilesPerTrigger``): the micro-batch of each of a
    stream's files.  FileStreamSource.scala ``fetchAllFiles`` sorts the files by
    modification time (``getModificationTime``, ms) and ``fetchMaxOffset`` takes
    the next ``maxFilesPerTrigger`` of them per batch; files with the same
    millisecond are taken in path order (Spark keeps its listing order for
    them).  File ``f`` is in batch ``rank(f) // N``."""
    order = sorted(range(len(paths)), key=lambda f: (int(mtime_us[f]) // MS, str(paths[f])))
    batch = np.empty(len(paths), np.int64)
    batch[np.asarray(order, dtype=np.int64)] = np.arange(len(paths), dtype=np.int64) // per_batch
    return batch


def file_batch_times(batches: Sequence[np.ndarray], mtime_us: Sequence[np.ndarray]) -> np.ndarray:
    """When each micro-batch of ``--trigger-files`` runs, given every stream's file
    batches and modification times (µs): batch ``j`` runs once all its files exist,
    and after batch ``j - 1``: ``P[j] = max(latest mtime of the files of batches
    0..j, P[j - 1] + 1 µs)``.  One more entry, ``P[-1] = P[B - 1] + 1 µs``, is the
    no-data batch after the last."""
    count = 1 + max((int(b.max()) for b in batches if len(b)), default=-1)
    latest = np.full(count, np.iinfo(np.int64).min, np.int64)
    for b, m in zip(batches, mtime_us):
        np.maximum.at(latest, np.asarray(b, dtype=np.int64), np.asarray(m, dtype=np.int64))
    done = np.maximum.accumulate(latest)      # (some stream has files in every batch 0..count - 1)
    times = np.empty(count + 1, np.int64)
    for j in range(count):                    # one step per batch (a batch holds whole files), not per row
        times[j] = done[j] if j == 0 else max(int(done[j]), int(times[j - 1]) + 1)
    times[count] = times[count - 1] + 1 if count else 0
    return times


def file_arrivals(file_of_row: Sequence[np.ndarray], mtime_us: Sequence[Sequence[int]],
                  paths: Sequence[Sequence[str]], per_batch: int) -> tuple[list[np.ndarray], np.ndarray]:
    """``--trigger-files N`` for every stream at once: each row's arrival (the time
    its file's batch runs, :func:`file_batch_times`) and those times.  Per stream:
    ``file_of_row`` the index of each row's file in ``paths`` / ``mtime_us``."""
    batches = [file_batches(m, p, per_batch) for m, p in zip(mtime_us, paths)]
    times = file_batch_times(batches, [np.asarray(m, dtype=np.int64) for m in mtime_us])
    arrivals = [times[b[np.asarray(f, dtype=np.int64)]] if len(f) else np.empty(0, np.int64)
                for b, f in zip(batches, file_of_row)]
    return arrivals, times
