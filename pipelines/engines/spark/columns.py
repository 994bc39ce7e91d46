"""The per-tuple columns the kernels read, and their trip to the executors.

:func:`tuple_table` (stream-major table of every tuple) and
:func:`attach_facts` (the progress facts joined onto it) feed CTR and the
in-process plane; :func:`kernel_inputs` is the per-stream form the
``none`` / ATR Spark tasks read.  Time compression: :func:`time_base`,
:func:`shrink_times` (int32 offsets through the JVM) and
:func:`restore_times` / :func:`absolute_times` (back to int64 in the task);
:func:`narrow_ids` sends ids as int32; :func:`pack_emitted` /
:func:`unpack_emitted` carry ``emitted`` as bits.
"""

from __future__ import annotations


import numpy as np

from ...policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC
from ...replay.candidates import Space
from ...replay.partitioned_progress import Facts
from .kernels import INT


def tuple_table(ts, arrival, ids, space: Space | None) -> tuple[dict, bool, int]:
    """stream, row, ts, arrival, kid, v* per tuple (stream-major order);
    ``ids``: the key ids (:func:`~streamjoin.pipelines.replay.candidates.key_ids`) or None."""
    n = len(ts)
    sizes = [len(t) for t in ts]
    tab = {
        "stream": np.concatenate([np.full(s, k, np.int32) for k, s in enumerate(sizes)]),
        "row": np.concatenate([np.arange(s, dtype=np.int32 if s < 2**31 else INT) for s in sizes]),
        "ts": np.concatenate([np.asarray(t, INT) for t in ts]),
        "arrival": np.concatenate([np.asarray(t, INT) for t in arrival]),
        "kid": np.concatenate(ids) if ids is not None else np.zeros(sum(sizes), INT),
    }
    dims = space.dims if space is not None else 0
    for d in range(dims):
        tab[f"v{d}"] = np.concatenate([space.vectors[k][:, d] for k in range(n)]).astype(np.float64)
    return tab, ids is not None, dims


def attach_facts(tab: dict, f: Facts, n: int) -> dict:
    """Join the progress facts onto the tuple table (by stream, row)."""
    cols = ["rel_us", "dropped"] + [f"H{k}" for k in range(n)]
    if f.replay is not None:
        # the driver's replay: the table is stream-major with rows in order, so
        # each tuple's arrival index is index_of, concatenated -- gather the
        # facts there instead of scattering them through (stream, row)
        a = np.concatenate(f.replay.index_of) if n else np.empty(0, np.int32)
        dec = f.decisions
        return dict(tab, a=a, **{c: (dec.horizon_at(int(c[1:]), a) if c[0] == "H" and dec.family == SYMMETRIC
                                     else np.asarray(f[c])[a]) for c in cols})
    sizes = np.bincount(tab["stream"], minlength=n)
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = offs[f["stream"]] + f["row"]
    out = dict(tab)
    N = len(tab["ts"])
    for c in ["a", *cols]:
        col = np.empty(N, dtype=np.asarray(f[c]).dtype)
        col[pos] = f[c]
        out[c] = col
    return out


def kernel_inputs(ts, ids, space: Space | None, dims: int, replay, dec, family: str) -> list[dict]:
    """Per stream, in row order, the columns the Spark kernel reads
    (:func:`join_streams` with ``timing=False``), straight from the driver's
    replay: ``a`` is the replay position of each row, facts are gathered there."""
    n = len(ts)
    kdt = np.int32 if ids is not None and max((int(i.max()) for i in ids if len(i)), default=0) < 2**31 else INT
    out = []
    for k in range(n):
        pos = replay.index_of[k]
        d = {"ts": np.asarray(ts[k], INT)}
        if ids is not None:
            d["kid"] = ids[k].astype(kdt, copy=False)
        for j in range(dims):
            d[f"v{j}"] = np.ascontiguousarray(space.vectors[k][:, j], dtype=np.float64)
        if family == SYMMETRIC:
            d["a"] = pos
            for j in range(n):
                d[f"H{j}"] = dec.horizon_at(j, pos)
        else:
            d["dropped"] = dec.dropped[pos]
        if family == MICROBATCH:       # spark-ss: batch and removal batch
            d["b"], d["rm"] = dec.batches.batch[pos], dec.batches.removal[pos]
        elif family == INTERVAL_JOIN:  # flink: watermark before the record, cleanup threshold
            d["a"], d["bf"], d["th"] = pos, dec.watermarks.before[pos], dec.watermarks.threshold[pos]
        elif family == SQL_INTERVAL_JOIN:   # flink-sql: cached, probes, first index that no longer finds it
            st = dec.sql
            d["a"], d["ca"], d["pr"], d["vu"] = pos, st.cached[pos], st.probes[pos], st.visible_until[pos]
        out.append(d)
    return out


I32 = np.iinfo(np.int32)


def time_base(per: list[dict]) -> int | None:
    """The smallest ``ts`` if every ``ts`` fits in int32 from it (a span of 35
    minutes of microseconds), else ``None``."""
    nonempty = [d["ts"] for d in per if len(d["ts"])]
    if not nonempty:
        return None
    base = min(int(t.min()) for t in nonempty)
    return base if max(int(t.max()) for t in nonempty) - base < I32.max else None


def shrink_times(per: list[dict], base: int | None) -> list[dict]:
    """``ts`` and ``H_k`` as int32 offsets from ``base`` (:func:`time_base`): 4
    bytes less per column and tuple on the way to the executors.

    ``H_k`` below the range is clipped to its bottom, which changes no
    comparison: the kernel only asks ``ts + W >= H`` with ``ts >= base``."""
    if base is None:
        return per
    out = []
    for d in per:
        e = dict(d)
        for c, v in d.items():
            if c == "ts":
                e[c] = (v - base).astype(np.int32)
            elif c[0] == "H":
                e[c] = np.clip(v - base, I32.min, I32.max).astype(np.int32)
        out.append(e)
    return out


def restore_times(per: list[dict], base: int | None) -> list[dict]:
    """Absolute int64 ``ts`` back (enumeration, ownership); the int32 offsets stay
    as ``ts32`` beside ``H_k`` (offsets too) for :func:`join_streams`' emission test."""
    if base is None:
        return per
    for d in per:
        d["ts32"] = d["ts"]
        d["ts"] = d["ts"].astype(INT) + base
    return per


def pack_emitted(out: dict) -> dict:
    """A kernel's result for the trip to the driver: ``emitted`` as bits."""
    em = out.pop("emitted")
    out["emitted"] = np.packbits(em)
    out["m"] = len(em)
    return out


def unpack_emitted(out: dict) -> dict:
    out["emitted"] = np.unpackbits(out["emitted"], count=out.pop("m")).astype(bool)
    return out


_IDS = ("row", "kid", "a")


def absolute_times(d: dict, base: int | None) -> dict:
    """Undo :func:`shrink_times` completely (``ts`` and ``H_k`` as absolute int64:
    the CTR kernels compare them with each other; a clipped ``H`` stays below every ``ts + W``)."""
    if base is None:
        return d
    return {c: (v.astype(INT) + base if c == "ts" or c[0] == "H" else v) for c, v in d.items()}


def narrow_ids(d: dict) -> dict:
    """Row, key and arrival-index columns as int32 when they fit (the trip to the executors)."""
    out = dict(d)
    for c in _IDS:
        v = d.get(c)
        if v is not None and v.dtype == INT and (not len(v) or (int(v.min()) >= I32.min and int(v.max()) <= I32.max)):
            out[c] = v.astype(np.int32)
    return out
