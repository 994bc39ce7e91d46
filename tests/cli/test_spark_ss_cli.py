"""``streamjoin run --policy spark-ss``: flags, TOML, outputs (``batch`` column,
per-stream late drops, settings, an outer join's null-padded rows) and the
one-line refusals of what is not emulated yet (CTR routing, nightly runs,
more than two streams, outer joins of other policies); --chunk-rows equals
the in-memory run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.adapters import parquet_ref_streams
from helpers.cli import assert_chunked_run_equals_in_memory, pair_job_toml, run_cli
from helpers.spark_ss import local_spark_ss

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_micro_batches_files

S = 1_000_000
T0 = 1_700_000_000 * S


def write_streams(root: Path, names, keys: int) -> Path:
    """Keyed streams (``keys`` keys) with heavy disorder, as Parquet with timestamp columns."""
    rng = np.random.default_rng(5)
    for name in names:
        n = 300
        ts = T0 + rng.integers(0, 60 * S, n)
        delay = np.where(rng.random(n) < 0.2, rng.integers(0, 20 * S, n), rng.integers(0, S, n))
        pl.DataFrame({"ts": ts, "arrival": ts + delay, "key": rng.integers(0, keys, n)}).with_columns(
            pl.col("ts").cast(pl.Datetime("us")), pl.col("arrival").cast(pl.Datetime("us"))
        ).write_parquet(root / f"{name}.parquet")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Three streams, four keys."""
    return write_streams(tmp_path_factory.mktemp("sparkss"), ("left", "right", "third"), 4)


@pytest.fixture(scope="module")
def sparse(tmp_path_factory) -> Path:
    """Two streams, 60 keys: many rows without a partner."""
    return write_streams(tmp_path_factory.mktemp("sparse"), ("left", "right"), 60)


def base_args(data: Path, out: Path, *streams: str) -> list[str]:
    args = ["run"]
    for s in streams or ("left", "right"):
        args += ["--stream", f"{s}={data / (s + '.parquet')}"]
    return args + ["--arrival", "arrival", "--key", "key", "--window", "2s", "--out", str(out)]


def test_run_writes_batches_drops_and_settings_equal_to_the_model(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_cli(base_args(data, out) + ["--policy", "spark-ss", "--watermark", "1s", "--watermark", "right=3s",
                                    "--trigger", "5s", "--watermark-policy", "max"], tmp_path)
    report = json.loads((out / "report.json").read_text())
    results = pl.read_parquet(out / "results.parquet")
    # the same rows, batches and drops as the model on the same tuples (row numbers = file order)
    model = model_of(data, PolicySpec("spark-ss", watermark=(S, 3 * S), trigger_us=5 * S, watermark_policy="max"))
    assert set(results.select("left_row", "right_row", "batch").rows()) == \
        {(left, right, b) for (left, right), (b, _, _) in model.emitted.items()}
    assert report["emitted_results"] == len(model.emitted) < report["truth_results"]
    drops = [sum(1 for s, _ in model.dropped if s == i) for i in (0, 1)]
    assert [s["dropped_late"] for s in report["streams"]] == drops and sum(drops) > 0
    # emitted at the end of its batch: latency > 0, emit time on the trigger grid
    assert (results["emit_us"] % (5 * S) == 0).all() and results["latency_us"].min() > 0
    settings = report["policy_settings"]
    assert settings["watermark_us"] == [S, 3 * S] and settings["trigger_us"] == 5 * S
    assert settings["watermark_policy"] == "max" and settings["state_rows_peak"] == max(map(sum, model.state_rows))
    assert report["config"]["engine"] == "local"


def model_of(data: Path, policy: PolicySpec):
    return local_spark_ss(parquet_ref_streams(data), (2 * S, 2 * S), policy)


@pytest.mark.parametrize("join", ["left", "right"])
def test_outer_join_writes_null_padded_rows_reported_apart_from_recall(sparse: Path, tmp_path: Path, join) -> None:
    data = sparse
    settings = ["--policy", "spark-ss", "--watermark", "1s", "--trigger", "5s"]
    run_cli(base_args(data, tmp_path / "inner") + settings, tmp_path)
    proc = run_cli(base_args(data, tmp_path / "outer") + settings + ["--join", join], tmp_path)
    inner = json.loads((tmp_path / "inner" / "report.json").read_text())
    report = json.loads((tmp_path / "outer" / "report.json").read_text())
    results = pl.read_parquet(tmp_path / "outer" / "results.parquet")
    model = model_of(data, PolicySpec("spark-ss", watermark=(S, S), trigger_us=5 * S, watermark_policy="min",
                                      join=join))
    side, other = (0, 1) if join == "left" else (1, 0)
    names = ("left", "right")
    padded = results.filter(pl.col(f"{names[other]}_row").is_null())
    # the null-padded rows: the model's, with their batch and latency; nulls in every column of the other side
    assert {(r, b, lat) for r, b, lat in padded.select(f"{names[side]}_row", "batch", "latency_us").rows()} == \
        {(row, b, lat) for (stream, row), (b, _, lat) in model.outer.items() if stream == side}
    assert len(padded) > 0 and padded.select(pl.col(f"^{names[other]}_.*$").is_null().all()).row(0) == (True,) * 4
    assert padded[f"{names[side]}_ts_us"].null_count() == 0 and (padded["latency_us"] > 0).all()
    assert (results["emit_us"] % (5 * S) == 0).all()
    assert results["emit_us"].is_sorted()
    # recall counts the inner pairs, the same as the inner join's; the padded rows are reported apart
    assert (report["truth_results"], report["emitted_results"], report["recall"]) == \
        (inner["truth_results"], inner["emitted_results"], inner["recall"])
    assert len(results) == report["emitted_results"] + len(padded)
    outer = report["outer_join"]
    assert (outer["join"], outer["stream"], outer["rows"]) == (join, names[side], len(padded))
    assert outer["latency_us"]["max"] == padded["latency_us"].max()
    assert [s["outer_rows"] for s in report["streams"]] == [len(padded) if i == side else 0 for i in (0, 1)]
    assert report["config"]["policy"]["join"] == join and "join" not in inner["config"]["policy"]
    assert f"outer_rows: {len(padded):,} of {names[side]}" in proc.stdout
    assert f"{join} outer join: {len(padded):,} rows of {names[side]}" in \
        (tmp_path / "outer" / "report.html").read_text()


def test_toml_settings(data: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "job.toml"
    cfg.write_text(pair_job_toml(data, f"""
policy = "spark-ss"
trigger = "5s"
watermark = "1s"
watermark_policy = "max"
join = "right"
out = "{tmp_path / 'out'}"
""", right_extra='watermark = "3s"'))
    run_cli(["run", str(cfg)], tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    settings = report["policy_settings"]
    assert (settings["watermark_us"], settings["trigger_us"], settings["watermark_policy"]) == ([S, 3 * S], 5 * S, "max")
    assert report["outer_join"]["join"] == "right" and report["outer_join"]["stream"] == "right"


@pytest.mark.parametrize("extra,streams,needle", [
    (["--engine", "spark", "--router", "ctr"], (), "runs with --router none, atr or auto"),
    ([], ("left", "right", "third"), "exactly two streams"),
    (["--join", "left", "--date", "2023-11-14"], (), "nightly runs support the inner join"),
])
def test_not_emulated_yet_is_refused_in_one_line(data: Path, tmp_path: Path, extra, streams, needle) -> None:
    out = tmp_path / "out"
    proc = run_cli(base_args(data, out, *streams) + ["--policy", "spark-ss", "--watermark", "1s", "--trigger", "5s"]
                   + extra, tmp_path, ok=False)
    assert proc.returncode == 2
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--policy", "static", "--retention", "1s", "--watermark", "1s"], "settings of --policy spark-ss"),
    (["--policy", "qjoin", "--recall", "0.9", "--trigger", "5s"], "settings of --policy spark-ss"),
    (["--policy", "spark-ss", "--trigger", "5s"], "needs --watermark"),
    (["--policy", "spark-ss", "--watermark", "1s"], "needs --trigger"),
    (["--policy", "spark-ss", "--watermark", "1500us", "--trigger", "5s"], "whole milliseconds"),
    (["--policy", "static", "--retention", "1s", "--join", "left"], "--join left: outer joins are emulated for "
                                                                    "--policy spark-ss, flink-sql only, not static"),
    (["--policy", "flink", "--watermark", "1s", "--join", "right"], "--join right: outer joins"),
    (["--policy", "spark-ss", "--watermark", "1s", "--trigger", "5s", "--trigger-files", "2"], "not both"),
    (["--policy", "spark-ss", "--watermark", "1s", "--trigger-files", "0"], "--trigger-files 0: expected"),
    (["--policy", "spark-ss", "--watermark", "1s", "--trigger-files", "2"], "drop the arrival column of left, right"),
    (["--policy", "static", "--retention", "1s", "--trigger-files", "2"], "--trigger-files: a setting of --policy"),
])
def test_bad_settings_are_one_line_exit_2(data: Path, tmp_path: Path, extra, needle) -> None:
    proc = run_cli(base_args(data, tmp_path / "out") + extra, tmp_path, ok=False)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def write_file_streams(root: Path) -> list:
    """Two streams as directories of Parquet files with set modification times (no
    arrival column); returns them as the model takes them: per stream ``(path,
    mtime µs, rows)``, rows numbered in path order as the loader reads them."""
    rng = np.random.default_rng(9)
    files = []
    for i, name in enumerate(("left", "right")):
        side = root / name
        side.mkdir()
        written = []
        for k in range(6):
            n = int(rng.integers(0, 12))
            ts = (T0 + k * 5 * S + rng.integers(0, 30 * S, n)).tolist()
            keys = rng.integers(0, 3, n).tolist()
            path = side / f"part-{(5 - k) if i else k}.parquet"      # right: names against the time order
            pl.DataFrame({"ts": ts, "key": keys}, schema={"ts": pl.Int64, "key": pl.Int64}).with_columns(
                pl.col("ts").cast(pl.Datetime("us"))).write_parquet(path)
            # whole seconds + 250 µs; files k = 2, 3 of one stream share a millisecond, so the path decides
            mtime_ns = (1_700_000_100 + 10 * k - (k == 3) * 10) * 1_000_000_000 + 250_000
            os.utime(path, ns=(mtime_ns, mtime_ns))
            written.append((str(path), mtime_ns // 1000, ts, keys))
        row, fs = 0, []
        for path, mtime, ts, keys in sorted(written):
            fs.append((path, mtime, [RefTuple(i, row + r, t, 0, (k,)) for r, (t, k) in enumerate(zip(ts, keys))]))
            row += len(ts)
        files.append(fs)
    return files


@pytest.mark.parametrize("engine", [["--engine", "local"], ["--engine", "spark", "--master", "local[2]"]])
def test_trigger_files_cuts_batches_by_files_as_the_model(tmp_path: Path, engine) -> None:
    """--trigger-files 2: two files per stream per batch by modification time, then
    path; rows arrive when their batch runs.  The run's rows, batches, drops and
    emission times are the per-batch reference's, which cuts the files itself -- on the
    local engine and on --engine spark."""
    files = write_file_streams(tmp_path)
    out = tmp_path / "out"
    run_cli(["run", "--stream", f"left={tmp_path / 'left'}", "--stream", f"right={tmp_path / 'right'}",
             "--key", "key", "--window", "2s", "--policy", "spark-ss", "--watermark", "1s", "--trigger-files", "2",
             "--join", "left", *engine, "--out", str(out)], tmp_path)
    policy = PolicySpec("spark-ss", watermark=(S, S), trigger_files=2, watermark_policy="min", join="left")
    ref = replay_micro_batches_files(files, (2 * S, 2 * S), policy)
    results = pl.read_parquet(out / "results.parquet")
    report = json.loads((out / "report.json").read_text())
    pairs = results.filter(pl.col("right_row").is_not_null())
    assert {(r["left_row"], r["right_row"], r["batch"], r["emit_us"]) for r in pairs.iter_rows(named=True)} == \
        {(left, right, b, e) for (left, right), (b, e, _) in ref.emitted.items()}
    padded = results.filter(pl.col("right_row").is_null())
    assert {(r, b, e) for r, b, e in padded.select("left_row", "batch", "emit_us").rows()} == \
        {(row, b, e) for (_, row), (b, e, _) in ref.outer.items()}
    assert [s["dropped_late"] for s in report["streams"]] == [sum(1 for s, _ in ref.dropped if s == i) for i in (0, 1)]
    assert report["policy_settings"]["trigger_files"] == 2 and report["policy_settings"]["trigger_us"] is None
    assert ("master" in (report.get("routing") or {})) == (engine[1] == "spark")   # the Spark engine ran it
    assert report["policy_settings"]["batches"] == 3 and len(pairs) < report["truth_results"]
    # a row arrives when its batch runs: the latest modification time of its batch's files (s 110, 120 -- two
    # files -- and 150, + 250 µs)
    assert set(results["left_arrival_us"].to_list()) == {(1_700_000_000 + t) * S + 250 for t in (110, 120, 150)}


@pytest.mark.parametrize("join", ["inner", "full"])
def test_chunked_run_equals_the_in_memory_run(data: Path, tmp_path: Path, join) -> None:
    """--chunk-rows: the bounded engine publishes what the in-memory engine publishes (a full outer
    join: the null-padded rows of both sides too, in the same order, and the outer_join section)."""
    args = base_args(data, tmp_path / "unused") + ["--policy", "spark-ss", "--watermark", "1s", "--trigger", "5s",
                                                   "--join", join]
    assert_chunked_run_equals_in_memory(args[:args.index("--out")] + args[args.index("--out") + 2:], tmp_path)
