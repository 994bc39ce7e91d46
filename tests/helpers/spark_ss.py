"""``spark-ss`` helpers shared by the property test and the real-Spark test:
random disordered inputs on a millisecond scale and the local engine's answer
in the reference's shape (:class:`~streamjoin.pipelines.replay.reference.MicroBatchReference`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.policies.spark_ss import file_arrivals
from streamjoin.pipelines.replay import microbatch
from streamjoin.pipelines.replay.reference import MicroBatchReference, RefTuple

from .adapters import key_frames
from .strategies import ref_streams

MS = 1000


@st.composite
def spark_problems(draw, max_rows: int = 10, origin=st.sampled_from([0, 5_000, 1_000_000])):
    """Two streams with heavy disorder on a scale of milliseconds, windows, and
    ``spark-ss`` settings (watermark in whole ms, any trigger, any join type).  ``origin``
    shifts every time (0 exercises Spark's floor of the watermark at 0)."""
    unit = draw(st.sampled_from([250, 1000, 1500]))      # µs per step of event time
    base = draw(origin)
    keyed = draw(st.booleans())
    streams = ref_streams(draw, 2, max_rows, keyed=keyed, unit=unit, base=base, jitter=999)
    windows = tuple(draw(st.integers(0, 12)) * unit + draw(st.sampled_from([0, 0, 500])) for _ in range(2))
    policy = PolicySpec("spark-ss", watermark=tuple(draw(st.integers(0, 12)) * MS for _ in range(2)),
                        trigger_us=draw(st.sampled_from([1, 2, 3, 7])) * unit,
                        watermark_policy=draw(st.sampled_from(["min", "max"])),
                        join=draw(st.sampled_from(["inner", "left", "right", "full"])))
    return streams, windows, policy


@st.composite
def spark_file_problems(draw, max_rows: int = 10):
    """As :func:`spark_problems`, with each stream's rows cut into files (``(path,
    mtime µs, rows)``) and ``--trigger-files N``: up to 5 files per stream, some
    empty, modification times that tie within a millisecond (then the path
    decides) or exactly."""
    streams, windows, policy = draw(spark_problems(max_rows))
    files = []
    for i, rows in enumerate(streams):
        count = draw(st.integers(1, 5))
        owner = [draw(st.integers(0, count - 1)) for _ in rows]
        mtimes = [T_FILES + draw(st.integers(0, 6)) * MS + draw(st.sampled_from([0, 0, 1, 999])) for _ in range(count)]
        names = draw(st.permutations([f"part-{k}" for k in range(count)]))
        files.append([(names[k], mtimes[k], [x for x, o in zip(rows, owner) if o == k]) for k in range(count)])
    per_batch = draw(st.integers(1, 3))
    return files, windows, replace(policy, trigger_us=None, trigger_files=per_batch)


#: file modification times of :func:`spark_file_problems` (µs): a calendar time
T_FILES = 1_700_000_000_000_000


def local_spark_ss_files(files, windows, policy: PolicySpec) -> MicroBatchReference:
    """The local engine's ``--trigger-files`` answer: the rows' arrivals are their
    batches' times (:func:`~streamjoin.pipelines.policies.spark_ss.file_arrivals`)."""
    streams = []
    file_of_row, mtimes, paths = [], [], []
    for fs in files:
        rows = sorted(((x, k) for k, (_, _, xs) in enumerate(fs) for x in xs), key=lambda p: p[0].row)
        streams.append([x for x, _ in rows])
        file_of_row.append(np.array([k for _, k in rows], dtype=np.int64))
        mtimes.append([m for _, m, _ in fs])
        paths.append([p for p, _, _ in fs])
    arrivals, times = file_arrivals(file_of_row, mtimes, paths, policy.trigger_files)
    streams = [[replace(x, arrival=int(a)) for x, a in zip(s, arr)] for s, arr in zip(streams, arrivals)]
    return local_spark_ss(streams, windows, replace(policy, batch_times_us=tuple(int(t) for t in times)))


def local_spark_ss(streams: list[list[RefTuple]], windows, policy: PolicySpec) -> MicroBatchReference:
    """The local engine's ``spark-ss`` answer, as the reference reports it."""
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    out = join(ts, arrival, key_frames(streams), windows, policy)
    em = out.emission
    rows = [r.tolist() for r in out.combos.rows]
    pairs = list(zip(*rows))
    emitted = {p: (b, e, lat) for p, m, b, e, lat in zip(pairs, em.emitted.tolist(), em.batch.tolist(),
                                                           em.emit_us.tolist(), em.latency_us.tolist()) if m}
    d, replay = out.decisions, out.replay
    order = list(zip(replay.stream.tolist(), replay.row.tolist()))
    dropped = {order[a] for a in np.flatnonzero(d.dropped).tolist()}
    outer = {} if em.outer is None else {
        order[a]: (b, e, lat) for p in em.outer for a, b, e, lat in zip(p.index.tolist(), p.batch.tolist(),
                                                                         p.emit_us.tolist(), p.latency_us.tolist())}
    mb = d.batches
    batches = np.arange(mb.batches)
    state = microbatch.state_rows(mb, d.dropped, replay.stream, 2, batches)
    watermark = np.zeros(mb.batches, np.int64)
    # an empty batch runs with the next occupied batch's watermark
    nxt = np.searchsorted(mb.occupied, batches, side="left")
    watermark[:] = mb.watermark_ms[np.minimum(nxt, len(mb.occupied) - 1)] if len(mb.occupied) else 0
    return MicroBatchReference(truth=set(pairs), emitted=emitted, outer=outer, dropped=dropped,
                               state_rows=list(zip(state[0].tolist(), state[1].tolist())),
                               watermarks=watermark.tolist())
