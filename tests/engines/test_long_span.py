"""Long spans with default settings (issue 15, item 1): cost bounded by the input.

A year of events (~50k rows, integer seconds, 1 h windows, delays of minutes
to hours) goes through ``run`` on both engines, ``tune-buffer --per-period``,
``report`` and a two-day ``backfill`` with default settings, each in a few
seconds.  Before issue 15 the default 60 s period gave ~525,000 periods and
``run`` did not finish in 400 s.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import run_cli

from streamjoin.pipelines.report.json import validate
from streamjoin.pipelines.base.timeunits import GRID_STEPS_US, HUMAN_STEPS_US

#: 2025-01-01 00:00 UTC in seconds
YEAR_START_S = 1_735_689_600
DAY_S = 86_400
DAY_US = 86_400_000_000
STREAMS = ("impressions", "clicks")


def year_of_events(rows: int = 50_000, *, seed: int = 15, days: int = 365) -> dict[str, pl.DataFrame]:
    """Two keyed streams over ``days`` days, times in integer seconds.

    Event times have a daily rhythm (busier by day); delays are lognormal
    (median ~5 min for impressions, ~20 min for clicks) with a tail of hours,
    capped at 8 h.  Files are in event-time order; arrival carries the
    disorder.  Deterministic for a seed.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for i, name in enumerate(STREAMS):
        n = rows // 2
        day = rng.integers(0, days, n)
        # daily rhythm: hour of day drawn from a bump around 14:00
        hour = np.clip(rng.normal(14.0, 4.5, n), 0, 23.999)
        ts = YEAR_START_S + day * DAY_S + (hour * 3600).astype(np.int64)
        ts.sort()
        median = 300.0 if i == 0 else 1200.0
        delay = np.minimum(rng.lognormal(np.log(median), 1.3, n), 8 * 3600).astype(np.int64)
        out[name] = pl.DataFrame({
            "ts": ts,
            "arrival": ts + delay,
            "user": rng.integers(0, 40, n),
            "value": rng.normal(size=n).round(3),
        })
    return out


def write_year(root: Path, rows: int = 50_000, *, seed: int = 15, days: int = 365) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, frame in year_of_events(rows, seed=seed, days=days).items():
        paths[name] = root / f"{name}.parquet"
        frame.write_parquet(paths[name], row_group_size=max(1, frame.height // 8))
    return paths


def year_flags(paths: dict[str, Path]) -> list[str]:
    """``streamjoin run`` flags for the year data (everything else default)."""
    out = []
    for name in STREAMS:
        out += ["--stream", f"{name}={paths[name]}"]
    return out + ["--ts", "ts", "--arrival", "arrival", "--unit", "s", "--key", "user", "--window", "1h"]


# ----------------------------------------------------------------------------
# fixtures and helpers
# ----------------------------------------------------------------------------

STATIC = ["--policy", "static", "--retention", "30m"]


@pytest.fixture(scope="module")
def year(tmp_path_factory) -> dict[str, Path]:
    return write_year(tmp_path_factory.mktemp("year") / "data")


@pytest.fixture(scope="module")
def span_us(year) -> int:
    arrivals = [pl.read_parquet(p)["arrival"] for p in year.values()]
    return (max(int(a.max()) for a in arrivals) - min(int(a.min()) for a in arrivals)) * 1_000_000


@pytest.fixture(scope="module")
def local_run(year, tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("local")
    proc = run_cli(["run", *year_flags(year), *STATIC, "--engine", "local", "--out", str(tmp / "out")], tmp)
    return tmp / "out", proc.stdout


def _report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report


def expected_default_period(span: int) -> int:
    """The rule, spelled out: the smallest of 1s .. 1w with at most 1,000 periods over the span."""
    return next((p for p in HUMAN_STEPS_US if span // p + 1 <= 1000), HUMAN_STEPS_US[-1])


def assert_sparse_periods(report: dict, period_us: int) -> None:
    """Only periods with results are listed; they add up to the totals."""
    periods = report["periods"]
    assert report["period_us"] == period_us
    assert len(periods) == report["periods_total"] - report["periods_empty"]
    assert all(p["truth"] > 0 for p in periods)
    assert sum(p["truth"] for p in periods) == report["truth_results"]
    assert sum(p["emitted"] for p in periods) == report["emitted_results"]
    first = periods[0]["start_us"]
    assert all((p["start_us"] - first) % period_us == 0 and p["end_us"] - p["start_us"] == period_us for p in periods)
    assert [p["start_us"] for p in periods] == sorted({p["start_us"] for p in periods})


# ----------------------------------------------------------------------------
# run: local and Spark engines, default settings
# ----------------------------------------------------------------------------


def test_year_data_is_what_the_test_says(year, span_us):
    frames = year_of_events()
    assert sum(f.height for f in frames.values()) == 50_000
    assert 360 * DAY_US < span_us < 366 * DAY_US
    delays = pl.concat([f["arrival"] - f["ts"] for f in frames.values()])
    assert delays.quantile(0.5) >= 60 and delays.max() >= 4 * 3600  # minutes to hours
    assert year_of_events()["clicks"].equals(frames["clicks"])  # deterministic


def test_run_default_period_is_chosen_from_the_span(local_run, span_us):
    out, stdout = local_run
    report = _report(out)
    assert expected_default_period(span_us) == DAY_US  # a year -> 1d
    total = span_us // DAY_US + 1
    assert report["period_source"] == f"default: {total} periods over 365d"
    assert report["periods_total"] == total
    assert report["config"]["period_us"] == DAY_US
    assert_sparse_periods(report, DAY_US)
    assert report["truth_results"] > 1000 and report["recall"] < 1  # a 30 min retention misses some
    # said on the plain summary, and the run took seconds, not minutes
    assert f"period: 1d (default: {total} periods over 365d)" in stdout
    assert report["timings_s"]["total"] < 60


def test_run_plots_aggregate_periods(local_run):
    from streamjoin.pipelines.report import plots

    out, _ = local_run
    report = _report(out)
    groups = plots.period_groups(report["periods"])
    assert groups["k"] == -(-groups["span_periods"] // plots.MAX_BARS) == 2
    assert len(groups["start_us"]) <= plots.MAX_BARS
    # a group's recall is its sums' ratio, its worst the lowest single period
    p = report["periods"]
    by_start = {x["start_us"]: x for x in p}
    first = p[0]["start_us"]
    for start, recall, worst in zip(groups["start_us"], groups["recall"], groups["worst"]):
        members = [by_start[s] for s in (start, start + DAY_US) if s in by_start]
        assert recall == sum(m["emitted"] for m in members) / sum(m["truth"] for m in members)
        assert worst == min(m["recall"] for m in members)
        assert (start - first) % (2 * DAY_US) == 0
    html = (out / "report.html").read_text()
    # recall per period, memory, tuning curve (static: latency 0, said in words)
    assert len(re.findall(r'<img src="data:image/svg\+xml;base64,', html)) == 3
    assert "period 1d (default: " in html


def test_spark_engine_with_default_settings(year, local_run, tmp_path, span_us):
    out = tmp_path / "spark"
    proc = run_cli(["run", *year_flags(year), *STATIC, "--engine", "spark", "--master", "local[2]",
                    "--spark-conf", "spark.sql.shuffle.partitions=2", "--out", str(out)], tmp_path)
    spark = _report(out)
    local = _report(local_run[0])
    assert spark["period_us"] == DAY_US and spark["period_source"] == local["period_source"]
    for key in ("truth_results", "emitted_results", "periods", "periods_total", "periods_empty", "memory_tuples"):
        assert spark[key] == local[key], key
    assert (out / "results.parquet").read_bytes() == (local_run[0] / "results.parquet").read_bytes()
    assert "period: 1d (default:" in proc.stdout


def test_bounded_engine_takes_the_period_from_its_survey(year, local_run, tmp_path):
    out = tmp_path / "chunked"
    run_cli(["run", *year_flags(year), *STATIC, "--engine", "local", "--chunk-rows", "7000", "--out", str(out)],
            tmp_path)
    chunked = _report(out)
    local = _report(local_run[0])
    assert chunked["bounded"]["chunks"] > 3
    for key in ("period_us", "period_source", "periods", "periods_total", "periods_empty", "truth_results"):
        assert chunked[key] == local[key], key


def test_explicit_period_is_honoured_and_bounded(year, tmp_path, span_us):
    """--period 1s over a year: 31M periods in the span, but only those with results are
    listed, the plot groups them, and the run takes seconds."""
    from streamjoin.pipelines.report import plots

    out = tmp_path / "p1s"
    proc = run_cli(["run", *year_flags(year), *STATIC, "--period", "1s", "--engine", "local", "--no-results",
                    "--out", str(out)], tmp_path)
    report = _report(out)
    assert report["period_us"] == 1_000_000 and report["period_source"] == "user"
    assert report["config"]["period_us"] == 1_000_000
    assert report["periods_total"] == span_us // 1_000_000 + 1 > 30_000_000
    assert_sparse_periods(report, 1_000_000)
    assert len(report["periods"]) <= report["truth_results"]
    assert len(plots.period_groups(report["periods"])["start_us"]) <= plots.MAX_BARS
    assert report["timings_s"]["total"] < 60
    assert "period: 1s (user)" in proc.stdout
    # the page lists the worst periods only, collapsed, and says where the rest are
    html = (out / "report.html").read_text()
    assert re.search(r"<details class=\"periods\"><summary>The 20 worst of [\d,]+ periods with results, worst first "
                     r"\(full list: &quot;periods&quot; in report.json\)", html)


def test_terminal_tables_show_the_worst_periods_only(local_run):
    from rich.console import Console

    from streamjoin.pipelines.report.terminal import render_rich

    out, _ = local_run
    report = _report(out)
    console = Console(record=True, width=160)
    render_rich(report, console)
    text = console.export_text()
    hidden = len(report["periods"]) - 20
    assert f"the 20 worst periods ({hidden:,} more in report.json)" in text
    worst = min(p["recall"] for p in report["periods"])
    assert f"{worst:.4f}"[:6] in text


# ----------------------------------------------------------------------------
# tune-buffer --per-period, report, backfill
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned(year, tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("tune")
    proc = run_cli(["tune-buffer", *year_flags(year), "--recall", "0.95", "--per-period", "--out", str(tmp / "t")],
                   tmp)
    return tmp / "t", proc.stdout


def test_tune_per_period_with_default_settings(tuned, span_us):
    out, stdout = tuned
    t = json.loads((out / "tune.json").read_text())
    assert t["period_us"] == DAY_US and t["period_source"].startswith("default: ")
    assert t["periods_total"] == span_us // DAY_US + 1
    periods = t["periods"]
    assert all(p["truth"] > 0 for p in periods)
    assert sum(p["truth"] for p in periods) == t["truth_results"]
    assert len(periods) == t["periods_total"] - t["periods_empty"] == t["every_period"]["periods_with_truth"]
    # the grid follows the data: a ladder step with 100..300 steps up to the largest required slack
    g = t["granularity_us"]
    assert g in GRID_STEPS_US and t["granularity_source"].startswith("default: ")
    top = t["curve"]["setting_us"][-1] // g
    assert 100 <= top <= 300 and t["curve"]["recall"][-1] == 1.0
    assert len(t["curve"]["setting_us"]) <= 2000
    # the exact minimum is exact; the recommendation is on the grid
    rec = t["recommendation"]
    assert rec["exact_us"] <= rec["setting_us"] < rec["exact_us"] + g
    assert t["every_period"]["setting_us"] == max(p["setting_us"] for p in periods)
    # at most 20 period rows on the terminal, and it says how many are not shown
    rows = [line for line in stdout.splitlines() if line.startswith("  +")]
    assert len(rows) == 20
    assert f"the 20 worst periods ({len(periods) - 20:,} more in tune.json)" in stdout


def test_tune_per_period_setting_meets_the_target_in_every_period(year, tuned, tmp_path):
    """Replayed with `run`: the per-period setting gives recall >= Q in every 1d period."""
    t = json.loads((tuned[0] / "tune.json").read_text())
    every = t["every_period"]["setting_us"]
    out = tmp_path / "every"
    run_cli(["run", *year_flags(year), "--policy", "static", "--retention", f"{every}us", "--engine", "local",
             "--no-results", "--out", str(out)], tmp_path)
    report = _report(out)
    assert report["period_us"] == t["period_us"]
    assert all(p["recall"] >= 0.95 for p in report["periods"])
    by_start = {p["start_us"]: p for p in t["periods"]}
    assert {p["start_us"] for p in report["periods"]} == set(by_start)
    assert all(by_start[p["start_us"]]["truth"] == p["truth"] for p in report["periods"])


def test_report_command_rerenders_the_year(local_run, tuned, tmp_path):
    for src, name in ((local_run[0], "report"), (tuned[0], "tune")):
        copy = tmp_path / name
        copy.mkdir()
        shutil.copy(src / f"{name}.json", copy / f"{name}.json")
        proc = run_cli(["report", str(copy)], tmp_path)
        assert proc.stdout.strip().endswith(f"{name}.html")
        assert (copy / f"{name}.html").read_text() == (src / f"{name}.html").read_text()


@pytest.mark.parametrize("page", ["report.html", "tune.html"])
def test_year_pages_open_in_headless_chromium(local_run, tuned, tmp_path, page):
    from helpers.browser import CHROMIUM, probe

    assert CHROMIUM is not None, "headless Chromium is required: run `bash .ci/bootstrap --test` (installs Debian's chromium)"
    facts = probe((local_run[0] if page == "report.html" else tuned[0]) / page, tmp_path)
    assert facts["errors"] == [] and facts["external"] == 0
    assert facts["images"] == (3 if page == "report.html" else 1) and facts["decoded"] == facts["images"], facts


def _write_days(year: dict[str, Path], root: Path, days: int) -> None:
    """The first ``days`` days of the year as hive partitions cut by arrival day (UTC)."""
    for name, path in year.items():
        frame = pl.read_parquet(path).with_columns(day=(pl.col("arrival") - YEAR_START_S) // DAY_S)
        for d in range(days):
            date = dt.date(2025, 1, 1) + dt.timedelta(days=d)
            part = root / name / f"date={date.isoformat()}" / "part-0.parquet"
            part.parent.mkdir(parents=True, exist_ok=True)
            frame.filter(pl.col("day") == d).drop("day").write_parquet(part)


def test_two_day_backfill_with_default_settings(year, tmp_path):
    _write_days(year, tmp_path / "data", 3)
    text = '[run]\npolicy = "static"\nretention = "30m"\nout = "out"\n'
    for name in STREAMS:
        text += (f'\n[[stream]]\nname = "{name}"\npath = "data/{name}/date={{date}}/"\nts = "ts"\n'
                 f'arrival = "arrival"\nunit = "s"\nkeys = ["user"]\nwindow = "1h"\n')
    (tmp_path / "nightly.toml").write_text(text)
    proc = run_cli(["backfill", "nightly.toml", "--from", "2025-01-02", "--to", "2025-01-03"], tmp_path)
    assert "published=2" in proc.stdout + proc.stderr or "published: 2" in proc.stdout + proc.stderr, proc.stdout
    # one period for every day, chosen from the day (not the day's data): 10min, 144 a day
    assert expected_default_period(DAY_US - 1) == 600_000_000
    for day in ("2025-01-02", "2025-01-03"):
        m = json.loads((tmp_path / "out" / f"date={day}" / "_manifest.json").read_text())
        assert m["metrics"]["period_us"] == 600_000_000
        assert m["metrics"]["period_source"] == "default: 144 periods over 1d"
        assert m["config"]["period_us"] == 600_000_000
        assert m["counts"]["truth"] > 0
