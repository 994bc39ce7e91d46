"""Peers benchmark (issue 7): the core data through streamjoin, DuckDB, polars and Spark Structured Streaming.

    python benchmarks/bench_peers.py [--runs 5] [--skip-sss] [--slow] [--with-results]
                                     [--spark-seconds 60] [--batch 1s] [--delays 0ms,50ms,1s]
    python benchmarks/bench_peers.py --whole [--results-only] [--runs 5] [--compare PYTHONPATH]

Needs the ``bench`` extra (``pip install -e '.[bench]'``: DuckDB); polars and
PySpark are streamjoin dependencies already.

Part 1 -- exact offline band join, on the SAME files (``bench_core.ensure_data``:
``streamjoin generate bench --seed 7``, 2M + 1M tuples, W = 100 ms both).
Every measurement is a fresh process (one uncounted warm-up, then ``--runs``
counted runs, medians shown):

* streamjoin: the core benchmark command (``run ... --engine local --router
  none --policy static --retention 50ms --no-results``); wall time plus the
  job's own ``timings_s`` from ``report.json``.
* DuckDB and polars: this file re-executed as a child (``--child FORM``).  The
  child times the one query straight from Parquet (``direct``: reading
  included, only the count returned) and reports the time from process spawn to
  that count (``wall``, the figure to compare with streamjoin's wall); then,
  for the bucketed forms, the same join split into ``read`` (Parquet into
  memory), ``join`` (count over the in-memory tables) and ``pairs``
  (materialising the (left row, right row) pairs, as streamjoin's truth does).
  Every count is asserted equal to streamjoin's ``truth_results``.

Part 1b -- the same with results written (``--with-results``; issue 21): rounds
of fresh processes, alternating ``streamjoin run`` *without* ``--no-results``
(results.parquet: every emitted pair with both members' columns, emission time
and latency) and a DuckDB child that writes the exact band join's pairs with
both sides' columns to Parquet (``COPY (...) TO ... (FORMAT parquet)``, DuckDB's
default codec snappy, streamjoin's too).  Wall time from spawn to the file
written; the file sizes are printed beside.

``--whole`` (issue 21) runs only the whole-process rows: ``run --engine local
--no-results`` on the flights sample (2,888 rows), the bench set at 1/30 scale
(99,990 tuples, generated once into ``benchmarks/data/small100k/``) and the core
data, next to DuckDB's bucketed exact count on the core data; and ``run`` *with*
results.parquet on the core data next to DuckDB writing the same pairs to
Parquet (Part 1b's child; both DuckDB counts are asserted equal to streamjoin's truth), in alternating rounds (``--results-only``: only the
with-results pair); ``--compare PYTHONPATH`` adds another checkout's code (B)
beside this one's (A), their order swapped every round.  Timed streamjoin processes run
without ``PYTHONDONTWRITEBYTECODE`` (``bench_core.child_env``).

Part 2 -- Spark Structured Streaming (stream-stream inner join with
``withWatermark``), unless ``--skip-sss``: the first ``--spark-seconds`` of
arrival time are cut out of the same data, each stream sorted by arrival and
written as one Parquet file per ``--batch`` of arrival time under
``benchmarks/data/peers/`` (file j of both streams covers the same arrival
slice; modification times are set in batch order).  Both streams are read
with ``readStream.parquet`` + ``maxFilesPerTrigger=1`` and
``trigger(availableNow=True)``, so trigger j processes exactly batch j of both
streams (asserted from the query progress).  For each delay D, Spark's output
count and join state rows (``stateOperators[0].numRowsTotal`` after every
trigger: peak and mean) are compared with ``streamjoin run --policy static
--retention D`` on the same slice (``emitted_results``, ``truth_results``,
``memory_tuples``), and with ``--retention D + batch`` (Spark's watermark only
moves at batch ends).  ``spark_model`` replays Spark's watermark rules on the
same batches in numpy and predicts which truth pairs Spark emits; its count is
printed beside Spark's (it is a check of the explanation in
docs/performance.md, not an input to anything).

``--slow`` adds the forms that take minutes on this data (DuckDB's default
plan for the plain range-join SQL, polars ``join_where`` with the key
equality), run once each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import resource
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import DATA, child_env, ensure_data, streamjoin_cmd  # noqa: E402  (benchmarks/ is not a package)

HERE = Path(__file__).resolve().parent
PEERS = HERE / "data" / "peers"
LEFT, RIGHT = DATA / "left.parquet", DATA / "right.parquet"

UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000}


def parse_us(text: str) -> int:
    """'100ms' -> 100000 (the few units this benchmark needs)."""
    text = text.strip()
    if text == "0":
        return 0
    for unit in ("us", "ms", "s"):
        if text.endswith(unit):
            return round(float(text[: -len(unit)]) * UNITS_US[unit])
    raise SystemExit(f"bad duration {text!r} (use us, ms or s)")


def human_us(us: int) -> str:
    if us % 1_000_000 == 0 and us:
        return f"{us // 1_000_000}s"
    if us % 1_000 == 0:
        return f"{us // 1_000}ms"
    return f"{us}us"


def band_from_config(config: Path) -> int:
    """W from the config; the peers' band form |l.ts - r.ts| <= W needs W_left == W_right."""
    cfg = tomllib.loads(config.read_text())
    streams = cfg["stream"]
    windows = {parse_us(s["window"]) for s in streams}
    assert len(streams) == 2 and len(windows) == 1, "bench_peers expects 2 streams with one window"
    assert all(s.get("unit", "us") == "us" for s in streams)
    return windows.pop()


# --------------------------------------------------------------------------- offline forms (child processes)

def duckdb_child(form: str, W: int, kmin: int, tmin: int) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    lp, rp = f"read_parquet('{LEFT}')", f"read_parquet('{RIGHT}')"

    def bucketed(l_src: str, r_src: str, select: str) -> str:
        # equi-join on (key, bucket of width W); each right tuple is offered to its own
        # and both neighbouring buckets, then the exact band filter
        return (f"SELECT {select} FROM (SELECT *, ts // {W} AS b FROM {l_src}) AS l "
                f"JOIN (SELECT *, ts // {W} + d AS b FROM {r_src}, (VALUES (-1), (0), (1)) AS v(d)) AS r "
                f"ON l.key = r.key AND l.b = r.b WHERE abs(l.ts - r.ts) <= {W}")

    def packed(src: str) -> str:
        return f"(SELECT *, (key - {kmin}) * (1::BIGINT << 40) + (ts - {tmin}) AS k FROM {src})"

    forms = {
        "duckdb-bucketed": lambda l, r, s: bucketed(l, r, s),
        # the plain range-join SQL; DuckDB's default plan is a hash join on key + filter
        "duckdb-range": lambda l, r, s: (f"SELECT {s} FROM {l} AS l JOIN {r} AS r "
                                         f"ON l.key = r.key AND r.ts BETWEEN l.ts - {W} AND l.ts + {W}"),
        # same SQL with prefer_range_joins = true: IEJoin on the two inequalities, key as a filter
        "duckdb-range-iejoin": lambda l, r, s: (f"SELECT {s} FROM {l} AS l JOIN {r} AS r "
                                                f"ON l.key = r.key AND r.ts BETWEEN l.ts - {W} AND l.ts + {W}"),
        # one packed (key, ts) value per tuple, then a pure range join (IEJoin)
        "duckdb-packed-iejoin": lambda l, r, s: (f"SELECT {s} FROM {packed(l)} AS l JOIN {packed(r)} AS r "
                                                 f"ON r.k BETWEEN l.k - {W} AND l.k + {W}"),
    }
    if form == "duckdb-range-iejoin":
        con.execute("SET prefer_range_joins = true")
    query = forms[form]
    out: dict = {}
    t = time.perf_counter()
    out["count"] = con.execute(query(lp, rp, "count(*)")).fetchone()[0]
    out["direct_s"] = time.perf_counter() - t
    out["wall_s"] = time.time() - CHILD_T0
    out["user_s"], out["sys_s"] = os.times()[:2]
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if form == "duckdb-bucketed":
        t = time.perf_counter()
        for name, path in (("lt", LEFT), ("rt", RIGHT)):
            con.execute(f"CREATE TABLE {name} AS SELECT file_row_number AS row, key, ts "
                        f"FROM read_parquet('{path}', file_row_number = true)")
        out["read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        out["join_count"] = con.execute(query("lt", "rt", "count(*)")).fetchone()[0]
        out["join_s"] = time.perf_counter() - t
        t = time.perf_counter()
        con.execute(f"CREATE TABLE pairs AS {query('lt', 'rt', 'l.row AS left_row, r.row AS right_row')}")
        out["pairs_s"] = time.perf_counter() - t
        out["pairs_count"] = con.execute("SELECT count(*) FROM pairs").fetchone()[0]
    return out


def duckdb_write_pairs_child(W: int) -> dict:
    """The exact band join's pairs with both sides' columns, written to Parquet
    (the counterpart of ``streamjoin run`` writing results.parquet)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    cols = ", ".join(f"{side}.{c} AS {name}_{c}" for side, name in (("l", "left"), ("r", "right"))
                     for c in ("key", "ts", "arrival", "value"))
    target = Path(tempfile.mkdtemp()) / "pairs.parquet"
    try:
        con.execute(f"COPY (SELECT {cols} FROM (SELECT *, ts // {W} AS b FROM read_parquet('{LEFT}')) AS l "
                    f"JOIN (SELECT *, ts // {W} + d AS b FROM read_parquet('{RIGHT}'), (VALUES (-1), (0), (1)) AS v(d)) "
                    f"AS r ON l.key = r.key AND l.b = r.b WHERE abs(l.ts - r.ts) <= {W}) TO '{target}' (FORMAT parquet)")
        out = {"wall_s": time.time() - CHILD_T0, "bytes": target.stat().st_size}
        out["count"] = con.execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()[0]
    finally:
        shutil.rmtree(target.parent, ignore_errors=True)
    out["user_s"], out["sys_s"] = os.times()[:2]
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def duckdb_pairs_first_child(W: int) -> dict:
    """DuckDB's bucketed pairs as the *first* join of a fresh process (after
    reading the tables): the counterpart of streamjoin's join stage, which is
    the first join after the load in a fresh ``streamjoin run``."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    t = time.perf_counter()
    for name, path in (("lt", LEFT), ("rt", RIGHT)):
        con.execute(f"CREATE TABLE {name} AS SELECT file_row_number AS row, key, ts "
                    f"FROM read_parquet('{path}', file_row_number = true)")
    out: dict = {"read_s": time.perf_counter() - t}
    t = time.perf_counter()
    con.execute("CREATE TABLE pairs AS SELECT l.row AS left_row, r.row AS right_row "
                f"FROM (SELECT *, ts // {W} AS b FROM lt) AS l "
                f"JOIN (SELECT *, ts // {W} + d AS b FROM rt, (VALUES (-1), (0), (1)) AS v(d)) AS r "
                f"ON l.key = r.key AND l.b = r.b WHERE abs(l.ts - r.ts) <= {W}")
    out["pairs_s"] = time.perf_counter() - t
    out["count"] = con.execute("SELECT count(*) FROM pairs").fetchone()[0]
    return out


def streamjoin_warm_child(config: Path) -> dict:
    """streamjoin's join stage twice in one process on the loaded streams:
    the first join (as in ``streamjoin run``) and a second one on a heap that
    the first has already faulted in -- the counterpart of DuckDB's pairs
    query, which runs after a count join in its process."""
    from streamjoin.pipelines.base.allocator import no_huge_page_advice, reuse_freed_memory

    reuse_freed_memory()   # as the CLI does, before anything else is imported
    no_huge_page_advice()
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.engines.local import join
    from streamjoin.pipelines.io.load import load_all

    cfg = resolve(config, Flags(engine="local", policy="static", retention=["50ms"], out=None), check_out=False)
    streams = load_all(list(cfg.streams))
    args = ([s.ts for s in streams], [s.arrival for s in streams], [s.keys for s in streams], cfg.windows, cfg.policy)
    out: dict = {}
    for name in ("join1_s", "join2_s"):
        t = time.perf_counter()
        outcome = join(*args)
        out[name] = time.perf_counter() - t
        out["count"] = len(outcome.combos)
        del outcome
    return out


def polars_child(form: str, W: int, kmin: int, tmin: int) -> dict:
    import polars as pl

    def scan(path: Path, suffix: str, row: bool = False) -> pl.LazyFrame:
        lf = pl.scan_parquet(path, row_index_name="row") if row else pl.scan_parquet(path)
        cols = ["row", "key", "ts"] if row else ["key", "ts"]
        return lf.select([pl.col(c).alias(c + suffix) for c in cols])

    def bucketed(l: pl.LazyFrame, r: pl.LazyFrame) -> pl.LazyFrame:
        l = l.with_columns(b=pl.col("ts_l") // W)
        r = r.with_columns(b=pl.col("ts_r") // W + pl.lit([-1, 0, 1], dtype=pl.List(pl.Int64))).explode("b")
        return (l.join(r, left_on=["key_l", "b"], right_on=["key_r", "b"])
                .filter((pl.col("ts_l") - pl.col("ts_r")).abs() <= W))

    def packed_iejoin(l: pl.LazyFrame, r: pl.LazyFrame) -> pl.LazyFrame:
        l = l.with_columns(k_l=(pl.col("key_l") - kmin) * (1 << 40) + (pl.col("ts_l") - tmin))
        r = r.with_columns(k_r=(pl.col("key_r") - kmin) * (1 << 40) + (pl.col("ts_r") - tmin))
        return l.join_where(r, pl.col("k_r") >= pl.col("k_l") - W, pl.col("k_r") <= pl.col("k_l") + W)

    def join_where(l: pl.LazyFrame, r: pl.LazyFrame) -> pl.LazyFrame:
        return l.join_where(r, pl.col("key_l") == pl.col("key_r"),
                            pl.col("ts_r") >= pl.col("ts_l") - W, pl.col("ts_r") <= pl.col("ts_l") + W)

    join = {"polars-bucketed": bucketed, "polars-packed-iejoin": packed_iejoin,
            "polars-join_where": join_where}[form]
    out: dict = {}
    t = time.perf_counter()
    out["count"] = join(scan(LEFT, "_l"), scan(RIGHT, "_r")).select(pl.len()).collect().item()
    out["direct_s"] = time.perf_counter() - t
    out["wall_s"] = time.time() - CHILD_T0
    out["user_s"], out["sys_s"] = os.times()[:2]
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if form in ("polars-bucketed", "polars-packed-iejoin"):
        t = time.perf_counter()
        lt, rt = scan(LEFT, "_l", row=True).collect(), scan(RIGHT, "_r", row=True).collect()
        out["read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        out["join_count"] = join(lt.lazy(), rt.lazy()).select(pl.len()).collect().item()
        out["join_s"] = time.perf_counter() - t
        t = time.perf_counter()
        pairs = join(lt.lazy(), rt.lazy()).select("row_l", "row_r").collect()
        out["pairs_s"] = time.perf_counter() - t
        out["pairs_count"] = pairs.height
    return out


CHILD_T0 = 0.0
FAST_FORMS = ["duckdb-bucketed", "duckdb-packed-iejoin", "polars-bucketed", "polars-packed-iejoin"]
#: run every round too, only for the cold/warm ratios (not rows of the table)
PAIRED_FORMS = ["duckdb-pairs-first", "streamjoin-warm"]
ONCE_FORMS = ["duckdb-range-iejoin"]                      # ~1 min: run once
SLOW_FORMS = ["duckdb-range", "polars-join_where"]       # minutes: only with --slow, once


def run_streamjoin(config: Path, policy_args: list[str], *, results: bool = False, out_dir: Path | None = None,
                   pythonpath: str | None = None) -> dict:
    """bench_core's command as a fresh process: report.json plus wall, user and system CPU, peak RSS.

    (User and system time are kept apart: on this VM, system time is mostly first-touch page
    faults, whose cost depends on the host -- see "Machine" in docs/performance.md.)  ``out_dir``:
    the run's ``--out`` (kept, e.g. for its results.parquet; a fresh temporary folder otherwise).
    ``pythonpath``: another checkout's code (``--compare``), run as ``python -m streamjoin.cli.main``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = out_dir or Path(tmp) / "out"
        with open(Path(tmp) / "stderr", "w+") as err:
            t = time.perf_counter()
            cmd = [sys.executable, "-m", "streamjoin.cli.main"] if pythonpath else streamjoin_cmd()
            proc = subprocess.Popen([*cmd, "run", str(config), "--engine", "local", "--router", "none",
                                     *policy_args, *([] if results else ["--no-results"]), "--out", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=err, env=child_env(pythonpath))
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t
            if os.waitstatus_to_exitcode(status) != 0:
                err.seek(0)
                raise SystemExit(f"streamjoin run failed: {err.read().strip()[-2000:]}")
        report = json.loads((out / "report.json").read_text())
        if results:
            report["results_bytes"] = (out / "results.parquet").stat().st_size
    report.update(wall_s=wall, user_s=usage.ru_utime, sys_s=usage.ru_stime, rss_mb=usage.ru_maxrss / 1024)
    return report


def run_child(form: str, W: int, kmin: int, tmin: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", form, "--band", str(W),
           "--kmin", str(kmin), "--tmin", str(tmin), "--t0", repr(time.time())]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{form} failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t
    return out


# --------------------------------------------------------------------------- Spark Structured Streaming

def write_toml_streams(config: Path, dest: Path, paths: dict[str, str]) -> None:
    cfg = tomllib.loads(config.read_text())
    lines = ["# bench_peers.py: an arrival-time slice of the bench set (same columns, same windows)", ""]
    for s in cfg["stream"]:
        lines.append("[[stream]]")
        for k, v in s.items():
            v = paths[s["name"]] if k == "path" else v
            lines.append(f"{k} = " + (json.dumps(v) if isinstance(v, (str, list)) else str(v)))
        lines.append("")
    dest.write_text("\n".join(lines))


def ensure_slice(config: Path, seconds: int, batch_us: int) -> tuple[Path, Path, list[tuple[int, int]]]:
    """The first `seconds` of arrival time: a streamjoin config and Spark micro-batch files.

    Returns (slice config, batch directory, expected (left rows, right rows) per batch).
    """
    import polars as pl

    root = PEERS / f"first{seconds}s-batch{human_us(batch_us)}"
    manifest = root / "manifest.json"
    source = [[p.stat().st_size, p.stat().st_mtime_ns] for p in (LEFT, RIGHT)]   # regenerated bench data -> redo
    if manifest.exists():
        m = json.loads(manifest.read_text())
        if m.get("source") == source:
            return root / "slice.toml", root / "batches", [tuple(x) for x in m["batches"]]
    shutil.rmtree(root, ignore_errors=True)
    (root / "batches").mkdir(parents=True)
    frames = {"left": pl.read_parquet(LEFT), "right": pl.read_parquet(RIGHT)}
    t0 = min(int(f["arrival"].min()) for f in frames.values())
    cut = t0 + seconds * 1_000_000
    nb = -(-seconds * 1_000_000 // batch_us)
    parts = {}
    for name, df in frames.items():
        part = df.filter(pl.col("arrival") < cut)
        part.write_parquet(root / f"{name}.parquet")                      # streamjoin's input: file order kept
        parts[name] = part.with_columns(_b=((pl.col("arrival") - t0) // batch_us).cast(pl.Int64))
    counts = write_batch_files(parts, root / "batches", nb)
    write_toml_streams(config, root / "slice.toml", {"left": "left.parquet", "right": "right.parquet"})
    batches = list(zip(counts["left"], counts["right"]))
    manifest.write_text(json.dumps({"t0_arrival_us": t0, "seconds": seconds, "batch_us": batch_us,
                                    "batches": batches, "source": source}))
    return root / "slice.toml", root / "batches", batches


def write_batch_files(parts: dict, dest: Path, nb: int) -> dict[str, list[int]]:
    """One Parquet file per stream per micro-batch, ``dest/<stream>/batch-<j>.parquet`` for j < ``nb``
    (empty ones too), rows in arrival order, modification times in batch order (FileStreamSource
    takes files by mtime).  ``parts``: stream name -> polars frame with each row's batch in ``_b``
    (dropped from the files).  Returns the rows per batch of each stream."""
    counts = {}
    mbase = time.time() - 10 * nb
    for name, part in parts.items():
        ordered = part.sort("arrival", maintain_order=True)
        groups = {k[0]: g.drop("_b") for k, g in ordered.partition_by("_b", as_dict=True).items()}
        (dest / name).mkdir(parents=True)
        counts[name] = []
        for j in range(nb):
            g = groups.get(j, ordered.drop("_b").clear())
            f = dest / name / f"batch-{j:05d}.parquet"
            g.write_parquet(f)
            os.utime(f, (mbase + 10 * j, mbase + 10 * j))
            counts[name].append(g.height)
        assert sum(counts[name]) == part.height, f"{name}: rows outside batches 0..{nb - 1}"
    return counts


def spark_session():
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench_peers")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .config("spark.driver.memory", "4g")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_join(spark, batches_dir: Path, expected: list[tuple[int, int]], W: int, delay_us: int, *,
               schema: str = "key BIGINT, ts BIGINT, arrival BIGINT, value DOUBLE", key: str = "key",
               ts: str = "ts", windows: tuple[int, int] | None = None, names: tuple[str, str] = ("left", "right"),
               row: str | None = None) -> dict:
    """The stream-stream inner join with ``withWatermark(delay)`` on both sides through Spark, batch j =
    file j of both streams (asserted).  ``ts``: int64 µs.  Band ``r.ts BETWEEN l.ts - W_r AND l.ts + W_l``,
    ``windows = (W_l, W_r)`` (default ``(W, W)``).  ``row``: a row-id column; then a ``foreachBatch`` sink
    collects ``rows`` = {(batch id, left row id, right row id)} instead of the ``noop`` sink."""
    from pyspark.sql import functions as F

    assert delay_us % 1000 == 0, "Spark watermark delays have millisecond granularity"
    w_left, w_right = windows or (W, W)

    def side(name: str, p: str):
        extra = [F.col(row).alias(f"{p}row")] if row else []
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(batches_dir / name))
                .select(*extra, F.col(key).alias(f"{p}key"), F.expr(f"timestamp_micros({ts})").alias(f"{p}ts"))
                .withWatermark(f"{p}ts", f"{delay_us // 1000} milliseconds"))

    joined = side(names[0], "l_").join(side(names[1], "r_"), F.expr(
        f"l_key = r_key AND r_ts BETWEEN l_ts - INTERVAL {w_right} MICROSECONDS "
        f"AND l_ts + INTERVAL {w_left} MICROSECONDS"))
    # not a TemporaryDirectory: Spark's state-store maintenance thread may still write snapshots
    # after the query has stopped; the whole checkpoints/ folder is removed after spark.stop()
    ckpt = PEERS / "checkpoints" / f"delay-{human_us(delay_us)}-{os.getpid()}"
    shutil.rmtree(ckpt, ignore_errors=True)
    got: list[tuple[int, int, int]] = []

    def collect(df, batch_id):
        got.extend((batch_id, r["l_row"], r["r_row"]) for r in df.select("l_row", "r_row").collect())

    t = time.perf_counter()
    writer = joined.writeStream.foreachBatch(collect) if row else joined.writeStream.format("noop")
    q = writer.option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    q.awaitTermination()
    elapsed = time.perf_counter() - t
    progress = list(q.recentProgress)
    # which triggers consumed files, and how many rows from each stream
    seen = []
    for p in progress:
        srcs = p["sources"]
        if any(s["startOffset"] != s["endOffset"] for s in srcs):
            by = {(names[0] if s["description"].endswith(f"/{names[0]}]") else names[1]): s["numInputRows"]
                  for s in srcs}
            seen.append((by[names[0]], by[names[1]]))
    assert seen == [tuple(b) for b in expected], "Spark triggers did not process batch j of both streams together"
    states = [p["stateOperators"][0]["numRowsTotal"] for p in progress if p["stateOperators"]]
    dropped = sum(p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in progress if p["stateOperators"])
    out = {
        "emitted": len(got) if row else sum(p["sink"]["numOutputRows"] for p in progress),
        "state_peak": max(states), "state_mean": statistics.fmean(states),
        "dropped_late": dropped, "triggers": len(progress), "data_triggers": len(seen),
        "time_s": elapsed,
        "trigger_ms_median": statistics.median(p["durationMs"]["triggerExecution"] for p in progress),
    }
    if row:
        out["rows"] = set(got)
        op = [p["stateOperators"][0] if p["stateOperators"] else {} for p in progress]
        out["state_rows"] = [o.get("numRowsTotal") for o in op]
        out["dropped_rows"] = [o.get("numRowsDroppedByWatermark") for o in op]
    return out


def slice_pairs(root: Path, W: int):
    """Truth pairs of the slice with each member's micro-batch (polars bucketed band join)."""
    import polars as pl

    m = json.loads((root / "manifest.json").read_text())
    t0, batch_us = m["t0_arrival_us"], m["batch_us"]

    def read(name: str, p: str) -> pl.DataFrame:
        return (pl.read_parquet(root / f"{name}.parquet", columns=["key", "ts", "arrival"]).with_row_index(f"{p}row")
                .select(pl.col(f"{p}row").cast(pl.Int64), pl.col("key").alias(f"{p}key"), pl.col("ts").alias(f"{p}ts"),
                        ((pl.col("arrival") - t0) // batch_us).alias(f"{p}b")))

    left, right = read("left", "l_"), read("right", "r_")
    pairs = (left.with_columns(k=pl.col("l_ts") // W)
             .join(right.with_columns(k=pl.col("r_ts") // W + pl.lit([-1, 0, 1], dtype=pl.List(pl.Int64))).explode("k"),
                   left_on=["l_key", "k"], right_on=["r_key", "k"])
             .filter((pl.col("l_ts") - pl.col("r_ts")).abs() <= W))
    return left, right, pairs, len(m["batches"])


def spark_model(sliced, W: int, delay_us: int) -> dict:
    """Which truth pairs Spark's stream-stream inner join emits, replayed batch by batch (numpy).

    What Spark 3.5+/4.x does (MicroBatchExecution, WatermarkTracker, StreamingSymmetricHashJoinExec):
    * after batch j, each withWatermark operator that saw rows moves to max(own, max event time of
      batch j in *milliseconds* - delay); the global watermark is the min over the two streams
      (an operator without data counts as 0) and never decreases.  It is in force for batch j+1;
    * in batch j, an input row is dropped as late iff ts <= the watermark in force for batch j-1
      (``eventTimeWatermarkForLateEvents``); a dropped row neither joins nor is stored;
    * the state watermark of each side (from the band condition) is wm - W - 1 ms, wm = the
      watermark in force for batch j (``eventTimeWatermarkForEviction``); a row is stored only if
      ts is above it, and stored rows at or below it are removed at the end of batch j;
    * within a batch the left rows probe the right state and are stored, then the right rows
      probe the left state (which already holds this batch's left rows).
    """
    import numpy as np

    left, right, pairs, nb = sliced
    assert W % 1000 == 0 and delay_us % 1000 == 0
    w_ms, d_ms = W // 1000, delay_us // 1000

    def batch_max_ms(df, p):
        out = np.full(nb, np.iinfo(np.int64).min)
        ts, b = df[f"{p}ts"].to_numpy() // 1000, df[f"{p}b"].to_numpy()
        np.maximum.at(out, b, ts)
        return out

    maxima = [batch_max_ms(left, "l_"), batch_max_ms(right, "r_")]
    own = [None, None]
    wm = np.zeros(nb, dtype=np.int64)          # watermark (ms) in force for batch j
    glob = 0
    for j in range(nb):
        wm[j] = glob
        for i in (0, 1):
            if maxima[i][j] != np.iinfo(np.int64).min:
                v = maxima[i][j] - d_ms
                own[i] = v if own[i] is None else max(own[i], v)
        glob = max(glob, min(0 if o is None else o for o in own))
    wm_late = np.concatenate([[0], wm[:-1]])   # in force for the previous batch

    def is_late(df, p):
        return df[f"{p}ts"].to_numpy() <= wm_late[df[f"{p}b"].to_numpy()] * 1000

    late_l, late_r = is_late(left, "l_"), is_late(right, "r_")
    lt, rt = pairs["l_ts"].to_numpy(), pairs["r_ts"].to_numpy()
    lb, rb = pairs["l_b"].to_numpy(), pairs["r_b"].to_numpy()
    alive = ~late_l[pairs["l_row"].to_numpy()] & ~late_r[pairs["r_row"].to_numpy()]

    def survives(ts, b_in, b_probe):
        """Stored in batch b_in and still stored when probed in batch b_probe >= b_in."""
        keep = lambda j: ts > (wm[j] - w_ms - 1) * 1000  # noqa: E731
        return keep(b_in) & keep(np.maximum(b_probe - 1, b_in))

    # the earlier member (left on ties: left rows are stored before the right rows probe) is the stored one
    emitted = alive & np.where(lb <= rb, survives(lt, lb, rb), survives(rt, rb, lb))
    return {"emitted": int(emitted.sum()), "dropped_late": int(late_l.sum() + late_r.sum()),
            "lost_late": int((~alive).sum()), "lost_state": int((alive & ~emitted).sum())}


# --------------------------------------------------------------------------- main

def with_results(config: Path, W: int, runs: int) -> None:
    """Part 1b: whole processes that write their pairs, alternating, one warm-up round."""
    sj, db = [], []
    for rnd in range(runs + 1):
        a = run_streamjoin(config, ["--policy", "static", "--retention", "50ms"], results=True)
        b = run_child("duckdb-write-pairs", W, 0, 0)
        if rnd:
            sj.append(a)
            db.append(b)
        print(f"  round {rnd}{' (warm-up)' if not rnd else ''}: streamjoin {a['wall_s']:.2f}s, "
              f"DuckDB {b['wall_s']:.2f}s", flush=True)
    assert all(r["count"] == sj[0]["truth_results"] for r in db), "DuckDB pairs != streamjoin truth"
    med = statistics.median
    print()
    print(f"With results written: median of {runs} alternating rounds of fresh processes after a warm-up")
    hdr = f"{'system':<52} {'rows':>11} {'wall s':>7} {'user s':>6} {'sys s':>6} {'RSS MB':>6} {'file MB':>7}"
    print(hdr)
    print("-" * len(hdr))
    print(f"{'streamjoin run, static 50ms, results.parquet':<52} {sj[0]['emitted_results']:>11,} "
          f"{med([r['wall_s'] for r in sj]):>7.2f} {med([r['user_s'] for r in sj]):>6.2f} "
          f"{med([r['sys_s'] for r in sj]):>6.2f} {med([r['rss_mb'] for r in sj]):>6.0f} "
          f"{sj[0]['results_bytes'] / 1e6:>7.0f}")
    print(f"{'DuckDB COPY exact band-join pairs TO parquet':<52} {db[0]['count']:>11,} "
          f"{med([r['wall_s'] for r in db]):>7.2f} {med([r['user_s'] for r in db]):>6.2f} "
          f"{med([r['sys_s'] for r in db]):>6.2f} {med([r['rss_mb'] for r in db]):>6.0f} {db[0]['bytes'] / 1e6:>7.0f}")
    stage = {k: med([r["timings_s"].get(k, 0.0) for r in sj]) for k in ("load", "join", "metrics", "write", "total")}
    print("streamjoin stages (median s): " + ", ".join(f"{k} {v:.2f}" for k, v in stage.items()))
    rs = [a["wall_s"] / b["wall_s"] for a, b in zip(sj, db)]
    print(f"streamjoin / DuckDB, wall: median {med(rs):.2f}x (rounds: " + ", ".join(f"{x:.2f}" for x in rs) + ")")


# --------------------------------------------------------------------------- whole process, A/B (issue 21)

SAMPLES = HERE.parent / "samples"
SMALL = HERE / "data" / "small100k"


def ensure_small() -> Path:
    """The bench set at 1/30 scale (66,660 + 33,330 = 99,990 tuples, 10 s): issue 21's small input."""
    config = SMALL / "bench.toml"
    if not config.exists():
        SMALL.mkdir(parents=True, exist_ok=True)
        subprocess.run([*streamjoin_cmd(), "generate", "bench", "--out", str(SMALL), "--seed", "7", "--scale", "0.03333"],
                       check=True, stdout=subprocess.DEVNULL)
    return config


#: the core data's two whole-process rows and their DuckDB counterparts (``--whole``)
CORE, CORE_RESULTS = "core 2M + 1M", "core, results.parquet"


def whole_process_ab(config: Path, W: int, kmin: int, tmin: int, runs: int, compare: str | None,
                     results_only: bool = False) -> None:
    """Whole ``run --engine local`` processes, this checkout (A) against ``--compare`` (B,
    if given): ``--no-results`` on three inputs, next to DuckDB's bucketed exact count on
    the core data; and with results.parquet on the core data, next to DuckDB writing the
    same pairs to Parquet (``results_only``: only this pair).  Per round every process
    once, the order of A and B swapped every round, one uncounted warm-up round; medians
    of wall and CPU (user + system)."""
    static = ["--policy", "static", "--retention", "50ms"]
    inputs = [] if results_only else [
        ("flights sample", SAMPLES / "flights" / "flights.toml", [], False),
        ("bench 1/30 (100k)", ensure_small(), static, False),
        (CORE, config, static, False)]
    inputs.append((CORE_RESULTS, config, static, True))
    peer = {CORE: ("duckdb-bucketed", "DuckDB bucketed count"), CORE_RESULTS: ("duckdb-write-pairs",
                                                                                "DuckDB COPY pairs")}
    sides = ["A"] + (["B"] if compare else [])
    got: dict[tuple[str, str], list[dict]] = {(n, side): [] for n, *_ in inputs for side in sides + ["DuckDB"]}
    for rnd in range(runs + 1):
        order = sides if rnd % 2 == 0 else sides[::-1]
        for name, cfg, policy, results in inputs:
            for side in order:
                r = run_streamjoin(cfg, policy, results=results, pythonpath=compare if side == "B" else None)
                r["cpu_s"] = r["user_s"] + r["sys_s"]
                if rnd:
                    got[(name, side)].append(r)
            if name in peer:
                d = run_child(peer[name][0], W, kmin, tmin)
                d["cpu_s"] = d["user_s"] + d["sys_s"]
                if rnd:
                    got[(name, "DuckDB")].append(d)
        print(f"  round {rnd}{' (warm-up)' if not rnd else ''}: load average {os.getloadavg()[0]:.1f}", flush=True)
    for name in peer:   # DuckDB's pairs (counted, or written and counted) against streamjoin's truth
        if (name, "A") in got:
            truth = got[(name, "A")][0]["truth_results"]
            assert all(d["count"] == truth for d in got[(name, "DuckDB")]), f"{name}: DuckDB pairs != streamjoin truth"
    med = statistics.median
    print()
    print(f"Whole process, `run --engine local` (--no-results unless the input says results.parquet), {runs} "
          "rounds after a warm-up (A = this checkout" + (f", B = {compare}" if compare else "")
          + "); medians, spread = min..max")
    hdr = (f"{'input':<20} {'side':<7} {'wall s':>7} {'spread':>11} {'CPU s':>6} {'CPU spread':>11} {'job s':>6} "
           f"{'outside s':>9}  walls")
    print(hdr)
    print("-" * len(hdr))
    for name, *_ in inputs:
        for side in sides + ["DuckDB"]:
            rs = got[(name, side)]
            if not rs:
                continue
            w = [r["wall_s"] for r in rs]
            job = med([r["timings_s"]["total"] for r in rs]) if "timings_s" in rs[0] else None
            c = [r["cpu_s"] for r in rs]
            print(f"{name:<20} {side:<7} {med(w):>7.2f} {min(w):>5.2f}..{max(w):<5.2f} {med(c):>6.2f} "
                  f"{min(c):>5.2f}..{max(c):<5.2f} {fmt_s(job):>6} {fmt_s(None if job is None else med(w) - job):>9}  " + " ".join(f"{x:.2f}" for x in w))
        if len(sides) == 2:
            for what in ("wall_s", "cpu_s"):   # per round: the two sides saw the same load
                rs = [a[what] / b[what] for a, b in zip(got[(name, "A")], got[(name, "B")])]
                print(f"{'':<20} A / B {what[:-2]}: median {med(rs):.2f} (rounds: " + ", ".join(f"{x:.2f}" for x in rs) + ")")
    for name, (_, label) in peer.items():
        db = got.get((name, "DuckDB"))
        if not db:
            continue
        for side in sides:
            for what in ("wall_s", "cpu_s"):
                rs = [a[what] / b[what] for a, b in zip(got[(name, side)], db)]
                print(f"{name}, {side} / {label}, {what[:-2]}: median {med(rs):.2f}x (rounds: "
                      + ", ".join(f"{x:.2f}" for x in rs) + ")")
        for side in sides:
            stage = {k: med([r["timings_s"].get(k, 0.0) for r in got[(name, side)]])
                     for k in ("load", "join", "join.candidates", "join.progress", "join.count", "metrics", "results",
                               "write", "total")}
            print(f"{name} stages, {side} (median s): " + ", ".join(f"{k} {v:.2f}" for k, v in stage.items()))
    if (CORE_RESULTS, "A") in got:
        print(f"file MB: results.parquet {got[(CORE_RESULTS, 'A')][0]['results_bytes'] / 1e6:.0f}, "
              f"DuckDB {got[(CORE_RESULTS, 'DuckDB')][0]['bytes'] / 1e6:.0f}")


def fmt_s(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="counted rounds after one warm-up round (default 5)")
    ap.add_argument("--skip-sss", action="store_true", help="skip Spark Structured Streaming (part 2)")
    ap.add_argument("--skip-offline", action="store_true", help="skip part 1")
    ap.add_argument("--slow", action="store_true",
                    help="also the forms that take minutes (DuckDB's default range-join plan, polars join_where on key)")
    ap.add_argument("--spark-seconds", type=int, default=60, help="arrival-time slice for part 2 (default 60)")
    ap.add_argument("--batch", default="1s", help="arrival time per Spark micro-batch (default 1s)")
    ap.add_argument("--delays", default="0ms,50ms,1s", help="watermark delay = streamjoin static retention")
    ap.add_argument("--with-results", action="store_true",
                    help="part 1b: streamjoin writing results.parquet vs DuckDB writing the pairs to Parquet")
    ap.add_argument("--whole", action="store_true",
                    help="only the whole-process rows (issue 21): flights sample, a 100k input, the core data vs DuckDB, "
                         "with and without results")
    ap.add_argument("--results-only", action="store_true",
                    help="with --whole: only the core run with results.parquet and DuckDB writing the pairs")
    ap.add_argument("--compare", metavar="PYTHONPATH",
                    help="with --whole: alternate with another checkout's code (as in bench_core.py --compare)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--band", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--kmin", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tmin", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        global CHILD_T0
        CHILD_T0 = args.t0
        if args.child == "duckdb-pairs-first":
            print(json.dumps(duckdb_pairs_first_child(args.band)))
        elif args.child == "duckdb-write-pairs":
            print(json.dumps(duckdb_write_pairs_child(args.band)))
        elif args.child == "streamjoin-warm":
            print(json.dumps(streamjoin_warm_child(ensure_data(1.0))))
        else:
            fn = duckdb_child if args.child.startswith("duckdb") else polars_child
            print(json.dumps(fn(args.child, args.band, args.kmin, args.tmin)))
        return

    import polars as pl

    config = ensure_data(1.0)
    W = band_from_config(config)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (2 vCPU)")
    try:
        import duckdb
        duck_version = duckdb.__version__
    except ImportError:
        raise SystemExit("DuckDB missing: pip install -e '.[bench]'")
    import pyspark
    print(f"versions: duckdb {duck_version}, polars {pl.__version__}, pyspark {pyspark.__version__}")

    stats = pl.concat([pl.scan_parquet(LEFT).select("key", "ts"), pl.scan_parquet(RIGHT).select("key", "ts")]) \
        .select(kmin=pl.col("key").min(), tmin=pl.col("ts").min()).collect().row(0, named=True)
    if args.results_only and not args.whole:
        ap.error("--results-only needs --whole")
    if args.whole:
        whole_process_ab(config, W, stats["kmin"], stats["tmin"], args.runs, args.compare, args.results_only)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return

    if not args.skip_offline:
        stats = pl.concat([pl.scan_parquet(LEFT).select("key", "ts"), pl.scan_parquet(RIGHT).select("key", "ts")]) \
            .select(kmin=pl.col("key").min(), kmax=pl.col("key").max(), tmin=pl.col("ts").min(),
                    tmax=pl.col("ts").max()).collect().row(0, named=True)
        # the packed (key, ts) forms are exact iff the ts span + W fits under 2^40 and the keys under 2^23
        assert stats["tmax"] - stats["tmin"] + W < (1 << 40) and stats["kmax"] - stats["kmin"] < (1 << 22)
        kmin, tmin = stats["kmin"], stats["tmin"]

        # Rounds: each round runs streamjoin and every fast form once, back to back, so that
        # the per-round ratios compare processes that saw the same load (the host is shared).
        sj_args = ["--policy", "static", "--retention", "50ms"]
        sj: list[dict] = []
        results: dict[str, list[dict]] = {f: [] for f in FAST_FORMS}
        paired: dict[str, list[dict]] = {f: [] for f in PAIRED_FORMS}
        for rnd in range(args.runs + 1):                                   # round 0: warm-up, not counted
            rep = run_streamjoin(config, sj_args)
            outs = {form: run_child(form, W, kmin, tmin) for form in FAST_FORMS}
            extra = {form: run_child(form, W, kmin, tmin) for form in PAIRED_FORMS}
            if rnd:
                sj.append(rep)
                for form, out in outs.items():
                    results[form].append(out)
                for form, out in extra.items():
                    paired[form].append(out)
            print(f"  round {rnd}{' (warm-up)' if not rnd else ''}: streamjoin {rep['wall_s']:.2f}s, "
                  + ", ".join(f"{f} {o['wall_s']:.2f}s" for f, o in outs.items()), flush=True)
        truth = sj[0]["truth_results"]
        rows = sum(s["rows"] for s in sj[0]["streams"])
        assert all(r["truth_results"] == truth for r in sj)
        for form in ONCE_FORMS + (SLOW_FORMS if args.slow else []):
            results[form] = [run_child(form, W, kmin, tmin)]
            print(f"  {form}: {results[form][0]['wall_s']:.1f}s", flush=True)
        for form, rs in results.items():
            for r in rs:
                assert r["count"] == truth, f"{form}: count {r['count']:,} != streamjoin truth {truth:,}"
                for k in ("join_count", "pairs_count"):
                    assert r.get(k, truth) == truth, f"{form}: {k} {r[k]:,} != truth {truth:,}"

        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        print()
        print(f"Exact band join, {rows:,} input tuples (left 2M, right 1M), W = {human_us(W)}; "
              f"every count asserted == streamjoin truth {truth:,}")
        print(f"median of {args.runs} rounds of fresh processes after a warm-up round (forms marked * ran once)")
        hdr = (f"{'system / form':<44} {'count':>11} {'wall s':>7} {'user s':>6} {'sys s':>6} {'RSS MB':>6} "
               f"{'in-proc s':>9} {'read s':>7} {'join s':>7} {'pairs s':>8}")
        print(hdr)
        print("-" * len(hdr))
        walls = [r["wall_s"] for r in sj]
        jobs = [r["timings_s"]["total"] for r in sj]
        loads = [r["timings_s"].get("load", 0.0) for r in sj]
        gs = lambda k: med([r[k] for r in sj])  # noqa: E731
        print(f"{'streamjoin local, static 50ms (whole job)':<44} {truth:>11,} {med(walls):>7.2f} {gs('user_s'):>6.2f} "
              f"{gs('sys_s'):>6.2f} {gs('rss_mb'):>6.0f} {med(jobs):>9.2f} {med(loads):>7.2f} {'':>7} {'':>8}")
        labels = {
            "duckdb-bucketed": "DuckDB bucketed equi-join + band filter",
            "duckdb-packed-iejoin": "DuckDB packed (key,ts) range join (IEJoin)",
            "duckdb-range-iejoin": "DuckDB key= AND ts BETWEEN, IEJoin *",
            "duckdb-range": "DuckDB key= AND ts BETWEEN, default plan *",
            "polars-bucketed": "polars bucketed equi-join + band filter",
            "polars-packed-iejoin": "polars join_where packed (key,ts) (IEJoin)",
            "polars-join_where": "polars join_where key== AND ts band *",
        }
        for form, rs in results.items():
            g = lambda k: med([r[k] for r in rs if k in r])  # noqa: E731
            print(f"{labels[form]:<44} {rs[0]['count']:>11,} {g('wall_s'):>7.2f} {g('user_s'):>6.2f} "
                  f"{g('sys_s'):>6.2f} {g('rss_mb'):>6.0f} {g('direct_s'):>9.2f} {fmt_s(g('read_s')):>7} "
                  f"{fmt_s(g('join_s')):>7} {fmt_s(g('pairs_s')):>8}")
        print("wall = process spawn -> count (imports included; streamjoin: the whole `streamjoin run`); user/sys =")
        print("CPU of that process up to the same point, RSS its peak; in-proc = the one query from Parquet (streamjoin:")
        print("report timings_s.total); read/join/pairs = the same join split: Parquet -> memory, count over the")
        print("in-memory tables, materialise the (left row, right row) pairs")
        stage = {k: med([r["timings_s"].get(k, 0.0) for r in sj]) for k in sj[0]["timings_s"] if k != "total"}
        print("streamjoin stages (median s, some overlap on threads): "
              + ", ".join(f"{k} {v:.2f}" for k, v in stage.items()))
        db = results["duckdb-bucketed"]
        ratio = lambda f: [f(a) / f(b) for a, b in zip(sj, db)]  # noqa: E731  per round
        for name, f in (("wall", lambda r: r["wall_s"]), ("user CPU", lambda r: r["user_s"]),
                        ("in-process", lambda r: r["timings_s"]["total"] if "timings_s" in r else r["direct_s"])):
            rs = ratio(f)
            print(f"streamjoin / DuckDB bucketed, {name}: median {med(rs):.2f}x (rounds: "
                  + ", ".join(f"{x:.2f}" for x in rs) + ")")
        # like for like: the engine's own work against DuckDB's exact join producing its pairs
        for name, f_sj, f_db in (
                ("replay + truth + emission (join stage) / pairs from memory",
                 lambda r: r["timings_s"]["join"], lambda r: r["pairs_s"]),
                ("load + join stage / read + pairs from memory",
                 lambda r: r["timings_s"]["load"] + r["timings_s"]["join"], lambda r: r["read_s"] + r["pairs_s"])):
            rs = [f_sj(a) / f_db(b) for a, b in zip(sj, db)]
            print(f"streamjoin / DuckDB bucketed, {name}: median {med(rs):.2f}x (rounds: "
                  + ", ".join(f"{x:.2f}" for x in rs) + ")")
        # both first joins after loading, in fresh processes; and both on a warmed heap
        first, warm = paired["duckdb-pairs-first"], paired["streamjoin-warm"]
        for r in first + warm:
            assert r["count"] == truth, f"count {r['count']:,} != truth {truth:,}"
        print(f"DuckDB pairs as the first join after reading (median): {med([r['pairs_s'] for r in first]):.2f}s; "
              f"streamjoin join stage in one process, first / second: {med([r['join1_s'] for r in warm]):.2f}s / "
              f"{med([r['join2_s'] for r in warm]):.2f}s")
        for name, f_sj, sj_rs, f_db, db_rs in (
                ("cold / cold: join stage of `streamjoin run` / DuckDB pairs, first join after reading",
                 lambda r: r["timings_s"]["join"], sj, lambda r: r["pairs_s"], first),
                ("warm / warm: second join stage in one process / DuckDB pairs after its count join",
                 lambda r: r["join2_s"], warm, lambda r: r["pairs_s"], db)):
            rs = [f_sj(a) / f_db(b) for a, b in zip(sj_rs, db_rs)]
            print(f"streamjoin / DuckDB bucketed, {name}: median {med(rs):.2f}x (rounds: "
                  + ", ".join(f"{x:.2f}" for x in rs) + ")")

    if args.with_results:
        with_results(config, W, args.runs)

    if not args.skip_sss:
        batch_us = parse_us(args.batch)
        slice_cfg, batches_dir, expected = ensure_slice(config, args.spark_seconds, batch_us)
        n_left, n_right = sum(b[0] for b in expected), sum(b[1] for b in expected)
        sliced = slice_pairs(slice_cfg.parent, W)
        t = time.perf_counter()
        spark = spark_session()
        session_s = time.perf_counter() - t
        rows_out = []
        for delay in [parse_us(d) for d in args.delays.split(",")]:
            rep = run_streamjoin(slice_cfg, ["--policy", "static", "--retention", human_us(delay)])
            assert rep["truth_results"] == sliced[2].height, "slice truth: streamjoin != polars band join"
            # Spark's watermark only moves at batch ends: compare also with one batch more retention
            rep_eq = run_streamjoin(slice_cfg, ["--policy", "static", "--retention", human_us(delay + batch_us)])
            sp = spark_join(spark, batches_dir, expected, W, delay)
            model = spark_model(sliced, W, delay)
            rows_out.append((delay, rep, sp, model, rep_eq))
            print(f"  delay {human_us(delay)}: streamjoin emitted {rep['emitted_results']:,}, Spark {sp['emitted']:,}, "
                  f"model {model['emitted']:,} (truth {rep['truth_results']:,})", flush=True)
        spark.stop()
        shutil.rmtree(PEERS / "checkpoints", ignore_errors=True)
        print()
        print(f"Spark Structured Streaming vs streamjoin static, first {args.spark_seconds} s of arrival time "
              f"({n_left:,} + {n_right:,} tuples), {len(expected)} micro-batches of {human_us(batch_us)} arrival time, "
              f"local[2], 2 shuffle partitions")
        hdr = (f"{'delay':>6} {'system':<36} {'emitted':>9} {'truth':>9} {'recall':>7} {'state peak':>10} "
               f"{'state mean':>10} {'late':>6} {'time s':>7}")
        print(hdr)
        print("-" * len(hdr))
        for delay, rep, sp, model, rep_eq in rows_out:
            truth = rep["truth_results"]
            for r, label in ((rep, "streamjoin static --retention D"),
                             (rep_eq, f"streamjoin static, retention {human_us(delay + batch_us)}")):
                late = sum(s["expired_on_arrival"] for s in r["streams"])
                mem = r["memory_tuples"]
                print(f"{human_us(delay) if r is rep else '':>6} {label:<36} {r['emitted_results']:>9,} {truth:>9,} "
                      f"{r['emitted_results'] / truth:>7.4f} {mem['peak']:>10,} {mem['mean']:>10,.0f} {late:>6,} "
                      f"{r['wall_s']:>7.1f}")
            print(f"{'':>6} {'Spark withWatermark':<36} {sp['emitted']:>9,} {truth:>9,} {sp['emitted'] / truth:>7.4f} "
                  f"{sp['state_peak']:>10,} {sp['state_mean']:>10,.0f} {sp['dropped_late']:>6,} {sp['time_s']:>7.1f}")
            print(f"{'':>6} {'Spark semantics replayed (numpy)':<36} {model['emitted']:>9,} {truth:>9,} "
                  f"{model['emitted'] / truth:>7.4f} {'':>10} {'':>10} {model['dropped_late']:>6,} {'':>7}")
        print("state: streamjoin = tuples buffered after every arrival (peak, mean over arrivals); Spark = "
              "numRowsTotal after every trigger (peak, mean over triggers)")
        print("late: streamjoin = expired on arrival (still probes the other buffer); Spark = "
              "numRowsDroppedByWatermark (not joined at all)")
        print("replayed: spark_model() in this file -- batch-level watermark, late filter one batch behind, "
              "state watermark wm - W - 1 ms; pairs lost: "
              + ", ".join(f"{human_us(d)}: {m['lost_late']:,} to late drops + {m['lost_state']:,} to eviction"
                          for d, _, _, m, _ in rows_out))
        print(f"time: streamjoin = fresh process wall; Spark = query only (session start {session_s:.1f} s not "
              f"included), median trigger "
              + ", ".join(f"{human_us(d)}: {sp['trigger_ms_median'] / 1000:.2f} s" for d, _, sp, _, _ in rows_out))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
