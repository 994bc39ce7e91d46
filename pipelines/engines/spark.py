"""The Spark engine: the same answer as the local engine, spread over partitions.

Stages (each a Spark job; the driver sees only small summaries until the
report stage)::

    load (driver, polars)  ->  tuples DataFrame (stream, row, ts, arrival, key id, vectors)
      -> progress pass (pipelines/sparkprogress.py): range-partitioned scans in
         arrival order with carried-in prefix maxima; every tuple now carries
         a, rel_us, dropped, H_0..H_{n-1}          (the seed-004 coordination clock)
      -> routing plan (driver, from a per-stream rate histogram): none | atr | ctr
      -> data plane:
           none: one partition joins everything
           atr : tuples replicated to partitions (route/atr.py), groupBy(part)
                 .applyInArrow(enumerate_truth on the partition's tuples,
                 keep combinations whose owner segment lives here, closed-form emission)
           ctr : tuples stored once + probe copies (route/ctr.py); n-1 hops of
                 cogroup(stored, partials).applyInArrow(band extension); the last
                 hop applies the closed-form emission
      -> combinations (row indexes, emission) collected for the report;
         results written by Spark as Parquet (a directory of part files)

Ownership is what makes it exact (theorems A and C): a tuple may be on many
partitions, a combination is produced on exactly one::

    ATR  combination (m @ 12, s @ 9), master segments [0,10) p0 | [10,20) p1
         s is on p0 and p1 (replicated); only p1 owns it (12 in [10, 20))
    CTR  prober = newest member; it meets each partner where the partner
         is *stored* (once), so the pair is produced where s is stored

Emission needs no global state inside a partition: for the symmetric family a
combination is emitted iff every member ``x`` other than the last-arriving
``y`` has ``x.ts + W >= H_{s(x)}(a_y)`` (``y`` carries its ``H`` row); for the
sorting family iff no member was dropped, at ``max(member rel_us)``.

:func:`run_plane` executes the same kernels without Spark (the tests use it
to check the routing exhaustively); :func:`spark_join` runs them on Spark.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ..candidates import Combos, Space, enumerate_truth, key_ids
from ..emit import Emission
from ..plan import Plan, probe_order
from ..policies import SORTING, SYMMETRIC, PolicySpec
from ..progress import memory_per_stream
from .. import sparkprogress as sp
from ..route import atr as atr_mod
from ..route import ctr as ctr_mod
from ..route import histogram, imbalance, theorem_b, theorem_d
from .local import JoinOutcome

INT = np.int64


# ------------------------------------------------------------------ kernels

def finish(family: str, W, t, a, amax, arrmax, relmax, drop_any, hrow):
    """Closed-form emission (SPEC §4) from the facts a combination carries."""
    m = len(amax)
    if family == SYMMETRIC:
        emitted = np.ones(m, dtype=bool)
        for k in range(len(t)):
            emitted &= (a[k] == amax) | (t[k] + int(W[k]) >= hrow[k])
        return emitted, arrmax.copy(), np.zeros(m, INT)
    return ~drop_any, relmax.copy(), relmax - arrmax


def _by_stream(tab: dict, n: int) -> list[dict]:
    out = []
    for k in range(n):
        sel = np.flatnonzero(tab["stream"] == k)
        sel = sel[np.argsort(tab["row"][sel], kind="stable")]
        out.append({c: v[sel] for c, v in tab.items()})
    return out


def join_partition(tab: dict, n: int, W, family: str, keyed: bool, dims: int, threshold: float | None,
                   owned: Callable[[list[np.ndarray]], np.ndarray] | None, order=None) -> dict:
    """ATR / none kernel: the local engine's enumeration on this partition's tuples,
    the combinations this partition owns, their emission."""
    t0 = time.perf_counter()
    per = _by_stream(tab, n)
    ts = [p["ts"] for p in per]
    keys = [pl.DataFrame({"__key0": p["kid"]}) for p in per] if keyed else [None] * n
    space = Space([np.column_stack([p[f"v{d}"] for d in range(dims)]) if dims else None for p in per], threshold) \
        if dims else None
    combos = enumerate_truth(ts, keys, list(W), space=space, order=order)
    cand = len(combos)
    mt = [ts[k][combos.rows[k]] for k in range(n)]
    if owned is not None and cand:
        keep = owned(mt)
        combos = combos.filter(keep)
        mt = [x[keep] for x in mt]
    rows = [combos.rows[k].astype(INT) for k in range(n)]
    a = [per[k]["a"][rows[k]] for k in range(n)]
    m = len(rows[0]) if n else 0
    amax = np.maximum.reduce(a) if m else np.empty(0, INT)
    arrmax = np.maximum.reduce([per[k]["arrival"][rows[k]] for k in range(n)]) if m else np.empty(0, INT)
    relmax = np.maximum.reduce([per[k]["rel_us"][rows[k]] for k in range(n)]) if m else np.empty(0, INT)
    drop_any = np.logical_or.reduce([per[k]["dropped"][rows[k]].astype(bool) for k in range(n)]) if m else np.empty(0, bool)
    hrow = [np.zeros(m, INT) for _ in range(n)]
    for k in range(n):
        is_last = a[k] == amax
        for j in range(n):
            hrow[j] = np.where(is_last, per[k][f"H{j}"][rows[k]], hrow[j])
    emitted, emit_us, latency = finish(family, W, mt, a, amax, arrmax, relmax, drop_any, hrow)
    out = {f"r{k}": per[k]["row"][rows[k]].astype(INT) for k in range(n)}
    out.update(emitted=emitted, emit_us=emit_us.astype(INT), latency_us=latency.astype(INT), last=amax.astype(INT))
    out["_stats"] = {"n_in": int(len(tab["ts"])), "n_cand": int(cand), "n_out": int(m), "t_us": (time.perf_counter() - t0) * 1e6}
    return out


def partial_columns(n: int) -> list[str]:
    return (["ps", "pj"] + [f"r{k}" for k in range(n)] + [f"t{k}" for k in range(n)] + [f"a{k}" for k in range(n)]
            + ["kid", "amax", "arrmax", "relmax", "drop_any"] + [f"h{k}" for k in range(n)])


def initial_partials(tab: dict, n: int, slots: np.ndarray) -> dict:
    """Each tuple as a one-member partial combination (the prober)."""
    m = len(tab["ts"])
    s = tab["stream"].astype(INT)
    out = {"ps": s, "pj": slots.astype(INT)}
    for k in range(n):
        mine = s == k
        out[f"r{k}"] = np.where(mine, tab["row"], -1).astype(INT)
        out[f"t{k}"] = np.where(mine, tab["ts"], 0).astype(INT)
        out[f"a{k}"] = np.where(mine, tab["a"], -1).astype(INT)
    out["kid"] = tab["kid"].astype(INT)
    out["amax"] = tab["a"].astype(INT)
    out["arrmax"] = tab["arrival"].astype(INT)
    out["relmax"] = tab["rel_us"].astype(INT)
    out["drop_any"] = tab["dropped"].astype(bool)
    for k in range(n):
        out[f"h{k}"] = tab[f"H{k}"].astype(INT)
    assert len(out["ps"]) == m
    return out


def extend(partials: dict, stored: dict, hop: int, n: int, W, orders, keyed: bool) -> dict:
    """CTR hop kernel: extend partial combinations by the stored tuples of the
    next stream in each prober's probe order, within the band of every member
    (sorted ``(key, ts)`` ranges, as :func:`~streamjoin.pipelines.candidates.enumerate_sorted`)."""
    outs = []
    for ps in np.unique(partials["ps"]):
        sel = np.flatnonzero(partials["ps"] == ps)
        P = {c: v[sel] for c, v in partials.items()}
        k = orders[int(ps)][hop - 1]
        S = {c: v[stored["stream"] == k] for c, v in stored.items()}
        if not len(S["ts"]) or not len(sel):
            continue
        ty = P[f"t{ps}"]
        lo = ty - int(W[k])
        hi = ty if k < ps else ty - 1      # the prober is the newest member (ties: larger stream)
        for m in range(n):
            present = P[f"r{m}"] >= 0
            hi = np.where(present, np.minimum(hi, P[f"t{m}"] + int(W[m])), hi)
        base = int(min(S["ts"].min(), lo.min())) - 1
        span = int(max(S["ts"].max(), hi.max()) - base) + 2
        kid_s = S["kid"] if keyed else np.zeros(len(S["ts"]), INT)
        kid_p = P["kid"] if keyed else np.zeros(len(sel), INT)
        code = kid_s * span + (S["ts"] - base)
        order = np.argsort(code, kind="stable")
        vs = code[order]
        qlo = kid_p * span + (lo - base)
        qhi = kid_p * span + (hi - base)
        a = np.searchsorted(vs, qlo, side="left")
        b = np.searchsorted(vs, qhi, side="right")
        cnt = np.where(hi >= lo, np.maximum(b - a, 0), 0)
        parent = np.repeat(np.arange(len(sel)), cnt)
        pos = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(a, cnt)
        x = order[pos]
        new = {c: v[parent] for c, v in P.items()}
        new[f"r{k}"] = S["row"][x].astype(INT)
        new[f"t{k}"] = S["ts"][x].astype(INT)
        new[f"a{k}"] = S["a"][x].astype(INT)
        later = S["a"][x] > new["amax"]
        new["amax"] = np.maximum(new["amax"], S["a"][x])
        new["arrmax"] = np.maximum(new["arrmax"], S["arrival"][x])
        new["relmax"] = np.maximum(new["relmax"], S["rel_us"][x])
        new["drop_any"] = new["drop_any"] | S["dropped"][x].astype(bool)
        for j in range(n):
            new[f"h{j}"] = np.where(later, S[f"H{j}"][x], new[f"h{j}"])
        outs.append(new)
    if not outs:
        return {c: np.empty(0, bool if c == "drop_any" else INT) for c in partial_columns(n)}
    return {c: np.concatenate([o[c] for o in outs]) for c in partial_columns(n)}


def finish_partials(P: dict, n: int, W, family: str) -> dict:
    t = [P[f"t{k}"] for k in range(n)]
    a = [P[f"a{k}"] for k in range(n)]
    hrow = [P[f"h{k}"] for k in range(n)]
    emitted, emit_us, latency = finish(family, W, t, a, P["amax"], P["arrmax"], P["relmax"], P["drop_any"], hrow)
    out = {f"r{k}": P[f"r{k}"] for k in range(n)}
    out.update(emitted=emitted, emit_us=emit_us, latency_us=latency, last=P["amax"])
    return out


def route_partials(P: dict, plan: ctr_mod.CtrPlan, hop: int, at: int) -> tuple[dict, np.ndarray]:
    """Copies of partials for ``hop``: ``at`` itself plus the set cover (rows exploded, dest column)."""
    keys = P["ps"] * (plan.slots + 1) + P["pj"]
    idx, dest = [], []
    for key in np.unique(keys):
        sel = np.flatnonzero(keys == key)
        ps, pj = divmod(int(key), plan.slots + 1)
        for d in plan.dest(ps, pj, hop, at):
            idx.append(sel)
            dest.append(np.full(len(sel), d, INT))
    if not idx:
        return {c: v[:0] for c, v in P.items()}, np.empty(0, INT)
    ii = np.concatenate(idx)
    return {c: v[ii] for c, v in P.items()}, np.concatenate(dest)


# ------------------------------------------------------------------ plane (no Spark)

@dataclass
class PlaneResult:
    combos: dict                       # r0.., emitted, emit_us, latency_us, last
    stats: dict[int, dict]             # per partition: n_in, n_cand, n_out, t_us
    shipped_tuples: int                # copies of original tuples sent to partitions
    shipped_intermediate: int = 0      # CTR partial results sent to another partition


def _concat(parts: list[dict], n: int) -> dict:
    cols = [f"r{k}" for k in range(n)] + ["emitted", "emit_us", "latency_us", "last"]
    if not parts:
        return {c: np.empty(0, bool if c == "emitted" else INT) for c in cols}
    return {c: np.concatenate([p[c] for p in parts]) for c in cols}


def _stat(stats, p, **kw):
    s = stats.setdefault(int(p), {"n_in": 0, "n_cand": 0, "n_out": 0, "t_us": 0.0})
    for k, v in kw.items():
        s[k] += v


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
                for d in np.unique(dest):
                    nxt.setdefault(int(d), []).append({c: v[dest == d] for c, v in routed.items()})
        waiting = nxt
    return PlaneResult(_concat(finals, n), stats, shipped, inter)


# ------------------------------------------------------------------ planning

@dataclass
class RouteSettings:
    router: str = "none"
    partitions: int = 1
    segment_us: int | None = None
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    adapt: bool = False


def default_segment(ts: Sequence[np.ndarray], windows, partitions: int) -> int:
    """About 16 segments per partition, never shorter than the largest window."""
    nonempty = [t for t in ts if len(t)]
    if not nonempty:
        return 1
    span = max(int(t.max()) for t in nonempty) - min(int(t.min()) for t in nonempty) + 1
    return max(1, int(span // (16 * max(partitions, 1))), int(max(windows, default=0)))


def make_plans(ts, windows, settings: RouteSettings, order: Sequence[int], selectivity: dict | None = None):
    """Plan ATR and/or CTR (both for ``auto``) and their predicted overheads."""
    hist = histogram(ts)
    T = settings.segment_us or default_segment(ts, windows, settings.partitions)
    rates = hist.rates()
    out = {}
    if settings.router in ("atr", "auto"):
        p = atr_mod.plan(hist, windows, T, settings.partitions, settings.weights, adapt=settings.adapt)
        J = len(p.start)
        pred = sum(theorem_b(rates, list(windows), int(p.master[j]), p.lengths[j]) for j in range(J)) / max(J, 1)
        out["atr"] = (p, pred)
    if settings.router in ("ctr", "auto"):
        p = ctr_mod.plan(hist, windows, T, settings.partitions, order, settings.weights)
        M, Mint = _ctr_multiplicity(p, hist)
        o, o_star = theorem_d(rates, list(windows), M, p.orders, selectivity or {}, Mint)
        out["ctr"] = (p, o, o_star)
    return out, T, rates


def _ctr_multiplicity(p: ctr_mod.CtrPlan, hist) -> tuple[list[float], list[list[float]]]:
    """Average hosts per tuple (``M_i``: storage + hop-1 probe copies) and per
    intermediate hop (``M_ik``: copies sent elsewhere), weighted by segment sizes."""
    n = p.n
    M, Mint = [], []
    for i in range(n):
        tot, cnt = 0.0, 0.0
        inter = [0.0] * max(n - 2, 0)
        for j in range(p.slots):
            c = float(hist.count(i, p.base + j * p.T, p.base + (j + 1) * p.T))
            if c == 0:
                continue
            at = int(p.host[i, j])
            tot += c * len(p.dest(i, j, 1, at))
            cnt += c
            for h in range(2, n):
                inter[h - 2] += c * (len(p.dest(i, j, h, at)) - 1)
        M.append(tot / cnt if cnt else 1.0)
        Mint.append([x / cnt if cnt else 0.0 for x in inter])
    return M, Mint


# ------------------------------------------------------------------ inputs

def tuple_table(ts, arrival, keys, space: Space | None) -> tuple[dict, bool, int]:
    """stream, row, ts, arrival, kid, v* per tuple (stream-major order)."""
    n = len(ts)
    sizes = [len(t) for t in ts]
    ids = key_ids(list(keys)) if keys is not None else None
    tab = {
        "stream": np.concatenate([np.full(s, k, np.int32) for k, s in enumerate(sizes)]),
        "row": np.concatenate([np.arange(s, dtype=INT) for s in sizes]),
        "ts": np.concatenate([np.asarray(t, INT) for t in ts]),
        "arrival": np.concatenate([np.asarray(t, INT) for t in arrival]),
        "kid": np.concatenate(ids) if ids is not None else np.zeros(sum(sizes), INT),
    }
    dims = space.dims if space is not None else 0
    for d in range(dims):
        tab[f"v{d}"] = np.concatenate([space.vectors[k][:, d] for k in range(n)]).astype(np.float64)
    return tab, ids is not None, dims


def attach_facts(tab: dict, f: dict, n: int) -> dict:
    """Join the progress facts onto the tuple table (by stream, row)."""
    sizes = np.bincount(tab["stream"], minlength=n)
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = offs[f["stream"]] + f["row"]
    out = dict(tab)
    N = len(tab["ts"])
    for c in ["a", "rel_us", "dropped"] + [f"H{k}" for k in range(n)]:
        col = np.empty(N, dtype=np.asarray(f[c]).dtype)
        col[pos] = f[c]
        out[c] = col
    return out


# ------------------------------------------------------------------ outcome

@dataclass
class SparkOutcome(JoinOutcome):
    routing: dict[str, Any] = field(default_factory=dict)
    writer: Callable[[Any], None] | None = None


def outcome_from(f: dict, combos: dict, ts, n: int, W, policy: PolicySpec, sizes, timings, plan) -> JoinOutcome:
    replay, dec = (f["_replay"], f["_decisions"]) if "_replay" in f else sp.replay_from_facts(f, n, policy, sizes)
    rows = [combos[f"r{k}"] for k in range(n)]
    order = np.lexsort(list(reversed(rows))) if len(rows[0]) else np.empty(0, INT)
    idx = np.int32 if max(sizes, default=0) < 2**31 else INT
    c = Combos([r[order].astype(idx) for r in rows], list(ts))
    a = [replay.index_of[k][c.rows[k]] for k in range(n)]
    em = Emission(a=a, last=combos["last"][order], emitted=combos["emitted"][order].astype(bool),
                  emit_us=combos["emit_us"][order], latency_us=combos["latency_us"][order])
    memory = memory_per_stream(replay, np.asarray(W, INT), dec)
    return SparkOutcome(replay=replay, decisions=dec, combos=c, emission=em, memory=memory, timings_s=timings, plan=plan)


def post_filter(outcome: JoinOutcome, where, space: Space | None, distance_in_kernel: bool) -> None:
    """Predicates evaluated on the driver: ``--where`` always, distance when the kernel did not."""
    c = outcome.combos
    if not len(c):
        return
    keep = np.ones(len(c), dtype=bool)
    if space is not None and not distance_in_kernel:
        n = len(c.rows)
        for i in range(n):
            for j in range(i + 1, n):
                keep &= space.within(i, c.rows[i], j, c.rows[j])
    if where is not None:
        keep &= where(c)
    if keep.all():
        return
    outcome.combos = c.filter(keep)
    em = outcome.emission
    outcome.emission = Emission(a=[x[keep] for x in em.a], last=em.last[keep], emitted=em.emitted[keep],
                                emit_us=em.emit_us[keep], latency_us=em.latency_us[keep])


def routing_report(router: str, partitions: int, res: PlaneResult, N: int, duration_s: float, predicted: float,
                   weights, extra: dict) -> dict:
    P = max(res.stats) + 1 if res.stats else 1
    cpu = np.array([res.stats.get(p, {}).get("n_in", 0) + res.stats.get(p, {}).get("n_cand", 0) for p in range(P)], float)
    mem = np.array([res.stats.get(p, {}).get("n_in", 0) for p in range(P)], float)
    net = mem.copy()

    def share(x):
        return x / x.mean() if x.mean() > 0 else np.zeros_like(x)
    w1, w2, w3 = weights
    load = (w1 * share(cpu) + w2 * share(mem) + w3 * share(net)) / max(w1 + w2 + w3, 1e-12)
    extra_tuples = res.shipped_tuples - N + res.shipped_intermediate
    return {
        "router": router,
        "partitions": int(partitions),
        "replication_factor": (res.shipped_tuples / N) if N else 1.0,
        "overhead_measured": (extra_tuples / duration_s) if duration_s > 0 else 0.0,
        "overhead_predicted": float(predicted),
        "load_imbalance": imbalance(load),
        "per_partition": [
            {"partition": p, "load": float(load[p]), **{k: (float(v) if k == "t_us" else int(v))
                                                        for k, v in res.stats.get(p, {}).items()}}
            for p in range(P)
        ],
        "shipped_tuples": int(res.shipped_tuples),
        "shipped_intermediate": int(res.shipped_intermediate),
        **extra,
    }


# ------------------------------------------------------------------ Spark

@contextmanager
def spark_session(master: str = "local[*]", partitions: int = 4, conf: Sequence[tuple[str, str]] = ()):
    """One quiet SparkSession per run; an already active session is reused (and left running)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "local-cluster" in master and "SPARK_HOME" not in os.environ:
        import pyspark

        os.environ["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    b = (SparkSession.builder.appName("streamjoin").master(master)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", str(max(1, partitions)))
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.log.level", "ERROR"))
    for k, v in conf:
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _arrow(d: dict):
    import pyarrow as pa

    return pa.table({k: pa.array(v) for k, v in d.items()})


def _np(table) -> dict:
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}


def _schema(d: dict) -> str:
    def t(v):
        v = np.asarray(v)
        if v.dtype == bool:
            return "boolean"
        if v.dtype.kind == "f":
            return "double"
        if v.dtype == np.int32:
            return "int"
        return "bigint"
    return ", ".join(f"{k} {t(v)}" for k, v in d.items())


def spark_progress(spark, tab: dict, n: int, W, policy: PolicySpec, P: int) -> dict:
    """The partition-wise progress pass on Spark; returns the facts as numpy
    columns for the driver-side report (the pass itself moves only
    O(P x n) numbers to the driver)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    base = {"stream": tab["stream"], "row": tab["row"], "ts": tab["ts"], "arrival": tab["arrival"]}
    df = spark.createDataFrame(_arrow(base))
    df = df.repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
    df = df.localCheckpoint(eager=True)

    def chunk(it):
        batches = list(it)
        if not batches:
            return {"stream": np.empty(0, np.int32), "row": np.empty(0, INT), "ts": np.empty(0, INT), "arrival": np.empty(0, INT)}
        t = pa.Table.from_batches(batches)
        return {c: t.column(c).to_numpy() for c in ("stream", "row", "ts", "arrival")}

    def summ(fn, width):
        def run(it):
            c = chunk(it)
            v = fn(c, TaskContext.get().partitionId())
            yield pa.RecordBatch.from_pydict({"p": [TaskContext.get().partitionId()], **{f"v{i}": [int(x)] for i, x in enumerate(v)}})
        rows = df.mapInArrow(run, ", ".join(["p bigint"] + [f"v{i} bigint" for i in range(width)])).collect()
        got = {r["p"]: np.array([r[f"v{i}"] for i in range(width)], INT) for r in rows}
        return [got.get(p, None) for p in range(max(got) + 1 if got else 0)]

    s1 = summ(lambda c, p: sp.summary1(c, n), n + 1)
    s1 = [x if x is not None else np.concatenate([[0], np.full(n, sp.NEG_INF, INT)]) for x in s1]
    offsets, Mc, N = sp.carries_from(s1, n)
    npart = len(s1)
    Kc = [np.zeros(n, INT)] * npart
    if policy.name == "mpkslack":
        s2 = summ(lambda c, p: sp.summary2(c, n, Mc[p]), n)
        Kc = sp.prefix_max([x if x is not None else np.zeros(n, INT) for x in s2], np.zeros(n, INT))
    width = 1 if policy.family == SORTING else n
    s3 = summ(lambda c, p: sp.summary3(c, n, policy, Mc[p], Kc[p]), width)
    carried = sp.prefix_max([x if x is not None else np.full(width, sp.NEG_INF, INT) for x in s3],
                            np.full(width, sp.NEG_INF, INT))
    Rc = [int(x[0]) if policy.family == SORTING else sp.NEG_INF for x in carried]
    Hc = [x if policy.family == SYMMETRIC else np.full(n, sp.NEG_INF, INT) for x in carried]
    cols = sp.fact_columns(n)
    proto = sp.facts({k: v[:1] for k, v in base.items()}, n, W, policy, 0, Mc[0], Kc[0], Rc[0], Hc[0])
    schema = _schema({c: proto[c] for c in cols})

    def run_facts(it):
        p = TaskContext.get().partitionId()
        c = chunk(it)
        f = sp.facts(c, n, W, policy, offsets[p], Mc[p], Kc[p], Rc[p], Hc[p])
        yield pa.RecordBatch.from_pydict({k: f[k] for k in cols})

    fdf = df.mapInArrow(run_facts, schema).localCheckpoint(eager=True)
    last_arrival = None
    rel_cols = None
    if policy.family == SORTING and N:
        q = fdf.filter(~F.col("dropped")).select(F.col("ts").alias("value"), F.lit(0).cast("tinyint").alias("kind"), "a", "arrival")
        cp = fdf.filter(F.col("R") > F.col("R_prev")).select(F.col("R").alias("value"), F.lit(1).cast("tinyint").alias("kind"), "a", "arrival")
        rdf = q.unionByName(cp).repartitionByRange(P, "value", "kind", "a").sortWithinPartitions("value", "kind", "a")
        rdf = rdf.localCheckpoint(eager=True)
        last_arrival = int(fdf.agg(F.max("arrival")).collect()[0][0])

        def rchunk(it):
            batches = list(it)
            if not batches:
                return {"value": np.empty(0, INT), "kind": np.empty(0, np.int8), "a": np.empty(0, INT), "arrival": np.empty(0, INT)}
            t = pa.Table.from_batches(batches)
            return {c: t.column(c).to_numpy() for c in ("value", "kind", "a", "arrival")}

        def rsum(it):
            s = sp.release_summary(rchunk(it))
            yield pa.RecordBatch.from_pydict({"p": [TaskContext.get().partitionId()], "h": [int(s[0])], "ca": [int(s[1])], "cr": [int(s[2])]})
        rows = rdf.mapInArrow(rsum, "p bigint, h bigint, ca bigint, cr bigint").collect()
        got = {r["p"]: np.array([r["h"], r["ca"], r["cr"]], INT) for r in rows}
        summaries = [got.get(p, np.zeros(3, INT)) for p in range(max(got) + 1 if got else 0)]
        carries = sp.release_carries(summaries)

        def rfill(it):
            p = TaskContext.get().partitionId()
            r = rchunk(it)
            g = sp.release_fill(r, carries[p], N, last_arrival)
            yield pa.RecordBatch.from_pydict(g)
        rel_cols = rdf.mapInArrow(rfill, "a bigint, rel bigint, rel_us bigint")
    # the report needs the facts on the driver (see docs/performance.md, "at scale")
    f = _np(fdf.toArrow())
    if rel_cols is not None:
        r = _np(rel_cols.toArrow())
        rel = np.full(N, N, INT)
        rel_us = np.full(N, last_arrival, INT)
        rel[r["a"]] = r["rel"]
        rel_us[r["a"]] = r["rel_us"]
    else:
        rel = np.full(N, N, INT)
        last = int(f["arrival"].max()) if N else 0
        rel_us = np.full(N, last, INT)
    order = np.argsort(f["a"], kind="stable")
    f = {k: v[order] for k, v in f.items()}
    f["rel"], f["rel_us"] = rel, rel_us
    f["dropped"] = f["dropped"].astype(bool)
    f["expired"] = f["expired"].astype(bool)
    return f


def spark_plane(spark, tab: dict, n: int, W, family: str, router: str, plan, keyed: bool, dims: int,
                threshold, partitions: int) -> PlaneResult:
    """Routing and kernels as Spark jobs (the same kernels as :func:`run_plane`)."""
    import pyarrow as pa

    N = len(tab["ts"])
    out_cols = [f"r{k}" for k in range(n)] + ["emitted", "emit_us", "latency_us", "last"]
    stat_cols = ["n_in", "n_cand", "n_out", "t_us"]
    schema_out = ", ".join(["part bigint", "kind int"] + [f"r{k} bigint" for k in range(n)]
                           + ["emitted boolean", "emit_us bigint", "latency_us bigint", "last bigint",
                              "n_in bigint", "n_cand bigint", "n_out bigint", "t_us double"])

    def pack(part, out, stats):
        m = len(out["r0"]) if n else 0
        d = {"part": np.full(m + 1, part, INT), "kind": np.concatenate([np.zeros(m, np.int32), [1]]).astype(np.int32)}
        for c in out_cols:
            v = out[c]
            d[c] = np.concatenate([v, np.zeros(1, dtype=v.dtype)])
        for c in stat_cols:
            d[c] = np.concatenate([np.zeros(m), [stats[c]]]).astype(float if c == "t_us" else INT)
        return pa.Table.from_pydict(d)

    def unpack(rows_table) -> tuple[dict, dict]:
        t = _np(rows_table)
        is_c = t["kind"] == 0
        combos = {c: t[c][is_c] for c in out_cols}
        combos["emitted"] = combos["emitted"].astype(bool)
        stats = {int(p): {c: t[c][i] for c in stat_cols} for i, p in zip(np.flatnonzero(~is_c), t["part"][~is_c])}
        return combos, stats

    if router in ("none", "atr"):
        if router == "none":
            part = np.zeros(N, INT)
            idx = np.arange(N)
        else:
            ii, pp = [], []
            for k in range(n):
                sel = np.flatnonzero(tab["stream"] == k)
                i, p = atr_mod.assign(plan, k, tab["ts"][sel])
                ii.append(sel[i])
                pp.append(p)
            idx, part = np.concatenate(ii), np.concatenate(pp)
        # routing runs where the tuples are: a mapInArrow over the tuples table
        df = spark.createDataFrame(_arrow(tab)).repartition(max(1, partitions))

        def route(it):
            for b in it:
                t = _np(pa.Table.from_batches([b]))
                if router == "none":
                    t["part"] = np.zeros(len(t["ts"]), INT)
                    yield pa.RecordBatch.from_pydict(t)
                    continue
                ii, pp = [], []
                for k in range(n):
                    sel = np.flatnonzero(t["stream"] == k)
                    i, p = atr_mod.assign(plan, k, t["ts"][sel])
                    ii.append(sel[i])
                    pp.append(p)
                i, p = np.concatenate(ii), np.concatenate(pp)
                d = {c: v[i] for c, v in t.items()}
                d["part"] = p
                yield pa.RecordBatch.from_pydict(d)

        routed = df.mapInArrow(route, _schema({**tab, "part": np.zeros(1, INT)}))

        def kernel(table):
            t = _np(table)
            p = int(t.pop("part")[0])
            own = None if router == "none" else (lambda mt: atr_mod.owner_partition(plan, mt) == p)
            out = join_partition(t, n, W, family, keyed, dims, threshold, own)
            stats = out.pop("_stats")
            return pack(p, out, stats)

        res = routed.groupBy("part").applyInArrow(kernel, schema_out)
        combos, stats = unpack(res.toArrow())
        return PlaneResult(combos, stats, int(len(idx)))

    # CTR: storage + hop-1 probe copies, then n - 1 cogroup hops
    home = np.empty(N, INT)
    for k in range(n):
        sel = tab["stream"] == k
        home[sel] = ctr_mod.storage(plan, k, tab["ts"][sel])
    slots = plan.slot(tab["ts"])
    stored_df = spark.createDataFrame(_arrow({**tab, "host": home}))
    pcols = partial_columns(n)
    proto = initial_partials({c: v[:1] for c, v in tab.items()}, n, slots[:1])
    pschema = _schema({**{c: proto[c] for c in pcols}, "dest": np.zeros(1, INT)})
    base = spark.createDataFrame(_arrow({**tab, "host": home, "slot": slots.astype(INT)}))

    def first_hop(it):
        for b in it:
            t = _np(pa.Table.from_batches([b]))
            for h in np.unique(t["host"]):
                sel = t["host"] == h
                P0 = initial_partials({c: v[sel] for c, v in t.items() if c not in ("host", "slot")}, n, t["slot"][sel])
                routed, dest = route_partials(P0, plan, 1, int(h))
                d = {c: routed[c] for c in pcols}
                d["dest"] = dest
                d["src"] = np.full(len(dest), int(h), INT)
                yield pa.RecordBatch.from_pydict(d)

    partials = base.mapInArrow(first_hop, pschema + ", src bigint").localCheckpoint(eager=True)
    from pyspark.sql import functions as F

    moved = partials.filter(F.col("dest") != F.col("src")).groupBy("dest").count().collect()
    shipped = N + sum(r["count"] for r in moved)
    stats: dict[int, dict] = {}
    counts = np.bincount(home, minlength=plan.partitions)
    for p in range(plan.partitions):
        _stat(stats, p, n_in=int(counts[p]))
    for r in moved:
        _stat(stats, r["dest"], n_in=int(r["count"]))
    partials = partials.drop("src")
    inter = 0
    tab_cols = list(tab)
    for hop in range(1, n):
        final = hop == n - 1

        def make_hop(hop, final):
          def hop_fn(left, right):
            S = _np(left)
            Pt = _np(right)
            if not len(Pt.get("dest", [])):
                host = int(S["host"][0]) if len(S.get("host", [])) else -1
            else:
                host = int(Pt["dest"][0])
            t0 = time.perf_counter()
            stored = {c: S[c] for c in tab_cols} if len(S.get("ts", [])) else {c: np.empty(0, tab[c].dtype) for c in tab_cols}
            Pd = {c: Pt[c] for c in pcols} if len(Pt.get("ps", [])) else None
            if Pd is None:
                empty = {c: np.empty(0, INT) for c in pcols}
                if final:
                    return pack(host, {c: np.empty(0, bool if c == "emitted" else INT) for c in out_cols},
                                {"n_in": 0, "n_cand": 0, "n_out": 0, "t_us": 0.0})
                return pa.Table.from_pydict({**empty, "drop_any": np.empty(0, bool), "dest": np.empty(0, INT), "src": np.empty(0, INT)})
            Pd["drop_any"] = Pd["drop_any"].astype(bool)
            stored["dropped"] = stored["dropped"].astype(bool)
            ext = extend(Pd, stored, hop, n, W, plan.orders, keyed)
            if final:
                out = finish_partials(ext, n, W, family)
                return pack(host, out, {"n_in": 0, "n_cand": len(ext["ps"]), "n_out": len(out["r0"]),
                                        "t_us": (time.perf_counter() - t0) * 1e6})
            routed, dest = route_partials(ext, plan, hop + 1, host)
            d = {c: routed[c] for c in pcols}
            d["dest"] = dest
            d["src"] = np.full(len(dest), host, INT)
            return pa.Table.from_pydict(d)
          return hop_fn
        hop_fn = make_hop(hop, final)

        schema = schema_out if final else pschema + ", src bigint"
        res = stored_df.groupBy("host").cogroup(partials.groupBy("dest")).applyInArrow(hop_fn, schema)
        if final:
            combos, st = unpack(res.toArrow())
            for p, s in st.items():
                _stat(stats, p, n_cand=int(s["n_cand"]), n_out=int(s["n_out"]), t_us=float(s["t_us"]))
            return PlaneResult(combos, stats, shipped, inter)
        res = res.localCheckpoint(eager=True)
        inter += int(res.filter(F.col("dest") != F.col("src")).count())
        partials = res.drop("src")
    raise AssertionError("unreachable")


def spark_writer(spark, outcome: JoinOutcome, names: Sequence[str], payloads, ts, arrival):
    """A function writing results.parquet (a directory of part files) with Spark;
    same columns and order as :func:`~streamjoin.pipelines.job.results_frame`."""
    def write(path):
        em = outcome.emission
        mask = em.emitted
        rows = [r[mask].astype(INT) for r in outcome.combos.rows]
        base = {f"_r{k}": rows[k] for k in range(len(names))}
        base["emit_us"] = em.emit_us[mask].astype(INT)
        base["latency_us"] = em.latency_us[mask].astype(INT)
        base["_last"] = em.last[mask].astype(INT)
        df = spark.createDataFrame(_arrow(base))
        select = []
        for k, name in enumerate(names):
            side = pl.DataFrame({f"{name}_row": np.arange(len(ts[k]), dtype=INT), f"{name}_ts_us": ts[k],
                                 f"{name}_arrival_us": arrival[k]}).hstack(
                payloads[k].rename({c: f"{name}_{c}" for c in payloads[k].columns}))
            sdf = spark.createDataFrame(side.to_arrow())
            df = df.join(sdf, df[f"_r{k}"] == sdf[f"{name}_row"], "left")
            select += side.columns
        order = ["emit_us", "_last"] + [f"_r{k}" for k in range(len(names))]
        df = df.orderBy(*order).select(*select, "emit_us", "latency_us")
        df.write.mode("error").option("compression", "zstd").parquet(str(path))
    return write


def spark_join(
    ts, arrival, keys, windows, policy: PolicySpec, *, space: Space | None = None, where=None,
    order=None, bad_arrivals=None, settings: RouteSettings | None = None, spark=None,
    progress: str = "auto", progress_threshold: int = 2_000_000, plane: str = "spark",
) -> SparkOutcome:
    """Replay and join on Spark (or, with ``plane="local"``, the same kernels in-process).

    ``progress``: ``"spark"`` (the partition-wise pass), ``"driver"``
    (:mod:`~streamjoin.pipelines.progress`) or ``"auto"`` (Spark from
    ``progress_threshold`` tuples on; adaptive policies always on the driver).
    """
    settings = settings or RouteSettings()
    timings: dict[str, float] = {}
    n = len(ts)
    W = np.asarray(windows, dtype=INT)
    sizes = [len(t) for t in ts]
    N = sum(sizes)
    t0 = time.perf_counter()
    tab, keyed, dims = tuple_table(ts, arrival, keys, space)
    plan_ = probe_order(ts, keys, W.tolist(), space) if order is None else Plan(order=list(order))
    timings["plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    use_spark_progress = (plane == "spark" and not policy.adaptive
                          and (progress == "spark" or (progress == "auto" and N >= progress_threshold)))
    if use_spark_progress:
        f = spark_progress(spark, tab, n, W, policy, max(settings.partitions, 1))
    elif policy.adaptive or progress in ("driver", "auto") or plane == "local":
        f = sp.driver_facts(ts, arrival, W, policy, bad_arrivals=bad_arrivals)
    else:
        raise AssertionError(progress)
    timings["progress"] = time.perf_counter() - t0
    full = attach_facts(tab, f, n)
    t0 = time.perf_counter()
    plans, T, rates = make_plans(ts, W.tolist(), settings, plan_.order, plan_.selectivity) if settings.router != "none" else ({}, None, None)
    router = settings.router
    predicted = {"atr": plans["atr"][1] if "atr" in plans else None,
                 "ctr": (plans["ctr"][1] + plans["ctr"][2]) if "ctr" in plans else None}
    if router == "auto":
        router = "atr" if predicted["atr"] <= predicted["ctr"] else "ctr"
    plan = plans[router][0] if router in plans else None
    timings["route_plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    distance_in_kernel = router != "ctr"
    threshold = space.threshold if space is not None else None
    kdims = dims if distance_in_kernel else 0
    if plane == "spark":
        res = spark_plane(spark, full, n, W, policy.family, router, plan, keyed, kdims, threshold,
                          max(settings.partitions, 1))
    else:
        res = run_plane(full, n, W, policy.family, router, plan, keyed, kdims, threshold)
    timings["join"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = outcome_from(f, res.combos, ts, n, W, policy, sizes, timings, plan_)
    post_filter(out, where, space, distance_in_kernel)
    timings["collect"] = time.perf_counter() - t0
    nonempty = [t for t in ts if len(t)]
    duration_s = ((max(int(t.max()) for t in nonempty) - min(int(t.min()) for t in nonempty)) / 1e6) if nonempty else 0.0
    extra = {"requested": settings.router, "segment_us": T, "load_weights": list(settings.weights),
             "predicted": {"atr": predicted["atr"], "ctr": predicted["ctr"]},
             "progress_pass": "spark" if use_spark_progress else "driver",
             "stage_s": {k: v for k, v in timings.items()}}
    if router == "atr":
        extra["atr"] = plan.to_dict()
        extra["theorem_b"] = predicted["atr"]
    if router == "ctr":
        extra["ctr"] = plan.to_dict()
        extra["theorem_d"] = {"O_ctr": plans["ctr"][1], "O_star_ctr": plans["ctr"][2]}
    routing = routing_report(router, settings.partitions if router != "none" else 1, res, N, duration_s,
                             predicted.get(router) or 0.0, settings.weights, extra)
    out.routing = routing
    return out


# ------------------------------------------------------------------ job glue

def join_for_job(cfg, streams, where_fn, space, bad_arrivals) -> SparkOutcome:
    """``streamjoin run --engine spark``: open the run's SparkSession, join, keep the
    session for the Spark Parquet writer; :meth:`SparkOutcome.close` stops it."""
    from contextlib import ExitStack

    stack = ExitStack()
    partitions = cfg.partitions
    spark = stack.enter_context(spark_session(cfg.master, partitions or 4, cfg.spark_conf))
    try:
        if partitions is None:
            partitions = max(1, int(spark.sparkContext.defaultParallelism))
        settings = RouteSettings(router=cfg.router, partitions=partitions, segment_us=cfg.segment_us,
                                 weights=tuple(cfg.load_weights), adapt=cfg.adapt_segment)
        out = spark_join([s.ts for s in streams], [s.arrival for s in streams],
                         [s.keys if s.keys.width else None for s in streams], cfg.windows, cfg.policy,
                         space=space, where=where_fn, bad_arrivals=bad_arrivals, settings=settings, spark=spark)
    except BaseException:
        stack.close()
        raise
    out.routing["master"] = cfg.master
    out.writer = spark_writer(spark, out, [s.name for s in streams], [s.payload for s in streams],
                              [s.ts for s in streams], [s.arrival for s in streams])
    out._stack = stack
    return out


def _close(self) -> None:
    stack = getattr(self, "_stack", None)
    if stack is not None:
        self._stack = None
        stack.close()


SparkOutcome.close = _close
