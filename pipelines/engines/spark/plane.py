"""The data plane: the kernels (:mod:`.kernels`) run over routed partitions.

* :func:`run_plane` -- in-process, no Spark (the tests use it to check the
  routing exhaustively).
* :func:`spark_plane` -- ``none`` / ATR as one Spark job: ``parallelize``
  places one record per partition in task ``p`` (its tuples as numpy
  columns, routed on the driver; with the files hand-off, the streams'
  columns, from which the task picks its own rows); ``mapPartitionsWithIndex``
  joins it; the combinations come back as one record.  No shuffle, no
  per-row conversion.
* :func:`ctr_spark` -- CTR: hop 1 joins each partition's stored tuples with
  the probers routed to it; later hops (``n >= 3``) move partial combinations
  with ``partitionBy(P, identity)``.

Bulk records travel through the hand-off (:mod:`.handoff`: in band, or as
files on the driver's host); only tokens go through Spark.  Ownership is what
makes it exact (theorems A and C): a tuple may be on many partitions, a
combination is produced on exactly one::

    ATR  combination (m @ 12, s @ 9), master segments [0,10) p0 | [10,20) p1
         s is on p0 and p1 (replicated); only p1 owns it (12 in [10, 20))
    CTR  prober = newest member; it meets each partner where the partner
         is *stored* (once), so the pair is produced where s is stored
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ...base.allocator import reuse_freed_memory
from ...policies import SYMMETRIC
from ...route import atr as atr_mod
from ...route import ctr as ctr_mod
from .kernels import INT, join_partition, join_streams, lean_partial_columns, initial_partials, distinct_small, extend, extend_probers, extend_with, emitted_partials, finish_partials, route_partials
from .columns import time_base, shrink_times, restore_times, pack_emitted, unpack_emitted, absolute_times, narrow_ids
from .handoff import Handoff
from .sink import Sink
from ...io.chunks import take_rows


@dataclass
class PlaneResult:
    combos: dict                       # r0.., emitted, emit_us, latency_us, last
    stats: dict[int, dict]             # per partition: n_in, n_cand, n_out, t_us (CTR: n_inter_in)
    shipped_tuples: int                # copies of original tuples sent to partitions
    shipped_intermediate: int = 0      # CTR partial results sent to another partition
    summaries: list | None = None      # results on the executors (.sink): one ResultSummary per task
    stored: np.ndarray | None = None   # ATR on Spark, counted CTR: (n, P) tuples of each stream each partition holds


def _concat(parts: list[dict], n: int) -> dict:
    cols = [f"r{k}" for k in range(n)] + ["emitted", "emit_us", "latency_us", "last"]
    if not parts:
        return {c: np.empty(0, bool if c == "emitted" else INT) for c in cols}
    return {c: np.concatenate([p[c] for p in parts]) for c in cols}


def _stat(stats, p, **kw):
    s = stats.setdefault(int(p), {"n_in": 0, "n_cand": 0, "n_out": 0, "t_us": 0.0})
    for k, v in kw.items():
        s[k] = s.get(k, 0) + v


def run_plane(tab: dict, n: int, W, family: str, router: str, plan, keyed: bool = False, dims: int = 0,
              threshold: float | None = None) -> PlaneResult:
    """Execute routing + kernels in plain Python, partition by partition."""
    N = len(tab["ts"])
    if router == "none":
        out = join_partition(tab, n, W, family, keyed, dims, threshold, None)
        stats = {0: out.pop("_stats")}
        return PlaneResult(_concat([out], n), stats, N)
    if router == "atr":
        idx_all, part_all = [], []
        for k in range(n):
            sel = np.flatnonzero(tab["stream"] == k)
            i, p = atr_mod.assign(plan, k, tab["ts"][sel])
            idx_all.append(sel[i])
            part_all.append(p)
        idx, part = np.concatenate(idx_all), np.concatenate(part_all)
        parts, stats = [], {}
        for p in range(plan.partitions):
            sel = idx[part == p]
            local = {c: v[sel] for c, v in tab.items()}
            out = join_partition(local, n, W, family, keyed, dims, threshold,
                                 lambda mt, p=p: atr_mod.owner_partition(plan, mt) == p)
            stats[p] = out.pop("_stats")
            parts.append(out)
        return PlaneResult(_concat(parts, n), stats, int(len(idx)))
    if router == "ctr":
        return _ctr_plane(tab, n, W, family, plan, keyed)
    raise AssertionError(router)


def _ctr_plane(tab, n, W, family, plan: ctr_mod.CtrPlan, keyed) -> PlaneResult:
    stats: dict[int, dict] = {}
    home = np.empty(len(tab["ts"]), INT)
    for k in range(n):
        sel = tab["stream"] == k
        home[sel] = ctr_mod.storage(plan, k, tab["ts"][sel])
    stored = {p: {c: v[home == p] for c, v in tab.items()} for p in range(plan.partitions)}
    for p in range(plan.partitions):
        _stat(stats, p, n_in=len(stored[p]["ts"]))
    shipped, inter = len(tab["ts"]), 0
    # hop 1: the prober at its storage host, plus copies to the cover
    waiting: dict[int, list[dict]] = {}
    slots = plan.slot(tab["ts"])
    for p in range(plan.partitions):
        sel = home == p
        P0 = initial_partials({c: v[sel] for c, v in tab.items()}, n, slots[sel])
        routed, dest = route_partials(P0, plan, 1, p)
        for d in np.unique(dest):
            waiting.setdefault(int(d), []).append({c: v[dest == d] for c, v in routed.items()})
        moved = int((dest != p).sum())
        shipped += moved
        for d in np.unique(dest[dest != p]):
            _stat(stats, d, n_in=int((dest == d).sum()))
    finals = []
    for hop in range(1, n):
        nxt: dict[int, list[dict]] = {}
        for p, plist in waiting.items():
            t0 = time.perf_counter()
            P = {c: np.concatenate([x[c] for x in plist]) for c in plist[0]}
            ext = extend(P, stored[p], hop, n, W, plan.orders, keyed)
            _stat(stats, p, n_cand=len(ext["ps"]), t_us=(time.perf_counter() - t0) * 1e6)
            if hop == n - 1:
                out = finish_partials(ext, n, W, family)
                _stat(stats, p, n_out=len(out["r0"]))
                finals.append(out)
            else:
                routed, dest = route_partials(ext, plan, hop + 1, p)
                inter += int((dest != p).sum())
                for d, c in enumerate(np.bincount(dest[dest != p], minlength=plan.partitions).tolist()):
                    if c:
                        _stat(stats, d, n_inter_in=c)   # intermediate results shipped to d
                for d in np.unique(dest):
                    nxt.setdefault(int(d), []).append({c: v[dest == d] for c, v in routed.items()})
        waiting = nxt
    return PlaneResult(_concat(finals, n), stats, shipped, inter)


def _identity(k):
    return k


def spark_plane(spark, per: list[dict], n: int, W, family: str, router: str, plan, keyed: bool, dims: int,
                threshold, handoff: Handoff = Handoff(), sink: Sink | None = None, alongside=None) -> PlaneResult:
    """``none`` / ``atr`` as one Spark job: one task per partition, no shuffle.

    Data moves as blocks of numpy columns, never as rows: partition ``p``'s
    tuples (per stream: :func:`kernel_inputs`' columns, plus ``row`` when routed) are
    one record, placed in task ``p`` by ``parallelize`` with one record per
    slice; its combinations come back as one record (``r0..r_{n-1}`` int32,
    ``emitted`` as bits).  No per-row conversion happens in the JVM, and the
    driver derives emission times itself (:func:`outcome_from`).  Both
    records travel through ``handoff`` (:mod:`.handoff`: in band, or as files
    on the driver's host when the executors share it).  Routing
    (which partition gets which tuples): with the files hand-off each
    stream's columns are written once and each task computes its own rows
    from the plan (:func:`~streamjoin.pipelines.route.atr.assign`: the plan is
    O(segments), the driver never gathers a partition); inline, the driver
    gathers each partition's rows.  Either way each task counts the rows of
    each stream it received (:attr:`PlaneResult.stored`).  ``per``:
    :func:`kernel_inputs`; emptied once handed off (the caller's list).

    ``alongside``: called (to start work on another thread) once the tasks'
    records are handed off, before the job runs.

    With ``sink`` (:mod:`.sink`) the combinations stay on the executors: each
    task writes its results and returns only its summary;
    :attr:`PlaneResult.summaries` holds them (``combos`` is empty).
    """
    sc = spark.sparkContext
    rdt = np.int32 if sum(len(d["ts"]) for d in per) < 2**31 else INT
    # files hand-off: each stream's columns are written once and every task picks
    # its own rows from the plan (O(segments)); inline, the driver routes
    on_tasks = router != "none" and handoff.directory is not None
    if router == "none":
        P = 1
        parts = [list(per)]
    elif on_tasks:
        P = plan.partitions
        parts = []
    else:
        P = plan.partitions
        parts = [[None] * n for _ in range(P)]
        for k in range(n):
            i, p = atr_mod.assign(plan, k, per[k]["ts"])
            for q in range(P):
                parts[q][k] = _take(per[k], i[p == q], rdt)
    shipped = int(sum(len(d["ts"]) for part in parts for d in part))
    # after routing, which reads absolute times; one base for every partition.
    # Only through the JVM (inline): as files, the tasks would pay fresh memory
    # to widen the times again
    base = time_base([d for part in parts for d in part]) if handoff.directory is None else None
    parts = [shrink_times(part, base) for part in parts]

    def task(index, records):
        reuse_freed_memory()  # as the CLI does for the driver: large temporaries reuse the heap
        for q, token in records:
            if on_tasks:   # this partition's rows of each stream (atr.assign, as the driver would)
                part = []
                for k, t in enumerate(token):
                    d = handoff.get(t)
                    i, p = atr_mod.assign(plan, k, d["ts"])
                    part.append(_take(d, i[p == q], rdt))
                    del d, i, p
            else:
                part = restore_times(handoff.get(token), base)
            own = None if router == "none" else (lambda mt, q=q: atr_mod.owner_partition(plan, mt) == q)
            out = join_streams(part, n, W, family, keyed, dims, threshold, own, timing=False)
            stats = out.pop("_stats")
            stats["_stored"] = [len(d["ts"]) for d in part]   # per stream (the report's mem and net use)
            if sink is not None:   # results written here, only the summary goes back
                yield q, stats, sink.finish(q, part, out)
                continue
            del part
            yield q, stats, handoff.put(pack_emitted(out))

    with ThreadPoolExecutor(max_workers=2) as pool:  # file writes release the GIL
        if on_tasks:
            streams = list(pool.map(handoff.put, per))
            records = [(q, streams) for q in range(P)]
        else:
            records = list(pool.map(lambda q: (q, handoff.put(parts[q])), range(P)))
    parts.clear()
    per.clear()   # the caller's list: its columns are in the records now
    if alongside is not None:   # driver work that overlaps the job (the engine's memory series)
        alongside()
    got = sc.parallelize(records, P).mapPartitionsWithIndex(task).collect()
    got.sort(key=lambda g: g[0])
    stored = np.array([g[1].pop("_stored") for g in got], dtype=np.int64).T.reshape(n, P)
    if on_tasks:
        shipped = int(stored.sum())   # each task's rows: the copies routed to it
    if sink is not None:
        return PlaneResult(_concat_emitted([], n), {int(g[0]): g[1] for g in got}, shipped,
                           summaries=[g[2] for g in got], stored=stored)
    return PlaneResult(_concat_emitted([unpack_emitted(handoff.get(g[2], consume=True)) for g in got], n),
                       {int(g[0]): g[1] for g in got}, shipped, stored=stored)


def _take(d: dict, sel: np.ndarray, rdt) -> dict:
    """Rows ``sel`` (ascending) of one stream's columns, with their ``row`` numbers."""
    out = {c: (take_rows(v, sel) if c == "payload" else v[sel]) for c, v in d.items()}
    out["row"] = sel.astype(rdt)
    return out


def _concat_emitted(parts: list[dict], n: int) -> dict:
    cols = [f"r{k}" for k in range(n)] + ["emitted"]
    if not parts:
        return {f"r{k}": np.empty(0, np.int32) for k in range(n)} | {"emitted": np.empty(0, bool)}
    if len(parts) == 1:
        return {c: parts[0][c] for c in cols}
    return {c: np.concatenate([p[c] for p in parts]) for c in cols}


def ctr_spark(spark, tab: dict, n: int, W, family: str, plan: ctr_mod.CtrPlan, keyed: bool,
              handoff: Handoff = Handoff()) -> PlaneResult:
    """CTR on Spark: partition ``d`` receives its stored tuples and the hop-1 probers
    routed to it (one record), extends them; later hops (``n >= 3``) move the
    partial combinations with ``partitionBy(P, identity)`` (stored tuples stay
    with their partition, passed on through the same shuffle).  Every bulk
    record (stored tuples, probers, partials, results) travels through
    ``handoff``; only its token goes through Spark."""
    sc = spark.sparkContext
    P = plan.partitions
    N = len(tab["ts"])
    slots = plan.slot(tab["ts"])
    stream = tab["stream"].astype(INT)
    home = plan.host[stream, slots]          # ctr_mod.storage, for every stream at once
    # hop 1: each tuple probes from its storage host and the cover of its partner segments
    # (hosts on two threads: the sorts and gathers release the GIL)
    def hop1_copies(h):
        sel = np.flatnonzero(home == h)
        routed, dest = route_partials({"ps": stream[sel], "pj": slots[sel], "i": sel}, plan, 1, h)
        return routed["i"], dest

    with ThreadPoolExecutor(max_workers=2) as pool:
        copies = list(pool.map(hop1_copies, range(P)))
    pi, pd = np.concatenate([c[0] for c in copies]), np.concatenate([c[1] for c in copies])
    del copies
    moved = pd != home[pi]
    stats: dict[int, dict] = {}
    counts = np.bincount(home, minlength=P)
    moved_to = np.bincount(pd[moved], minlength=P)
    for p in range(P):
        _stat(stats, p, n_in=int(counts[p]) + int(moved_to[p]))
    shipped = N + int(moved.sum())
    # what extend() reads (CTR checks distances on the driver; no emission times: timing=False)
    cols = ["stream", "row", "ts", "kid", "a"] + ([f"H{k}" for k in range(n)] if family == SYMMETRIC else ["dropped"])
    # every tuple probes where it is stored (dest() always includes the storage host):
    # partition d gets its stored tuples once, plus the probers moved in from elsewhere.
    # Ids travel as int32 (the kernel reads either width); through the JVM (inline)
    # times too, as int32 offsets -- as files the tasks would have to widen those again
    inline = handoff.directory is None
    base = time_base([{"ts": tab["ts"]}]) if inline else None
    moved_in = [np.sort(pi[(pd == d) & moved]) for d in range(P)]
    del pi, pd

    def record(d):
        st = np.flatnonzero(home == d)
        return d, handoff.put(tuple(narrow_ids(shrink_times([{c: tab[c][sel] for c in cols}], base)[0])
                                    for sel in (st, moved_in[d])))

    with ThreadPoolExecutor(max_workers=2) as pool:  # gathers and file writes release the GIL
        records = list(pool.map(record, range(P)))
    moved_in.clear()

    def hop_out(d, hop, stored, ext, t0, part=0):
        """After extending at ``d`` for ``hop``: results (last hop) or partials
        for the next.  ``part``: which of the partition's prober sets ``ext``
        came from (the stored tuples go on to the next hop with part 0)."""
        if hop == n - 1:
            res = {f"r{k}": ext[f"r{k}"].astype(np.int32 if N < 2**31 else INT, copy=False) for k in range(n)}
            res["emitted"] = ext["emitted"] if "emitted" in ext else emitted_partials(ext, n, W, family)
            m = len(res["r0"])
            yield d, ("R", d, handoff.put(pack_emitted(res)), {"n_cand": m, "n_out": m, "part": part,
                                                        "t_us": (time.perf_counter() - t0) * 1e6})
            return
        routed, dest = route_partials(ext, plan, hop + 1, d)
        yield d, ("T", d, None, {"n_cand": len(ext["amax"]), "t_us": (time.perf_counter() - t0) * 1e6,
                                 "inter": int((dest != d).sum()),
                                 "inter_to": np.bincount(dest[dest != d], minlength=P).tolist()})
        if part == 0:
            yield d, ("S", d, handoff.put(stored), None)
        for e in distinct_small(dest):
            yield int(e), ("P", d, handoff.put({c: v[dest == e] for c, v in routed.items()}), part)

    def first(index, recs):
        reuse_freed_memory()  # as the driver does: the kernel's temporaries reuse the heap
        for d, token in recs:
            stored, moved_in = handoff.get(token)
            # ids stay as they came (int32 when narrowed): the kernel widens the
            # few values it packs into sort keys, a block at a time
            stored, moved_in = (absolute_times(x, base) for x in (stored, moved_in))
            # every stored tuple probes here, and so do the probers moved in: each
            # set is extended and sent on by itself, with no concatenated copy of
            # their columns or of their extensions (fresh memory is what two
            # concurrent tasks pay most for, docs/performance.md)
            for part, probers in enumerate((stored, moved_in)):
                t0 = time.perf_counter()
                ext = extend_probers(probers, stored, n, W, plan.orders, keyed, plan, family if n == 2 else None,
                                     keep=lean_partial_columns(n, family, n == 2))
                yield from hop_out(d, 1, stored, ext, t0, part)
                del ext

    def later(hop):
        def run(index, pairs):
            reuse_freed_memory()
            stored, partials, passed = None, [], []
            for _, (kind, src, payload, st) in pairs:
                if kind == "S":
                    stored = handoff.get(payload)
                elif kind == "P":
                    partials.append(((src, st), handoff.get(payload)))
                else:
                    passed.append((kind, src, payload, st))
            for item in passed:                     # earlier hops' statistics ride along
                yield index, item
            t0 = time.perf_counter()
            partials.sort(key=lambda x: x[0])        # deterministic order: by sending partition, part
            if partials:
                Pd = {c: np.concatenate([x[1][c] for x in partials]) for c in partials[0][1]}
            else:
                Pd = {c: np.empty(0, bool if c == "drop_any" else INT) for c in lean_partial_columns(n, family, False)}
            if stored is None:
                stored = {c: np.empty(0, tab[c].dtype) for c in cols}
            ext = extend_with(lambda c, idx, ps: Pd[c][idx], Pd["ps"], stored, hop, n, W, plan.orders, keyed,
                          lean_partial_columns(n, family, hop == n - 1), family if hop == n - 1 else None)
            yield from hop_out(index, hop, stored, ext, t0)
        return run

    rdd = sc.parallelize(records, P).mapPartitionsWithIndex(first)
    del records
    for hop in range(2, n):
        rdd = rdd.partitionBy(P, _identity).mapPartitionsWithIndex(later(hop))
    got = [x[1] for x in rdd.collect()]
    inter = 0
    finals = []
    for kind, d, payload, st in got:
        if kind == "R":
            finals.append(((d, st["part"]), unpack_emitted(handoff.get(payload, consume=True))))
            _stat(stats, d, n_cand=int(st["n_cand"]), n_out=int(st["n_out"]), t_us=float(st["t_us"]))
        elif kind == "T":
            _stat(stats, d, n_cand=int(st["n_cand"]), t_us=float(st["t_us"]))
            inter += int(st["inter"])
            for e, c in enumerate(st["inter_to"]):
                if c:
                    _stat(stats, e, n_inter_in=int(c))   # intermediate results shipped to e
    finals.sort(key=lambda x: x[0])
    return PlaneResult(_concat_emitted([x[1] for x in finals], n), stats, shipped, inter)
