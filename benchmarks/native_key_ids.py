"""The native recall-target path's key ids (issue 19): the one-task ``dense_rank`` window
it used against the ranking in range partitions (``native_adaptive._dense_key_ids``).

    python benchmarks/native_key_ids.py [--keys 1 3] [--rows 3] [--runs 3] [--partitions 2]

For each size: ``--rows`` million tuples whose string keys take ``--keys`` million
distinct values, on ``local[2]``; alternating rounds (medians) of each form's wall time
to the tuples' ids summed on the executors (the key ids ranked, joined back to every
tuple, ``sum(__kid)`` collected: both must give the same sum, checked) -- one Spark
session for all.  ``window``: ``dense_rank().over(Window.orderBy(key))`` over the
distinct keys (one task holds them all); ``ranged``: what ``native_adaptive`` does now.
"""

from __future__ import annotations

import argparse
import statistics
import time

from streamjoin.pipelines.engines.spark.native_adaptive import _with_key_ids
from streamjoin.pipelines.engines.spark.session import spark_session


def window_ids(df):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ranked = df.select("__key0").distinct().withColumn("__kid", F.dense_rank().over(Window.orderBy("__key0")))
    ranked = ranked.select(F.col("__key0").alias("__r0"), "__kid")
    return df.join(ranked, on=[df["__key0"].eqNullSafe(ranked["__r0"])], how="left"), None


def ranged_ids(df, partitions: int):
    out, _, cached = _with_key_ids(df, ["__key0"], partitions)
    return out, cached


def main() -> None:
    from pyspark.sql import functions as F

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=float, nargs="+", default=[1, 3], help="millions of distinct keys")
    ap.add_argument("--rows", type=float, default=3, help="millions of tuples")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    conf = [("spark.sql.shuffle.partitions", str(args.partitions)), ("spark.driver.memory", "2g")]
    with spark_session("local[2]", args.partitions, conf) as spark:
        print("| distinct keys | tuples | form | median s | runs s |")
        print("|---|---|---|---|---|")
        for keys in args.keys:
            k, n = int(keys * 1e6), int(args.rows * 1e6)
            df = (spark.range(n).select(F.format_string("k%09d", (F.col("id") * 7919) % k).alias("__key0"),
                                        F.col("id").alias("row")).cache())
            df.count()
            times, sums = {"window": [], "ranged": []}, {}
            for _ in range(args.runs):
                for form in ("window", "ranged"):
                    t0 = time.perf_counter()
                    out, cached = window_ids(df) if form == "window" else ranged_ids(df, args.partitions)
                    sums.setdefault(form, set()).add(out.agg(F.sum("__kid")).first()[0])
                    times[form].append(time.perf_counter() - t0)
                    if cached is not None:
                        cached.unpersist()
            assert sums["window"] == sums["ranged"] and len(sums["window"]) == 1, sums
            for form, ts in times.items():
                print(f"| {k:,} | {n:,} | {form} | {statistics.median(ts):.1f} | "
                      f"{' '.join(f'{t:.1f}' for t in ts)} |", flush=True)
            df.unpersist()


if __name__ == "__main__":
    main()
