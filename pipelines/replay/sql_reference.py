"""Flink SQL's row-time interval join, one event at a time: the oracle for a future ``flink-sql`` policy.

Written from ``TimeIntervalJoin.java`` / ``RowTimeIntervalJoin.java``
(flink-table-runtime, ``operators/join/interval/``) as the planner builds them
(``StreamExecIntervalJoin.java``: ``allowedLateness = 0``,
``minCleanUpInterval`` from ``table.exec.interval-join.min-cleanup-interval``);
docs/semantics.md "flink" says how it differs from the DataStream interval
join.  ``tests/engines/test_flink_sql_real.py`` runs Flink's own operator on
the same records and asserts the same output row for row.

The inputs' watermarks are those of ``--policy flink`` (per-input
``max ts - D - 1 ms``, per record or at ticks ``first + k I``; no idleness):
a SQL table made from such a DataStream with ``SOURCE_WATERMARK()``.  The SQL
condition is ``r.ts BETWEEN l.ts - W_right AND l.ts + W_left`` with equal
keys, i.e. ``leftLowerBound = -W_left``, ``leftUpperBound = W_right``.

Per key: a left and a right cache (time -> rows, each with an "emitted" flag)
and one cleanup timer per cache.  Shared by all keys (plain fields of the
function): the two expiration times.  ``OT = max(G, 0)``, read at every
element and timer (``RowTimeIntervalJoin.updateOperatorTime``).  A left row at
``t`` (the right side is symmetric):

1. if ``rightExpirationTime < t + W_left``: set ``rightExpirationTime = OT -
   W_right - 1`` and walk the key's right cache: join every row with time in
   ``[t - W_right, t + W_left]``; remove every row with time ``<=
   rightExpirationTime`` (a never-joined one emits a right-padded row under
   RIGHT / FULL);
2. if ``OT < t + W_left``: cache it (flag: joined now), and if the key has no
   left-cache timer, register one at ``t + W_left + minCleanUp + 1``;
   otherwise, if it joined nothing, emit a left-padded row now (LEFT / FULL);
3. a timer of the left cache fires when ``G`` reaches it: ``leftExpirationTime
   = OT - W_left - 1``, rows at or below it are removed (padded if never
   joined), and a new timer is registered from the earliest remaining row.

Timers fire in order of time, at watermark advances (``time <= G``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..base.timeunits import NEG_INF
from .reference import RefTuple, brute_force_truth, replay_order

JOIN_TYPES = ("inner", "left", "right", "full")


@dataclass
class SqlIntervalJoinReference:
    """What :func:`replay_sql_interval_join` produced.

    Attributes:
        truth: every valid pair ``(left row, right row)``.
        emitted: pair -> arrival index of the record whose processing emitted it.
        padded: ``(stream, row)`` -> arrival index at which its null-padded row
            came out (outer joins): the record being processed, or the last
            record before the watermark (per record, or at a tick) that fired
            the cleanup timer.
        cached: per arrival index, ``(left rows, right rows)`` in the caches
            once that record and its watermark are processed.
    """

    truth: set[tuple[int, int]] = field(default_factory=set)
    emitted: dict[tuple[int, int], int] = field(default_factory=dict)
    padded: dict[tuple[int, int], int] = field(default_factory=dict)
    cached: list[tuple[int, int]] = field(default_factory=list)


def replay_sql_interval_join(streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], watermark: Sequence[int],
                             interval_us: int, join: str = "inner", min_cleanup_us: int = 0,
                             end_of_input: bool = True) -> SqlIntervalJoinReference:
    """Flink SQL's row-time interval join of two streams (times in µs, whole ms).

    ``end_of_input``: the inputs end after the last record, as a bounded
    source does: Flink then sends ``Long.MAX_VALUE`` as the watermark, every
    cleanup timer fires and every cached row expires (``calExpirationTime``),
    so outer joins pad the never-joined rows still cached."""
    if len(streams) != 2 or join not in JOIN_TYPES:
        raise ValueError("two streams; join one of " + ", ".join(JOIN_TYPES))
    MS = 1000
    size = (int(windows[0]), int(windows[1]))      # leftRelativeSize, rightRelativeSize
    pad = (join in ("left", "full"), join in ("right", "full"))
    out = SqlIntervalJoinReference(truth=brute_force_truth(streams, windows))
    tuples = replay_order(streams)
    index = {(x.stream, x.row): a for a, x in enumerate(tuples)}
    largest = [NEG_INF, NEG_INF]
    emitted_wm = [NEG_INF, NEG_INF]
    G = NEG_INF
    caches: dict[tuple, list[dict[int, list[list]]]] = {}   # key -> [left cache, right cache]
    timers: dict[tuple, list[int | None]] = {}              # key -> [left-cache timer, right-cache timer]
    expiration = [0, 0]                                    # left / right expiration time (shared)
    now = [-1]                                             # arrival index of the last record released

    END = 2**63 - 1   # Long.MAX_VALUE: the watermark a bounded input ends with

    def operator_time() -> int:
        return G if G > 0 else 0

    def cache_of(key) -> list[dict[int, list[list]]]:
        return caches.setdefault(key, [{}, {}])

    def expire(side: int, key, limit: int) -> None:
        cache = cache_of(key)[side]
        for t in [t for t in cache if t <= limit]:
            for x, joined in cache.pop(t):
                if pad[side] and not joined:
                    out.padded[(x.stream, x.row)] = now[0]

    def fire(key, side: int) -> None:
        """The cleanup timer of ``side``'s cache of ``key`` (TimeIntervalJoin.onTimer)."""
        expiration[side] = END if G == END else operator_time() - size[side] - MS
        expire(side, key, expiration[side])
        rest = cache_of(key)[side]
        timers[key][side] = None
        if rest and min(rest) > 0:   # a new timer from the earliest remaining row
            timers[key][side] = min(rest) + size[side] + min_cleanup_us + MS
        else:                        # removeExpiredRows: "earliestTimestamp > 0" or the cache is cleared
            rest.clear()

    def advance(value: int) -> None:
        nonlocal G
        if value <= G:
            return
        G = value
        while True:   # timers with time <= G, in order of time
            due = sorted((t, key, side) for key, ts in timers.items() for side, t in enumerate(ts)
                         if t is not None and t <= G)
            if not due:
                return
            time = due[0][0]
            for key in sorted({k for t, k, _ in due if t == time}):
                for side in (1, 0):   # one onTimer call: the right cache's timer, then the left one's
                    if timers[key][side] == time:
                        fire(key, side)

    def emit_watermark(side: int) -> None:
        if largest[side] == NEG_INF:
            return
        value = largest[side] - int(watermark[side]) - MS
        if value > emitted_wm[side]:
            emitted_wm[side] = value
            advance(min(emitted_wm))

    def process(x: RefTuple) -> None:
        side, other = x.stream, 1 - x.stream
        key = x.key
        ot = operator_time()
        upper = x.ts + size[side]          # the other side's rows qualify in [ts - size[other], ts + size[side]]
        lower = x.ts - size[other]
        joined = False
        if expiration[other] < upper:
            expiration[other] = ot - size[other] - MS
            cache = cache_of(key)[other]
            for t in list(cache):
                rows = cache[t]
                if lower <= t <= upper:
                    for entry in rows:
                        pair = (x.row, entry[0].row) if side == 0 else (entry[0].row, x.row)
                        out.emitted[pair] = now[0]
                        joined = True
                        entry[1] = True
                if t <= expiration[other]:
                    for y, was_joined in cache.pop(t):
                        if pad[other] and not was_joined:
                            out.padded[(y.stream, y.row)] = now[0]
        if ot < upper:
            cache_of(key)[side].setdefault(x.ts, []).append([x, joined])
            ts = timers.setdefault(key, [None, None])
            if ts[side] is None:
                ts[side] = x.ts + size[side] + min_cleanup_us + MS
        elif pad[side] and not joined:
            out.padded[(x.stream, x.row)] = now[0]

    next_tick = tuples[0].arrival + interval_us if tuples and interval_us else None
    for x in tuples:
        while next_tick is not None and next_tick <= x.arrival:
            emit_watermark(0)
            emit_watermark(1)
            next_tick += interval_us
        now[0] = index[(x.stream, x.row)]
        process(x)
        largest[x.stream] = max(largest[x.stream], x.ts)
        if not interval_us:
            emit_watermark(x.stream)
        out.cached.append(tuple(sum(len(rows) for c in caches.values() for rows in c[s].values()) for s in (0, 1)))
    if end_of_input and tuples:   # the bounded input ends: MAX_WATERMARK fires every timer, every row expires
        advance(END)
    return out
