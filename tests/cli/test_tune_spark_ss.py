"""``streamjoin tune-buffer --policy spark-ss``: the least ``withWatermark`` delay for a
recall target, replayed with ``run --policy spark-ss`` at the recommendation (meets
it) and one grid step less (misses it); the curve agrees with the engine at every
replayed setting; the snippets carry the settings; bad options are one line, exit 2."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import run_cli
from rich.console import Console

from streamjoin.pipelines.base.timeunits import format_duration
from streamjoin.pipelines.report.html import what_to_do
from streamjoin.pipelines.report.terminal import render_tune_rich

S = 1_000_000
MS = 1000
T0 = 1_700_000_000 * S


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Two keyed streams, most rows a little late, a quarter up to 20 s late."""
    root = tmp_path_factory.mktemp("tune_sparkss")
    rng = np.random.default_rng(8)
    for name in ("left", "right"):
        n = 400
        ts = T0 + rng.integers(0, 60 * S, n)
        delay = np.where(rng.random(n) < 0.25, rng.integers(0, 20 * S, n), rng.integers(0, S, n))
        pl.DataFrame({"ts": ts, "arrival": ts + delay, "key": rng.integers(0, 3, n)}).with_columns(
            pl.col("ts").cast(pl.Datetime("us")), pl.col("arrival").cast(pl.Datetime("us"))
        ).write_parquet(root / f"{name}.parquet")
    return root


def stream_args(data: Path) -> list[str]:
    return ["--stream", f"left={data / 'left.parquet'}", "--stream", f"right={data / 'right.parquet'}",
            "--arrival", "arrival", "--key", "key", "--window", "2s"]


def run_recall(data: Path, tmp_path: Path, name: str, watermark_us: int, trigger: str, policy: str) -> float:
    out = tmp_path / name
    run_cli(["run", *stream_args(data), "--policy", "spark-ss", "--watermark", f"{watermark_us // MS}ms",
             "--trigger", trigger, "--watermark-policy", policy, "--out", str(out), "--no-results"], tmp_path)
    return json.loads((out / "report.json").read_text())["recall"]


@pytest.mark.parametrize("q,granularity,policy", [(0.9, None, "min"), (0.97, "10ms", "max")])
def test_recommendation_meets_the_target_and_one_step_less_does_not(data: Path, tmp_path: Path, q, granularity,
                                                                     policy) -> None:
    out = tmp_path / "tune"
    args = ["tune-buffer", *stream_args(data), "--policy", "spark-ss", "--trigger", "2s", "--watermark-policy", policy,
            "--recall", str(q), "--out", str(out)] + (["--granularity", granularity] if granularity else [])
    proc = run_cli(args, tmp_path)
    t = json.loads((out / "tune.json").read_text())
    rec = t["recommendation"]
    assert t["policy"] == "spark-ss" and t["trigger_us"] == 2 * S and t["watermark_policy"] == policy
    assert rec["setting_us"] > 0 and rec["setting_us"] % t["granularity_us"] == 0 and rec["exact_us"] % MS == 0
    # replayed by run at the recommendation and one grid step less
    assert run_recall(data, tmp_path, "at", rec["setting_us"], "2s", policy) == rec["recall"] >= q
    assert run_recall(data, tmp_path, "below", rec["one_step_below_us"], "2s", policy) == \
        rec["recall_one_step_below"] < q
    # the exact minimum meets it too, 1 ms less does not
    assert run_recall(data, tmp_path, "exact", rec["exact_us"], "2s", policy) >= q
    assert run_recall(data, tmp_path, "exact-1", rec["exact_us"] - MS, "2s", policy) < q
    # the curve (from required delays) equals the engine's recall at every replayed setting
    curve = dict(zip(t["curve"]["setting_us"], t["curve"]["recall"]))
    shared = [c for c in t["candidates"] if c["setting_us"] in curve]
    assert len(shared) >= 3 and all(c["recall"] == curve[c["setting_us"]] for c in shared)
    assert all(a <= b for a, b in zip(t["curve"]["recall"], t["curve"]["recall"][1:]))
    # paste-ready snippets with the chosen settings
    snippet = t["snippet"]["text"]
    assert f'withWatermark("ts", "{rec["setting_us"] // MS} milliseconds")' in snippet
    assert 'trigger(processingTime="2 seconds")' in snippet and f'"{policy}")' in snippet
    assert f'watermark = "{rec["setting_us"] // MS}ms"' in t["toml"] and 'trigger = "2s"' in t["toml"]
    compile(snippet, "snippet", "exec")                                   # valid Python
    assert "Spark job snippet:" in proc.stdout and "withWatermark" in proc.stdout
    console = Console(file=io.StringIO(), width=100)
    render_tune_rich(t, console)                                          # the terminal's panels keep "[run]"
    assert "[run]" in console.file.getvalue() and "withWatermark" in console.file.getvalue()
    assert "withWatermark" in (out / "tune.html").read_text()


def test_trigger_and_policy_from_the_run_config(data: Path, tmp_path: Path) -> None:
    """A spark-ss run's TOML is reused as it is: its trigger and watermark policy are used,
    its watermark is what is tuned."""
    cfg = tmp_path / "job.toml"
    tables = "".join(f'[[stream]]\nname = "{n}"\npath = "{data / (n + ".parquet")}"\narrival = "arrival"\n'
                     f'keys = ["key"]\nwindow = "2s"\n\n' for n in ("left", "right"))
    cfg.write_text('[run]\npolicy = "spark-ss"\ntrigger = "2s"\nwatermark = "1s"\nwatermark_policy = "max"\n\n' + tables)
    out = tmp_path / "tune"
    run_cli(["tune-buffer", str(cfg), "--policy", "spark-ss", "--recall", "0.97", "--granularity", "10ms",
             "--out", str(out)], tmp_path)
    flags = tmp_path / "flags"
    run_cli(["tune-buffer", *stream_args(data), "--policy", "spark-ss", "--trigger", "2s", "--watermark-policy", "max",
             "--recall", "0.97", "--granularity", "10ms", "--out", str(flags)], tmp_path)
    a, b = (json.loads((d / "tune.json").read_text()) for d in (out, flags))
    assert (a["trigger_us"], a["watermark_policy"]) == (2 * S, "max")
    assert a["recommendation"] == b["recommendation"] and a["curve"] == b["curve"]


@pytest.mark.parametrize("extra,needle", [
    (["--policy", "spark-ss"], "needs --trigger"),
    (["--policy", "spark-ss", "--trigger", "2s", "--granularity", "500us"], "whole milliseconds"),
    (["--policy", "spark-ss", "--trigger", "2s", "--per-period"], "--per-period"),
    (["--policy", "static", "--watermark-policy", "max"], "a setting of --policy spark-ss"),
])
def test_bad_options_are_one_line_exit_2(data: Path, tmp_path: Path, extra, needle) -> None:
    out = tmp_path / "tune"
    proc = run_cli(["tune-buffer", *stream_args(data), "--recall", "0.9", "--out", str(out)] + extra, tmp_path,
                   ok=False)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (out / "tune.json").exists()


def test_rows_at_the_epoch_cap_recall_and_say_so(tmp_path: Path) -> None:
    """Spark drops rows with ts <= 0 whatever the delay: a target above what is left is refused."""
    for name in ("left", "right"):
        ts = np.arange(0, 20_000, 500, dtype=np.int64)                 # ms from 0: the first row is at the epoch
        pl.DataFrame({"ts": ts, "arrival": ts + 10}).write_parquet(tmp_path / f"{name}.parquet")
    base = ["tune-buffer", "--stream", f"left={tmp_path / 'left.parquet'}", "--stream",
            f"right={tmp_path / 'right.parquet'}", "--arrival", "arrival", "--unit", "ms", "--window", "0",
            "--policy", "spark-ss", "--trigger", "1s"]
    proc = run_cli(base + ["--recall", "1", "--out", str(tmp_path / "a")], tmp_path, ok=False)
    assert proc.returncode == 2 and "out of reach" in proc.stderr and "0.975" in proc.stderr, proc.stderr
    run_cli(base + ["--recall", "0.975", "--out", str(tmp_path / "b")], tmp_path)
    t = json.loads((tmp_path / "b" / "tune.json").read_text())
    assert t["unreachable_results"] == 1 and t["recommendation"]["recall"] == 39 / 40
    assert any("ts <= 0" in line for line in t["summary"])


def test_run_report_draws_the_watermark_curve_and_says_which_watermark(data: Path, tmp_path: Path) -> None:
    """A spark-ss run's report.json ``tuning`` is the watermark curve (the exact minimum
    tune-buffer finds), its "what to do" names --watermark, and the watermark it
    names, replayed, meets the target."""
    q = 0.97
    run = tmp_path / "run"
    run_cli(["run", *stream_args(data), "--policy", "spark-ss", "--watermark", "10ms", "--trigger", "2s",
             "--recall", str(q), "--out", str(run), "--no-results"], tmp_path)
    report = json.loads((run / "report.json").read_text())
    tuning = report["tuning"]
    assert report["recall"] < q and tuning["policy"] == "spark-ss" and tuning["sample_every"] == 1
    assert (tuning["trigger_us"], tuning["watermark_policy"]) == (2 * S, "min")
    tune = tmp_path / "tune"
    run_cli(["tune-buffer", *stream_args(data), "--policy", "spark-ss", "--trigger", "2s", "--recall", str(q),
             "--granularity", "10ms", "--out", str(tune)], tmp_path)
    rec = json.loads((tune / "tune.json").read_text())["recommendation"]
    assert (tuning["exact_us"], tuning["setting_us"]) == (rec["exact_us"], rec["setting_us"])
    todo = what_to_do(report)
    need = format_duration(tuning["setting_us"])
    assert any(f"raise --watermark from 10ms to {need}" in line for line in todo), todo
    assert any("end of their micro-batch" in line for line in todo) and not any("--k" in line for line in todo)
    assert run_recall(data, tmp_path, "hinted", tuning["setting_us"], "2s", "min") >= q
    html = (run / "report.html").read_text()
    assert "Tuning curve (spark-ss)" in html and "withWatermark delay for both streams" in html
