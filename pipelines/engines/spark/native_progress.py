"""The native Spark path's progress pass and memory series: prefix scans over a
DataFrame in replay order, the facts left on the executors (issue 19).

:func:`progress_frame` range-partitions the tuples by ``(arrival, stream,
row)`` (the replay order, SPEC §2) and runs the scans of
:mod:`~streamjoin.pipelines.replay.partitioned_progress` as ``mapInArrow``
stages: each stage sends one summary per partition to the driver (O(P x n)
numbers: rows and largest ``ts`` per stream, MP-K-slack's largest delay,
the largest release / horizon candidate), the driver turns them into
carried-in prefix maxima, and the last stage attaches every tuple's facts
(arrival index ``a``, frontier ``T`` and ``T(a - 1)``, delay, ``R``,
dropped, horizons ``H_k``, expired, the required K-slack ``kneed``) as
columns of a DataFrame that stays on the executors.

:func:`next_change` is the one search both releases and expiries need: for
each query value ``v`` at arrival index ``a_x``, the first arrival index at
which a never-decreasing sequence ``G`` reaches ``v`` (``>= v``: a release,
``G = R``) or passes it (``> v``: the end of a tuple's stay in memory,
``G = R`` or ``G = T``).  ``G``'s change points ``(G(a), a)`` and the queries
are sorted together by value on Spark; each query takes the next change point
after it, from its own partition or carried in from a later one
(:func:`~streamjoin.pipelines.replay.partitioned_progress.release_fill`):
O(P) numbers on the driver.

:func:`memory_stats` is the memory series as a prefix sum: +1 at each held
tuple's own index, -1 where it leaves (the rule of
:func:`~streamjoin.pipelines.replay.progress.memory_per_stream`), summed per
partition (n numbers each to the driver) and scanned with the carried-in
sums; each partition returns its peak and sums and its pieces of the report's
downsampled series (:func:`~streamjoin.pipelines.report.build.memory_series`'
buckets): O(P + buckets) numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...base.timeunits import NEG_INF
from ...policies import SORTING, PolicySpec
from ...replay import partitioned_progress as sp
from .kernels import INT
from .progress import arrow_chunk, carried, per_partition, table_of

#: columns of the facts frame beside stream, row, ts, arrival (H0.. follow per stream)
FACTS = ("a", "T", "T_prev", "delay", "R", "R_prev", "dropped", "expired", "kneed")


@dataclass
class Progress:
    """The facts frame (on the executors) and the scalars the driver keeps."""

    facts: object          # DataFrame: stream, row, ts, arrival, FACTS, H0.., rel_us (sorting), end
    N: int
    first: int | None      # first and last arrival (None: no tuples)
    last: int | None
    partitions: int


def progress_frame(spark, df, n: int, W, policy: PolicySpec, P: int) -> Progress:
    """The progress facts of a fixed policy (``none``, ``static``, ``kslack``,
    ``mpkslack``) as a DataFrame on the executors; ``df``: stream, row, ts,
    arrival (and anything else, ignored here)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    W = np.asarray(W, dtype=INT)
    base = (df.select("stream", "row", "ts", "arrival")
            .repartitionByRange(P, "arrival", "stream", "row").sortWithinPartitions("arrival", "stream", "row")
            .localCheckpoint(eager=True))
    cy = carried(base, n, policy)
    offsets, Mc, Kc, Rc, Hc, N = cy.offsets, cy.M, cy.K, cy.R, cy.H, cy.N
    hcols = [f"H{k}" for k in range(n)]
    schema = ", ".join(["stream int", "row bigint", "ts bigint", "arrival bigint", "a bigint", "T bigint",
                        "T_prev bigint", "delay bigint", "R bigint", "R_prev bigint", "dropped boolean",
                        "expired boolean", "kneed bigint"] + [f"{h} bigint" for h in hcols])

    def run_facts(it):
        p = TaskContext.get().partitionId()
        c = arrow_chunk(table_of(it))
        f = sp.facts(c, n, W, policy, offsets[p], Mc[p], Kc[p], Rc[p], Hc[p])
        m = len(c["ts"])
        t_in = int(Mc[p].min()) if n else NEG_INF          # T(a - 1) of the partition's first tuple
        T_prev = np.concatenate([[t_in], f["T"][:-1]]).astype(INT) if m else np.empty(0, INT)
        # tuning.required_k_per_tuple: k(x) = max(0, T(a_x - 1) - ts), 0 where T(a_x - 1) = -inf
        kneed = np.where(T_prev == NEG_INF, 0, np.maximum(T_prev - c["ts"], 0)).astype(INT)
        out = {"stream": c["stream"].astype(np.int32), "row": c["row"].astype(INT), "ts": c["ts"].astype(INT),
               "arrival": c["arrival"].astype(INT), "a": f["a"], "T": f["T"], "T_prev": T_prev,
               "delay": f["delay"], "R": f["R"], "R_prev": f["R_prev"], "dropped": f["dropped"],
               "expired": f["expired"], "kneed": kneed, **{h: f[h] for h in hcols}}
        yield pa.RecordBatch.from_pydict(out)

    fdf = base.mapInArrow(run_facts, schema).localCheckpoint(eager=True)
    if N:
        lo_hi = fdf.agg(F.min("arrival"), F.max("arrival")).collect()[0]
        first, last = int(lo_hi[0]), int(lo_hi[1])
    else:
        first = last = None
    # where each tuple leaves memory: sorting -- after release, once R passes ts + W;
    # symmetric -- once its horizon passes ts + W (H_k = T - d_k: T passes ts + W_k + d_k)
    lim = F.col("ts") + F.element_at(F.array(*[F.lit(int(w)) for w in W]), F.col("stream") + 1)
    if policy.family == SORTING:
        rel = next_change(spark, fdf.filter(~F.col("dropped")).select(F.col("ts").alias("value"), "a", "arrival"),
                          fdf.filter(F.col("R") > F.col("R_prev")).select(F.col("R").alias("value"), "a", "arrival"),
                          P, N, last or 0, strict=False)
        fdf = fdf.join(rel.select("a", F.col("rel").alias("rel"), "rel_us"), "a", "left")
        fdf = fdf.withColumn("rel", F.coalesce("rel", F.lit(N))).withColumn("rel_us", F.coalesce("rel_us", F.lit(last or 0)))
        leave = next_change(spark, fdf.filter(~F.col("dropped")).select(lim.alias("value"), "a", "arrival"),
                            fdf.filter(F.col("R") > F.col("R_prev")).select(F.col("R").alias("value"), "a", "arrival"),
                            P, N, last or 0, strict=True)
    else:
        d = np.asarray(policy.retention, dtype=INT).reshape(n)
        lim = lim + F.element_at(F.array(*[F.lit(int(x)) for x in d]), F.col("stream") + 1)
        leave = next_change(spark, fdf.select(lim.alias("value"), "a", "arrival"),
                            fdf.filter(F.col("T") > F.col("T_prev")).select(F.col("T").alias("value"), "a", "arrival"),
                            P, N, last or 0, strict=True)
    fdf = fdf.join(leave.select("a", F.col("rel").alias("end")), "a", "left")
    end = F.greatest(F.coalesce("end", F.lit(N)), F.col("a"))
    if policy.family == SORTING:
        end = F.greatest(end, F.col("rel"))
    fdf = fdf.withColumn("end", end).localCheckpoint(eager=True)
    return Progress(facts=fdf, N=N, first=first, last=last, partitions=P)


def next_change(spark, queries, changes, P: int, N: int, last_arrival: int, strict: bool):
    """Per query row (``value``, ``a``, ``arrival``): ``rel``, the first index ``>= a``
    at which ``G`` reaches ``value`` (``strict``: exceeds it), ``N`` if never,
    and ``rel_us``, the arrival there; ``changes`` are ``G``'s change points
    (``value = G(a) > G(a - 1)``, ``a``, ``arrival``).  Sorted together by value,
    change points after equal queries (``>=``) or before them (``>``)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    q_tie, c_tie = (1, 0) if strict else (0, 1)
    both = (queries.select("value", F.lit(q_tie).cast("tinyint").alias("tie"), F.lit(0).cast("tinyint").alias("kind"),
                           "a", "arrival")
            .unionByName(changes.select("value", F.lit(c_tie).cast("tinyint").alias("tie"),
                                        F.lit(1).cast("tinyint").alias("kind"), "a", "arrival")))
    both = both.repartitionByRange(P, "value", "tie", "a").sortWithinPartitions("value", "tie", "a")
    both = both.localCheckpoint(eager=True)
    names, dts = ("value", "kind", "a", "arrival"), (INT, np.int8, INT, INT)
    summaries = per_partition(both, lambda t, p: sp.release_summary(arrow_chunk(t, names, dts)), 3, np.zeros(3, INT))
    carries = sp.release_carries(summaries)

    def fill(it):
        p = TaskContext.get().partitionId()
        g = sp.release_fill(arrow_chunk(table_of(it), names, dts), carries[p], N, last_arrival)
        yield pa.RecordBatch.from_pydict(g)

    return both.mapInArrow(fill, "a bigint, rel bigint, rel_us bigint")


def memory_stats(spark, prog: Progress, n: int, row_bytes, points: int, held_all: bool):
    """Memory over arrival indexes from the facts' ``a`` / ``end``: ``(tuples, bytes,
    series)`` as :func:`~streamjoin.pipelines.analysis.metrics.memory_summary` and
    :func:`~streamjoin.pipelines.report.build.memory_series` give them.
    ``held_all``: every tuple is held from its arrival (symmetric family;
    sorting: all but the dropped)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    N = prog.N
    if N == 0:
        return ({"peak": 0, "mean": 0.0}, {"peak": 0, "mean": 0.0},
                {"arrival_us": [], "peak": [], "mean": [], "points": 0, "arrivals_per_point": 0})
    f = prog.facts if held_all else prog.facts.filter(~F.col("dropped"))
    plus = f.select("a", "stream", F.lit(1).alias("d"))
    minus = f.filter(F.col("end") < N).select(F.col("end").alias("a"), "stream", F.lit(-1).alias("d"))
    ev = (plus.unionByName(minus).groupBy("a")
          .agg(*[F.sum(F.when(F.col("stream") == k, F.col("d")).otherwise(0)).cast("bigint").alias(f"d{k}")
                 for k in range(n)]))
    P = prog.partitions
    ev = ev.repartitionByRange(P, "a").sortWithinPartitions("a").localCheckpoint(eager=True)
    dn = [f"d{k}" for k in range(n)]

    def chunk(t):
        return arrow_chunk(t, ["a", *dn], [INT] * (n + 1))

    def summ(t, p):
        c = chunk(t)
        first = int(c["a"][0]) if len(c["a"]) else -1
        return [first] + [int(c[d].sum()) for d in dn]
    s = per_partition(ev, summ, n + 1, np.concatenate([[-1], np.zeros(n, INT)]))
    sums, cur = [], np.zeros(n, INT)
    for x in s:
        sums.append(cur.copy())
        cur = cur + x[1:]
    nxt, following = [N] * len(s), N
    for p in range(len(s) - 1, -1, -1):       # each partition's last value holds until the next event
        nxt[p] = following
        if s[p][0] >= 0:
            following = int(s[p][0])
    b = min(points, N)
    starts = np.unique(np.linspace(0, N, b, endpoint=False).astype(np.int64))
    w = np.asarray(row_bytes, dtype=np.float64)

    def scan(it):
        p = TaskContext.get().partitionId()
        c = chunk(table_of(it))
        if not len(c["a"]):
            return
        mem = np.vstack([np.cumsum(c[d]) + sums[p][k] for k, d in enumerate(dn)])
        total = mem.sum(axis=0)
        nbytes = mem[0] * w[0]                 # metrics.memory_summary: the same products, the same order
        for k in range(1, n):
            nbytes = nbytes + mem[k] * w[k]
        # pieces of constant memory, cut at the series' bucket starts
        a = c["a"]
        lo, hi = int(a[0]), nxt[p]
        cuts = starts[(starts > lo) & (starts < hi)]
        bp = np.union1d(a, cuts)
        at = np.searchsorted(a, bp, side="right") - 1
        length = np.diff(np.append(bp, hi))
        bucket = np.searchsorted(starts, bp, side="right") - 1
        heads = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))
        tot, byt = total[at], nbytes[at]
        yield pa.RecordBatch.from_pydict({
            "bucket": bucket[heads].astype(INT),
            "peak": np.maximum.reduceat(tot, heads).astype(INT),
            "sum": np.add.reduceat(tot * length, heads).astype(INT),
            "bpeak": np.maximum.reduceat(byt, heads).astype(np.float64),
            "bsum": np.add.reduceat(byt * length, heads).astype(np.float64)})

    got = ev.mapInArrow(scan, "bucket bigint, peak bigint, sum bigint, bpeak double, bsum double").toArrow()
    B = len(starts)
    peak, total_sum = np.zeros(B, INT), np.zeros(B, INT)
    bucket = got.column("bucket").to_numpy()
    np.maximum.at(peak, bucket, got.column("peak").to_numpy())
    np.add.at(total_sum, bucket, got.column("sum").to_numpy())
    bpeak = float(got.column("bpeak").to_numpy().max()) if got.num_rows else 0.0
    bsum = float(got.column("bsum").to_numpy().sum())
    sizes = np.diff(np.append(starts, N))
    arr = {int(r["a"]): int(r["arrival"]) for r in
           prog.facts.filter(F.col("a").isin([int(x) for x in starts])).select("a", "arrival").collect()}
    tuples = {"peak": int(peak.max()), "mean": float(int(total_sum.sum()) / N)}
    nbytes = {"peak": int(round(max(bpeak, 0.0))), "mean": bsum / N}
    series = {"arrival_us": [arr[int(x)] for x in starts], "peak": peak.tolist(),
              "mean": (total_sum / sizes).round(3).tolist(), "points": int(B),
              "arrivals_per_point": float(N / B)}
    return tuples, nbytes, series
