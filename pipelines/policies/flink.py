"""``flink``: Flink's DataStream interval join with bounded-out-of-orderness watermarks (SPEC §4.4).

The job it emulates (two streams; stream 0 is the left input, stream 1 the
right one)::

    left.assignTimestampsAndWatermarks(WatermarkStrategy.forBoundedOutOfOrderness(D_0)).keyBy(key)
        .intervalJoin(right.assignTimestampsAndWatermarks(
            WatermarkStrategy.forBoundedOutOfOrderness(D_1)).keyBy(key))
        .between(-W_1, +W_0)          # inclusive bounds, the default
        .process(...)

Settings (validated here): ``--watermark DUR`` per stream (the out-of-orderness
``D_i``, whole milliseconds), ``--idleness DUR`` (rule 8) and ``--watermark-interval DUR`` (Flink's
``pipeline.auto-watermark-interval``, default 200 ms, taken as arrival time in
a replay; ``0`` = a watermark after every record).  Event times, windows and
delays must be whole milliseconds: Flink's record timestamps, watermarks and
``between`` bounds are milliseconds.

The rules, each with the Flink source it comes from (the column form is
:mod:`streamjoin.pipelines.replay.interval_join`; docs/semantics.md "flink"
says the same with examples).  ``G`` is the join operator's watermark.

1. **Bounds** (``KeyedStream.IntervalJoin.between``, IntervalJoinOperator.java
   constructor): a pair is joined iff ``right.ts`` is in ``[left.ts - W_1,
   left.ts + W_0]`` -- exactly the SPEC §3 window condition -- and the keys
   match (``--distance`` / ``--where`` as a filter in the join function).
2. **Per-input watermark** (BoundedOutOfOrdernessWatermarks.java): generator
   ``i`` emits ``max ts of stream i so far - D_i - 1 ms``; the emitter passes on
   only increasing values (TimestampsAndWatermarksOperator.java,
   ``WatermarkEmitter``).  When: ``--watermark-interval 0`` -- after each record
   of stream ``i``; ``I > 0`` -- at every ``first arrival + k I`` (``k >= 1``),
   over the records that arrived before that instant (``onPeriodicEmit`` on a
   processing-time timer, TimestampsAndWatermarksOperator.java).
3. **Operator watermark** (AbstractStreamOperator.java ``processWatermark1/2``,
   IndexedCombinedWatermarkStatus.java): ``G = min`` over the two inputs, each
   ``Long.MIN_VALUE`` until its first watermark; it moves only up and timers
   fire only when it does.
4. **Late records** (IntervalJoinOperator.java ``isLate``): a record with
   ``ts < G`` (strict) when it is processed is dropped -- not buffered, not
   joined (``sideOutputLeftLateData`` / ``...RightLateData`` would receive it);
   counted per stream.
5. **Buffer, probe, emit** (IntervalJoinOperator.java ``processElement``): a
   record that is not late is added to its side's buffer and joins every record
   in the other side's buffer within the bounds; results are emitted at once,
   on the arrival of the later member (latency 0).
6. **Cleanup** (IntervalJoinOperator.java ``processElement`` /
   ``onEventTime``; InternalTimerServiceImpl.java ``advanceWatermark``: timers
   with ``time <= G`` fire): a buffered record of stream ``i`` registers a timer
   at ``ts + W_i`` and leaves the buffer when ``G`` advances to ``>= ts + W_i``
   -- so at the first advance after it was buffered (a record at ``ts = G``
   with ``W_i = 0`` stays until ``G`` moves).
7. **Memory**: records in both buffers after each arrival index.
8. **Idle inputs** (``--idleness T``, ``withIdleness``; WatermarksWithIdleness.java,
   TimestampsAndWatermarksOperator.java ``WatermarkEmitter``,
   CombinedWatermarkStatus.java): checked at the ticks only (so ``I > 0``); an
   input with no record since tick ``k0`` is marked idle at tick ``k0 +
   floor(T / I) + 2``, active again when it emits a higher watermark; ``G`` is
   the minimum over the inputs not idle, the maximum when both are (the left
   input's generator runs first at a tick).

Not modelled: watermark alignment, the Flink SQL interval join
(``TimeIntervalJoin``), more than two streams.
"""

from __future__ import annotations

from ..base.errors import InputError

#: Flink's record timestamps, watermarks and interval bounds are milliseconds
MS = 1000
#: ``pipeline.auto-watermark-interval`` default (ExecutionConfig): 200 ms
DEFAULT_WATERMARK_INTERVAL_US = 200 * MS


def check_settings(policy) -> None:
    """One-line errors for a ``flink`` :class:`~streamjoin.pipelines.policies.PolicySpec`."""
    if policy.watermark is None or any(v is None for v in policy.watermark):
        raise InputError(f"policy {policy.name} needs --watermark DURATION (for every stream; NAME=DUR for one), "
                         "the forBoundedOutOfOrderness delay")
    if len(policy.watermark) != 2:
        raise InputError(f"policy {policy.name} joins exactly two streams (Flink's interval join is binary); "
                         f"got {len(policy.watermark)}")
    for v in policy.watermark:
        if v % MS:
            raise InputError(f"--watermark {v}us: Flink's out-of-orderness is whole milliseconds")
    interval = policy.watermark_interval_us
    if interval is None or interval < 0:
        raise InputError("--watermark-interval must be >= 0 (0: a watermark after every record)")
    idleness = policy.idleness_us
    if idleness is not None:
        if idleness <= 0:
            raise InputError("--idleness must be > 0 (withIdleness: idleTimeout must be greater than zero)")
        if interval == 0:
            raise InputError("--idleness needs --watermark-interval > 0: Flink checks idleness only at periodic "
                             "watermark emissions (WatermarksWithIdleness.onPeriodicEmit), and there are none "
                             "with a watermark after every record")


def check_windows(windows) -> None:
    """The interval join's bounds are milliseconds: every window must be whole ms."""
    for w in windows:
        if int(w) % MS:
            raise InputError(f"--window {int(w)}us: policy flink needs whole-millisecond windows "
                             "(the interval join's bounds are milliseconds)")
