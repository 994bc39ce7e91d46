"""The Spark engine's join kernels: pure numpy on blocks of columns, so the
same code runs in a Spark task and in-process (:func:`~.plane.run_plane`).

* :func:`join_streams` / :func:`join_partition` -- one partition's tuples
  (``none`` / ATR): candidate enumeration, ownership (a combination is
  produced on exactly one partition, theorem A) and the closed-form emission
  test (:func:`finish`).
* CTR extension, hop by hop: :func:`initial_partials`, :func:`extend`,
  :func:`extend_probers` (hop 1 straight from the probing tuples) and
  :func:`extend_with` (the block loop both use), :func:`route_partials` (where
  each partial goes next), :func:`emitted_partials` / :func:`finish_partials`
  (the last hop's emission).

Emission needs no global state inside a partition: for the symmetric family a
combination is emitted iff every member ``x`` other than the last-arriving
``y`` has ``x.ts + W >= H_{s(x)}(a_y)`` (``y`` carries its ``H`` row); for the
sorting family iff no member was dropped, at ``max(member rel_us)``; ``spark-ss``
and ``flink`` from the members' own facts (batch and removal batch; watermark before
and cleanup threshold), computed on the driver before the join.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from ...base.sorting import band_ranges, gather_ranges, range_blocks, stable_order
from ...policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC
from ...replay.candidates import Space, enumerate_truth
from ...replay.microbatch import pair_emitted
from ...replay.sql_interval_join import pair_emitted as sql_pair_emitted
from ...route import ctr as ctr_mod


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
        elif family == MICROBATCH:   # spark-ss: the members' batches, removal batches, late flags
            emitted = pair_emitted(*[per[k][c][rows[k]] for c in ("b", "rm") for k in range(2)],
                                   *[per[k]["dropped"][rows[k]].astype(bool) for k in range(2)])[0]
        elif family == INTERVAL_JOIN:   # flink: the later member probes before the earlier one's cleanup
            a0, a1 = per[0]["a"][rows[0]], per[1]["a"][rows[1]]
            earlier_th = np.where(a0 < a1, per[0]["th"][rows[0]], per[1]["th"][rows[1]])
            later_bf = np.where(a0 < a1, per[1]["bf"][rows[1]], per[0]["bf"][rows[0]])
            emitted = ~per[0]["dropped"][rows[0]].astype(bool) & ~per[1]["dropped"][rows[1]].astype(bool) \
                & (later_bf < earlier_th)
        elif family == SQL_INTERVAL_JOIN:   # flink-sql: the earlier member cached, the later one probes it in time
            emitted = sql_pair_emitted(*[per[k]["a"][rows[k]] for k in range(2)],
                                       *[tuple(per[k][c][rows[k]] for k in range(2)) for c in ("ca", "pr", "vu")])
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


def distinct_small(small: np.ndarray) -> np.ndarray:
    """The distinct values of an array of small non-negative ints (stream or
    partition ids), ascending: ``np.unique`` without sorting or hashing millions."""
    return np.flatnonzero(np.bincount(small)) if len(small) else np.empty(0, INT)


def extend(partials: dict, stored: dict, hop: int, n: int, W, orders, keyed: bool,
           keep: Sequence[str] | None = None) -> dict:
    """CTR hop kernel: extend partial combinations by the stored tuples of the
    next stream in each prober's probe order, within the band of every member
    (sorted ``(key, ts)`` ranges, as :func:`~streamjoin.pipelines.replay.candidates.enumerate_sorted`).
    ``keep``: the partial columns to produce (default: all)."""
    return extend_with(lambda c, idx, ps: partials[c][idx], partials["ps"], stored, hop, n, W, orders, keyed,
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
    return extend_with(get, stream, stored, 1, n, W, orders, keyed, cols, family)


#: partial combinations (probers) per block of :func:`extend_with`
PROBE_BLOCK = 1 << 16


def extend_with(get, ps_all, stored: dict, hop: int, n: int, W, orders, keyed: bool, cols: list[str],
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
    for ps in distinct_small(ps_all):
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
        # stable sorts from SIMD value sorts (pipelines/base/sorting.py): the same
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
    """One block of :func:`extend_with`: partials ``sel`` (stream ``ps`` probes)
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
