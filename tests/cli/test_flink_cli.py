"""``streamjoin run --policy flink``: flags, TOML, outputs (per-stream late drops,
settings, latency 0) and the one-line refusals of what is not emulated
(CTR routing, nightly runs, more than two streams, sub-ms times); --chunk-rows equals the in-memory run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import assert_chunked_run_equals_in_memory, run_cli
from helpers.flink import local_flink

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Three keyed streams with heavy disorder, event times in whole ms (Parquet timestamps);
    ``fine.parquet`` has sub-millisecond event times."""
    root = tmp_path_factory.mktemp("flink")
    rng = np.random.default_rng(7)
    for name in ("left", "right", "third", "fine"):
        n = 300
        ts = T0 + rng.integers(0, 60_000, n) * MS + (rng.integers(0, MS, n) if name == "fine" else 0)
        delay = np.where(rng.random(n) < 0.2, rng.integers(0, 20 * S, n), rng.integers(0, S, n))
        pl.DataFrame({"ts": ts, "arrival": ts + delay, "key": rng.integers(0, 4, n)}).with_columns(
            pl.col("ts").cast(pl.Datetime("us")), pl.col("arrival").cast(pl.Datetime("us"))
        ).write_parquet(root / f"{name}.parquet")
    return root


def base_args(data: Path, out: Path, *streams: str) -> list[str]:
    args = ["run"]
    for s in streams or ("left", "right"):
        args += ["--stream", f"{s}={data / (s + '.parquet')}"]
    return args + ["--arrival", "arrival", "--key", "key", "--window", "2s", "--out", str(out)]


def model_of(data: Path, policy: PolicySpec):
    frames = [pl.read_parquet(data / f"{s}.parquet").with_columns(pl.col("ts", "arrival").cast(pl.Int64))
              for s in ("left", "right")]
    streams = [[RefTuple(i, r, t, a, (k,)) for r, (t, a, k) in enumerate(f.select("ts", "arrival", "key").rows())]
               for i, f in enumerate(frames)]
    return local_flink(streams, (2 * S, 2 * S), policy)


@pytest.mark.parametrize("interval,flag", [(0, ["--watermark-interval", "0"]), (200 * MS, [])])
def test_run_writes_pairs_drops_and_settings_equal_to_the_model(data: Path, tmp_path: Path, interval, flag) -> None:
    out = tmp_path / "out"
    run_cli(base_args(data, out) + ["--policy", "flink", "--watermark", "1s", "--watermark", "right=3s"] + flag,
            tmp_path)
    report = json.loads((out / "report.json").read_text())
    results = pl.read_parquet(out / "results.parquet")
    model = model_of(data, PolicySpec("flink", watermark=(S, 3 * S), watermark_interval_us=interval))
    assert set(results.select("left_row", "right_row").rows()) == set(model.emitted)
    assert report["emitted_results"] == len(model.emitted) < report["truth_results"]
    drops = [sum(1 for s, _ in model.dropped if s == i) for i in (0, 1)]
    assert [s["dropped_late"] for s in report["streams"]] == drops and sum(drops) > 0
    assert results["latency_us"].max() == 0 and report["latency_us"]["max"] == 0   # emitted on arrival
    assert report["memory_tuples"]["peak"] == max(map(sum, model.buffered))
    settings = report["policy_settings"]
    assert settings["watermark_us"] == [S, 3 * S] and settings["watermark_interval_us"] == interval
    assert settings["dropped_late"] == sum(drops)
    assert report["config"]["engine"] == "local"


def test_toml_settings(data: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "job.toml"
    cfg.write_text(f"""
[run]
policy = "flink"
watermark = "1s"
watermark_interval = "1s"
out = "{tmp_path / 'out'}"

[[stream]]
name = "left"
path = "{data / 'left.parquet'}"
arrival = "arrival"
keys = ["key"]
window = "2s"

[[stream]]
name = "right"
path = "{data / 'right.parquet'}"
arrival = "arrival"
keys = ["key"]
window = "2s"
watermark = "3s"
""")
    run_cli(["run", str(cfg)], tmp_path)
    settings = json.loads((tmp_path / "out" / "report.json").read_text())["policy_settings"]
    assert (settings["watermark_us"], settings["watermark_interval_us"]) == ([S, 3 * S], S)


@pytest.mark.parametrize("extra,streams,needle", [
    (["--engine", "spark", "--router", "ctr"], (), "runs with --router none, atr or auto"),
    ([], ("left", "right", "third"), "exactly two streams"),
    (["--date", "2023-11-14"], (), "nightly runs"),
    ([], ("left", "fine"), "not a whole millisecond"),
    (["--chunk-rows", "50"], ("left", "fine"), "not a whole millisecond"),
])
def test_not_emulated_is_refused_in_one_line(data: Path, tmp_path: Path, extra, streams, needle) -> None:
    out = tmp_path / "out"
    proc = run_cli(base_args(data, out, *streams) + ["--policy", "flink", "--watermark", "1s"] + extra,
                   tmp_path, ok=False)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr    # (after the load stage's log line, if any)
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--policy", "static", "--retention", "1s", "--watermark-interval", "0"], "setting of --policy flink"),
    (["--policy", "flink"], "needs --watermark"),
    (["--policy", "flink", "--watermark", "1500us"], "whole milliseconds"),
    (["--policy", "flink", "--watermark", "1s", "--window", "1500us"], "whole-millisecond windows"),
    (["--policy", "flink", "--watermark", "1s", "--watermark-policy", "max"], "settings of --policy spark-ss"),
    (["--policy", "flink", "--watermark", "1s", "--watermark-interval", "soon"], "watermark_interval"),
])
def test_bad_settings_are_one_line_exit_2(data: Path, tmp_path: Path, extra, needle) -> None:
    proc = run_cli(base_args(data, tmp_path / "out") + extra, tmp_path, ok=False)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1



def test_chunked_run_equals_the_in_memory_run(data: Path, tmp_path: Path) -> None:
    """--chunk-rows: the bounded engine publishes what the in-memory engine publishes."""
    args = base_args(data, tmp_path / "unused") + ["--policy", "flink", "--watermark", "1s"]
    assert_chunked_run_equals_in_memory(args[:args.index("--out")] + args[args.index("--out") + 2:], tmp_path)
