"""``streamjoin run --policy flink-sql``: outputs equal to the model (pairs, the
full outer join's null-padded rows of both streams with their emission times,
cached rows as memory, no late drops), the TOML form, the bounded engine equal
to the in-memory one, and the one-line refusals of what is not emulated
(idleness, nightly runs, tune-buffer, compare)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from helpers.cli import assert_chunked_run_equals_in_memory, pair_job_toml, run_cli
from helpers.flink import local_flink_sql, reference_flink_sql
from test_flink_cli import base_args, data  # noqa: F401  (the module's input fixture)

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple

MS = 1000
S = 1_000_000


def model_of(data: Path, policy: PolicySpec):
    frames = [pl.read_parquet(data / f"{s}.parquet").with_columns(pl.col("ts", "arrival").cast(pl.Int64))
              for s in ("left", "right")]
    streams = [[RefTuple(i, r, t, a, (k,)) for r, (t, a, k) in enumerate(f.select("ts", "arrival", "key").rows())]
               for i, f in enumerate(frames)]
    return local_flink_sql(streams, (2 * S, 2 * S), policy), frames


@pytest.mark.parametrize("join", ["inner", "full"])
def test_run_writes_pairs_padded_rows_and_settings_equal_to_the_model(data: Path, tmp_path: Path, join) -> None:
    out = tmp_path / "out"
    run_cli(base_args(data, out) + ["--policy", "flink-sql", "--watermark", "1s", "--watermark", "right=3s",
                                    "--join", join, "--recall", "0.99"], tmp_path)
    report = json.loads((out / "report.json").read_text())
    results = pl.read_parquet(out / "results.parquet")
    model, frames = model_of(data, PolicySpec("flink-sql", watermark=(S, 3 * S), watermark_interval_us=200 * MS,
                                              join=join))
    pairs = results.filter(pl.col("left_row").is_not_null() & pl.col("right_row").is_not_null())
    assert set(pairs.select("left_row", "right_row").rows()) == set(model.emitted)
    assert report["emitted_results"] == len(model.emitted) < report["truth_results"]
    assert pairs["latency_us"].max() == 0
    assert report["memory_tuples"]["peak"] == max(map(sum, model.cached))
    assert [s["dropped_late"] for s in report["streams"]] == [0, 0]
    settings = report["policy_settings"]
    assert settings["watermark_us"] == [S, 3 * S] and settings["join"] == join and settings["dropped_late"] == 0
    assert "tuning" not in report   # no delay curve: recall is not monotone in the delay
    assert "has no exact least delay" in (out / "report.html").read_text()   # what to do, not a tuned value
    padded = results.filter(pl.col("left_row").is_null() | pl.col("right_row").is_null())
    if join == "inner":
        assert padded.height == 0 and "outer_join" not in report
        return
    got = {(0 if r["right_row"] is None else 1, r["left_row"] if r["right_row"] is None else r["right_row"]):
           (r["emit_us"], r["latency_us"]) for r in padded.iter_rows(named=True)}
    arrival = [f["arrival"].to_list() for f in frames]
    assert got == {k: (e, e - arrival[k[0]][k[1]]) for k, e in model.padded.items()}
    assert {s for s, _ in got} == {0, 1} and any(lat > 0 for _, lat in got.values())
    assert report["outer_join"]["rows"] == len(got) and report["outer_join"]["stream"] == "left and right"
    assert [s["outer_rows"] for s in report["streams"]] == [sum(1 for s, _ in got if s == i) for i in (0, 1)]


def test_toml_settings(data: Path, tmp_path: Path) -> None:  # noqa: F811
    cfg = tmp_path / "job.toml"
    cfg.write_text(pair_job_toml(data, f"""
policy = "flink-sql"
watermark = "1s"
watermark_interval = "0"
join = "left"
out = "{tmp_path / 'out'}"
"""))
    run_cli(["run", str(cfg)], tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["policy_settings"]["watermark_interval_us"], report["policy_settings"]["join"]) == (0, "left")
    assert report["outer_join"]["stream"] == "left"


def _ref_streams(data: Path) -> list[list[RefTuple]]:
    frames = [pl.read_parquet(data / f"{s}.parquet").with_columns(pl.col("ts", "arrival").cast(pl.Int64))
              for s in ("left", "right")]
    return [[RefTuple(i, r, t, a, (k,)) for r, (t, a, k) in enumerate(f.select("ts", "arrival", "key").rows())]
            for i, f in enumerate(frames)]


@pytest.mark.parametrize("form", ["flag", "toml"])
def test_min_cleanup_interval_equals_the_reference(data: Path, tmp_path: Path, form) -> None:  # noqa: F811
    """--min-cleanup-interval 5s / [run] min_cleanup_interval = "5s" (Flink's
    table.exec.interval-join.min-cleanup-interval): the pairs and the full outer join's padded
    rows (with their emission times) are the per-event reference's with that interval -- which
    differ from the default's -- and policy_settings reports it."""
    out = tmp_path / "out"
    if form == "flag":
        run_cli(base_args(data, out) + ["--policy", "flink-sql", "--watermark", "1s", "--watermark-interval", "0",
                                        "--join", "full", "--min-cleanup-interval", "5s"], tmp_path)
    else:
        cfg = tmp_path / "job.toml"
        cfg.write_text(pair_job_toml(data, f"""
policy = "flink-sql"
watermark = "1s"
watermark_interval = "0"
join = "full"
min_cleanup_interval = "5s"
out = "{out}"
"""))
        run_cli(["run", str(cfg)], tmp_path)
    report = json.loads((out / "report.json").read_text())
    results = pl.read_parquet(out / "results.parquet")
    streams = _ref_streams(data)
    policy = PolicySpec("flink-sql", watermark=(S, S), watermark_interval_us=0, join="full")
    ref, default = (reference_flink_sql(streams, (2 * S, 2 * S), policy, c) for c in (5 * S, 0))
    assert (ref.emitted, ref.padded) != (default.emitted, default.padded)   # the interval changes the answer
    pairs = results.filter(pl.col("left_row").is_not_null() & pl.col("right_row").is_not_null())
    assert set(pairs.select("left_row", "right_row").rows()) == set(ref.emitted)
    padded = results.filter(pl.col("left_row").is_null() | pl.col("right_row").is_null())
    got = {(0, r["left_row"]) if r["right_row"] is None else (1, r["right_row"]): r["emit_us"]
           for r in padded.iter_rows(named=True)}
    assert got == ref.padded
    assert report["policy_settings"]["min_cleanup_interval_us"] == 5 * S
    assert report["config"]["policy"]["min_cleanup_us"] == 5 * S


def test_default_min_cleanup_interval_stays_out_of_the_config(tmp_path: Path) -> None:
    """At Flink's default 0 the setting is left out of the resolved config (so a config hash
    stays what it was); set, it enters it."""
    from streamjoin.pipelines.config.settings import RunConfig, StreamConfig

    streams = tuple(StreamConfig(name=n, path="x.parquet", ts="ts", arrival="arrival", window_us=S) for n in "ab")
    policy = PolicySpec("flink-sql", watermark=(S, S), watermark_interval_us=0)
    plain = RunConfig(streams=streams, policy=policy, out=tmp_path).to_dict()
    set_ = RunConfig(streams=streams, policy=replace(policy, min_cleanup_us=2 * S), out=tmp_path).to_dict()
    assert "min_cleanup_us" not in plain["policy"] and set_["policy"]["min_cleanup_us"] == 2 * S
    spark = RunConfig(streams=streams, policy=PolicySpec("spark-ss", watermark=(S, S), trigger_us=S,
                                                         watermark_policy="min"), out=tmp_path).to_dict()
    assert "min_cleanup_us" not in spark["policy"]


def test_bounded_engine_equals_in_memory(data: Path, tmp_path: Path) -> None:  # noqa: F811
    """`run --policy flink-sql --join left --chunk-rows 50` (the bounded engine, several chunks)
    publishes the in-memory run's results.parquet row for row -- pairs and null-padded rows
    with their emission times, in the same order -- and the same report numbers (no late drop)."""
    args = base_args(data, tmp_path / "unused") + ["--policy", "flink-sql", "--watermark", "1s",
                                                   "--watermark-interval", "0", "--join", "left"]
    assert_chunked_run_equals_in_memory(args[:args.index("--out")] + args[args.index("--out") + 2:], tmp_path,
                                        late=False)


@pytest.mark.parametrize("args,needle", [
    (["run", "--policy", "flink-sql", "--watermark", "1s", "--watermark-interval", "100ms", "--idleness", "1s"],
     "policy flink-sql does not emulate withIdleness"),
    (["run", "--policy", "flink-sql", "--watermark", "1s", "--date", "2023-11-14"],
     "--policy flink-sql: nightly runs do not carry its caches"),
    (["run", "--policy", "spark-ss", "--watermark", "1s", "--trigger", "5s", "--join", "full", "--date", "2023-11-14"],
     "--join full: nightly runs support the inner join"),
    (["tune-buffer", "--policy", "flink-sql", "--recall", "0.9"], "its recall is not monotone in the delay"),
    (["compare", "--policy", "flink-sql --watermark 1s"], "compare does not take flink-sql yet"),
    (["run", "--policy", "flink", "--watermark", "1s", "--join", "full"], "outer joins are emulated for"),
    (["run", "--policy", "flink", "--watermark", "1s", "--min-cleanup-interval", "1s"],
     "--min-cleanup-interval: a setting of --policy flink-sql, not of flink"),
    (["run", "--policy", "flink-sql", "--watermark", "1s", "--min-cleanup-interval", "1500us"],
     "--min-cleanup-interval 1500us: expected whole milliseconds >= 0"),
])
def test_not_emulated_is_refused_in_one_line(data: Path, tmp_path: Path, args, needle) -> None:  # noqa: F811
    full = base_args(data, tmp_path / "out")
    proc = run_cli([args[0]] + full[1:] + args[1:], tmp_path, ok=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
