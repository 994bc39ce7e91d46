"""The recall-target policies (``qjoin``, ``qkslack``; SPEC §4.3) on the native Spark
path (issue 19): the controller's decisions on the driver, their effect on the executors.

:func:`decide` runs the online controller (:mod:`~streamjoin.pipelines.policies.controller`,
the local engine's own code, in its streaming form) and returns its decision log, its resolved settings and the
decision table -- each decision's time and per-stream value, O(decisions x n) numbers.
The table goes back to the executors inside the progress scans
(:func:`~.native_progress.progress_frame`'s ``schedule``): each tuple's ``K_i(a)``
(qkslack) or ``d_i(a)`` (qjoin) is the value of the last decision made strictly before
its arrival, MP-K-slack's bound before the first
(:func:`~streamjoin.pipelines.replay.partitioned_progress.scheduled`), so releases,
drops, horizons, expiries, memory, the join and every metric follow on the executors
exactly as for a fixed policy.

What the controller reads is NOT a per-period summary, and cannot be one while its
decisions stay exactly the local engine's (docs/semantics.md, "``qjoin`` and ``qkslack``
on the native path"): each decision reads, per tuple of its history window (the latest
period, widened back to ``10 / (1 - Q)`` tuples), its partner density counted over the
partners arrived by the decision time, its ramp (qjoin) or delay (qkslack).  So the driver
holds a sliding window instead (:class:`~streamjoin.pipelines.policies.window.ReplayWindow`):

* up front, three aggregations: count, first / last arrival and ``ts`` range; the key ids
  (:func:`_with_key_ids`: value minus the smallest for one integer column over a range
  below 2^31, else the dense rank over the distinct keys, ranked in range partitions on
  the executors, :func:`_dense_key_ids`: per-partition counts to the driver, O(P)) and the
  largest; the smallest ``ts`` arriving in each of :data:`FLOOR_BUCKETS` arrival buckets
  (a bound on the ``ts`` still to come: which partners may still be counted)  O(buckets);
* then the frame (every column and the key ids) range-partitioned in replay order
  (``arrival``, ``stream``, ``row``) and persisted -- the progress scans take it over
  (:func:`~.native_progress.progress_frame`'s ``ordered``), so the tuples are partitioned
  once --, each partition's Arrow batches (the controller's columns) as IPC bytes through
  ``toLocalIterator(prefetchPartitions=False)`` (:func:`arrow_partitions`): the driver's
  JVM holds one partition's bytes, its Python process one chunk of up to
  :data:`CHUNK_ROWS` tuples (:func:`feed_chunks`) plus the controller's window -- the
  history window's tuples and those since the last decision, the partners within
  ``max(W, b)`` below the smallest held or later ``ts``, each stream's arrivals of the
  last rate history, the last ``memory_periods`` periods' needs: O(chunk + tuples per
  period + tuples per (disorder + W)), not O(N) (``benchmarks/native_adaptive_driver.py``,
  docs/performance.md); only the table, the log and the settings stay.
The quarantined rows' arrival times (``bad_arrivals``, the bad-rows trigger) come from
the read on the executors (``read.SparkInput.bad_arrivals``, O(quarantined rows)).
"""

from __future__ import annotations

import numpy as np

from ...policies.controller import streaming
from ...policies.recall_target import decision_table

#: arrival buckets of the later-ts bound (the smallest ts arriving in each): O(buckets) numbers
FLOOR_BUCKETS = 4096
#: tuples per chunk fed to the controller (the Arrow batches of one partition are gathered up to it)
CHUNK_ROWS = 65_536
ORDER = ("arrival", "stream", "row")


def decide(df, *, n: int, W, policy, bad_arrivals, keycols, partitions: int) -> tuple[tuple, list, dict, object]:
    """The controller's ``(schedule, log, settings, ordered)`` for ``df`` (the native frame):
    ``schedule`` = (decision times, ``(n, D)`` values), what the progress scans apply;
    ``log`` / ``settings``: ``report.json``'s ``policy_decisions`` / ``policy_settings``;
    ``ordered``: ``df`` (and ``__kid``) range-partitioned in replay order into
    ``partitions`` and persisted, which the progress scans take over
    (:func:`~.native_progress.progress_frame`'s ``ordered``; ``None`` without tuples).
    The frame reaches the driver one partition at a time, in replay order (module docstring)."""
    frame, key_max, cached = _with_key_ids(df, keycols, partitions)
    try:
        return _decide(df, frame, key_max, n=n, W=W, policy=policy, bad_arrivals=bad_arrivals, partitions=partitions)
    finally:
        if cached is not None:
            cached.unpersist()


def _decide(df, frame, key_max, *, n, W, policy, bad_arrivals, partitions):
    """:func:`decide` once ``frame`` has its key ids."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)), F.min("arrival"), F.max("arrival"), F.min("ts"), F.max("ts")).first()
    if not row[0]:
        sched = streaming(policy.name, n, W, policy.target, first_arrival=0, last_arrival=0, ts_range=(0, 0),
                          bad_arrivals=bad_arrivals).on_eof()
        return decision_table(sched.log, n), sched.log, sched.settings, None
    first, last, ts_lo, ts_hi = (int(v) for v in row[1:])
    width = -(-(last - first + 1) // FLOOR_BUCKETS)
    floors = np.full(FLOOR_BUCKETS + 1, np.iinfo(np.int64).max, dtype=np.int64)
    bucket = F.expr(f"(arrival - {first}L) div {width}L").alias("b")   # integral, as feed_chunks' own
    for b, lo in df.groupBy(bucket).agg(F.min("ts")).collect():
        floors[int(b)] = int(lo)
    floors = np.minimum.accumulate(floors[::-1])[::-1]   # the smallest ts arriving in a bucket or later
    ctl = streaming(policy.name, n, W, policy.target, first_arrival=first, last_arrival=last, ts_range=(ts_lo, ts_hi),
                    key_max=key_max, bad_arrivals=bad_arrivals)
    cols = ["stream", "ts", "arrival"] + (["__kid"] if key_max is not None else [])
    # every column: the progress scans reuse this partitioning (progress_frame's ``ordered``)
    ordered = (frame.repartitionByRange(max(int(partitions), 1), *ORDER).sortWithinPartitions(*ORDER)
               .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        feed_chunks(ctl, arrow_partitions(ordered.select(*cols)), floors, first, width)
    except BaseException:
        ordered.unpersist()
        raise
    sched = ctl.on_eof()
    return decision_table(sched.log, n), sched.log, sched.settings, ordered


def feed_chunks(ctl, batches, floors: np.ndarray, first: int, width: int) -> None:
    """Feed ``batches`` (Arrow record batches of ``stream``, ``ts``, ``arrival`` and the
    key ids ``__kid``, in replay order) to the streaming controller ``ctl`` in chunks of
    about :data:`CHUNK_ROWS`; each chunk's bound on later ``ts``: the smallest ``ts``
    arriving in its last tuple's arrival bucket or later (``floors``, bucket ``width``
    from ``first``)."""
    import pyarrow as pa

    pending, rows = [], 0

    def flush(final: bool) -> None:
        t = pa.Table.from_batches(pending)
        arrival = t.column("arrival").to_numpy()
        later = None if final else int(floors[min((int(arrival[-1]) - first) // width, len(floors) - 1)])
        ctl.on_chunk(t.column("stream").to_numpy(), t.column("ts").to_numpy(), arrival,
                     t.column("__kid").to_numpy() if "__kid" in t.column_names else None, later_ts_min=later)
        pending.clear()

    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            rows += batch.num_rows
        if rows >= CHUNK_ROWS:
            flush(False)
            rows = 0
    if pending:
        flush(True)


def arrow_partitions(frame):
    """The rows of ``frame`` as Arrow record batches, partition by partition in order:
    each partition's batches travel as Arrow IPC bytes (``mapInArrow``) and
    ``toLocalIterator(prefetchPartitions=False)`` fetches one partition at a time, so
    the driver holds one partition (and no Row per tuple)."""
    import pyarrow as pa

    def to_ipc(batches):
        for b in batches:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, b.schema) as w:
                w.write_batch(b)
            yield pa.RecordBatch.from_pydict({"ipc": [sink.getvalue().to_pybytes()]},
                                             schema=pa.schema([("ipc", pa.binary())]))

    for row in frame.mapInArrow(to_ipc, "ipc binary").toLocalIterator(prefetchPartitions=False):
        yield from pa.ipc.open_stream(row[0]).read_all().to_batches()


def _with_key_ids(df, keycols, partitions: int | None = None):
    """``(frame, key_max, cached)``: ``df`` with ``__kid``, each tuple's key id, the largest
    id, and the persisted frame of ranked distinct keys the ids come from (``None`` when
    nothing is cached; unpersist it once ``frame`` is consumed) -- the ids
    :func:`~streamjoin.pipelines.replay.candidates.key_ids` gives the local engine up to
    a renaming (one integer column -- ``uint64`` included, ``decimal(20,0)`` here -- over a
    range below 2^31: value minus the smallest;
    else the dense rank, from 1, over the distinct keys: :func:`_dense_key_ids`, ranked
    on the executors in ``partitions`` range partitions) -- or ``(df, None, None)``
    without keys."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, DecimalType, IntegerType, LongType, ShortType

    if not keycols:
        return df, None, None
    dtype = df.schema[keycols[0]].dataType
    # decimal(20,0): a uint64 key (read._spark_key_type), an integer column to the local engine
    integral = isinstance(dtype, (ByteType, ShortType, IntegerType, LongType)) or (
        isinstance(dtype, DecimalType) and dtype.scale == 0)
    if len(keycols) == 1 and integral:
        lo, hi = df.agg(F.min(keycols[0]), F.max(keycols[0])).first()
        if lo is not None and int(hi) - int(lo) < 2**31:   # lo as Spark gave it: a uint64 may exceed a long
            return df.withColumn("__kid", (F.col(keycols[0]) - F.lit(lo)).cast("long")), int(hi) - int(lo), None
    P = int(partitions or df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    ranked, key_max, cached = _dense_key_ids(df, keycols, P)
    renamed = ranked.select(*[F.col(c).alias(f"__r{k}") for k, c in enumerate(keycols)], "__kid")
    cond = [df[c].eqNullSafe(renamed[f"__r{k}"]) for k, c in enumerate(keycols)]
    return df.join(renamed, on=cond, how="left").select(*df.columns, "__kid"), key_max, cached


def _dense_key_ids(df, keycols, P: int):
    """``(ranked, count, cached)``: the distinct keys of ``df`` with ``__kid``, their dense
    rank from 1 in Spark's ascending order (``dense_rank().over(Window.orderBy(*keycols))``'s
    ids, without its single task), the number of distinct keys, and the persisted frame
    ``ranked`` reads (unpersist it when done).

    The distinct keys range-partitioned on the keys (``P`` partitions) and sorted within
    each; ``monotonically_increasing_id`` gives each its partition (the high bits) and
    its index there (the low 33), materialised once by the persist (so both uses below
    read the same partitioning); the per-partition counts reach the driver (O(P)), their
    prefix sums go back as a literal array: id = offset of the partition + index + 1."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    mono = F.monotonically_increasing_id()
    parts = (df.select(*keycols).distinct().repartitionByRange(max(P, 1), *keycols).sortWithinPartitions(*keycols)
             .select(*keycols, F.shiftrightunsigned(mono, 33).alias("__p"), (mono.bitwiseAND((1 << 33) - 1)).alias("__i"))
             .persist(StorageLevel.MEMORY_AND_DISK))
    counts = dict((int(p), int(c)) for p, c in parts.groupBy("__p").count().collect())
    top = max(counts, default=-1)
    sizes = np.array([counts.get(p, 0) for p in range(top + 1)], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(sizes) else np.zeros(1, np.int64)
    offset = F.element_at(F.array(*[F.lit(int(o)) for o in offsets]), (F.col("__p") + 1).cast("int"))
    ranked = parts.select(*keycols, (offset + F.col("__i") + 1).cast("long").alias("__kid"))
    return ranked, int(sizes.sum()), parts
