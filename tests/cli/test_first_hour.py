"""The first hour on a user's own data (issue 16): mistakes that used to pass silently.

A realistic export -- three days of ``impressions`` and ``clicks`` with int64
epoch-millisecond ``event_time`` and a ``user_id`` key -- run through the real
console command with the mistakes a new user makes:

* the wrong ``--unit`` (every row quarantined, or the span shrunk 1000x, with
  exit 0 before): now exit 2 naming the likely unit;
* most of a stream quarantined: exit 2 unless ``--max-quarantine`` allows it;
* a directory whose files disagree on column names or types: exit 2 naming
  the file, instead of quarantining the odd file as null times;
* ``inspect`` with the wrong unit (an internal ``KeyError`` before);
* ``--unit`` on Parquet timestamp columns: a warning, not silence;
* ``run --out`` onto a ``tune-buffer`` output and back: refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_bad_input import assert_one_line_error, leftovers, run_cli, snapshot

DAY_MS = 86_400_000
START_MS = 1_709_251_200_000  # 2024-03-01 00:00 UTC
ROWS = 10_000
DAYS = 3


def clicks_impressions(rows: int = ROWS, days: int = DAYS, seed: int = 16) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Impressions over ``days`` days and, for each, a click 1-30 s later
    (epoch ms, int64 ``event_time``; 500 users)."""
    rng = np.random.default_rng(seed)
    shown = np.sort(rng.integers(START_MS, START_MS + days * DAY_MS - 60_000, rows)).astype(np.int64)
    users = rng.integers(0, 500, rows).astype(np.int64)
    impressions = pl.DataFrame({"event_time": shown, "user_id": users, "ad": rng.integers(0, 40, rows)})
    clicked = shown + rng.integers(1_000, 30_000, rows)
    order = np.argsort(clicked, kind="stable")
    clicks = pl.DataFrame({"event_time": clicked[order], "user_id": users[order], "x": rng.random(rows)})
    return impressions, clicks


def day_files(frame: pl.DataFrame, directory: Path) -> list[Path]:
    """``frame`` split into one file per day under ``directory`` (part-0, part-1, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    day = (frame["event_time"] - START_MS) // DAY_MS
    paths = []
    for d in range(int(day.max()) + 1):
        path = directory / f"part-{d}.parquet"
        frame.filter(day == d).write_parquet(path)
        paths.append(path)
    return paths


@pytest.fixture
def export(tmp_path: Path) -> Path:
    impressions, clicks = clicks_impressions()
    impressions.write_parquet(tmp_path / "impressions.parquet")
    clicks.write_parquet(tmp_path / "clicks.parquet")
    return tmp_path


PAIR = ["--stream", "impressions=impressions.parquet", "--stream", "clicks=clicks.parquet",
        "--ts", "event_time", "--key", "user_id", "--window", "1min"]


# ----------------------------------------------------------------------------
# 1. the wrong --unit; most of a stream quarantined
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["s", "us", "ns"])
@pytest.mark.parametrize("chunk_rows", ["0", "2000"])  # in memory, and the bounded-memory survey
def test_epoch_ms_under_the_wrong_unit_is_an_error_naming_ms(export: Path, unit: str, chunk_rows: str) -> None:
    proc = run_cli(["run", *PAIR, "--unit", unit, "--chunk-rows", chunk_rows, "--out", "out"], cwd=export)
    assert_one_line_error(proc, "impressions.parquet", "'impressions'", "'event_time'", f"read in {unit}",
                          "looks like epoch milliseconds", "--unit ms")
    assert not (export / "out").exists() and leftovers(export) == []


def test_epoch_ms_under_ms_runs_over_three_days(export: Path) -> None:
    proc = run_cli(["run", *PAIR, "--unit", "ms", "--out", "out", "--json"], cwd=export)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    report = json.loads(proc.stdout)
    assert [(s["name"], s["rows"], s["quarantined"]) for s in report["streams"]] == [
        ("impressions", ROWS, 0), ("clicks", ROWS, 0)]
    # every click joins its own impression (1-30 s apart, window 1 min)
    assert report["truth_results"] >= ROWS


def test_relative_integer_clocks_are_not_taken_for_a_wrong_unit(tmp_path: Path) -> None:
    # seconds since a sensor's boot: plausible dates under no unit -> no complaint
    for name, offset in (("a", 0), ("b", 5)):
        pl.DataFrame({"ts": np.arange(0, 3_600, 10, dtype=np.int64) + offset}).write_parquet(tmp_path / f"{name}.parquet")
    for unit in ("s", "ms", "us", "ns", "ps"):
        proc = run_cli(["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", unit,
                        "--window", "0", "--out", f"out-{unit}"], cwd=tmp_path)
        assert proc.returncode == 0, (unit, proc.stderr)
        assert "warning" not in proc.stderr and "error" not in proc.stderr


def _with_null_times(frame: pl.DataFrame, share: float) -> pl.DataFrame:
    n = int(frame.height * share)
    return frame.with_columns(
        pl.when(pl.int_range(pl.len()) < n).then(None).otherwise(pl.col("event_time")).alias("event_time"))


@pytest.mark.parametrize("chunk_rows", ["0", "2000"])
def test_majority_quarantined_is_an_error_unless_allowed(export: Path, chunk_rows: str) -> None:
    _, clicks = clicks_impressions()
    _with_null_times(clicks, 0.6).write_parquet(export / "clicks.parquet")
    base = ["run", *PAIR, "--unit", "ms", "--chunk-rows", chunk_rows]
    proc = run_cli([*base, "--out", "out"], cwd=export)
    assert_one_line_error(proc, "clicks.parquet", "'clicks'", "6000 of 10000 rows (60%) quarantined",
                          "6000 null event_time", "--max-quarantine 0.5")
    assert not (export / "out").exists() and leftovers(export) == []
    # the user opts in: the run goes ahead and keeps the quarantined rows
    proc = run_cli([*base, "--max-quarantine", "0.7", "--out", "out"], cwd=export)
    assert proc.returncode == 0, proc.stderr
    assert pl.read_parquet(export / "out" / "quarantine" / "clicks.parquet").height == 6000
    # ... or in the config file
    (export / "job.toml").write_text("[run]\nmax_quarantine = 0.7\n")
    proc = run_cli(["run", "job.toml", *base[1:], "--out", "out2"], cwd=export)
    assert proc.returncode == 0, proc.stderr


def test_every_row_quarantined_is_an_error_whatever_the_threshold(export: Path) -> None:
    _, clicks = clicks_impressions()
    _with_null_times(clicks, 1.0).write_parquet(export / "clicks.parquet")
    proc = run_cli(["run", *PAIR, "--unit", "ms", "--max-quarantine", "1", "--out", "out"], cwd=export)
    assert_one_line_error(proc, "clicks.parquet", "all 10000 rows quarantined", "10000 null event_time")
    assert not (export / "out").exists()


def test_max_quarantine_outside_0_1_is_refused(export: Path) -> None:
    proc = run_cli(["run", *PAIR, "--unit", "ms", "--max-quarantine", "1.5", "--out", "out"], cwd=export)
    assert_one_line_error(proc, "--max-quarantine 1.5", "[0, 1]")


# ----------------------------------------------------------------------------
# 2. schema drift across the files of a stream
# ----------------------------------------------------------------------------


def _daily_dirs(root: Path) -> tuple[list[Path], list[Path]]:
    impressions, clicks = clicks_impressions()
    return day_files(impressions, root / "impressions"), day_files(clicks, root / "clicks")


DIRS = ["--stream", "impressions=impressions", "--stream", "clicks=clicks", "--ts", "event_time",
        "--key", "user_id", "--window", "1min", "--unit", "ms"]


def test_a_directory_of_daily_files_runs(tmp_path: Path) -> None:
    _daily_dirs(tmp_path)
    proc = run_cli(["run", *DIRS, "--out", "out", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [s["rows"] for s in json.loads(proc.stdout)["streams"]] == [ROWS, ROWS]


@pytest.mark.parametrize("chunk_rows", ["0", "2000"])
@pytest.mark.parametrize("column", ["event_time", "user_id"])
def test_a_file_with_a_renamed_column_is_an_error_naming_it(tmp_path: Path, column: str, chunk_rows: str) -> None:
    _, clicks = _daily_dirs(tmp_path)
    second = clicks[1]
    pl.read_parquet(second).rename({column: "ts" if column == "event_time" else "uid"}).write_parquet(second)
    proc = run_cli(["run", *DIRS, "--chunk-rows", chunk_rows, "--out", "out"], cwd=tmp_path)
    assert_one_line_error(proc, "clicks/part-1.parquet", "'clicks'", f"missing column {column!r}",
                          "clicks/part-0.parquet has it")
    assert not (tmp_path / "out").exists()


def test_a_renamed_arrival_column_is_an_error_naming_the_file(tmp_path: Path) -> None:
    _, clicks = _daily_dirs(tmp_path)
    for path in clicks:
        frame = pl.read_parquet(path)
        name = "arrival" if path != clicks[2] else "arrived"
        frame.with_columns((pl.col("event_time") + 500).alias(name)).write_parquet(path)
    proc = run_cli(["run", *DIRS, "--arrival", "clicks=arrival", "--out", "out"], cwd=tmp_path)
    assert_one_line_error(proc, "clicks/part-2.parquet", "missing column 'arrival'")


@pytest.mark.parametrize("chunk_rows", ["0", "2000"])
def test_a_file_whose_time_column_changes_type_is_an_error_naming_it(tmp_path: Path, chunk_rows: str) -> None:
    _, clicks = _daily_dirs(tmp_path)
    last = clicks[2]
    pl.read_parquet(last).with_columns(pl.col("event_time").cast(pl.Datetime("ms"))).write_parquet(last)
    proc = run_cli(["run", *DIRS, "--chunk-rows", chunk_rows, "--out", "out"], cwd=tmp_path)
    assert_one_line_error(proc, "clicks/part-2.parquet", "'event_time'", "timestamp[ms]", "int64",
                          "clicks/part-0.parquet")


# ----------------------------------------------------------------------------
# 4. --unit on Parquet timestamp columns
# ----------------------------------------------------------------------------


def test_unit_on_a_timestamp_column_is_ignored_with_one_warning(export: Path) -> None:
    impressions, clicks = clicks_impressions()
    stamped = pl.col("event_time").cast(pl.Datetime("ms"))
    impressions.with_columns(stamped).write_parquet(export / "impressions.parquet")
    clicks.with_columns(stamped).write_parquet(export / "clicks.parquet")
    proc = run_cli(["run", *PAIR, "--unit", "s", "--chunk-rows", "2000", "--out", "out", "--json"], cwd=export)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, proc.stderr  # one per stream, not one per row group
    for name, line in zip(("impressions", "clicks"), warnings):
        assert f"{name}.parquet" in line and "'event_time'" in line and "timestamp[ms]" in line
        assert "--unit s is ignored" in line
    # the timestamps' own unit was used: three days of data, nothing quarantined
    report = json.loads(proc.stdout)
    assert [s["quarantined"] for s in report["streams"]] == [0, 0]
    assert report["truth_results"] >= ROWS
    # no warning when --unit matches the column's own unit
    proc = run_cli(["run", *PAIR, "--unit", "ms", "--out", "out2"], cwd=export)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


# ----------------------------------------------------------------------------
# 3. inspect: the same unit guard, no internal failure, readable rates
# ----------------------------------------------------------------------------


def test_inspect_with_the_wrong_unit_names_the_likely_one(export: Path) -> None:
    proc = run_cli(["inspect", "clicks.parquet", "--ts", "event_time", "--unit", "s"], cwd=export)
    assert_one_line_error(proc, "clicks.parquet", "'event_time'", "looks like epoch milliseconds", "--unit ms")


def test_inspect_of_a_wholly_quarantined_stream_shows_it(export: Path) -> None:
    _, clicks = clicks_impressions()
    _with_null_times(clicks, 1.0).write_parquet(export / "clicks.parquet")
    proc = run_cli(["inspect", "clicks.parquet", "--ts", "event_time", "--unit", "ms"], cwd=export)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("clicks: rows 0 quarantined 10000 (10000 null event_time) span ")
    assert "lag-behind-max p50 - " in proc.stdout


def test_inspect_prints_slow_rates_readably(export: Path) -> None:
    proc = run_cli(["inspect", "clicks.parquet", "--ts", "event_time", "--unit", "ms", "--json"], cwd=export)
    rate = json.loads(proc.stdout)[0]["rate_per_s"]
    assert rate == pytest.approx(ROWS / (3 * 86_400), rel=0.01)  # 0.0386/s
    proc = run_cli(["inspect", "clicks.parquet", "--ts", "event_time", "--unit", "ms"], cwd=export)
    assert f" rate {rate * 60:.3g}/min " in proc.stdout, proc.stdout  # 2.32/min, not 0.0/s
    assert "delay" not in proc.stdout  # the column says what it measures: lag behind the stream's max ts


# ----------------------------------------------------------------------------
# 6. one command's output is not another's to replace
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("first,second", [("tune-buffer", "run"), ("run", "tune-buffer")])
def test_run_and_tune_buffer_do_not_replace_each_others_output(export: Path, first: str, second: str) -> None:
    command = {"run": ["run", *PAIR, "--unit", "ms"],
               "tune-buffer": ["tune-buffer", "--recall", "0.9", *PAIR, "--unit", "ms"]}
    proc = run_cli([*command[first], "--out", "out"], cwd=export)
    assert proc.returncode == 0, proc.stderr
    before = snapshot(export / "out")
    marker = {"run": "report.json", "tune-buffer": "tune.json"}[first]
    assert marker in before
    proc = run_cli([*command[second], "--out", "out"], cwd=export)
    assert_one_line_error(proc, "out", f"holds a {first} output ({marker})", "choose another --out")
    assert snapshot(export / "out") == before and leftovers(export) == []
    # the same command still replaces its own previous output
    proc = run_cli([*command[first], "--out", "out"], cwd=export)
    assert proc.returncode == 0, proc.stderr
