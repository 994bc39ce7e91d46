"""The command line the outputs record (``command`` of report.json and tune.json): one
builder, ``cli.common.command_line`` -- ``streamjoin`` and the arguments, shell-quoted so
that pasting it into a shell runs the same command again."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import polars as pl

from helpers.cli import run_cli

from streamjoin.cli import common


def test_command_line_quotes_each_argument(monkeypatch):
    monkeypatch.setattr(common.sys, "argv", ["/any/path/streamjoin", "run", "--where", "a_v < 5", "--out", "o u t"])
    line = common.command_line()
    assert line == "streamjoin run --where 'a_v < 5' --out 'o u t'"
    assert shlex.split(line)[1:] == ["run", "--where", "a_v < 5", "--out", "o u t"]


def test_run_and_tune_buffer_record_their_own_command_line(tmp_path: Path):
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        ts = np.sort(rng.integers(0, 1_000_000, 200))
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 5_000, 200), "v": rng.integers(0, 10, 200)}
                     ).write_parquet(tmp_path / f"{name}.parquet")
    inputs = ["--stream", f"a={tmp_path / 'a.parquet'}", "--stream", f"b={tmp_path / 'b.parquet'}",
              "--unit", "us", "--window", "2ms", "--where", "a_v < 5"]
    run = ["run", *inputs, "--policy", "kslack", "--k", "1ms", "--out", str(tmp_path / "run out")]
    tune = ["tune-buffer", *inputs, "--recall", "0.9", "--policy", "kslack", "--out", str(tmp_path / "tune out")]
    run_cli(run, tmp_path)
    run_cli(tune, tmp_path)
    report = json.loads((tmp_path / "run out" / "report.json").read_text())
    tuned = json.loads((tmp_path / "tune out" / "tune.json").read_text())
    assert report["command"] == "streamjoin " + shlex.join(run)
    assert tuned["command"] == "streamjoin " + shlex.join(tune)
