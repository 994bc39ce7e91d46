"""``flink-sql``: Flink SQL's row-time interval join (issue 18).

The job it emulates (two tables; stream 0 is the left one)::

    SELECT ... FROM L [LEFT | RIGHT | FULL OUTER] JOIN R ON L.k = R.k
      AND R.ts BETWEEN L.ts - INTERVAL 'W_1' AND L.ts + INTERVAL 'W_0'

on row-time attributes whose watermarks are those of ``--policy flink``
(``forBoundedOutOfOrderness(D_i)`` per input, emitted per record or every
``--watermark-interval``: a table made from such a DataStream with
``SOURCE_WATERMARK()``).  The planner (``StreamExecIntervalJoin.java``) runs
``RowTimeIntervalJoin`` (flink-table-runtime, ``operators/join/interval/``,
subclass of ``TimeIntervalJoin``) with ``allowedLateness = 0`` and
``minCleanUpInterval`` = ``table.exec.interval-join.min-cleanup-interval``
(default 0; ``--min-cleanup-interval DUR`` sets it).  Settings: ``--watermark``
per stream, ``--watermark-interval`` (as ``flink``), ``--join
inner|left|right|full`` and ``--min-cleanup-interval``.

What differs from ``flink`` (the DataStream ``IntervalJoinOperator``), rule by
rule; the column form is :mod:`streamjoin.pipelines.replay.sql_interval_join`,
the per-event oracle :mod:`streamjoin.pipelines.replay.sql_reference` (verified
against Flink's own operator), docs/semantics.md "flink-sql" the same with
examples.  ``G`` is the operator watermark, ``OT = max(G, 0)``
(``RowTimeIntervalJoin.updateOperatorTime``), ``W_s`` the window of side ``s``.

1. **No late drop** (TimeIntervalJoin.java ``processElement1/2``: no
   ``isLate``): every row is processed; ``dropped_late`` is always 0.
2. **Cache or not** (``processElement1/2``): a row at ``t`` is cached iff
   ``OT < t + W_s``; a row that is not cached still joins what it finds.
3. **Probe or not** (``processElement1/2``): the row walks the other side's
   cache of its key only if that side's *expiration time* -- one per side,
   shared by all keys, initially 0 -- is ``< t + W_s``; walking, it first sets
   it to ``OT - W_o - 1 ms`` (``calExpirationTime``), joins every row in the
   bounds and removes every row at or below it (a row removed this way is
   still joined by the row that removes it).
4. **Cleanup timers** (``registerCleanUpTimer``, ``onTimer``,
   ``removeExpiredRows``): one per key and cache, at ``t + W_s +
   minCleanUpInterval + 1 ms`` of the row cached into a cache without one;
   when ``G`` reaches it the cache's expiration time becomes ``OT - W_s -
   1 ms``, rows at or below it go, and a new timer is set from the earliest
   row left (none left: the cache and its timer are cleared).  Timers fire at
   watermark advances, in order of time; for one key the right cache's timer
   before the left one's.
5. **Emission**: a pair comes out when its later member probes (latency 0).
6. **Outer joins** (``processElement1/2``, ``removeExpiredRows``): a row never
   joined is emitted null-padded when it leaves its cache (at the probe or the
   timer that removes it: latency = that moment minus its arrival), or at once
   if it was not cached and joined nothing.
7. **End of input** (``calExpirationTime``): a bounded input ends with
   ``Long.MAX_VALUE``: every timer fires, every cached row leaves (and is
   padded if never joined), at the last record.
8. **Memory**: rows in both caches after each arrival index.

Refused (one line, exit 2): ``--idleness`` (not emulated for the SQL join),
event times ``<= 0`` (``removeExpiredRows`` takes a row time ``<= 0`` for "no
rows left"), and -- as for ``flink`` -- times, windows and delays that are not
whole milliseconds.
"""

from __future__ import annotations

from ..base.errors import InputError
from . import flink


def check_settings(policy) -> None:
    """One-line errors for a ``flink-sql`` :class:`~streamjoin.pipelines.policies.PolicySpec`."""
    if policy.idleness_us is not None:
        raise InputError("--idleness: policy flink-sql does not emulate withIdleness yet (policy flink does)")
    cleanup = policy.min_cleanup_us
    if isinstance(cleanup, bool) or not isinstance(cleanup, int) or cleanup < 0 or cleanup % flink.MS:
        raise InputError(f"--min-cleanup-interval {cleanup}us: expected whole milliseconds >= 0 "
                         "(table.exec.interval-join.min-cleanup-interval)")
    flink.check_settings(policy)
