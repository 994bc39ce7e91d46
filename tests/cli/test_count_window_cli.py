"""Count windows through the real console command.

A run with ``--window a=3tuples`` reports what the per-arrival count
reference computes on the same files (truth, emitted, peak memory), and
shows each stream's window in words in report.json, the terminal and
report.html.  Everything a count window does not run with is refused in one
line with exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import run_cli

from streamjoin.pipelines.replay.count_reference import Tup, replay_counted

BASE = ["--stream", "a=a.parquet", "--stream", "b=b.parquet", "--arrival", "arrival", "--unit", "us",
        "--key", "k"]


def write_stream(path: Path, n: int, offset: int, seed: int, late_us: int) -> None:
    rng = np.random.default_rng(seed)
    ts = np.arange(n, dtype=np.int64) * 1_000 + offset
    arrival = ts + rng.integers(0, late_us, n)      # disorder: up to late_us late
    pl.DataFrame({"ts": ts, "arrival": arrival, "k": np.arange(n, dtype=np.int64) % 3}).write_parquet(path)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_stream(tmp_path / "a.parquet", 20, 0, 1, 10_000)
    write_stream(tmp_path / "b.parquet", 20, 300, 2, 3_000)
    return tmp_path


def tuples(path: Path, stream: int) -> list[Tup]:
    df = pl.read_parquet(path)
    return [Tup(stream, r, int(t), int(a), int(k))
            for r, (t, a, k) in enumerate(zip(df["ts"], df["arrival"], df["k"]))]


def test_count_window_run_reports_what_the_reference_computes(data: Path) -> None:
    done = run_cli(["run", *BASE, "--window", "a=3tuples", "--window", "b=2ms", "--policy", "static",
                    "--retention", "0", "--engine", "local", "--out", "out"], data)
    report = json.loads((data / "out" / "report.json").read_text())
    ref = replay_counted([tuples(data / "a.parquet", 0), tuples(data / "b.parquet", 1)],
                         [0, 2_000], [3, None], [0, 0])
    assert report["truth_results"] == len(ref.truth)
    assert report["emitted_results"] == len(ref.emitted)
    assert report["memory_tuples"]["peak"] == max(sum(m) for m in ref.memory)
    assert 0 < report["emitted_results"] < report["truth_results"]   # the case loses something to disorder
    assert [s["window"] for s in report["streams"]] == ["3 tuples", "2ms"]
    assert [s.get("window_count") for s in report["config"]["streams"]] == [3, None]
    assert "window 3 tuples" in done.stdout
    assert "<td>3 tuples</td>" in (data / "out" / "report.html").read_text()
    results = pl.read_parquet(data / "out" / "results.parquet")
    assert results.height == len(ref.emitted)


def test_count_window_from_the_config_without_retention_for_counted_streams(data: Path) -> None:
    (data / "job.toml").write_text(
        '[run]\npolicy = "static"\nengine = "local"\nout = "out"\n'
        '[[stream]]\nname = "a"\npath = "a.parquet"\narrival = "arrival"\nunit = "us"\nkeys = ["k"]\n'
        'window = "2 tuples"\n'
        '[[stream]]\nname = "b"\npath = "b.parquet"\narrival = "arrival"\nunit = "us"\nkeys = ["k"]\n'
        'window = "1 tuple"\n')
    run_cli(["run", "job.toml"], data)
    report = json.loads((data / "out" / "report.json").read_text())
    ref = replay_counted([tuples(data / "a.parquet", 0), tuples(data / "b.parquet", 1)], [0, 0], [2, 1], [0, 0])
    assert report["truth_results"] == len(ref.truth) == report["emitted_results"]   # no duration window: nothing lost
    assert [s["window"] for s in report["streams"]] == ["2 tuples", "1 tuple"]
    assert report["memory_tuples"]["peak"] <= 3


@pytest.mark.parametrize("extra, needle", [
    ([], "not --policy none"),
    (["--policy", "qjoin", "--recall", "0.9"], "not --policy qjoin"),
    (["--policy", "static", "--retention", "1ms", "--engine", "spark"], "not --engine spark"),
    (["--policy", "static", "--retention", "1ms", "--chunk-rows", "10"], "not --chunk-rows 10"),
    (["--policy", "static", "--retention", "1ms", "--capacity", "tuple=5us"], "not --capacity"),
    (["--policy", "static", "--retention", "1ms", "--flow-control", "buffer=100,rate=1e7"], "not --flow-control"),
])
def test_count_window_refuses_what_it_does_not_run_with(data: Path, extra: list[str], needle: str) -> None:
    proc = run_cli(["run", *BASE, "--window", "a=3tuples", "--window", "b=2ms", *extra, "--out", "out"], data,
                   ok=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "--window 3tuples (stream 'a')" in lines[0] and needle in lines[0], lines[0]
    assert not (data / "out").exists()


@pytest.mark.parametrize("extra", [[], ["--engine", "spark"]])
def test_a_router_is_refused_not_dropped(data: Path, extra: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --engine, a count window picks the local engine -- but not over a
    --router, which runs on Spark only: refused in one line, never run without it."""
    monkeypatch.delenv("STREAMJOIN_ENGINE", raising=False)   # the real default engine, Spark
    proc = run_cli(["run", *BASE, "--window", "a=3tuples", "--window", "b=2ms", "--policy", "static",
                    "--retention", "1ms", "--router", "atr", *extra, "--out", "out"], data, ok=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--window 3tuples (stream 'a')" in lines[0] and "not --router atr" in lines[0], lines
    assert not (data / "out").exists()


@pytest.mark.parametrize("command", [["tune-buffer", "--recall", "0.9"], ["compare"]])
def test_tune_buffer_and_compare_refuse_a_count_window(data: Path, command: list[str]) -> None:
    proc = run_cli([*command, *BASE, "--window", "3tuples", "--out", "other"], data, ok=False)
    assert proc.returncode == 2, proc.stderr
    assert f"not `streamjoin {command[0]}`" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command, offers", [("run", True), ("tune-buffer", False), ("compare", False)])
def test_window_help_offers_a_count_only_where_it_runs(tmp_path: Path, command: str, offers: bool) -> None:
    text = " ".join(run_cli([command, "--help"], tmp_path).stdout.split())
    assert ("1000tuples" in text) is offers and "…" not in text
    assert "required, here or in the config" in " ".join(text.replace("│", " ").split())


def test_a_nightly_run_refuses_a_count_window(data: Path) -> None:
    proc = run_cli(["run", *BASE, "--window", "3tuples", "--policy", "static", "--date", "2026-01-01",
                    "--out", "nightly"], data, ok=False)
    assert proc.returncode == 2, proc.stderr
    assert "not a nightly run (--date, backfill)" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_count_window_holds_at_least_one_tuple(data: Path) -> None:
    proc = run_cli(["run", *BASE, "--window", "0tuples", "--policy", "static", "--out", "out"], data, ok=False)
    assert proc.returncode == 2
    assert "at least 1 tuple" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_count_window_holds_at_most_2_to_the_62_tuples(data: Path) -> None:
    ok = run_cli(["run", *BASE, "--window", f"{2**62}tuples", "--policy", "static", "--out", "ok"], data)
    assert ok.returncode == 0, ok.stderr
    proc = run_cli(["run", *BASE, "--window", "99999999999999999999tuples", "--policy", "static", "--out", "out"],
                   data, ok=False)
    assert proc.returncode == 2, proc.stderr
    assert "at most 2**62 tuples" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_bad_window_names_both_kinds(data: Path) -> None:
    proc = run_cli(["run", *BASE, "--window", "a=1000t", "--window", "b=5ms", "--policy", "static", "--out", "out"],
                   data, ok=False)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "window of stream 'a'" in line and "250ms" in line and "1000tuples" in line and "\n" not in line
