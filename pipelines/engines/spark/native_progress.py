"""The native Spark path's progress pass and memory series: prefix scans over a
DataFrame in replay order, the facts left on the executors (issue 19).

:func:`progress_frame` range-partitions the tuples (every column: keys and
payload ride along) by ``(arrival, stream, row)`` (the replay order, SPEC
§2) once and persists them (``MEMORY_AND_DISK``).
:func:`~.progress.carried` runs the scans of
:mod:`~streamjoin.pipelines.replay.partitioned_progress` as two
``mapInArrow`` summary jobs (O(P x n) numbers to the driver: rows, smallest
and largest ``ts`` and largest own delay per stream, first and last arrival;
then the largest release / horizon candidate); the driver turns them into
carried-in prefixes, and one more ``mapInArrow`` attaches every tuple's facts
(arrival index ``a``, frontier ``T``, delay, ``R``, dropped, horizons
``H_k``, expired, the required K-slack ``kneed``) as columns of a DataFrame
that stays on the executors.  Only the columns the policy's family computes
go through Python and the cache; those it holds constant (sorting: ``H_k`` =
0, expired false; symmetric: ``R`` = 0, dropped false, no release) are
literal columns on the persisted frame.

The same ``mapInArrow`` finds where each tuple is released (sorting family:
the first index ``>= a_x`` at which ``R`` reaches ``ts``) and where it leaves
memory (the first index at which ``R`` -- sorting -- or ``T`` -- symmetric,
``H_k = T - d_k`` passing ``ts + W_k`` -- exceeds ``ts + W (+ d)``; ``qjoin``,
whose retentions ``d_k(a)`` follow its decisions: the first index at which
stream ``k``'s horizon ``H_k`` exceeds ``ts + W_k``, searched in ``H_k``):
these sequences never decrease, so it is a ``searchsorted`` in the partition's own
sequence (:func:`local_search`) when the partition reaches the value, and
otherwise in the first later partition whose last value does (the driver
knows each partition's last value: O(P)).  Those few tuples -- near a
partition's end -- are found there (:func:`search_head`, a
``groupBy(partition).applyInArrow`` over them and the partition's head, the
driver getting the largest value and count per partition, O(P)) and joined
back: broadcast when at most 2,000,000 are marked (the facts keep the replay
order's partitions: ``Progress.in_order``), else a shuffle join.

:func:`memory_stats` is the memory series as a prefix sum: +1 at each held
tuple's own index, -1 where it leaves (the rule of
:func:`~streamjoin.pipelines.replay.progress.memory_per_stream`), each event
sent to the partition of the replay order holding its index, summed per
partition (n numbers each to the driver) and scanned with the carried-in
sums; each partition returns its peak and sums per bucket of the report's
downsampled series (:func:`~streamjoin.pipelines.report.build.memory_series`'
buckets): O(P + buckets) numbers.  When the facts frame keeps the replay
order's partitions (the found rows broadcast: ``Progress.in_order``) that is
done without a shuffle (:func:`_memory_in_order`): a ``mapInArrow`` gives each
partition's sums and the events it sends past its own range to the driver (at
most :data:`FOREIGN_MAX`, else the shuffle), a second scans each partition where
it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...base.timeunits import NEG_INF
from ...policies import SORTING, PolicySpec
from ...replay import partitioned_progress as sp
from .kernels import INT
from .progress import TUPLE_COLS, arrow_chunk, carried, one_group_per_task, table_of

#: columns of the facts frame beside stream, row, ts, arrival (H0.. follow per stream)
FACTS = ("a", "T", "delay", "R", "dropped", "expired", "kneed")


@dataclass
class Progress:
    """The facts frame (on the executors) and the scalars the driver keeps."""

    facts: object          # DataFrame: the input's columns, FACTS, H0.., rel / rel_us (sorting), end
    N: int
    first: int | None      # first and last arrival (None: no tuples)
    last: int | None
    partitions: int
    offsets: list = field(default_factory=list)   # each partition's first arrival index
    ts_min: int | None = None                      # smallest and largest ts (None: no tuples)
    ts_max: int | None = None
    cached: list = field(default_factory=list)     # the persisted frames under ``facts`` (:meth:`release`)
    in_order: bool = False                         # ``facts``' partition p is the replay order's p-th range

    def release(self) -> None:
        """Unpersist the frames the facts are read from (after the last reader)."""
        for df in self.cached:
            df.unpersist()


def local_search(G, v, a, arrival, strict: bool, held, off: int, G_end, p: int, N: int, last: int):
    """The first index ``>= a`` at which the never-decreasing ``G`` reaches ``v``
    (``strict``: exceeds it) and the arrival there, for this partition's queries:
    found here (a ``searchsorted`` in the partition's own ``G``), never (``N``, the
    last arrival), or ``-1`` with the later partition where it is (``G_end``: ``G`` at
    each partition's last index; the first later one whose end reaches ``v``)."""
    side = "right" if strict else "left"
    m = len(G)
    j = np.searchsorted(G, v, side=side)
    here = j < m
    jj = np.minimum(j, max(m - 1, 0))
    later = np.asarray(G_end[p + 1:], INT)
    k = np.searchsorted(later, v, side=side)
    where = np.where(here | (k >= len(later)), -1, p + 1 + k)
    never = ~here & (where < 0)
    idx = np.where(here, np.maximum(a, off + jj), np.where(never, N, -1))
    us = np.where(here, np.maximum(arrival, arrival[jj] if m else 0), np.where(never, last, -1))
    idx, us, where = np.where(held, idx, N), np.where(held, us, last), np.where(held, where, -1)
    return idx.astype(INT), us.astype(INT), where.astype(np.int32)


def marked_in(idx, to):
    """:func:`local_search`'s indexes with its marks folded in (one column instead of
    two on every row): ``-1 - q`` where the index is in the later partition ``q``."""
    return np.where(to >= 0, -1 - to.astype(INT), idx).astype(INT)


def search_head(G, a_h, arr_h, v, a, arrival, strict: bool):
    """The queries :func:`local_search` marked for a later partition, found in its
    head (its rows in order, up to the first where ``G`` passes the largest query):
    the first index at which ``G`` reaches ``v`` (``strict``: exceeds it) and the
    arrival there."""
    j = np.minimum(np.searchsorted(G, v, side="right" if strict else "left"), max(len(G) - 1, 0))
    if not len(G):
        return np.full(len(v), -1, INT), np.full(len(v), -1, INT)
    return np.maximum(a, a_h[j]).astype(INT), np.maximum(arrival, arr_h[j]).astype(INT)


def _progress_frame(spark, df, n: int, W, policy: PolicySpec, P: int, schedule, ordered, persisted: list) -> Progress:
    """The progress facts of a fixed policy (``none``, ``static``, ``kslack``,
    ``mpkslack``) or, given its ``schedule``, a recall-target one (``qjoin``,
    ``qkslack``: the decision times and values,
    :func:`~streamjoin.pipelines.replay.partitioned_progress.scheduled`; the hook
    of :mod:`.native_adaptive`) as a DataFrame on the executors; ``df``: stream,
    row, ts, arrival and anything else (keys, payload), which rides along: the
    facts frame has ``df``'s columns and the facts, range-partitioned in replay order.
    ``ordered``: ``df``'s rows (and maybe more columns) already so partitioned (``P``),
    sorted and persisted (:func:`.native_adaptive.decide`'s); used instead, unpersisted here.

    One range partitioning, persisted (``MEMORY_AND_DISK``: spills rather than
    filling the heap); :func:`~.progress.carried` (two summary jobs); one
    ``mapInArrow`` that attaches the facts and finds each tuple's release and
    where it leaves memory when that is in its own partition (nearly every tuple:
    both come soon after it) or marks the later partition where it is; the few
    marked ones are found there (``groupBy(partition).applyInArrow`` over them and
    that partition's head) and joined back."""
    import pyarrow as pa
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    W = np.asarray(W, dtype=INT)
    sorting = policy.family == SORTING
    qjoin = schedule is not None and not sorting   # leaves by H_k: d_k moves with the decisions
    d = np.zeros(n, INT) if sorting or qjoin else np.asarray(policy.retention, dtype=INT).reshape(n)
    held = ordered if ordered is not None else (
        df.repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
        .persist(StorageLevel.MEMORY_AND_DISK))
    if ordered is None:
        persisted.append(held)
    base = held.select(*df.columns)
    cy = carried(base.select(*TUPLE_COLS), n, policy, schedule)
    offsets, Mc, Kc, Rc, Hc, N = cy.offsets, cy.M, cy.K, cy.R, cy.H, cy.N
    first, last = cy.first, cy.last_arrival
    hcols = [f"H{k}" for k in range(n)]
    # the never-decreasing sequences the ends of stay are searched in, with their value one index
    # earlier (the marked partitions' heads) and at each partition's end: R, T, or qjoin's H_k
    seqs = ([(h, f"{h}_prev", [int(x[k]) for x in cy.H_end]) for k, h in enumerate(hcols)] if qjoin
            else [("R", "R_prev", cy.R_end) if sorting else ("T", "T_prev", cy.T_end)])
    hprev = [f"{h}_prev" for h in hcols] if qjoin else []
    types = {"a": pa.int64(), "T": pa.int64(), "T_prev": pa.int64(), "delay": pa.int64(), "R": pa.int64(),
             "R_prev": pa.int64(), "dropped": pa.bool_(), "expired": pa.bool_(), "kneed": pa.int64(),
             **{h: pa.int64() for h in hcols}, "rel": pa.int64(), "rel_us": pa.int64(), "end0": pa.int64(),
             **{h: pa.int64() for h in hprev}}
    # columns the family holds constant are literals on the persisted frame, not computed and cached per
    # tuple: sorting's horizons and expired, the symmetric family's R, dropped and release (never searched);
    # the head searches' "one index earlier" columns only where searched (R_prev sorting, T_prev symmetric)
    const = ({**{h: 0 for h in hcols}, "expired": False} if sorting
             else {"R": 0, "dropped": False, "rel": N, "rel_us": last if last is not None else 0})
    unused = {"T_prev"} if sorting else {"R_prev", "T_prev"} if qjoin else {"R_prev"}
    types = {c: t for c, t in types.items() if c not in const and c not in unused}
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType
    schema = StructType(base.schema.fields + [StructField(c, from_arrow_type(t)) for c, t in types.items()])

    def run_facts(it):
        t = table_of(it)
        if t is None:
            return
        # the partition scanned, not the task's: a lost cached block recomputed in a union's
        # stage (the marked searches, the memory events) runs in task P + i for its i
        p = int(t.column("__p")[0].as_py())
        t = t.drop_columns(["__p"])
        c = arrow_chunk(t)
        f = sp.facts(c, n, W, policy, offsets[p], Mc[p], Kc[p], Rc[p], Hc[p], schedule)
        m = len(c["ts"])
        t_in = int(Mc[p].min()) if n else NEG_INF          # T(a - 1) of the partition's first tuple
        T_prev = np.concatenate([[t_in], f["T"][:-1]]).astype(INT) if m else np.empty(0, INT)
        # tuning.required_k_per_tuple: k(x) = max(0, T(a_x - 1) - ts), 0 where T(a_x - 1) = -inf
        kneed = np.where(T_prev == NEG_INF, 0, np.maximum(T_prev - c["ts"], 0)).astype(INT)
        st, ts, arr = c["stream"].astype(np.int64), c["ts"], c["arrival"]
        # a tuple's release (sorting): first a >= a_x with R(a) >= ts; it leaves memory at the
        # first a where R (sorting) or T (symmetric: H_k = T - d_k passes ts + W_k) exceeds ts + W (+ d)
        held = ~f["dropped"]
        args = (f["a"], arr)
        if sorting:
            rel, rel_us, rel_to = local_search(f["R"], ts, *args, False, held, offsets[p], cy.R_end, p, N, last)
            rel = marked_in(rel, rel_to)
        else:
            rel, rel_us = np.full(m, N, INT), np.full(m, last, INT)
        lim = ts + W[st] + d[st]
        if qjoin:   # stream k's tuples in H_k
            end0, end_to = np.full(m, N, INT), np.full(m, -1, np.int32)
            for k, (h, _, h_end) in enumerate(seqs):
                mine = st == k
                e, _, to = local_search(f[h], lim, *args, True, held & mine, offsets[p], h_end, p, N, last)
                end0, end_to = np.where(mine, e, end0), np.where(mine, to, end_to)
        else:
            end0, _, end_to = local_search(f[seqs[0][0]], lim, *args, True, held, offsets[p], seqs[0][2], p, N, last)
        end0 = marked_in(end0, end_to)
        prev = {f"{h}_prev": np.concatenate([[Hc[p][k]], f[h][:-1]]).astype(INT) if m else np.empty(0, INT)
                for k, h in enumerate(hcols) if qjoin}
        cols = {"a": f["a"], "T": f["T"], "T_prev": T_prev, "delay": f["delay"], "R": f["R"], "R_prev": f["R_prev"],
                "dropped": f["dropped"], "expired": f["expired"], "kneed": kneed, **{h: f[h] for h in hcols},
                "rel": rel, "rel_us": rel_us, "end0": end0, **prev}
        for name, typ in types.items():
            t = t.append_column(name, pa.array(np.asarray(cols[name]), typ))
        yield from t.to_batches()

    cached_pre = (base.withColumn("__p", F.spark_partition_id()).mapInArrow(run_facts, schema)
                  .persist(StorageLevel.MEMORY_AND_DISK))
    persisted.append(cached_pre)
    pre = cached_pre.withColumns({c: F.lit(v).cast("boolean" if isinstance(v, bool) else "bigint")
                                  for c, v in const.items()})
    lim = F.col("ts") + F.element_at(F.array(*[F.lit(int(w + x)) for w, x in zip(W, d)]), F.col("stream") + 1)
    # g: the sequence a query is searched in (seqs' index: qjoin's leave queries by their stream)
    g_leave = F.col("stream") if qjoin else F.lit(0)
    # a marked tuple's rel / end0 is -1 - (the later partition where it is found): marked_in
    queries = (pre.filter(F.col("rel") < 0).select((-1 - F.col("rel")).cast("int").alias("q"), F.lit(0).alias("s"),
                                                   F.lit(0).alias("g"), F.col("ts").alias("v"), "a", "arrival")
               .unionByName(pre.filter(F.col("end0") < 0).select((-1 - F.col("end0")).cast("int").alias("q"),
                                                                 F.lit(1).alias("s"), g_leave.alias("g"),
                                                                 lim.alias("v"), "a", "arrival")))
    heads = {(int(r["q"]), int(r["g"])): (int(r["v"]), int(r["count"])) for r in
             queries.groupBy("q", "g").agg(F.max("v").alias("v"), F.count("*").alias("count")).collect()}
    held.unpersist()   # pre is whole: the aggregation above read every partition
    fdf, cached, in_order = pre, [cached_pre], True
    if heads:
        head = None
        for j, (g, g_prev, _) in enumerate(seqs):
            marked = sorted({q for q, gj in heads if gj == j})
            if not marked:
                continue
            # the partition a row of pre lies in: pre keeps the replay order's partitions (a scan of its cache)
            here = F.spark_partition_id()
            top = F.element_at(F.array(*[F.lit(heads.get((q, j), (NEG_INF, 0))[0]) for q in range(P)]), here + 1)
            # the head of each marked partition: its rows up to the first where G passes the largest query
            part = (pre.filter(here.isin(marked) & (F.col(g_prev) <= top))
                    .select(here.alias("q"), F.lit(2).alias("s"), F.lit(j).alias("g"), F.col(g).alias("v"),
                            "a", "arrival"))
            head = part if head is None else head.unionByName(part)

        def resolve(t):
            s, g, v, a, arr = (t.column(c).to_numpy() for c in ("s", "g", "v", "a", "arrival"))
            out = {"a": [], "s": [], "idx": [], "us": []}
            for j in np.unique(g):
                h = np.flatnonzero((s == 2) & (g == j))
                h = h[np.argsort(a[h], kind="stable")]
                for kind in (0, 1):
                    qs = np.flatnonzero((s == kind) & (g == j))
                    idx, us = search_head(v[h], a[h], arr[h], v[qs], a[qs], arr[qs], strict=kind == 1)
                    out["a"].append(a[qs])
                    out["s"].append(np.full(len(qs), kind, np.int32))
                    out["idx"].append(idx)
                    out["us"].append(us)
            return pa.table({k: np.concatenate(x) for k, x in out.items()})

        found = (queries.unionByName(head).groupBy("q").applyInArrow(resolve, "a bigint, s int, idx bigint, us bigint")
                 .groupBy("a").agg(*[F.max(F.when(F.col("s") == k, F.col(c))).alias(f"{c}{k}")
                                     for k in (0, 1) for c in ("idx", "us")])
                 .persist(StorageLevel.MEMORY_AND_DISK))   # found once: every reader of the facts joins it
        persisted.append(found)
        cached.append(found)
        in_order = sum(c for _, c in heads.values()) <= 2_000_000
        if in_order:   # a few MB: sent to every task, no shuffle of pre (its partitions stay the replay order's)
            found = F.broadcast(found)
        fdf = (pre.join(found, "a", "left")
               .withColumn("rel", F.coalesce("idx0", "rel")).withColumn("rel_us", F.coalesce("us0", "rel_us"))
               .withColumn("end0", F.coalesce("idx1", "end0")).drop("idx0", "us0", "idx1", "us1"))
    end = F.greatest("end0", "a", "rel") if sorting else F.greatest("end0", "a")
    fdf = fdf.withColumn("end", end).drop("end0", "T_prev", "R_prev", *hprev)
    if not sorting:
        fdf = fdf.drop("rel", "rel_us")
    return Progress(facts=fdf, N=N, first=first, last=last, partitions=P, offsets=list(offsets),
                    ts_min=cy.ts_min, ts_max=cy.ts_max, cached=cached, in_order=in_order)


def progress_frame(spark, df, n: int, W, policy: PolicySpec, P: int, schedule=None, ordered=None) -> Progress:
    """:func:`_progress_frame`'s progress facts (its docstring); when a step fails, the
    frames it persisted are unpersisted (``ordered`` stays the caller's to drop)."""
    persisted: list = []
    try:
        return _progress_frame(spark, df, n, W, policy, P, schedule, ordered, persisted)
    except BaseException:
        for frame in persisted:
            frame.unpersist()
        raise


def bucket_pieces(mem, w, starts, lo: int) -> dict:
    """A partition's memory ``mem`` (``(n, m)`` tuples held per stream at its indexes
    ``lo..lo+m-1``) cut at the report's series buckets (``starts``): per bucket it
    touches, the peak and sum of the tuples held and of their bytes (``w`` per stream)."""
    n, m = mem.shape
    total = mem.sum(axis=0)
    nbytes = mem[0] * w[0]                 # metrics.memory_summary: the same products, the same order
    for k in range(1, n):
        nbytes = nbytes + mem[k] * w[k]
    bucket = np.searchsorted(starts, lo + np.arange(m), side="right") - 1
    heads = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))
    return {"bucket": bucket[heads].astype(INT), "peak": np.maximum.reduceat(total, heads).astype(INT),
            "sum": np.add.reduceat(total, heads).astype(INT),
            "bpeak": np.maximum.reduceat(nbytes, heads).astype(np.float64),
            "bsum": np.add.reduceat(nbytes, heads).astype(np.float64)}


def memory_stats(spark, prog: Progress, n: int, row_bytes, points: int, held_all: bool):
    """Memory over arrival indexes from the facts' ``a`` / ``end``: ``(tuples, bytes,
    series)`` as :func:`~streamjoin.pipelines.analysis.metrics.memory_summary` and
    :func:`~streamjoin.pipelines.report.build.memory_series` give them.
    ``held_all``: every tuple is held from its arrival (symmetric family;
    sorting: all but the dropped).

    +1 at each held tuple's index, -1 at its ``end``; each event goes to the
    partition of the replay order holding its index (``prog.offsets``); the
    per-partition sums (n numbers each) give every partition its carried-in
    memory; one ``groupBy(partition).applyInArrow`` turns each partition's events
    into its memory at every index (a dense prefix sum) and returns its peak and
    sums per bucket of the report's series.  With ``prog.in_order``,
    :func:`_memory_in_order` instead (no shuffle of the events)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    N = prog.N
    if N == 0:
        return ({"peak": 0, "mean": 0.0}, {"peak": 0, "mean": 0.0},
                {"arrival_us": [], "peak": [], "mean": [], "points": 0, "arrivals_per_point": 0})
    if prog.in_order:
        got = _memory_in_order(prog, n, row_bytes, points, held_all)
        if got is not None:
            return got
    f = prog.facts if held_all else prog.facts.filter(~F.col("dropped"))
    offs = [int(o) for o in prog.offsets]
    bounds = offs + [N]
    Q = len(offs)
    plus = f.select(F.col("a").alias("i"), "stream", F.lit(1).alias("d"))
    minus = f.filter(F.col("end") < N).select(F.col("end").alias("i"), "stream", F.lit(-1).alias("d"))
    ev = plus.unionByName(minus)
    # the last partition starting at or before i (an empty one shares its start with the next)
    ev = ev.withColumn("g", sum((F.col("i") >= F.lit(o)).cast("int") for o in offs[1:]) if Q > 1 else F.lit(0))
    per = np.zeros((Q, n), INT)
    for r in ev.groupBy("g").agg(*[F.sum(F.when(F.col("stream") == k, F.col("d")).otherwise(0)).alias(f"d{k}")
                                   for k in range(n)]).collect():
        per[int(r["g"])] = [int(r[f"d{k}"] or 0) for k in range(n)]
    carry = np.vstack([np.zeros((1, n), INT), np.cumsum(per, axis=0)[:-1]])
    # every partition with tuples has a group, even without events (its memory is its carry)
    marks = spark.createDataFrame([(g, offs[g], 0, 0) for g in range(Q) if bounds[g + 1] > offs[g]],
                                  "g int, i bigint, stream int, d int")
    ev = ev.select(F.col("g").cast("int"), F.col("i").cast("bigint"), F.col("stream").cast("int"),
                   F.col("d").cast("int")).unionByName(marks)
    b = min(points, N)
    starts = np.unique(np.linspace(0, N, b, endpoint=False).astype(np.int64))
    w = np.asarray(row_bytes, dtype=np.float64)

    def scan(t):
        g = int(t.column("g")[0].as_py())
        lo, m = bounds[g], bounds[g + 1] - bounds[g]
        i, st, dd = (t.column(c).to_numpy() for c in ("i", "stream", "d"))
        i = i - lo
        mem = np.empty((n, m), INT)
        for k in range(n):
            mine = st == k
            delta = (np.bincount(i[mine & (dd > 0)], minlength=m)[:m]
                     - np.bincount(i[mine & (dd < 0)], minlength=m)[:m])
            mem[k] = np.cumsum(delta) + carry[g][k]
        return pa.table(bucket_pieces(mem, w, starts, lo))

    got = one_group_per_task(ev, "g", Q).groupBy("__pk").applyInArrow(scan, "bucket bigint, peak bigint, sum bigint, bpeak double, bsum double").toArrow()
    arr = {int(r["a"]): int(r["arrival"]) for r in
           prog.facts.filter(F.col("a").isin([int(x) for x in starts])).select("a", "arrival").collect()}
    return merged_pieces({c: got.column(c).to_numpy() for c in got.column_names}, starts, N, arr)


def merged_pieces(g: dict, starts, N: int, arr: dict):
    """The partitions' :func:`bucket_pieces` (``g``: their columns, concatenated) merged
    into :func:`memory_stats`' ``(tuples, bytes, series)``; ``arr``: the arrival time at
    each series point (index -> arrival)."""
    B = len(starts)
    peak, total_sum = np.zeros(B, INT), np.zeros(B, INT)
    np.maximum.at(peak, g["bucket"], g["peak"])
    np.add.at(total_sum, g["bucket"], g["sum"])
    bpeak = float(g["bpeak"].max()) if len(g["bpeak"]) else 0.0
    bsum = float(g["bsum"].sum())
    sizes = np.diff(np.append(starts, N))
    tuples = {"peak": int(peak.max()), "mean": float(int(total_sum.sum()) / N)}
    nbytes = {"peak": int(round(max(bpeak, 0.0))), "mean": bsum / N}
    series = {"arrival_us": [arr[int(x)] for x in starts], "peak": peak.tolist(),
              "mean": (total_sum / sizes).round(3).tolist(), "points": int(B),
              "arrivals_per_point": float(N / B)}
    return tuples, nbytes, series


#: the largest number of events crossing a partition boundary :func:`_memory_in_order` takes to the
#: driver (more: the shuffle).  Each costs the driver about 90 bytes (:func:`crossing_events`: the
#: aggregated row, its copy by destination, and the pickled scan task that carries it): 400,000 are
#: about 35 MB, within the native path's driver budget (docs/performance.md, 160 MB above the
#: session's start); 2,000,000 were about 175 MB, past it on their own
FOREIGN_MAX = 400_000


def crossing_events(rows, Q: int, n: int):
    """:func:`_memory_in_order`'s first job's aggregated rows (``kind``, ``g``, ``i``,
    ``stream``, ``d``: kind 0 a partition's sums per stream, kind 1 the events landing at
    index ``i`` of partition ``g``) as each partition's carried-in memory (``(Q, n)``) and
    the events it receives: partition -> (indexes, streams, counts)."""
    r = {c: rows.column(c).to_numpy() for c in ("kind", "g", "i", "stream", "d")}
    per = np.zeros((Q, n), INT)
    s = r["kind"] == 0
    np.add.at(per, (r["g"][s], r["stream"][s]), r["d"][s])
    carry = np.vstack([np.zeros((1, n), INT), np.cumsum(per, axis=0)[:-1]])
    s = np.flatnonzero(r["kind"] == 1)
    g = r["g"][s]
    order = np.argsort(g, kind="stable")
    s, g = s[order], g[order]
    cut = np.flatnonzero(np.diff(g)) + 1
    incoming = {int(gs[0]): (r["i"][ss], r["stream"][ss], r["d"][ss])
                for ss, gs in zip(np.split(s, cut), np.split(g, cut)) if len(ss)}
    return carry, incoming


def _memory_in_order(prog: Progress, n: int, row_bytes, points: int, held_all: bool):
    """:func:`memory_stats` without a shuffle, when the facts' partitions are the replay
    order's ranges (``prog.in_order``): one ``mapInArrow`` gives per partition its
    events' sums per stream (``n`` numbers) and the ``-1`` events it sends to a later
    partition (a held tuple whose ``end`` is past its own range: those near a boundary),
    aggregated by index; a second ``mapInArrow`` scans each partition's own events
    with those it receives and its carried-in memory (the dense prefix sum), returning
    its peak and sums per bucket of the report's series and the arrival time at the
    series points it holds.  None (the caller shuffles instead) when more than
    :data:`FOREIGN_MAX` events cross a boundary."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    N = prog.N
    offs = np.asarray([int(o) for o in prog.offsets], INT)
    bounds = np.append(offs, N)
    Q = len(offs)
    cols = ["a", "end", "stream", "dropped", "arrival"]

    def held_events(t):
        a, end, st = (t.column(c).to_numpy() for c in ("a", "end", "stream"))
        held = np.ones(len(a), bool) if held_all else ~t.column("dropped").to_numpy(zero_copy_only=False)
        leaves = held & (end < N)
        g_end = np.searchsorted(offs, end[leaves], side="right") - 1   # an empty partition shares the next's start
        return a, st.astype(INT), held, end[leaves], st[leaves].astype(INT), g_end

    def sums(it):
        p = TaskContext.get().partitionId()
        t = table_of(it)
        if t is None:
            return
        a, st, held, e, est, g = held_events(t)
        out = {"kind": [], "g": [], "i": [], "stream": [], "d": []}

        def put(kind, gg, i, s, d):
            for k, v in (("kind", np.full(len(d), kind)), ("g", gg), ("i", i), ("stream", s), ("d", d)):
                out[k].append(np.asarray(v, INT))
        put(0, np.full(n, p), np.zeros(n), np.arange(n), np.bincount(st[held], minlength=n))
        code, c = np.unique(g * n + est, return_counts=True)
        put(0, code // n, np.zeros(len(c)), code % n, -c)
        away = g != p
        code, c = np.unique(e[away] * n + est[away], return_counts=True)
        put(1, np.searchsorted(offs, code // n, side="right") - 1, code // n, code % n, -c)
        yield pa.RecordBatch.from_pydict({k: np.concatenate(v) for k, v in out.items()})

    facts = prog.facts.select(*cols)
    part = facts.mapInArrow(sums, "kind bigint, g bigint, i bigint, stream bigint, d bigint").persist()
    try:   # small: n rows per partition and the boundary-crossing events
        if part.filter(F.col("kind") == 1).count() > FOREIGN_MAX:
            return None
        rows = part.groupBy("kind", "g", "i", "stream").agg(F.sum("d").alias("d")).toArrow()
    finally:
        part.unpersist()
    carry, incoming = crossing_events(rows, Q, n)
    del rows
    b = min(points, N)
    starts = np.unique(np.linspace(0, N, b, endpoint=False).astype(np.int64))
    w = np.asarray(row_bytes, dtype=np.float64)

    def scan(it):
        p = TaskContext.get().partitionId()
        t = table_of(it)
        lo, m = int(bounds[p]), int(bounds[p + 1] - bounds[p])
        if t is None or m == 0:
            return
        a, st, held, e, est, g = held_events(t)
        if len(a) != m or a.min() != lo or a.max() != lo + m - 1:
            raise RuntimeError(f"memory scan: partition {p} holds not the replay order's indexes {lo}..{lo + m - 1}")
        own = g == p
        fi, fs, fd = incoming.get(p, (np.empty(0, INT), np.empty(0, INT), np.empty(0, INT)))
        mem = np.empty((n, m), INT)
        for k in range(n):
            delta = (np.bincount(a[held & (st == k)] - lo, minlength=m)[:m]
                     - np.bincount(e[own & (est == k)] - lo, minlength=m)[:m])
            np.add.at(delta, fi[fs == k] - lo, fd[fs == k])
            mem[k] = np.cumsum(delta) + carry[p][k]
        pieces = bucket_pieces(mem, w, starts, lo)
        arrival = np.empty(m, INT)
        arrival[a - lo] = t.column("arrival").to_numpy()
        pts = starts[(starts >= lo) & (starts < lo + m)]
        k0, k1 = np.zeros(len(pieces["bucket"]), INT), np.ones(len(pts), INT)
        yield pa.RecordBatch.from_pydict({
            "kind": np.concatenate([k0, k1]), "bucket": np.concatenate([pieces["bucket"], pts]).astype(INT),
            "peak": np.concatenate([pieces["peak"], arrival[pts - lo]]).astype(INT),
            "sum": np.concatenate([pieces["sum"], k1 * 0]).astype(INT),
            "bpeak": np.concatenate([pieces["bpeak"], k1 * 0.0]).astype(np.float64),
            "bsum": np.concatenate([pieces["bsum"], k1 * 0.0]).astype(np.float64)})

    got = facts.mapInArrow(scan, "kind bigint, bucket bigint, peak bigint, sum bigint, bpeak double, bsum double") \
        .toArrow()
    g = {c: got.column(c).to_numpy() for c in got.column_names}
    pt = g["kind"] == 1
    arr = dict(zip(g["bucket"][pt].tolist(), g["peak"][pt].tolist()))
    return merged_pieces({c: v[~pt] for c, v in g.items()}, starts, N, arr)
