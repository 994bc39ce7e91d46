"""CTR on the native Spark path: the hops as successive shuffles (issue 19).

The plan (:class:`~streamjoin.pipelines.route.ctr.CtrPlan`) is made on the
driver from the rate histogram; the tuples never reach the driver.  Every
row that moves between the hops is a (partial) combination in one narrow,
null-free layout, :func:`hop_schema`: the group key ``q`` (a partition), a
role (``0`` a probing tuple or partial combination, ``1`` a tuple stored at
``q``, ``2`` a task's statistics), the sending partition, the prober's
stream ``ps``, the join keys, each member's row, event time and arrival
index (``r<k>``, ``t<k>``, ``a<k>``; ``-1`` / ``0`` where the member is not
there yet) and what the emission test and the report need of the members
so far, folded as they join (:data:`FOLDED`): the last arrival index
``amax``, the largest arrival time ``arrmax``; symmetric family the last
member's ``H`` row ``h<j>`` and watermark ``tlast``; sorting family
whether a member was dropped, the largest release ``relmax`` and required
slack ``kneedmax``.  A stored tuple is the one-member combination of
itself.  Only when results are written do the rows also carry each
member's arrival time ``arr<k>`` and its stream's payload columns (null
until the member joins)::

    hop 1   in the JVM (routed_copies): each tuple, only the columns the hops
            read, joined with a broadcast routing table per (stream, slot) --
            to its storage host (role 1; it probes there too) and, as probe
            copies (role 0), to the cover of its partner segments:
            ctr.CtrPlan.dest(stream, slot, 1, host)
            groupBy(q).applyInArrow: the tuples spread into one-member rows
            of the layout, the probers extended by the next stream in their
            probe order, joined only with the tuples *stored* at q
            (kernels.extend_with, the current path's kernel)
    hop h   (n >= 3) each partial goes to q itself plus the cover of the next
            stream's segments (dest(ps, slot, h, q)); the stored tuples stay
            at q, passed on through the same shuffle
    last    the complete combinations: emitted (kernels.emitted_partials),
            emission time, latency, required slack and period from the
            folded facts; with results, the results rows (the members'
            columns are in the row); without (--no-results), each task's
            summary instead of rows (:data:`SUMMARY_KINDS`: value counts of
            the period codes, latencies and required slacks, its
            duplicates), summed per value in one aggregation (:func:`ctr_summary`)

The tuples stored per partition and the copies shipped at hop 1 are counted
on the driver from a JVM aggregation (tuples per stream and slot, O(n x
slots)), not from the copies.  Each extension happens at one host (every
segment is stored once), so each combination is produced exactly once
(theorem C), as on the current path (:func:`~.plane.ctr_spark`).  Every
hop task adds a statistics row: the tuples it received (hop 1), its
extensions (``n_cand``), complete combinations (``n_out``, last hop),
intermediate results received from other partitions (``n_inter_in``) and
its kernel time -- the routing report's per-partition numbers, O(P x hops)
rows to the driver; between the hops they ride in the layout's own
columns (:data:`STAT_AS`).  Those statistics rows of the last output
(:data:`STAT_COLS`, :func:`with_stat_rows`, :func:`merge_stats`) are the
ATR / ``none`` tasks' too (:mod:`.native_metrics`).
"""

from __future__ import annotations

import time

import numpy as np

from ...analysis.summary import ResultSummary
from ...policies import SYMMETRIC
from ...replay.candidates import key_ids
from ...replay.duplicates import count_duplicates
from .kernels import INT, distinct_small, emitted_partials, extend_with

ROLE, Q, SRC, PS = "__role", "q", "__src", "__ps"
#: a combination's facts beside its members' columns in the results rows (native_metrics' results schema)
EMITTED, NEED, PERIOD = "__emitted", "__need", "__period"
COMBINATION_COLS = ("emit_us", "latency_us", EMITTED, NEED, PERIOD)
PARTIAL, STORED, STAT = 0, 1, 2

#: the join tasks' statistics: one extra row per task (per hop for CTR) whose results
#: columns are null and whose ``STAT_Q`` is its partition; the results rows have it null
STAT_Q = "__stat_q"
STAT_COLS = (STAT_Q, "__n_in", "__n_cand", "__n_out", "__n_inter_in", "__t_us")
#: between the hops a statistics row (role 2, ``q`` its partition) keeps its numbers in
#: the layout's own columns (kernel time in nanoseconds), no column null on every row
STAT_AS = {"n_in": "amax", "n_cand": "arrmax", "n_out": "t0", "n_inter_in": "a0", "t_ns": "t1"}
#: and hop 1's stored tuples of stream k in ``r<k>`
#: the last hop's summary rows without results: (kind, value, count)
KIND, VALUE, COUNT = "__kind", "__value", "__count"
#: period code (2 x period + emitted), emitted latency, required slack, duplicates (value 0)
#: and (value stream x P + partition) the tuples stored there
SUMMARY_KINDS = (CODE, LATENCY, NEED_KIND, DUPS, STORED_KIND) = (0, 1, 2, 3, 4)


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


def folded(n: int, family: str) -> list[str]:
    """:data:`FOLDED`'s columns for ``n`` streams and ``family``."""
    if family == SYMMETRIC:
        return ["amax", "arrmax"] + [f"h{j}" for j in range(n)] + ["tlast"]
    return ["amax", "arrmax", "drop_any", "relmax", "kneedmax"]


#: the members' facts folded as they join (module docstring); per family: :func:`folded`
FOLDED = ("amax", "arrmax", "h<j>", "tlast", "drop_any", "relmax", "kneedmax")


def numeric_cols(n: int, family: str, results: bool) -> list[str]:
    """The layout's per-combination numeric columns (after role, q, src, ps, keys)."""
    return [f"{c}{k}" for c in "rta" for k in range(n)] + folded(n, family) \
        + ([f"arr{k}" for k in range(n)] if results else [])


def hop_schema(data_schema, n: int, keycols, family: str, payload_cols):
    """The Spark schema of the rows between the hops (the module docstring);
    ``payload_cols`` empty per stream: no results written, no ``arr<k>``."""
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType

    by_name = {f.name: f for f in data_schema.fields}
    results = any(payload_cols) or None
    fields = [StructField(c, IntegerType(), False) for c in (ROLE, Q, SRC, PS)]
    fields += [StructField(c, by_name[c].dataType) for c in keycols]   # nullable: null in statistics rows
    fields += [StructField(c, BooleanType() if c == "drop_any" else LongType(), False)
               for c in numeric_cols(n, family, bool(results))]
    fields += [by_name[f] for p in payload_cols for f, _ in p]
    return StructType(fields)


def summary_schema():
    """The last hop's output without results: :data:`SUMMARY_KINDS` rows and statistics rows."""
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    return StructType([StructField(KIND, IntegerType()), StructField(VALUE, LongType()),
                       StructField(COUNT, LongType())] + stat_fields())


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


def slot_column(plan):
    """:meth:`~streamjoin.pipelines.route.ctr.CtrPlan.slot` as a Spark column."""
    from pyspark.sql import functions as F

    return F.least(F.greatest(F.floor((F.col("ts") - F.lit(int(plan.base))) / F.lit(int(plan.T))), F.lit(0)),
                   F.lit(int(plan.slots) - 1)).cast("long")


def routed_copies(data, plan):
    """Hop 1's copies of ``data`` in the JVM: each tuple joined with the routing table of
    its segment ``(stream, slot)`` -- one row per destination ``q``
    (:meth:`~streamjoin.pipelines.route.ctr.CtrPlan.dest` from the storage host), role
    1 at the storage host, 0 elsewhere (a broadcast table of O(n x slots x cover) rows)."""
    from pyspark.sql import functions as F

    rows = []
    for k in range(plan.n):
        for j in range(int(plan.slots)):
            home = int(plan.host[k, j])
            rows += [(k, j, int(d), STORED if int(d) == home else PARTIAL) for d in plan.dest(k, j, 1, home)]
    spark = data.sparkSession
    table = spark.createDataFrame(rows, f"stream {data.schema['stream'].dataType.simpleString()}, "
                                        f"__slot long, {Q} int, {ROLE} int")
    return data.withColumn("__slot", slot_column(plan)).join(F.broadcast(table), ["stream", "__slot"]).drop("__slot")


def stored_and_shipped(data, plan, n: int) -> tuple[np.ndarray, int]:
    """The ``(n, P)`` tuples stored on each partition and the copies shipped at hop 1,
    from the tuples per stream and slot (a JVM aggregation: O(n x slots) rows)."""
    P = max(int(plan.partitions), 1)
    slot = slot_column(plan)
    stored = np.zeros((n, P), np.int64)
    shipped = 0
    for r in data.groupBy("stream", slot.alias("slot")).count().collect():
        k, j, c = int(r["stream"]), int(r["slot"]), int(r["count"])
        home = int(plan.host[k, j])
        stored[k, home] += c
        shipped += c * len(plan.dest(k, j, 1, home))
    return stored, shipped


def combination_facts(ext: dict, n: int, W, family: str, first: int, period_us: int):
    """Per complete combination (the folded columns ``ext``): emitted, emission time,
    latency, required slack and period -- :func:`.sink.combination_facts`' numbers
    (symmetric: emitted at the last arrival, latency 0, the static slack it needs;
    sorting: at the largest release, the members' largest ``kneed``)."""
    from ...analysis.tuning import static_need

    emitted = emitted_partials(ext, n, W, family)
    if family == SYMMETRIC:
        emit_us = ext["arrmax"]
        latency = np.zeros(len(emit_us), INT)
        need = static_need([ext[f"t{k}"] for k in range(n)], [ext[f"a{k}"] for k in range(n)], ext["amax"],
                           ext["tlast"], [int(w) for w in W])
    else:
        emit_us = ext["relmax"]
        latency = emit_us - ext["arrmax"]
        need = ext["kneedmax"]
    period = (ext["arrmax"] - int(first)) // int(period_us)
    return emitted, emit_us, latency, need, period


def _counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v, c = np.unique(np.asarray(values, INT), return_counts=True)
    return v, c.astype(INT)


def ctr_combinations(data, *, n, W, family, plan, keycols, payload_cols, sizes, names, first, period_us,
                     rschema=None):
    """CTR's combinations of ``data`` (facts, keys, payload per tuple) as a lazy
    DataFrame: with ``rschema`` (results written) the results rows and the hop
    tasks' statistics rows in ``rschema``; without, each last-hop task's summary
    rows (:func:`summary_schema`, read by :func:`ctr_summary`) and the statistics
    rows.  Also the ``(n, P)`` tuples stored on each partition and
    ``{"shipped_tuples": copies sent at hop 1}``."""
    import pyarrow as pa
    import polars as pl
    from pyspark.sql.pandas.types import to_arrow_schema

    results = rschema is not None
    P = max(int(plan.partitions), 1)
    if not results:
        payload_cols = [[] for _ in range(n)]
    keyed = bool(keycols)
    U = hop_schema(data.schema, n, keycols, family, payload_cols)
    u_arrow = to_arrow_schema(U)
    out_schema = rschema if results else summary_schema()
    o_arrow = to_arrow_schema(out_schema)
    pay = [[f for f, _ in p] for p in payload_cols]
    nums = numeric_cols(n, family, results)
    sym = family == SYMMETRIC
    W = [int(w) for w in W]

    def table_of(cols: dict, m: int, payload=None, **const):
        """A hop-layout arrow table from numpy columns (and ``payload``: name -> arrow column)."""
        arrays = []
        for f in u_arrow:
            if f.name in const:
                arrays.append(pa.array(np.full(m, const[f.name], np.int32), f.type))
            elif f.name in cols:
                arrays.append(pa.array(cols[f.name], f.type))
            else:
                arrays.append(payload[f.name])
        return pa.Table.from_arrays(arrays, schema=u_arrow)

    tuple_cols = ["row", "ts", "a", "arrival"] + ([f"H{j}" for j in range(n)] + ["T"] if sym
                                                 else ["dropped", "rel_us", "kneed"])

    def columns_of(t, hop: int) -> dict:
        """The layout's numeric columns and ``ps`` of ``t``: hop 1's tuples (the data's
        columns) spread into one-member combinations, a later hop's as they came."""
        if hop > 1:
            d = {c: t.column(c).to_numpy(zero_copy_only=False) for c in nums}
            d["ps"] = t.column(PS).to_numpy().astype(INT)
            return d
        s = t.column("stream").to_numpy().astype(INT)
        g = {c: t.column(c).to_numpy(zero_copy_only=False) for c in tuple_cols}
        d = {"ps": s, "amax": g["a"].astype(INT), "arrmax": g["arrival"]}
        for k in range(n):
            mine = s == k
            d[f"r{k}"] = np.where(mine, g["row"], -1)
            d[f"t{k}"] = np.where(mine, g["ts"], 0)
            d[f"a{k}"] = np.where(mine, d["amax"], -1)
            if results:
                d[f"arr{k}"] = np.where(mine, g["arrival"], 0)
        if sym:
            d.update({f"h{j}": g[f"H{j}"] for j in range(n)}, tlast=g["T"])
        else:
            d.update(drop_any=g["dropped"].astype(bool), relmax=g["rel_us"], kneedmax=g["kneed"])
        return d

    def stat_in_hop(stats):
        """Statistics rows in the hop layout (:data:`STAT_AS`)."""
        m = len(stats)
        cols = {c: np.zeros(m, bool if c == "drop_any" else INT) for c in nums}
        cols.update({ROLE: np.full(m, STAT, np.int32), Q: np.array([s["q"] for s in stats], np.int32),
                     SRC: np.zeros(m, np.int32), PS: np.zeros(m, np.int32)})
        for key, c in [*STAT_AS.items(), *((f"stored{k}", f"r{k}") for k in range(n))]:
            cols[c] = np.array([int(round(s.get("t_us", 0) * 1000)) if key == "t_ns" else s.get(key, -1)
                                for s in stats], INT)
        other = {f.name: pa.nulls(m, f.type) for f in u_arrow if f.name not in cols}   # keys, payload
        return table_of(cols, m, other)

    def stats_of(table):
        """The earlier hops' statistics rows of ``table`` (:data:`STAT_AS`) as dicts."""
        got = table.select([Q] + list(STAT_AS.values()) + [f"r{k}" for k in range(n)]).to_pylist()
        return [{"q": r[Q], **{k: r[c] for k, c in STAT_AS.items() if k != "t_ns"}, "t_us": r[STAT_AS["t_ns"]] / 1000,
                 **({f"stored{k}": r[f"r{k}"] for k in range(n)} if r["r0"] >= 0 else {})} for r in got]

    def hop_task(hop: int):
        final = hop == n - 1

        def run(table):
            role = table.column(ROLE).to_numpy()
            q = int(table.column(Q)[0].as_py())
            passed = stats_of(table.filter(pa.array(role == STAT))) if (role == STAT).any() else []
            stored = table.filter(pa.array(role == STORED))
            probers = table.filter(pa.array((role != STAT) if hop == 1 else (role == PARTIAL)))
            t0 = time.perf_counter()
            m = probers.num_rows
            arr = columns_of(probers, hop)
            arr["pidx"] = np.arange(m, dtype=INT)
            own = columns_of(stored, hop)
            sstream, ms = own["ps"], stored.num_rows
            pick = np.zeros(ms, INT)
            for k in range(n):
                pick = np.where(sstream == k, own[f"t{k}"], pick)
            # a stored tuple's "row" is its position in `stored`: the extension's r<k> indexes it
            sd = {"stream": sstream, "row": np.arange(ms, dtype=INT), "ts": pick, "a": own["amax"],
                  "arrival": own["arrmax"]}
            if sym:
                sd.update({f"H{j}": own[f"h{j}"] for j in range(n)})
            else:
                sd.update(dropped=own["drop_any"], rel_us=own["relmax"])
            if keyed:
                ids = key_ids([pl.from_arrow(probers.select(keycols)), pl.from_arrow(stored.select(keycols))])
                arr["kid"], sd["kid"] = np.asarray(ids[0], INT), np.asarray(ids[1], INT)
            cols = ["pidx", "ps"] + [f"{c}{k}" for c in "rta" for k in range(n)] + ["amax", "arrmax"] \
                + ([f"h{j}" for j in range(n)] if sym else ["drop_any", "relmax"])
            ext = extend_with(lambda c, idx, ps: arr[c][idx], arr["ps"], sd, hop, n, W, plan.orders, keyed, cols)
            pidx = ext["pidx"]
            pos = {}   # per extended stream k: the extensions' rows and their stored tuples (positions)
            for ps in distinct_small(ext["ps"]).tolist():
                k = plan.orders[ps][hop - 1]
                sel = np.flatnonzero(ext["ps"] == ps)
                pos.setdefault(k, []).append(sel)
            # the folds extend_with does not know, and the extended member's real row
            if sym:
                ext["tlast"] = arr["tlast"][pidx]
            else:
                ext["kneedmax"] = arr["kneedmax"][pidx]
            # results: each member's payload from the prober (row pidx) or, the member just
            # joined, the stored tuple (row m + its position) of probers and stored side by side
            src = {k: pidx.copy() for k in range(n)} if results else {}
            for k in range(n) if results else ():
                ext[f"arr{k}"] = arr[f"arr{k}"][pidx]
            for k, sels in pos.items():
                sel = np.concatenate(sels)
                sx = ext[f"r{k}"][sel]
                ext[f"r{k}"][sel] = own[f"r{k}"][sx]
                if sym:
                    last = ext[f"a{k}"][sel] == ext["amax"][sel]
                    ext["tlast"][sel] = np.where(last, own["tlast"][sx], ext["tlast"][sel])
                else:
                    ext["kneedmax"][sel] = np.maximum(ext["kneedmax"][sel], own["kneedmax"][sx])
                if results:
                    ext[f"arr{k}"][sel] = own["arrmax"][sx]
                    src[k][sel] = m + sx
            payload = {f: pa.concat_arrays([probers.column(f).combine_chunks(), stored.column(f).combine_chunks()])
                       .take(pa.array(src[k])) for k in range(n) for f in pay[k]} if results else {}
            mout = len(pidx)
            stat = {"q": q, "n_in": m if hop == 1 else 0, "n_cand": mout, "n_out": mout if final else 0,
                    "n_inter_in": int((probers.column(SRC).to_numpy() != q).sum()) if hop > 1 else 0}
            if hop == 1:   # the tuples stored here, per stream (the routing report's, without results)
                stat.update({f"stored{k}": c for k, c in enumerate(np.bincount(sstream, minlength=n).tolist())})
            if final:
                emitted, emit_us, latency, need, period = combination_facts(ext, n, W, family, first, period_us)
                if results:
                    rows = result_rows(ext, payload, emitted, emit_us, latency, need, period)
                    stat["t_us"] = (time.perf_counter() - t0) * 1e6
                    return with_stat_rows(rows, passed + [stat], o_arrow)
                dup = count_duplicates([ext[f"r{k}"] for k in range(n)], list(sizes), emitted) if mout else 0
                parts = [(CODE, *_counts(period * 2 + emitted)), (LATENCY, *_counts(latency[emitted])),
                         (NEED_KIND, *_counts(need)), (DUPS, np.zeros(1, INT), np.array([dup], INT))]
                for st in passed + [stat]:   # hop 1's stored tuples: value stream x P + partition
                    if "stored0" in st:
                        parts.append((STORED_KIND, np.arange(n, dtype=INT) * P + int(st["q"]),
                                      np.array([st[f"stored{k}"] for k in range(n)], INT)))
                summ = pa.table({KIND: pa.array(np.concatenate([np.full(len(v), kd, np.int32) for kd, v, _ in parts]),
                                                 pa.int32()),
                                 VALUE: pa.array(np.concatenate([v for _, v, _ in parts]), pa.int64()),
                                 COUNT: pa.array(np.concatenate([c for _, _, c in parts]), pa.int64())})
                stat["t_us"] = (time.perf_counter() - t0) * 1e6
                return with_stat_rows(summ, passed + [stat], o_arrow)
            # on to the next hop: q itself plus the cover of the next stream's segments
            ps = ext["ps"]
            tprober = np.zeros(mout, INT)
            for k in range(n):
                tprober = np.where(ps == k, ext[f"t{k}"], tprober)   # the prober's slot routes the next hop
            idx, dest = copies(plan, hop + 1, ps, plan.slot(tprober), np.full(mout, q, INT))
            moved = {c: ext[c][idx] for c in nums}
            moved.update({ROLE: np.zeros(len(idx), np.int32), Q: dest, SRC: np.full(len(idx), q), PS: ps[idx]})
            other = {c: probers.column(c).take(pa.array(pidx[idx])) for c in keycols}
            other.update({f: payload[f].take(pa.array(idx)) for f in payload})
            stat["t_us"] = (time.perf_counter() - t0) * 1e6
            if hop == 1:   # the stored tuples stay here, from now on in the layout
                kept = {c: v for c, v in own.items() if c in nums}
                kept.update({ROLE: np.full(ms, STORED, np.int32), Q: np.full(ms, q), SRC: np.full(ms, q), PS: sstream})
                stored = table_of(kept, ms, {c: stored.column(c) for c in keycols + [f for p in pay for f in p]})
            return pa.concat_tables([table_of(moved, len(idx), other), stored.cast(u_arrow),
                                     stat_in_hop(passed + [stat])])
        return run

    def result_rows(ext, payload, emitted, emit_us, latency, need, period):
        """The results rows (``rschema`` but the statistics) of the complete combinations."""
        cols = {}
        for k, name in enumerate(names):
            cols[f"{name}_row"] = pa.array(ext[f"r{k}"], o_arrow.field(f"{name}_row").type)
            cols[f"{name}_ts_us"] = pa.array(ext[f"t{k}"], pa.int64())
            cols[f"{name}_arrival_us"] = pa.array(ext[f"arr{k}"], pa.int64())
            for f, c in payload_cols[k]:
                cols[f"{name}_{c}"] = payload[f]
        for c, v in zip(COMBINATION_COLS, (emit_us, latency, emitted, need, period)):   # by name, in any order
            cols[c] = pa.array(v, o_arrow.field(c).type)
        return pa.table(cols)

    stored, shipped = stored_and_shipped(data, plan, n) if results else (None, None)
    # only what the hops read moves: the family's facts, keys, and payload when results are written
    frame = routed_copies(data.select("stream", *tuple_cols, *keycols, *[f for p in pay for f in p]), plan)
    for hop in range(1, n):
        frame = frame.groupBy(Q).applyInArrow(hop_task(hop), out_schema if hop == n - 1 else U)
    return frame, stored, {"shipped_tuples": shipped}


def ctr_summary(frame, P: int, n: int) -> tuple[ResultSummary, np.ndarray, dict[int, dict], np.ndarray, int]:
    """The merged summary, the occupied periods and the partitions' statistics from
    :func:`ctr_combinations`' frame without results: one job, whose aggregation
    sums the tasks' counts per (kind, value) and their statistics per partition, so
    that O(periods + distinct latencies and slacks + P) rows reach the driver (each
    task's own value counts would be up to P times as many)."""
    from pyspark.sql import functions as F

    t = frame.groupBy(KIND, VALUE, STAT_Q).agg(*[F.sum(c).alias(c) for c in (COUNT, *STAT_COLS[1:])]).toArrow()
    stat = t.column(STAT_Q).is_valid().to_numpy(zero_copy_only=False)
    stats = merge_stats(t.filter(stat).select(list(STAT_COLS)).to_pylist(), P)
    s = t.filter(~stat)
    kind, value, count = (s.column(c).to_numpy() for c in (KIND, VALUE, COUNT))

    def merged(kd):
        sel = kind == kd
        v, inv = np.unique(value[sel], return_inverse=True)
        return v.astype(INT), np.bincount(inv, weights=count[sel], minlength=len(v)).astype(INT)

    codes, per = merged(CODE)
    ids, at = np.unique(codes // 2, return_inverse=True)
    periods = np.zeros(2 * len(ids), INT)
    np.add.at(periods, 2 * at + codes % 2, per)
    summary = ResultSummary(truth=int(periods.sum()), emitted=int(periods[1::2].sum()),
                            duplicates=int(count[kind == DUPS].sum()), periods=periods,
                            latency=merged(LATENCY), need=merged(NEED_KIND))
    stored = np.zeros(n * max(P, 1), np.int64)
    np.add.at(stored, value[kind == STORED_KIND], count[kind == STORED_KIND])
    # every copy shipped at hop 1 is a tuple some hop-1 task received (n_in: hop 1's only)
    return summary, ids.astype(INT), stats, stored.reshape(n, max(P, 1)), sum(s["n_in"] for s in stats.values())
