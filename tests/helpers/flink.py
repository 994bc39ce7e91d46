"""``flink`` helpers shared by the property test and the real-Flink test:
random disordered inputs on a millisecond grid and the local engine's answer in
the reference's shape (:class:`~streamjoin.pipelines.replay.reference.IntervalJoinReference`)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import JOIN_TYPES, PolicySpec
from streamjoin.pipelines.replay.progress import build_replay
from streamjoin.pipelines.replay.reference import IntervalJoinReference, RefTuple, brute_force_truth, replay_order
from streamjoin.pipelines.replay.sql_interval_join import emitted_pairs, memory, sql_state
from streamjoin.pipelines.replay.sql_reference import SqlIntervalJoinReference, replay_sql_interval_join

from .adapters import key_frames
from .strategies import ref_streams

MS = 1000


@st.composite
def flink_problems(draw, max_rows: int = 10, idle: bool = True, sql: bool = False):
    """Two streams with heavy disorder, event times in whole ms (Flink's unit),
    arrivals at any µs, windows and out-of-orderness in whole ms, watermarks per
    record or periodic; with periodic ones, often an idleness timeout.  ``sql``:
    a ``flink-sql`` policy instead (event times > 0, no idleness, any join type)."""
    base = draw(st.sampled_from([MS if sql else 0, 5_000_000, 1_700_000_000_000_000]))
    keyed = draw(st.booleans())
    streams = ref_streams(draw, 2, max_rows, keyed=keyed, unit=MS, base=base, jitter=999)
    windows = tuple(draw(st.integers(0, 12)) * MS for _ in range(2))
    interval = draw(st.sampled_from([0, 0, 1, 500, 3 * MS, 7 * MS]))
    idleness = draw(st.sampled_from([None, 1, 700, 2 * MS, 5 * MS, 20 * MS])) if interval and idle and not sql else None
    policy = PolicySpec("flink-sql" if sql else "flink", watermark=tuple(draw(st.integers(0, 12)) * MS for _ in range(2)),
                        watermark_interval_us=interval, idleness_us=idleness,
                        join=draw(st.sampled_from(JOIN_TYPES)) if sql else "inner")
    return streams, windows, policy


def local_flink(streams: list[list[RefTuple]], windows, policy: PolicySpec) -> IntervalJoinReference:
    """The local engine's ``flink`` answer, as the reference reports it."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, key_frames(streams), windows, policy)
    em = out.emission
    pairs = list(zip(*[r.tolist() for r in out.combos.rows]))
    emitted = {p: (e, lat) for p, m, e, lat in zip(pairs, em.emitted.tolist(), em.emit_us.tolist(),
                                                   em.latency_us.tolist()) if m} if pairs else {}
    replay = out.replay
    order = list(zip(replay.stream.tolist(), replay.row.tolist()))
    dropped = {order[a] for a in np.flatnonzero(out.decisions.dropped).tolist()}
    buffered = list(zip(out.memory[0].tolist(), out.memory[1].tolist())) if replay.N else []
    return IntervalJoinReference(truth=set(pairs), emitted=emitted, dropped=dropped, buffered=buffered)


def local_flink_sql(streams: list[list[RefTuple]], windows, policy: PolicySpec) -> SqlIntervalJoinReference:
    """The local engine's ``flink-sql`` answer, as the reference reports it: each
    emitted pair and padded row with the arrival index that emitted it (the engine
    gives a time; the index is the reference's, checked to have that arrival time
    and, for pairs, latency 0)."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, key_frames(streams), windows, policy)
    em, replay = out.emission, out.replay
    assert not out.decisions.dropped.any()                    # no late drop in Flink SQL
    pairs = list(zip(*[r.tolist() for r in out.combos.rows]))
    emitted = {p: int(last) for p, m, last, lat, e in zip(pairs, em.emitted.tolist(), em.last.tolist(),
                                                          em.latency_us.tolist(), em.emit_us.tolist())
               if m and lat == 0 and e == replay.arrival[last]} if pairs else {}
    assert len(emitted) == int(np.count_nonzero(em.emitted))
    order = list(zip(replay.stream.tolist(), replay.row.tolist()))
    padded = {}
    for part in em.outer or []:
        for a, e, lat in zip(part.index.tolist(), part.emit_us.tolist(), part.latency_us.tolist()):
            assert lat == e - replay.arrival[a] >= 0
            padded[order[a]] = e                               # a time: compared as such
    cached = list(zip(out.memory[0].tolist(), out.memory[1].tolist())) if replay.N else []
    return SqlIntervalJoinReference(truth=set(pairs), emitted=emitted, padded=padded, cached=cached)


def reference_flink_sql(streams, windows, policy: PolicySpec, min_cleanup_us: int = 0) -> SqlIntervalJoinReference:
    """:func:`replay_sql_interval_join` for ``policy``, padded rows given by the arrival
    time of the record that emitted them (as :func:`local_flink_sql` reports them)."""
    ref = replay_sql_interval_join(streams, windows, policy.watermark, policy.watermark_interval_us, policy.join,
                                   min_cleanup_us)
    arrival = [x.arrival for x in replay_order(streams)]
    ref.padded = {k: arrival[a] for k, a in ref.padded.items()}
    return ref


def columns_flink_sql(streams, windows, policy: PolicySpec, min_cleanup_us: int = 0) -> SqlIntervalJoinReference:
    """The column form itself (:func:`sql_state`, any ``min_cleanup_us``), in the
    reference's shape: pairs and padded rows with the arrival index that emitted them."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    replay = build_replay(ts, [np.array([t.arrival for t in s], dtype=np.int64) for s in streams])
    keys = [np.array([t.key[0] if t.key else 0 for t in s], dtype=np.int64) for s in streams]
    state = sql_state(replay, windows, policy, keys, min_cleanup_us=min_cleanup_us)
    at = {(x.stream, x.row): a for a, x in enumerate(replay_order(streams))}
    truth = brute_force_truth(streams, windows)
    pairs = sorted(truth)
    a0 = np.array([at[(0, p[0])] for p in pairs], dtype=np.int64)
    a1 = np.array([at[(1, p[1])] for p in pairs], dtype=np.int64)
    mask = emitted_pairs(state, a0, a1)
    emitted = {p: int(max(x, y)) for p, x, y, m in zip(pairs, a0, a1, mask) if m}
    matched = set(a0[mask].tolist()) | set(a1[mask].tolist())
    padded = {(s, r): int(state.left_at[a]) for (s, r), a in at.items()
              if s in policy.padded_sides and a not in matched}
    mem = memory(state, replay.stream, 2)
    return SqlIntervalJoinReference(truth=truth, emitted=emitted, padded=padded,
                                    cached=list(zip(mem[0].tolist(), mem[1].tolist())))
