"""The partition-wise progress pass on Spark (:func:`spark_progress`): the
scans of :mod:`~streamjoin.pipelines.replay.partitioned_progress` as
``mapInArrow`` stages over a DataFrame range-partitioned in replay order.

:func:`carried` is the carried-summary chain (per partition summaries to the
driver, carried-in prefixes back) that both :func:`spark_progress` and the
native path (:mod:`.native_progress`) run; :func:`per_partition` is its one
"a few numbers per partition" collector.

Used only when asked for (``spark_join(progress="spark")``, or ``"auto"``
with a threshold): by default the driver computes the progress facts
(:func:`~streamjoin.pipelines.replay.partitioned_progress.driver_facts`),
because it has loaded the tuples and needs every tuple's facts for the
report anyway (docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...policies import SORTING, SYMMETRIC, PolicySpec
from ...replay import partitioned_progress as sp
from .kernels import INT
from .session import arrow_table, numpy_columns, spark_schema


#: the largest int64 sentinel (as ``NEG_INF`` the smallest): an empty chunk's smallest ts / arrival
POS_INF = -sp.NEG_INF
TUPLE_COLS = ("stream", "row", "ts", "arrival")
TUPLE_DTYPES = (np.int32, INT, INT, INT)


@dataclass
class Carried(sp.Carries):
    """The carried-in prefixes of a range-partitioned replay order, one entry per
    partition (:class:`~streamjoin.pipelines.replay.partitioned_progress.Carries`:
    ``offsets``, the arrival index of its first tuple; ``M``, largest ``ts`` per
    stream before it; ``K``, MP-K-slack's carried K; ``R``, sorting: the release
    frontier before it; ``H``, symmetric: the horizons before it; ``N`` tuples in
    all; ``last_arrival``, None: no tuples).  Also, from the same summaries:
    ``R_end`` / ``T_end``, the release frontier and the frontier ``T`` at each
    partition's last tuple (its carry if empty), ``H_end`` (symmetric) the
    horizons there, the first arrival and the smallest and largest ``ts``
    (None: no tuples)."""

    R_end: list[int]
    T_end: list[int]
    H_end: list[np.ndarray]
    first: int | None
    ts_min: int | None
    ts_max: int | None


def arrow_chunk(t, names=TUPLE_COLS, dtypes=TUPLE_DTYPES) -> dict:
    """An Arrow table's ``names`` as numpy columns (empty ones of ``dtypes`` for None)."""
    if t is None:
        return {c: np.empty(0, d) for c, d in zip(names, dtypes)}
    return {c: t.column(c).to_numpy() for c in names}


def table_of(it):
    """A ``mapInArrow`` partition's batches as one Arrow table (None: no batches)."""
    import pyarrow as pa

    batches = list(it)
    return pa.Table.from_batches(batches) if batches else None


def per_partition(df, fn, width: int, default) -> list[np.ndarray]:
    """``fn(partition's rows as an Arrow table or None, partition id) -> width numbers``
    for every partition of ``df``, in partition order (``default`` where a partition
    returned nothing): one ``mapInArrow`` job, ``width + 1`` numbers per partition to
    the driver."""
    import pyarrow as pa
    from pyspark import TaskContext

    def run(it):
        p = TaskContext.get().partitionId()
        v = fn(table_of(it), p)
        yield pa.RecordBatch.from_pydict({"p": [p], **{f"v{i}": [int(x)] for i, x in enumerate(v)}})

    rows = df.mapInArrow(run, ", ".join(["p bigint"] + [f"v{i} bigint" for i in range(width)])).collect()
    got = {r["p"]: np.array([r[f"v{i}"] for i in range(width)], INT) for r in rows}
    P = df.rdd.getNumPartitions()
    return [got.get(p, np.asarray(default, INT)) for p in range(P)]


def one_group_per_task(df, col: str, P: int, key: str = "__pk"):
    """``df`` shuffled so that each value ``0..P-1`` of the int column ``col`` is
    alone in its own task: a column ``key`` whose Spark hash lands on partition ``col``
    (``pmod(hash(key), P)``, the hash partitioner's; found by a tiny job), and
    ``repartition(P, key)`` (a shuffle with an explicit number of partitions, which
    adaptive execution leaves as it is).  ``groupBy(col)`` alone hashes ``P`` values
    into ``spark.sql.shuffle.partitions`` buckets, where two often share one task
    (or AQE coalesces the small shuffle into one): one core for the stage.
    Group by ``key`` afterwards (one group per ``col`` value, no further shuffle)."""
    from pyspark.sql import functions as F

    spark = df.sparkSession
    salt = {}
    for r in (spark.range(64 * P).select(F.col("id").cast("int").alias("v"))
              .select("v", F.expr(f"pmod(hash(v), {P})").alias("p")).collect()):
        salt.setdefault(int(r["p"]), int(r["v"]))
    values = F.array(*[F.lit(salt.get(q, q)) for q in range(P)])
    return df.withColumn(key, F.element_at(values, F.col(col) + 1).cast("int")).repartition(P, key)


def first_summary(c: dict, n: int) -> np.ndarray:
    """One pass's summary of a chunk: ``summary1`` (count, largest ``ts`` per stream),
    the smallest ``ts`` per stream (``POS_INF`` if none), ``summary2`` with no carry
    (the largest delay per stream from the chunk's own running maxima) and the first
    and last arrival (``POS_INF`` / ``NEG_INF`` if empty): ``3n + 3`` numbers."""
    lo = np.full(n, POS_INF, INT)
    for i in range(n):
        sel = c["ts"][c["stream"] == i]
        if len(sel):
            lo[i] = sel.min()
    m = len(c["ts"])
    arr = [int(c["arrival"][0]), int(c["arrival"][-1])] if m else [POS_INF, sp.NEG_INF]
    return np.concatenate([sp.summary1(c, n), lo, sp.summary2(c, n, np.full(n, sp.NEG_INF, INT)), arr]).astype(INT)


def carried_K(first: list[np.ndarray], Mc: list[np.ndarray], n: int) -> list[np.ndarray]:
    """MP-K-slack's carried K from :func:`first_summary` and the carried ``M``: a
    partition's largest delay of stream ``i`` with the carry is
    ``max(own largest delay, M_i carried - smallest ts of i)`` (the delay is
    ``max(M carried, own running max) - ts``), 0 if it has no tuple of ``i``."""
    s2 = []
    for s, m in zip(first, Mc):
        hi, lo, own = s[1:n + 1], s[n + 1:2 * n + 1], s[2 * n + 1:3 * n + 1]
        s2.append(np.where(hi > sp.NEG_INF, np.maximum(own, m - lo), 0).astype(INT))
    return sp.prefix_max(s2, np.zeros(n, INT))


def carried(df, n: int, policy: PolicySpec, schedule=None) -> Carried:
    """The carried-summary chain of :mod:`~streamjoin.pipelines.replay.partitioned_progress`
    on Spark in two ``mapInArrow`` jobs: :func:`first_summary` (``summary1`` and the
    pieces of ``summary2``), then ``summary3`` with the carries (:func:`carried_from`).
    ``df``: ``stream``, ``row``, ``ts``, ``arrival``, range-partitioned and sorted by
    ``(arrival, stream, row)``.  ``schedule``: a recall-target policy's decision table
    (:func:`~streamjoin.pipelines.replay.partitioned_progress.scheduled`)."""
    empty = np.concatenate([[0], np.full(n, sp.NEG_INF), np.full(n, POS_INF), np.zeros(n), [POS_INF, sp.NEG_INF]])
    s0 = per_partition(df, lambda t, p: first_summary(arrow_chunk(t), n), 3 * n + 3, empty.astype(INT))
    width = 1 if policy.family == SORTING else n

    def third(Mc, Kc):
        return per_partition(df, lambda t, p: sp.summary3(arrow_chunk(t), n, policy, Mc[p], Kc[p], schedule),
                             width, np.full(width, sp.NEG_INF, INT))
    return carried_from(s0, third, n, policy, scheduled=schedule is not None)


def carried_from(s0: list[np.ndarray], third, n: int, policy: PolicySpec, scheduled: bool = False) -> Carried:
    """:class:`Carried` from every partition's :func:`first_summary` (``s0``) and
    ``third(M carried, K carried)``, every partition's ``summary3``:
    ``carries_from`` -> (``mpkslack``, or ``scheduled``: a recall-target policy, which
    starts from MP-K-slack's bound) :func:`carried_K` -> ``prefix_max``."""
    s1 = [s[:n + 1] for s in s0]
    offsets, Mc, N = sp.carries_from(s1, n)
    mp = policy.name == "mpkslack" or scheduled
    Kc = carried_K(s0, Mc, n) if mp else [np.zeros(n, INT)] * len(s1)
    width = 1 if policy.family == SORTING else n
    s3 = third(Mc, Kc)
    prefix = sp.prefix_max(s3, np.full(width, sp.NEG_INF, INT))
    Rc = [int(x[0]) if policy.family == SORTING else sp.NEG_INF for x in prefix]
    Hc = [x if policy.family == SYMMETRIC else np.full(n, sp.NEG_INF, INT) for x in prefix]
    R_end = [max(r, int(x[0])) if policy.family == SORTING else sp.NEG_INF for r, x in zip(Rc, s3)]
    T_end = [int(np.maximum(m, s[1:n + 1]).min()) if n else sp.NEG_INF for m, s in zip(Mc, s1)]
    H_end = [np.maximum(h, x) if policy.family == SYMMETRIC else h for h, x in zip(Hc, s3)]
    lo = min((int(s[n + 1:2 * n + 1].min()) for s in s0), default=POS_INF)
    hi = max((int(s[1:n + 1].max()) for s in s0), default=sp.NEG_INF)
    return Carried(offsets=offsets, M=Mc, K=Kc, R=Rc, H=Hc, N=N, R_end=R_end, T_end=T_end, H_end=H_end,
                   first=min(int(s[-2]) for s in s0) if N else None,
                   last_arrival=max(int(s[-1]) for s in s0) if N else None,
                   ts_min=lo if N else None, ts_max=hi if N else None)


def spark_progress(spark, tab: dict, n: int, W, policy: PolicySpec, P: int) -> sp.Facts:
    """The partition-wise progress pass on Spark; returns the facts (numpy
    columns) for the driver-side report (the pass itself moves only
    O(P x n) numbers to the driver)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    base = {"stream": tab["stream"], "row": tab["row"], "ts": tab["ts"], "arrival": tab["arrival"]}
    df = spark.createDataFrame(arrow_table(base))
    df = df.repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
    df = df.localCheckpoint(eager=True)

    def chunk(it):
        return arrow_chunk(table_of(it))

    cy = carried(df, n, policy)
    offsets, Mc, Kc, Rc, Hc, N = cy.offsets, cy.M, cy.K, cy.R, cy.H, cy.N
    cols = sp.fact_columns(n)
    proto = sp.facts({k: v[:1] for k, v in base.items()}, n, W, policy, 0, Mc[0], Kc[0], Rc[0], Hc[0])
    schema = spark_schema({c: proto[c] for c in cols})

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
    f = numpy_columns(fdf.toArrow())
    if rel_cols is not None:
        r = numpy_columns(rel_cols.toArrow())
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
    return sp.Facts(columns=f)


def spark_micro_batches(spark, tab: dict, n: int, W, policy: PolicySpec, P: int, base: int):
    """``spark-ss``'s watermark scan on Spark: the tuples range-partitioned in replay order;
    each partition's summary is its occupied batches' largest event time per stream
    (:func:`~streamjoin.pipelines.replay.microbatch.batch_maxima`, O(its batches) numbers);
    the driver merges them in partition order (a batch cut between partitions is one) into
    the batch table, which every partition then applies to its own tuples
    (:func:`~streamjoin.pipelines.replay.microbatch.tuple_facts`).  Returns per tuple
    ``stream``, ``row``, ``batch``, ``dropped``, ``removal`` and the table."""
    import pyarrow as pa
    from pyspark import TaskContext

    from ...replay import microbatch

    T = int(policy.trigger_us)
    cols = ("stream", "row", "ts", "arrival")
    df = spark.createDataFrame(arrow_table({c: tab[c] for c in cols}))
    df = df.repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
    df = df.localCheckpoint(eager=True)

    def chunk(it):
        batches = list(it)
        if not batches:
            return None
        t = pa.Table.from_batches(batches)
        return {c: t.column(c).to_numpy() for c in cols}

    def summary(it):
        c = chunk(it)
        if c is None:
            return
        occupied, mx = microbatch.batch_maxima(c["stream"], c["ts"], c["arrival"] // T - base, n)
        p = TaskContext.get().partitionId()
        yield pa.RecordBatch.from_pydict({"p": np.full(len(occupied), p, INT), "batch": occupied.astype(INT),
                                          **{f"m{i}": mx[i].astype(INT) for i in range(n)}})

    schema = ", ".join(["p bigint", "batch bigint"] + [f"m{i} bigint" for i in range(n)])
    got = numpy_columns(df.mapInArrow(summary, schema).toArrow())
    order = np.lexsort((got["batch"], got["p"]))            # partitions in replay order, batches within
    parts = [(got["batch"][order], np.vstack([got[f"m{i}"][order] for i in range(n)]))] if len(order) else []
    table = microbatch.batch_table(*microbatch.merge_maxima(parts), policy)

    def facts(it):
        c = chunk(it)
        if c is None:
            return
        batch = c["arrival"] // T - base
        dropped, removal = microbatch.tuple_facts(table, c["stream"], c["ts"], batch, n, W)
        yield pa.RecordBatch.from_pydict({"stream": c["stream"].astype(np.int32), "row": c["row"].astype(INT),
                                          "batch": batch.astype(INT), "dropped": dropped, "removal": removal})

    f = numpy_columns(df.mapInArrow(facts, "stream int, row bigint, batch bigint, dropped boolean, removal bigint")
                      .toArrow())
    return f, table
