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
         results.parquet written on the driver, as the local engine writes it
         (the combinations are already there; --out is a driver-side path)

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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ...replay.candidates import Combos, Space, compact_ids, enumerate_truth, key_ids
from ...replay.emit import Emission, EmittedOnArrival, MemberIndexes, last_arrivals
from ...replay.probe_order import Plan, probe_order
from ...policies import SORTING, SYMMETRIC, PolicySpec
from ...base.allocator import reuse_freed_memory
from ...replay.progress import memory_per_stream
from ...base.sorting import band_ranges, gather_ranges, range_blocks, stable_order
from ...replay import partitioned_progress as sp
from ...route import atr as atr_mod
from ...route import ctr as ctr_mod
from ...route import histogram, imbalance, theorem_b, theorem_d
from .handoff import CONF_KEY as HANDOFF_CONF, Handoff
from ..local import JoinOutcome

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
    return join_streams(_by_stream(tab, n), n, W, family, keyed, dims, threshold, owned, order)


def join_streams(per: list[dict], n: int, W, family: str, keyed: bool, dims: int, threshold: float | None,
                 owned: Callable[[list[np.ndarray]], np.ndarray] | None, order=None, timing: bool = True) -> dict:
    """The ATR / none kernel on per-stream columns (a stream's dict without ``row``:
    its rows are ``0..len-1``).

    ``timing=False`` computes only *whether* each combination is emitted (the
    driver derives when, from the facts it holds: :func:`outcome_from`), so the
    kernel reads only ``ts``, ``kid``, ``v*`` and, symmetric family, ``a`` and
    ``H*`` (sorting: ``dropped``), and ships two int32 + one bool per
    combination."""
    t0 = time.perf_counter()
    ts = [p["ts"] for p in per]
    keys = [pl.DataFrame({"__key0": p["kid"]}) for p in per] if keyed else [None] * n
    space = Space([np.column_stack([p[f"v{d}"] for d in range(dims)]) if dims else None for p in per], threshold) \
        if dims else None
    combos = enumerate_truth(ts, keys, list(W), space=space, order=order)
    cand = len(combos)
    mt = None
    if owned is not None and cand:
        mt = [ts[k][combos.rows[k]] for k in range(n)]
        keep = owned(mt)
        combos = combos.filter(keep)
        mt = [x[keep] for x in mt]
    rows = combos.rows
    m = len(rows[0]) if n else 0
    out = {f"r{k}": (per[k]["row"][rows[k]] if "row" in per[k] else rows[k]) for k in range(n)}
    if not timing:
        if family == SYMMETRIC:
            # member j (not the last) must still be held when the last member y arrives:
            # t_j + W_j >= H_j(a_y), H_j(a_y) carried by y (finish(), two-member form)
            # ts32 (restore_times): event times and H as int32 offsets, half the bytes to gather
            a = [per[k]["a"][rows[k]] for k in range(n)]
            amax = np.maximum.reduce(a) if m else np.empty(0, INT)
            if "ts32" in per[0]:
                te = [per[k]["ts32"][rows[k]] for k in range(n)]
            else:
                te = mt if mt is not None else [ts[k][rows[k]] for k in range(n)]
            emitted = np.ones(m, dtype=bool)
            for y in range(n):
                last_y = a[y] == amax
                for j in range(n):
                    if j != y:
                        emitted &= ~last_y | (te[j] + INT(W[j]) >= per[y][f"H{j}"][rows[y]])
        else:
            emitted = ~np.logical_or.reduce([per[k]["dropped"][rows[k]].astype(bool) for k in range(n)]) if m \
                else np.ones(0, bool)
        out["emitted"] = emitted
        out["_stats"] = {"n_in": int(sum(len(t) for t in ts)), "n_cand": int(cand), "n_out": int(m),
                         "t_us": (time.perf_counter() - t0) * 1e6}
        return out
    mt = mt if mt is not None else [ts[k][rows[k]] for k in range(n)]
    rows = [r.astype(INT) for r in rows]
    a = [per[k]["a"][rows[k]] for k in range(n)]
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
    out = {f"r{k}": out[f"r{k}"].astype(INT) for k in range(n)}
    out.update(emitted=emitted, emit_us=emit_us.astype(INT), latency_us=latency.astype(INT), last=amax.astype(INT))
    out["_stats"] = {"n_in": int(sum(len(t) for t in ts)), "n_cand": int(cand), "n_out": int(m),
                     "t_us": (time.perf_counter() - t0) * 1e6}
    return out


def partial_columns(n: int) -> list[str]:
    return (["ps", "pj"] + [f"r{k}" for k in range(n)] + [f"t{k}" for k in range(n)] + [f"a{k}" for k in range(n)]
            + ["kid", "amax", "arrmax", "relmax", "drop_any"] + [f"h{k}" for k in range(n)])


def lean_partial_columns(n: int, family: str, final: bool) -> list[str]:
    """Partial columns a Spark CTR hop carries when only *whether* a combination
    is emitted is computed (``timing=False``): the last hop drops what only
    routing and band checks need."""
    cols = [f"r{k}" for k in range(n)] + [f"t{k}" for k in range(n)] + [f"a{k}" for k in range(n)] + ["amax"]
    cols += [f"h{k}" for k in range(n)] if family == SYMMETRIC else ["drop_any"]
    return cols if final else ["ps", "pj", "kid"] + cols


def initial_partials(tab: dict, n: int, slots: np.ndarray, keep: Sequence[str] | None = None) -> dict:
    """Each tuple as a one-member partial combination (the prober); ``keep``: only these columns."""
    m = len(tab["ts"])
    s = tab["stream"].astype(INT)
    want = set(partial_columns(n) if keep is None else keep) | {"ps"}
    out = {"ps": s}
    if "pj" in want:
        out["pj"] = slots.astype(INT)
    for k in range(n):
        mine = s == k
        out[f"r{k}"] = np.where(mine, tab["row"], -1).astype(INT)
        out[f"t{k}"] = np.where(mine, tab["ts"], 0).astype(INT)
        out[f"a{k}"] = np.where(mine, tab["a"], -1).astype(INT)
    out["kid"] = tab["kid"].astype(INT)
    out["amax"] = tab["a"].astype(INT)
    for c, src in (("arrmax", "arrival"), ("relmax", "rel_us")):
        if c in want:
            out[c] = tab[src].astype(INT)
    if "drop_any" in want:
        out["drop_any"] = tab["dropped"].astype(bool)
    for k in range(n):
        if f"h{k}" in want:
            out[f"h{k}"] = tab[f"H{k}"].astype(INT)
    assert len(out["ps"]) == m
    return out


def _present(small: np.ndarray) -> np.ndarray:
    """The distinct values of an array of small non-negative ints (stream or
    partition ids), ascending: ``np.unique`` without sorting or hashing millions."""
    return np.flatnonzero(np.bincount(small)) if len(small) else np.empty(0, INT)


def extend(partials: dict, stored: dict, hop: int, n: int, W, orders, keyed: bool,
           keep: Sequence[str] | None = None) -> dict:
    """CTR hop kernel: extend partial combinations by the stored tuples of the
    next stream in each prober's probe order, within the band of every member
    (sorted ``(key, ts)`` ranges, as :func:`~streamjoin.pipelines.candidates.enumerate_sorted`).
    ``keep``: the partial columns to produce (default: all)."""
    return _extend(lambda c, idx, ps: partials[c][idx], partials["ps"], stored, hop, n, W, orders, keyed,
                   [c for c in partial_columns(n) if keep is None or c in keep])


def extend_probers(probers: dict, stored: dict, n: int, W, orders, keyed: bool, plan: ctr_mod.CtrPlan,
                   family: str | None = None, keep: Sequence[str] | None = None) -> dict:
    """Hop 1 of :func:`extend` straight from the probing tuples: their one-member
    partials (:func:`initial_partials`) are read as views, never built.  With
    ``family`` (the last hop) only ``r0..`` and ``emitted`` come back."""
    stream = probers["stream"]

    def get(c, idx, ps):
        name, m = c.rstrip("0123456789"), c[1:]
        if c == "ps":
            return np.full(len(idx), ps, INT)
        if c == "pj":  # only the partials that go on to another hop are routed by it
            return plan.slot(probers["ts"][idx])
        if name in ("r", "t", "a") and m:
            if int(m) != ps:
                return np.full(len(idx), 0 if name == "t" else -1, INT)
            return probers[{"r": "row", "t": "ts", "a": "a"}[name]][idx].astype(INT, copy=False)
        if c == "drop_any":
            return probers["dropped"][idx].astype(bool)
        src = {"kid": "kid", "amax": "a", "arrmax": "arrival", "relmax": "rel_us"}.get(c, "H" + m if name == "h" else c)
        return probers[src][idx].astype(INT, copy=False)

    cols = [c for c in partial_columns(n) if keep is None or c in keep]
    return _extend(get, stream, stored, 1, n, W, orders, keyed, cols, family)


#: partial combinations (probers) per block of :func:`_extend`
PROBE_BLOCK = 1 << 16


def _extend(get, ps_all, stored: dict, hop: int, n: int, W, orders, keyed: bool, cols: list[str],
            family: str | None = None) -> dict:
    """:func:`extend` on partials read through ``get(column, indexes, prober stream)``.

    Per prober stream, the next stream's stored tuples are sorted by ``(key,
    ts)`` once; the partials then probe them :data:`PROBE_BLOCK` at a time,
    each block's queries in sorted order (the binary searches walk the
    sorted tuples monotonically), so every per-partial temporary stays
    block-sized and reuses the same heap pages.  Output order: blocks in
    partial order, within a block by band start (stable: deterministic)."""
    outs = []
    sstream = stored["stream"]
    # indexes as int32 where they fit: the gathers below touch every extension
    idx = np.int32 if max(len(ps_all), len(sstream)) < 2**31 else INT
    for ps in _present(ps_all):
        ps = int(ps)
        sel = np.flatnonzero(ps_all == ps).astype(idx)
        k = orders[ps][hop - 1]
        sk = np.flatnonzero(sstream == k)
        if not len(sk) or not len(sel):
            continue
        s_ts = stored["ts"][sk]
        # one code space for stored tuples and every band: key * span + (t - base),
        # with base below every band start and span above every band end
        # (each band ends at or before its prober's ts)
        ty = get(f"t{ps}", sel, ps)
        base = int(min(s_ts.min(), ty.min() - int(W[k]))) - 1
        span = int(max(s_ts.max(), ty.max()) - base) + 2
        del ty
        kid_s = stored["kid"][sk].astype(INT, copy=False) if keyed else np.zeros(len(sk), INT)
        code = kid_s * span + (s_ts - base)
        del kid_s, s_ts
        # stable sorts from SIMD value sorts (pipelines/sorting.py): the same
        # order as argsort(kind="stable"), several times faster
        order, vs = stable_order(code, overwrite=True)
        members = sk[order].astype(idx)                           # stream k's stored tuples, sorted
        del order, sk, code
        for b0 in range(0, len(sel), PROBE_BLOCK):
            outs.append(_extend_block(get, sel[b0:b0 + PROBE_BLOCK], ps, k, vs, members, base, span,
                                      stored, hop, n, W, keyed, cols, family, idx))
        del vs, members
    keys = list(outs[0]) if outs else (cols if family is None else [f"r{m}" for m in range(n)] + ["emitted"])
    if not outs:
        return {c: np.empty(0, bool if c in ("drop_any", "emitted") else INT) for c in keys}
    if len(outs) == 1:
        return {c: outs[0][c] for c in keys}
    return {c: np.concatenate([o[c] for o in outs]) for c in keys}


def _extend_block(get, sel: np.ndarray, ps: int, k: int, vs: np.ndarray, members: np.ndarray, base: int,
                  span: int, stored: dict, hop: int, n: int, W, keyed: bool, cols: list[str],
                  family: str | None, idx) -> dict:
    """One block of :func:`_extend`: partials ``sel`` (stream ``ps`` probes)
    extended by stream ``k``'s stored tuples (``members``, sorted, codes ``vs``)."""
    ty = get(f"t{ps}", sel, ps)
    lo = ty - int(W[k])
    hi = ty if k < ps else ty - 1      # the prober is the newest member (ties: larger stream)
    # every member m bounds the band by t_m + W_m; at hop 1 the prober is
    # the only member and its own bound ty + W_ps >= hi already holds
    for m in range(n) if hop > 1 else ():
        present = get(f"r{m}", sel, ps) >= 0
        hi = np.where(present, np.minimum(hi, get(f"t{m}", sel, ps) + int(W[m])), hi)
    kid_p = get("kid", sel, ps) if keyed else np.zeros(len(sel), INT)
    kid_p = kid_p * span
    qlo = kid_p + (lo - base)
    qhi = kid_p + (hi - base)
    del kid_p, lo, hi, ty
    # the partials are extended in the order of their band starts
    qorder, a, cnt = band_ranges(vs, qlo, qhi, idx, idx)
    del qlo, qhi
    sel = sel[qorder]
    del qorder
    if family is not None and n == 2:
        return _pairs_emitted(get, ps, k, sel, members, a, cnt, stored, W, family)
    px = np.repeat(sel, cnt)                      # partial of each extension
    sx = gather_ranges(members, a, cnt)          # stored tuple of each extension
    del a, cnt
    new = {c: get(c, px, ps) for c in cols if c not in (f"r{k}", f"t{k}", f"a{k}")}
    new[f"r{k}"] = stored["row"][sx].astype(INT, copy=False)
    new[f"t{k}"] = stored["ts"][sx].astype(INT, copy=False)
    sa = stored["a"][sx].astype(INT, copy=False)
    new[f"a{k}"] = sa
    later = sa > new["amax"]
    new["amax"] = np.maximum(new["amax"], sa)
    for c, src in (("arrmax", "arrival"), ("relmax", "rel_us")):
        if c in new:
            new[c] = np.maximum(new[c], stored[src][sx])
    if "drop_any" in new:
        new["drop_any"] = new["drop_any"] | stored["dropped"][sx].astype(bool)
    for j in range(n):
        if f"h{j}" in new:
            new[f"h{j}"] = np.where(later, stored[f"H{j}"][sx], new[f"h{j}"])
    if family is not None:
        new = {**{f"r{m}": new[f"r{m}"] for m in range(n)}, "emitted": emitted_partials(new, n, W, family)}
    return new


#: extensions per block of the two-stream last hop (:func:`_pairs_emitted`)
PAIR_BLOCK = 1 << 17


def _pairs_emitted(get, p: int, k: int, probers: np.ndarray, members: np.ndarray, first: np.ndarray,
                   counts: np.ndarray, stored: dict, W, family: str) -> dict:
    """:func:`_pair_emitted` for every extension of prober ``probers[q]``
    (stream ``p``) by ``members[first[q] : first[q] + counts[q]]`` (stream
    ``k``), in the order of ``probers``.

    Built a block of :data:`PAIR_BLOCK` extensions at a time into outputs
    allocated once (rows as int32 where they fit): the per-extension
    temporaries stay block-sized and reuse the same heap pages.  Built whole,
    they were a few hundred MB of fresh memory per task, and in a fresh
    Python worker faulting those pages in took as long as the kernel's
    arithmetic (docs/performance.md, "Spark engine vs local")."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    rdt = np.int32 if max(len(stored["row"]), total) < 2**31 else INT
    out = {"r0": np.empty(total, rdt), "r1": np.empty(total, rdt), "emitted": np.empty(total, bool)}
    for q0, q1, o0, o1 in range_blocks(counts, PAIR_BLOCK, ends):
        px = np.repeat(probers[q0:q1], counts[q0:q1])
        sx = gather_ranges(members, first[q0:q1], counts[q0:q1])
        got = _pair_emitted(get, p, k, px, sx, stored, W, family)
        for c, col in out.items():
            col[o0:o1] = got[c]
    return out


def _pair_emitted(get, p: int, k: int, px: np.ndarray, sx: np.ndarray, stored: dict, W, family: str) -> dict:
    """The last hop of a two-stream join: ``r0, r1, emitted`` straight from the
    prober ``px`` (stream ``p``) and stored partner ``sx`` (stream ``k``),
    gathering only what the emission test reads.

    Same answer as :func:`emitted_partials` on the full partials: arrival
    indexes are distinct, so exactly one member arrives last, and only the
    *other* member must still be held then -- ``t + W >= H`` with ``H`` read
    off the last member's row::

        partner arrives last (a_k > a_p):  t_p + W_p >= H_p(a_k)   (stored H_p)
        prober arrives last:               t_k + W_k >= H_k(a_p)   (prober's H_k)
    """
    out = {f"r{p}": get(f"r{p}", px, p), f"r{k}": stored["row"][sx].astype(INT, copy=False)}
    if family == SYMMETRIC:
        partner_last = stored["a"][sx] > get(f"a{p}", px, p)
        emitted = get(f"t{p}", px, p) + int(W[p]) >= stored[f"H{p}"][sx]
        prober_last = ~partner_last
        emitted[prober_last] = (stored["ts"][sx[prober_last]] + int(W[k])
                                >= get(f"h{k}", px[prober_last], p))
    else:
        emitted = ~(get("drop_any", px, p) | stored["dropped"][sx].astype(bool))
    out["emitted"] = emitted
    return {c: out[c] for c in ("r0", "r1", "emitted")}


def emitted_partials(P: dict, n: int, W, family: str) -> np.ndarray:
    """Whether each complete combination is emitted (the ``emitted`` of :func:`finish`)."""
    if family == SYMMETRIC:
        emitted = np.ones(len(P["amax"]), dtype=bool)
        for k in range(n):
            emitted &= (P[f"a{k}"] == P["amax"]) | (P[f"t{k}"] + int(W[k]) >= P[f"h{k}"])
        return emitted
    return ~P["drop_any"].astype(bool)


def finish_partials(P: dict, n: int, W, family: str) -> dict:
    t = [P[f"t{k}"] for k in range(n)]
    a = [P[f"a{k}"] for k in range(n)]
    hrow = [P[f"h{k}"] for k in range(n)]
    emitted, emit_us, latency = finish(family, W, t, a, P["amax"], P["arrmax"], P["relmax"], P["drop_any"], hrow)
    out = {f"r{k}": P[f"r{k}"] for k in range(n)}
    out.update(emitted=emitted, emit_us=emit_us, latency_us=latency, last=P["amax"])
    return out


def route_partials(P: dict, plan: ctr_mod.CtrPlan, hop: int, at: int) -> tuple[dict, np.ndarray]:
    """Copies of partials for ``hop``: ``at`` itself plus the set cover (rows exploded, dest column).

    Grouped by prober segment ``(ps, pj)`` with one stable sort (rows of a
    segment keep their order), segments in ascending order."""
    keys = P["ps"] * (plan.slots + 1) + P["pj"]
    if not len(keys):
        return {c: v[:0] for c, v in P.items()}, np.empty(0, INT)
    by_key, sk = stable_order(keys, overwrite=True)   # = argsort(kind="stable"), a value sort
    starts = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
    ends = np.append(starts[1:], len(sk))
    idx, dest = [], []
    for b, e in zip(starts.tolist(), ends.tolist()):
        ps, pj = divmod(int(sk[b]), plan.slots + 1)
        sel = by_key[b:e]
        for d in plan.dest(ps, pj, hop, at):
            idx.append(sel)
            dest.append(np.full(e - b, d, INT))
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

def tuple_table(ts, arrival, ids, space: Space | None) -> tuple[dict, bool, int]:
    """stream, row, ts, arrival, kid, v* per tuple (stream-major order);
    ``ids``: the key ids (:func:`~streamjoin.pipelines.candidates.key_ids`) or None."""
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


def attach_facts(tab: dict, f: dict, n: int) -> dict:
    """Join the progress facts onto the tuple table (by stream, row)."""
    cols = ["rel_us", "dropped"] + [f"H{k}" for k in range(n)]
    if "_replay" in f:
        # the driver's replay: the table is stream-major with rows in order, so
        # each tuple's arrival index is index_of, concatenated -- gather the
        # facts there instead of scattering them through (stream, row)
        a = np.concatenate(f["_replay"].index_of) if n else np.empty(0, np.int32)
        dec = f["_decisions"]
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


# ------------------------------------------------------------------ outcome

@dataclass
class SparkOutcome(JoinOutcome):
    routing: dict[str, Any] = field(default_factory=dict)


def outcome_from(replay, dec, f: dict, combos: dict, ts, n: int, timings, plan, memory) -> SparkOutcome:
    """The driver-side outcome from the collected combinations, in collection order
    (partition by partition; with one partition, the local engine's order).

    Combinations that carry only ``emitted`` (the Spark plane) get their
    emission time and latency from the facts, exactly as the local engine's
    :func:`~streamjoin.pipelines.emit.emission` does: the last member is the
    one with the largest arrival index ``a``; symmetric: ``emit = arrival[last]``,
    latency 0; sorting: ``emit = max(member rel_us)``, latency ``emit - arrival[last]``.
    """
    sizes = [len(t) for t in ts]
    idx = np.int32 if max(sizes, default=0) < 2**31 else INT
    c = Combos([np.asarray(combos[f"r{k}"]).astype(idx, copy=False) for k in range(n)], list(ts))
    a = MemberIndexes(c, replay)
    emitted = np.asarray(combos["emitted"]).astype(bool, copy=False)
    if "emit_us" in combos:
        em = Emission(a=a, last=combos["last"], emitted=emitted, emit_us=combos["emit_us"],
                      latency_us=combos["latency_us"])
    else:
        last = last_arrivals(c, replay, with_arrival=False).last
        if dec.family == SYMMETRIC:
            # emitted on arrival of the last member: the time is gathered if read, latency 0
            em = EmittedOnArrival(a, last, emitted, np.broadcast_to(np.zeros(1, dtype=INT), (len(last),)),
                                  replay.arrival)
        else:
            rel_us = np.asarray(f["rel_us"], dtype=INT)  # indexed by arrival index
            emit_us = np.maximum.reduce([rel_us[x] for x in a])
            latency = emit_us - replay.arrival[last]
            em = Emission(a=a, last=last, emitted=emitted, emit_us=emit_us, latency_us=latency)
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
         # a local master runs every task in the driver's JVM: Spark's default 1g heap
         # cannot hold a few million tuples in flight (applies only when this starts the JVM)
         .config("spark.driver.memory", "4g")
         # the kernels allocate large fresh numpy temporaries in short-lived Python
         # workers; numpy asks for transparent huge pages for them, and with THP
         # "defrag=madvise" each fault may compact memory first -- on the benchmark
         # VM that tripled the kernel's time (docs/performance.md, issue 7)
         .config("spark.executorEnv.NUMPY_MADVISE_HUGEPAGE", "0")
         # one malloc arena in the workers from their first allocation (glibc reads
         # this at start-up): a thread's own arena serves large blocks with fresh
         # mmaps, see pipelines/allocator.py -- reuse_freed_memory() in a task comes
         # too late for arenas that imports in the worker already created
         .config("spark.executorEnv.MALLOC_ARENA_MAX", "1")
         # a task's result up to this size travels with its status update instead of a
         # round trip through the block manager (below spark.rpc.message.maxSize, 128 MB)
         .config("spark.task.maxDirectResultSize", str(120 * 1024 * 1024))
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


def _import_kernels(records):
    """Runs in a Python worker, where unpickling this function has imported its
    module (numpy, polars, the kernels)."""
    yield sum(1 for _ in records)


def warm_up(spark) -> None:
    """One trivial task per executor core: starts the Python workers (reused by
    the job's tasks) and imports this module in them."""
    sc = spark.sparkContext
    tasks = max(1, int(sc.defaultParallelism))
    sc.parallelize(range(tasks), tasks).mapPartitions(_import_kernels).collect()


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


def _identity(k):
    return k


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


def _pack(out: dict) -> dict:
    """A kernel's result for the trip to the driver: ``emitted`` as bits."""
    em = out.pop("emitted")
    out["emitted"] = np.packbits(em)
    out["m"] = len(em)
    return out


def _unpack(out: dict) -> dict:
    out["emitted"] = np.unpackbits(out["emitted"], count=out.pop("m")).astype(bool)
    return out


def spark_plane(spark, per: list[dict], n: int, W, family: str, router: str, plan, keyed: bool, dims: int,
                threshold, handoff: Handoff = Handoff()) -> PlaneResult:
    """``none`` / ``atr`` as one Spark job: one task per partition, no shuffle.

    Data moves as blocks of numpy columns, never as rows: partition ``p``'s
    tuples (per stream: :func:`kernel_inputs`' columns, plus ``row`` when routed) are
    one record, placed in task ``p`` by ``parallelize`` with one record per
    slice; its combinations come back as one record (``r0..r_{n-1}`` int32,
    ``emitted`` as bits).  No per-row conversion happens in the JVM, and the
    driver derives emission times itself (:func:`outcome_from`).  Both
    records travel through ``handoff`` (:mod:`.handoff`: in band, or as files
    on the driver's host when the executors share it).  Routing
    (which partition gets which tuples) is computed where the tuples are: on
    the driver, which has loaded them and computed their progress facts.
    ``per``: :func:`kernel_inputs`.
    """
    sc = spark.sparkContext
    rdt = np.int32 if sum(len(d["ts"]) for d in per) < 2**31 else INT
    if router == "none":
        P = 1
        parts = [per]
    else:
        P = plan.partitions
        parts = [[None] * n for _ in range(P)]
        for k in range(n):
            i, p = atr_mod.assign(plan, k, per[k]["ts"])
            for q in range(P):
                sel = i[p == q]                       # ascending rows of stream k
                d = {c: v[sel] for c, v in per[k].items()}
                d["row"] = sel.astype(rdt)
                parts[q][k] = d
    shipped = int(sum(len(d["ts"]) for part in parts for d in part))
    # after routing, which reads absolute times; one base for every partition.
    # Only through the JVM (inline): as files, the tasks would pay fresh memory
    # to widen the times again
    base = time_base([d for part in parts for d in part]) if handoff.directory is None else None
    parts = [shrink_times(part, base) for part in parts]

    def task(index, records):
        reuse_freed_memory()  # as the CLI does for the driver: large temporaries reuse the heap
        for q, token in records:
            part = restore_times(handoff.get(token), base)
            own = None if router == "none" else (lambda mt, q=q: atr_mod.owner_partition(plan, mt) == q)
            out = join_streams(part, n, W, family, keyed, dims, threshold, own, timing=False)
            del part
            yield q, out.pop("_stats"), handoff.put(_pack(out))

    with ThreadPoolExecutor(max_workers=2) as pool:  # file writes release the GIL
        records = list(pool.map(lambda q: (q, handoff.put(parts[q])), range(P)))
    parts.clear()
    got = sc.parallelize(records, P).mapPartitionsWithIndex(task).collect()
    got.sort(key=lambda g: g[0])
    return PlaneResult(_concat_emitted([_unpack(handoff.get(g[2], consume=True)) for g in got], n),
                       {int(g[0]): g[1] for g in got}, shipped)


def _concat_emitted(parts: list[dict], n: int) -> dict:
    cols = [f"r{k}" for k in range(n)] + ["emitted"]
    if not parts:
        return {f"r{k}": np.empty(0, np.int32) for k in range(n)} | {"emitted": np.empty(0, bool)}
    if len(parts) == 1:
        return {c: parts[0][c] for c in cols}
    return {c: np.concatenate([p[c] for p in parts]) for c in cols}


_IDS = ("row", "kid", "a")


def _absolute_times(d: dict, base: int | None) -> dict:
    """Undo :func:`shrink_times` completely (``ts`` and ``H_k`` as absolute int64:
    the CTR kernels compare them with each other; a clipped ``H`` stays below every ``ts + W``)."""
    if base is None:
        return d
    return {c: (v.astype(INT) + base if c == "ts" or c[0] == "H" else v) for c, v in d.items()}


def _narrow(d: dict) -> dict:
    """Row, key and arrival-index columns as int32 when they fit (the trip to the executors)."""
    out = dict(d)
    for c in _IDS:
        v = d.get(c)
        if v is not None and v.dtype == INT and (not len(v) or (int(v.min()) >= I32.min and int(v.max()) <= I32.max)):
            out[c] = v.astype(np.int32)
    return out


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
        return d, handoff.put(tuple(_narrow(shrink_times([{c: tab[c][sel] for c in cols}], base)[0])
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
            yield d, ("R", d, handoff.put(_pack(res)), {"n_cand": m, "n_out": m, "part": part,
                                                        "t_us": (time.perf_counter() - t0) * 1e6})
            return
        routed, dest = route_partials(ext, plan, hop + 1, d)
        yield d, ("T", d, None, {"n_cand": len(ext["amax"]), "t_us": (time.perf_counter() - t0) * 1e6,
                                 "inter": int((dest != d).sum())})
        if part == 0:
            yield d, ("S", d, handoff.put(stored), None)
        for e in _present(dest):
            yield int(e), ("P", d, handoff.put({c: v[dest == e] for c, v in routed.items()}), part)

    def first(index, recs):
        reuse_freed_memory()  # as the driver does: the kernel's temporaries reuse the heap
        for d, token in recs:
            stored, moved_in = handoff.get(token)
            # ids stay as they came (int32 when narrowed): the kernel widens the
            # few values it packs into sort keys, a block at a time
            stored, moved_in = (_absolute_times(x, base) for x in (stored, moved_in))
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
            ext = _extend(lambda c, idx, ps: Pd[c][idx], Pd["ps"], stored, hop, n, W, plan.orders, keyed,
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
            finals.append(((d, st["part"]), _unpack(handoff.get(payload, consume=True))))
            _stat(stats, d, n_cand=int(st["n_cand"]), n_out=int(st["n_out"]), t_us=float(st["t_us"]))
        elif kind == "T":
            _stat(stats, d, n_cand=int(st["n_cand"]), t_us=float(st["t_us"]))
            inter += int(st["inter"])
    finals.sort(key=lambda x: x[0])
    return PlaneResult(_concat_emitted([x[1] for x in finals], n), stats, shipped, inter)


def spark_join(
    ts, arrival, keys, windows, policy: PolicySpec, *, space: Space | None = None, where=None,
    order=None, bad_arrivals=None, settings: RouteSettings | None = None, spark=None,
    progress: str = "auto", progress_threshold: int | None = None, plane: str = "spark",
    handoff: str | None = None,
) -> SparkOutcome:
    """Replay and join on Spark (or, with ``plane="local"``, the same kernels in-process).

    ``progress``: ``"spark"`` (the partition-wise pass,
    :mod:`~streamjoin.pipelines.sparkprogress`), ``"driver"``
    (:mod:`~streamjoin.pipelines.progress`) or ``"auto"``: the driver, unless
    ``progress_threshold`` is given and reached (adaptive policies always on
    the driver).  The driver is the default because it has loaded the tuples
    and needs every tuple's facts for the report anyway: the partition-wise
    pass ships the tuples to Spark and the facts back (on the core benchmark,
    3M tuples: about 140 s against 0.4 s, docs/performance.md).

    ``handoff``: how bulk records reach the tasks and come back
    (:mod:`.handoff`): ``"auto"`` (files when the master is local), ``"files"``
    or ``"inline"``; ``None`` reads the Spark conf ``spark.streamjoin.handoff``.
    """
    settings = settings or RouteSettings()
    timings: dict[str, float] = {}
    n = len(ts)
    W = np.asarray(windows, dtype=INT)
    sizes = [len(t) for t in ts]
    N = sum(sizes)
    t0 = time.perf_counter()
    ids = key_ids(list(keys)) if keys is not None else None
    # dense key ids (same equalities): (key, ts) codes then pack into one sort pass
    ids = compact_ids(ids) if ids is not None else None
    keyed, dims = ids is not None, (space.dims if space is not None else 0)
    tables: dict[str, dict] = {}

    def tab() -> dict:  # the stream-major tuple table (CTR, the in-process plane, the Spark progress pass)
        if "tab" not in tables:
            tables["tab"] = tuple_table(ts, arrival, ids, space)[0]
        return tables["tab"]

    plan_ = probe_order(ts, keys, W.tolist(), space) if order is None else Plan(order=list(order))
    timings["plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    use_spark_progress = (plane == "spark" and not policy.adaptive
                          and (progress == "spark" or (progress == "auto" and progress_threshold is not None
                                                       and N >= progress_threshold)))
    if use_spark_progress:
        f = spark_progress(spark, tab(), n, W, policy, max(settings.partitions, 1))
    elif policy.adaptive or progress in ("driver", "auto") or plane == "local":
        f = sp.driver_facts(ts, arrival, W, policy, bad_arrivals=bad_arrivals,
                            keys=key_ids(list(keys)) if policy.adaptive else None)
    else:
        raise AssertionError(progress)
    replay, dec = (f["_replay"], f["_decisions"]) if "_replay" in f else sp.replay_from_facts(f, n, policy, sizes)
    timings["progress"] = time.perf_counter() - t0
    # memory per arrival needs only the replay: counted on the driver while the join runs
    pool = ThreadPoolExecutor(max_workers=1)
    memory_job = pool.submit(_timed, timings, "memory", memory_per_stream, replay, W, dec)
    pool.shutdown(wait=False)
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
    hand = Handoff()
    if plane == "spark":
        mode = handoff or spark.conf.get(HANDOFF_CONF, "auto")
        hand = Handoff.open(mode, spark.sparkContext.master)
    try:
        if plane == "spark" and router != "ctr":
            res = spark_plane(spark, kernel_inputs(ts, ids, space, kdims, replay, dec, policy.family), n, W,
                              policy.family, router, plan, keyed, kdims, threshold, hand)
        elif plane == "spark":
            res = ctr_spark(spark, attach_facts(tab(), f, n), n, W, policy.family, plan, keyed, hand)
    finally:
        hand.close()
    if plane != "spark":
        res = run_plane(attach_facts(tab(), f, n), n, W, policy.family, router, plan, keyed, kdims, threshold)
    tables.clear()
    timings["join"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = outcome_from(replay, dec, f, res.combos, ts, n, timings, plan_, memory_job.result())
    post_filter(out, where, space, distance_in_kernel)
    timings["collect"] = time.perf_counter() - t0
    nonempty = [t for t in ts if len(t)]
    duration_s = ((max(int(t.max()) for t in nonempty) - min(int(t.min()) for t in nonempty)) / 1e6) if nonempty else 0.0
    extra = {"requested": settings.router, "segment_us": T, "load_weights": list(settings.weights),
             "predicted": {"atr": predicted["atr"], "ctr": predicted["ctr"]},
             "progress_pass": "spark" if use_spark_progress else "driver",
             "handoff": hand.mode if plane == "spark" else None,
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


def _timed(timings: dict, name: str, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    timings[name] = time.perf_counter() - t0
    return out


# ------------------------------------------------------------------ job glue

def join_for_job(cfg, streams, where_fn, space, bad_arrivals) -> SparkOutcome:
    """``streamjoin run --engine spark``: open the run's SparkSession and join; the
    session stays open until the job is written, :meth:`SparkOutcome.close` stops it."""
    from contextlib import ExitStack

    stack = ExitStack()
    partitions = cfg.partitions
    t0 = time.perf_counter()
    spark = stack.enter_context(spark_session(cfg.master, partitions or 4, cfg.spark_conf))
    started = {"spark_session": time.perf_counter() - t0}
    try:
        t0 = time.perf_counter()
        warm_up(spark)
        started["spark_warmup"] = time.perf_counter() - t0
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
    # session start-up, apart from the job: getOrCreate (JVM, SparkContext) and the first
    # job, which starts the executors' Python workers and imports the kernels there
    out.timings_s.update(started)
    out.routing["master"] = cfg.master
    out._stack = stack
    return out


def _close(self) -> None:
    stack = getattr(self, "_stack", None)
    if stack is not None:
        self._stack = None
        stack.close()


SparkOutcome.close = _close
