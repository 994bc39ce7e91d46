"""Long spans above the counting threshold: the counted paths on a year of data.

``test_long_span.py``'s year (~50k rows) stays below ``replay/counting.MIN_ROWS``
(= ``base/kernels.MIN_ROWS``, 65,536 rows), so every run there materialises.
Here the same generator makes 200,000 rows (integer seconds, delays of minutes
to hours), which a ``--no-results`` run counts (``counting.count_pairs``, the
compiled walk) and a run with results materialises -- every report number must
be the same:

* local engine, the symmetric (static) and the sorting (mpkslack) family, 1 h
  and 1 d windows (a 1 d window gives ~1.4M pairs: above
  ``report/build.TUNING_SAMPLE``, so the counted walk samples every 2nd
  required slack), the default 1 d period and ``--period 1s`` (31M periods in
  the span, ~65k occupied: the walk's codes are per occupied period), and a
  ten-year span;
* the Spark engine's counted runs (``engines/spark/counted``, ``local[2]``,
  ``--router none | atr | ctr --no-results``): ``counted_in_tasks`` is true and
  report.json's numbers are the local engine's.

Cost stays bounded by the input, not the span: the periods listed, the tuning
curve, the memory series and the latency histogram have bounded lengths, and
the routers' default plans cut the span into ``16 x partitions`` segments
(``engines/spark/routing.segment_for_span``), whatever its length.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import run_cli
from test_long_span import DAY_US, STREAMS, write_year, year_flags

from streamjoin.pipelines.replay.counting import MIN_ROWS
from streamjoin.pipelines.report.build import TUNING_SAMPLE
from streamjoin.pipelines.report.json import validate

ROWS = 200_000
#: report.json fields that differ between engines or runs by design (timings, where, how)
NOT_NUMBERS = {"command", "config", "input_tuples_per_s", "outputs", "routing", "timings_s"}
POLICIES = {"static": ["--policy", "static", "--retention", "30m"], "mpkslack": ["--policy", "mpkslack"]}
#: the default plans' segments: ``16 x partitions`` over the span (+1: the last reaches its end)
PARTITIONS = 2
MAX_SEGMENTS = 16 * PARTITIONS + 1


@pytest.fixture(scope="module")
def big_year(tmp_path_factory) -> dict[str, Path]:
    return write_year(tmp_path_factory.mktemp("big_year"), ROWS)


def _run(paths: dict[str, Path], tmp: Path, name: str, *args: str, window: str = "1h") -> dict:
    flags = year_flags(paths)
    assert flags[-2:] == ["--window", "1h"]
    out = tmp / name
    run_cli(["run", *flags[:-1], window, *args, "--out", str(out)], tmp)
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report


def _numbers(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in NOT_NUMBERS}


def assert_bounded(report: dict) -> None:
    """No part of report.json grows with the span: the periods listed are occupied
    ones (at most one per arrival) and the series have fixed caps."""
    assert len(report["periods"]) <= report["periods_total"] - report["periods_empty"]
    assert len(report["periods"]) <= sum(s["rows"] for s in report["streams"])
    assert len(report["tuning"]["curve"]["setting_us"]) <= 2000
    assert len(report["memory_series"]["arrival_us"]) <= 2000
    assert len(report["latency_histogram"]["edges_us"]) <= 61


@pytest.mark.parametrize("window", ["1h", "1d"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_counted_year_equals_materialised_year(big_year, tmp_path, policy, window):
    """``--no-results`` counts (``join.count`` in its timings), a run with results
    materialises (``join.emit``): the same report numbers, period by period."""
    assert ROWS >= MIN_ROWS
    args = [*POLICIES[policy], "--engine", "local"]
    counted = _run(big_year, tmp_path, "counted", *args, "--no-results", window=window)
    built = _run(big_year, tmp_path, "built", *args, window=window)
    assert "join.count" in counted["timings_s"] and "join.emit" not in counted["timings_s"]
    assert "join.emit" in built["timings_s"] and "join.count" not in built["timings_s"]
    assert _numbers(counted) == _numbers(built)
    assert counted["period_us"] == DAY_US and counted["periods_total"] == 366
    assert_bounded(counted)
    if window == "1d":   # above the tuning sample: the walk samples every 2nd required slack
        assert counted["truth_results"] > TUNING_SAMPLE and counted["tuning"]["sample_every"] == 2
    else:
        assert counted["tuning"]["sample_every"] == 1
    if policy == "mpkslack":
        assert counted["latency_us"]["p99"] > 0   # the sorting family's emitted latencies are compared
    else:
        assert counted["recall"] < 1


def test_counted_year_with_one_second_periods(big_year, tmp_path):
    """``--period 1s``: 31M periods in the span; the counted walk's codes are per
    occupied period, and its per-period numbers equal the materialising run's."""
    args = [*POLICIES["static"], "--period", "1s", "--engine", "local"]
    counted = _run(big_year, tmp_path, "counted", *args, "--no-results")
    built = _run(big_year, tmp_path, "built", *args)
    assert "join.count" in counted["timings_s"] and "join.emit" in built["timings_s"]
    assert counted["periods_total"] > 30_000_000
    assert _numbers(counted) == _numbers(built)
    assert 10_000 < len(counted["periods"]) <= counted["truth_results"]
    assert_bounded(counted)


def test_counted_ten_years(tmp_path):
    """Ten years (3,650 days) at the same size: counted equals materialised, the
    default period grows to 1 w (<= 1,000 periods), nothing else grows."""
    paths = write_year(tmp_path / "data", ROWS, days=3650)
    args = [*POLICIES["mpkslack"], "--engine", "local"]
    counted = _run(paths, tmp_path, "counted", *args, "--no-results")
    built = _run(paths, tmp_path, "built", *args)
    assert "join.count" in counted["timings_s"] and "join.emit" in built["timings_s"]
    assert _numbers(counted) == _numbers(built)
    assert counted["period_us"] == 7 * DAY_US and counted["periods_total"] <= 1000
    assert_bounded(counted)


@pytest.fixture(scope="module")
def local_counted(big_year, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("local_counted")
    return _run(big_year, tmp, "local", *POLICIES["mpkslack"], "--engine", "local", "--no-results", window="1d")


@pytest.mark.parametrize("router", ["none", "atr", "ctr"])
def test_spark_counts_a_year_in_its_tasks(big_year, local_counted, tmp_path, router):
    """Spark ``local[2]``, ``--no-results``: the tasks count (``counted_in_tasks``),
    report.json's numbers are the local engine's, and the routers' plans have
    ``16 x partitions`` segments over the year (not one per window or per day)."""
    partitions = 1 if router == "none" else PARTITIONS
    got = _run(big_year, tmp_path, router, *POLICIES["mpkslack"], "--engine", "spark", "--master", "local[2]",
               "--router", router, "--partitions", str(partitions), "--no-results", window="1d")
    routing = got["routing"]
    assert routing["counted_in_tasks"] is True
    assert _numbers(got) == _numbers(local_counted)
    assert sum(p["n_out"] for p in routing["per_partition"]) == local_counted["truth_results"]
    if router == "atr":
        assert 16 * PARTITIONS <= routing["atr"]["segments"] <= MAX_SEGMENTS
    elif router == "ctr":
        assert 16 * PARTITIONS <= routing["ctr"]["segments_per_stream"] <= MAX_SEGMENTS
        # slots still reachable: ceil(max W / T) + 2 per stream, T >= the largest window
        assert routing["ctr"]["routing_table_peak"] <= 3 * len(STREAMS)
