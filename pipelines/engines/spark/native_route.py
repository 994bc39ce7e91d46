"""CTR on the native Spark path: the hops as successive shuffles (issue 19).

The plan (:class:`~streamjoin.pipelines.route.ctr.CtrPlan`) is made on the
driver from the rate histogram; the tuples never reach the driver.  Every
row that moves between the hops has one layout, :func:`hop_schema`: the
group key ``q`` (a partition), a role (``0`` a probing tuple or partial
combination, ``1`` a tuple stored at ``q``, ``2`` a task's statistics), the
prober's stream ``__ps``, the join keys, and per stream ``k`` that member's
facts ``m<k>_<fact>`` and its payload columns (null where the member is not
there yet)::

    hop 1   mapInArrow: each tuple to its storage host (role 1; it probes there
            too) and, as probe copies (role 0), to the cover of its partner
            segments: ctr.CtrPlan.dest(stream, slot, 1, host)
            groupBy(q).applyInArrow: the probers extended by the next stream
            in their probe order, joined only with the tuples *stored* at q
            (kernels.extend_with, the current path's kernel)
    hop h   (n >= 3) each partial goes to q itself plus the cover of the next
            stream's segments (dest(ps, slot, h, q)); the stored tuples stay
            at q, passed on through the same shuffle
    last    the complete combinations: their members' facts and payload are in
            the row, so the results rows (emission, latency, required slack,
            period) are made there (native_metrics' rows_of)

Each extension happens at one host (every segment is stored once), so each
combination is produced exactly once (theorem C), as on the current path
(:func:`~.plane.ctr_spark`).  Every hop task adds a statistics row: the
tuples it received (hop 1), its extensions (``n_cand``), complete
combinations (``n_out``, last hop), intermediate results received from other
partitions (``n_inter_in``) and its kernel time -- the routing report's
per-partition numbers, O(P x hops) rows to the driver.  Those statistics
rows (:data:`STAT_COLS`, :func:`with_stat_rows`, :func:`merge_stats`) are
the ATR / ``none`` tasks' too (:mod:`.native_metrics`).
"""

from __future__ import annotations

import time

import numpy as np

from ...policies import SYMMETRIC
from ...replay.candidates import key_ids
from .kernels import INT, distinct_small, emitted_partials, extend_with

ROLE, Q, SRC, PS = "__role", "q", "__src", "__ps"
PARTIAL, STORED, STAT = 0, 1, 2

#: the join tasks' statistics: one extra row per task (per hop for CTR) whose results
#: columns are null and whose ``STAT_Q`` is its partition; the results rows have it null
STAT_Q = "__stat_q"
STAT_COLS = (STAT_Q, "__n_in", "__n_cand", "__n_out", "__n_inter_in", "__t_us")


def stat_fields():
    """The Spark fields of :data:`STAT_COLS`."""
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StructField

    return [StructField(STAT_Q, IntegerType())] + [StructField(c, LongType()) for c in STAT_COLS[1:-1]] \
        + [StructField(STAT_COLS[-1], DoubleType())]


def stat_table(stats: list[dict], schema, **fixed):
    """One row per entry of ``stats`` (``q``, ``n_in``, ``n_cand``, ``n_out``, ``n_inter_in``,
    ``t_us``) in :data:`STAT_COLS`, ``fixed`` columns (name -> values) as given, every other
    column of ``schema`` (an arrow schema) null."""
    import pyarrow as pa

    cols = {c: pa.nulls(len(stats), f.type) for c, f in zip(schema.names, schema)}
    for c, values in fixed.items():
        cols[c] = pa.array(values, schema.field(c).type)
    for c in STAT_COLS:
        key = "q" if c == STAT_Q else c[2:]
        cols[c] = pa.array([s.get(key, 0) for s in stats], schema.field(c).type)
    return pa.table(cols, schema=schema)


def with_stat_rows(rows, stats: list[dict], schema):
    """The arrow table ``rows`` (results columns) with null :data:`STAT_COLS`, and
    :func:`stat_table`'s rows of ``stats`` (``schema``: the output's arrow schema)."""
    import pyarrow as pa

    m = rows.num_rows
    for c in STAT_COLS:
        rows = rows.append_column(c, pa.nulls(m, schema.field(c).type))
    return pa.concat_tables([rows.select(schema.names).cast(schema), stat_table(stats, schema)])


def merge_stats(stat_rows, P: int) -> dict[int, dict]:
    """Per partition (every one of ``P``): the tasks' ``n_in``, ``n_cand``, ``n_out``,
    ``t_us`` summed, and ``n_inter_in`` where some arrived (the current path's
    :class:`~.plane.PlaneResult` statistics)."""
    stats = {p: {"n_in": 0, "n_cand": 0, "n_out": 0, "t_us": 0.0} for p in range(max(P, 1))}
    for r in stat_rows:
        s = stats.setdefault(int(r[STAT_Q]), {"n_in": 0, "n_cand": 0, "n_out": 0, "t_us": 0.0})
        for c in STAT_COLS[1:]:
            v = r[c]
            if c == "__n_inter_in":
                if v:
                    s["n_inter_in"] = s.get("n_inter_in", 0) + int(v)
            elif v is not None:
                s[c[2:]] += float(v) if c == "__t_us" else int(v)
    return stats


def member(k: int, c: str) -> str:
    """Stream ``k``'s member column for fact ``c``."""
    return f"m{k}_{c}"


def hop_schema(data_schema, n: int, keycols, fact_cols, payload_cols):
    """The Spark schema of the rows between the hops (the module docstring)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    by_name = {f.name: f for f in data_schema.fields}
    fields = [StructField(c, IntegerType()) for c in (ROLE, Q, SRC, PS)]
    fields += [by_name[c] for c in keycols]
    fields += [StructField(member(k, c), by_name[c].dataType) for k in range(n) for c in fact_cols]
    fields += [by_name[f] for p in payload_cols for f, _ in p]
    return StructType(fields + stat_fields())


def copies(plan, hop: int, stream: np.ndarray, slot: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's copies for ``hop``: ``(row index, destination)``, the destinations
    :meth:`~streamjoin.pipelines.route.ctr.CtrPlan.dest` of its prober segment
    ``(stream, slot)`` from the partition ``at`` it is at (one lookup per segment)."""
    if not len(stream):
        return np.empty(0, INT), np.empty(0, INT)
    width = int(plan.slots) + 1
    key = (stream.astype(INT) * width + slot.astype(INT)) * max(int(plan.partitions), 1) + at.astype(INT)
    uniq, inv = np.unique(key, return_inverse=True)
    dests = []
    for u in uniq.tolist():
        seg, h = divmod(u, max(int(plan.partitions), 1))
        ps, pj = divmod(seg, width)
        dests.append(plan.dest(ps, pj, hop, h))
    count = np.array([len(d) for d in dests], INT)
    flat = np.array([d for ds in dests for d in ds], INT)
    offset = np.cumsum(count) - count
    per = count[inv]
    idx = np.repeat(np.arange(len(stream), dtype=INT), per)
    within = np.arange(int(per.sum()), dtype=INT) - np.repeat(np.cumsum(per) - per, per)
    return idx, flat[offset[inv[idx]] + within]


def ctr_combinations(data, *, n, W, family, plan, keycols, payload_cols, fact_cols, rows_of, rschema):
    """CTR's combinations of ``data`` as a DataFrame of ``rschema`` (results rows
    from ``rows_of(part, out)`` and the hop tasks' statistics rows); the ``(n, P)``
    tuples stored on each partition; ``{"shipped_tuples": copies sent at hop 1}``; the
    persisted hop-1 copies (the caller unpersists them once the combinations are read)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import polars as pl
    from pyspark import StorageLevel
    from pyspark.sql.pandas.types import to_arrow_schema

    P = int(plan.partitions)
    keyed = bool(keycols)
    U = hop_schema(data.schema, n, keycols, fact_cols, payload_cols)
    u_arrow = to_arrow_schema(U)
    r_arrow = to_arrow_schema(rschema)
    pay = [[f for f, _ in p] for p in payload_cols]

    def u_rows(t, stream, role, q, src):
        """Tuples ``t`` (the data's columns) as one-member rows of the hop layout."""
        cols = {ROLE: pa.array(role, pa.int32()), Q: pa.array(q, pa.int32()), SRC: pa.array(src, pa.int32()),
                PS: pa.array(stream, pa.int32())}
        for c in keycols:
            cols[c] = t.column(c)
        for k in range(n):
            mine = pa.array(stream == k)
            for c in fact_cols:
                col = t.column(c)
                cols[member(k, c)] = pc.if_else(mine, col, pa.nulls(len(t), col.type))
        for p in pay:
            for f in p:
                cols[f] = t.column(f)
        for c in STAT_COLS:
            cols[c] = pa.nulls(len(t), u_arrow.field(c).type)
        return pa.table(cols).select(u_arrow.names).cast(u_arrow)

    def hop1(it):
        for b in it:
            t = pa.Table.from_batches([b])
            stream = t.column("stream").to_numpy().astype(INT)
            slot = plan.slot(t.column("ts").to_numpy())
            home = plan.host[stream, slot]
            idx, dest = copies(plan, 1, stream, slot, home)
            yield from u_rows(t.take(idx), stream[idx], (dest == home[idx]).astype(np.int32), dest,
                              home[idx]).to_batches()

    def stat_rows(stats):
        return stat_table(stats, u_arrow, **{ROLE: [STAT] * len(stats), Q: [s["q"] for s in stats]})

    def picked(t, stream, c, fill):
        """Fact ``c`` of each row's own member (one-member rows: stored tuples)."""
        out = None
        for k in range(n):
            col = pc.fill_null(t.column(member(k, c)), fill).to_numpy(zero_copy_only=False)
            out = col if out is None else np.where(stream == k, col, out)
        return out

    def hop_task(hop: int):
        final = hop == n - 1

        def run(table):
            role = table.column(ROLE).to_numpy()
            q = int(table.column(Q)[0].as_py())
            passed = [{"q": r[STAT_Q], **{c[2:]: r[c] for c in STAT_COLS[1:]}}
                      for r in table.filter(pa.array(role == STAT)).select(list(STAT_COLS)).to_pylist()]
            stored = table.filter(pa.array(role == STORED))
            probers = table.filter(pa.array((role != STAT) if hop == 1 else (role == PARTIAL)))
            t0 = time.perf_counter()
            m = probers.num_rows
            arr = {"pidx": np.arange(m, dtype=INT), "ps": probers.column(PS).to_numpy().astype(INT)}
            for k in range(n):
                arr[f"r{k}"] = pc.fill_null(probers.column(member(k, "row")), -1).to_numpy().astype(INT)
                arr[f"t{k}"] = pc.fill_null(probers.column(member(k, "ts")), 0).to_numpy().astype(INT)
                arr[f"a{k}"] = pc.fill_null(probers.column(member(k, "a")), -1).to_numpy().astype(INT)
            arr["amax"] = np.maximum.reduce([arr[f"a{k}"] for k in range(n)])
            drop = np.zeros(m, bool)
            for k in range(n):
                drop |= pc.fill_null(probers.column(member(k, "dropped")), False).to_numpy(zero_copy_only=False)
                last = arr[f"a{k}"] == arr["amax"]
                for j in range(n):
                    h = pc.fill_null(probers.column(member(k, f"H{j}")), 0).to_numpy().astype(INT)
                    arr[f"h{j}"] = np.where(last, h, arr.get(f"h{j}", np.zeros(m, INT)))
            arr["drop_any"] = drop
            sstream = stored.column(PS).to_numpy().astype(INT)
            sd = {"stream": sstream, "row": np.arange(stored.num_rows, dtype=INT),
                  "ts": picked(stored, sstream, "ts", 0).astype(INT), "a": picked(stored, sstream, "a", -1).astype(INT),
                  "dropped": picked(stored, sstream, "dropped", False)}
            for j in range(n):
                sd[f"H{j}"] = picked(stored, sstream, f"H{j}", 0).astype(INT)
            if keyed:
                ids = key_ids([pl.from_arrow(probers.select(keycols)), pl.from_arrow(stored.select(keycols))])
                arr["kid"], sd["kid"] = np.asarray(ids[0], INT), np.asarray(ids[1], INT)
            cols = ["pidx", "ps"] + [f"{c}{k}" for c in "rta" for k in range(n)] + ["amax"] \
                + ([f"h{j}" for j in range(n)] if family == SYMMETRIC else ["drop_any"])
            # stored "row" is the position in `stored`: the extension's r<k> is the stored tuple
            ext = extend_with(lambda c, idx, ps: arr[c][idx], arr["ps"], sd, hop, n, W, plan.orders, keyed, cols)
            emitted = emitted_partials(ext, n, W, family) if final else None
            chunks, done, tprober = [], [], []
            for ps in distinct_small(ext["ps"]).tolist():
                sel = np.flatnonzero(ext["ps"] == ps)
                k = plan.orders[ps][hop - 1]
                tprober.append(arr[f"t{ps}"][ext["pidx"][sel]])   # the prober's slot routes the next hop
                chunk = probers.take(ext["pidx"][sel])
                got = stored.take(ext[f"r{k}"][sel])
                for name in [member(k, c) for c in fact_cols] + pay[k]:
                    chunk = chunk.set_column(chunk.schema.get_field_index(name), name, got.column(name))
                chunks.append(chunk)
                if final:
                    done.append(emitted[sel])
            new = pa.concat_tables(chunks) if chunks else probers.slice(0, 0)
            stat = {"q": q, "n_in": m if hop == 1 else 0, "n_cand": new.num_rows,
                    "n_out": new.num_rows if final else 0,
                    "n_inter_in": int((probers.column(SRC).to_numpy() != q).sum()) if hop > 1 else 0}
            if final:
                part, out = [], {"emitted": np.concatenate(done) if done else np.empty(0, bool)}
                for k in range(n):
                    rk = new.column(member(k, "row")).to_numpy()
                    _, first = np.unique(rk, return_index=True)   # each member once, rows ascending
                    sub = new.take(first)
                    d = {c: sub.column(member(k, c)).to_numpy(zero_copy_only=False) for c in fact_cols}
                    d["payload"] = (pl.from_arrow(sub.select(pay[k])).rename(dict(payload_cols[k]))
                                    if pay[k] else pl.DataFrame())
                    part.append(d)
                    out[f"r{k}"] = rk
                rows = rows_of(part, out)
                stat["t_us"] = (time.perf_counter() - t0) * 1e6
                return with_stat_rows(rows, passed + [stat], r_arrow)
            # on to the next hop: q itself plus the cover of the next stream's segments
            ps = new.column(PS).to_numpy().astype(INT)
            tprober = np.concatenate(tprober) if tprober else np.empty(0, INT)
            idx, dest = copies(plan, hop + 1, ps, plan.slot(tprober), np.full(len(ps), q, INT))
            moved = new.take(idx)
            moved = moved.set_column(moved.schema.get_field_index(Q), Q, pa.array(dest, pa.int32()))
            moved = moved.set_column(moved.schema.get_field_index(SRC), SRC, pa.array(np.full(len(idx), q), pa.int32()))
            moved = moved.set_column(moved.schema.get_field_index(ROLE), ROLE,
                                     pa.array(np.zeros(len(idx)), pa.int32()))
            stat["t_us"] = (time.perf_counter() - t0) * 1e6
            return pa.concat_tables([moved.cast(u_arrow), stored.cast(u_arrow), stat_rows(passed + [stat])])
        return run

    # copied once (the count below fills the cache), then joined; MEMORY_AND_DISK as the ATR
    # copies: spills rather than filling the heap, and a lost executor's part is recomputed
    routed = data.mapInArrow(hop1, U).persist(StorageLevel.MEMORY_AND_DISK)
    stored = np.zeros((n, max(P, 1)), np.int64)
    shipped = 0
    for r in routed.groupBy(Q, PS, ROLE).count().collect():
        shipped += int(r["count"])
        if int(r[ROLE]) == STORED:
            stored[int(r[PS]), int(r[Q])] += int(r["count"])
    frame = routed
    for hop in range(1, n):
        frame = frame.groupBy(Q).applyInArrow(hop_task(hop), rschema if hop == n - 1 else U)
    return frame, stored, {"shipped_tuples": shipped}, routed
