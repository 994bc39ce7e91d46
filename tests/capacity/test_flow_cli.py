"""``streamjoin run --flow-control``: the report fields, the page's plot, the results'
latency, and that without the option (or with capacity far above the load) nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.cli import run_cli
from streamjoin.pipelines.report.json import validate

VOLATILE = ("timings_s", "outputs", "input_tuples_per_s", "command")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Two keyed streams, 2,000 + 1,500 tuples over ~1 s (integer µs), disordered arrivals."""
    rng = np.random.default_rng(5)
    for name, n in (("a", 2000), ("b", 1500)):
        ts = np.sort(rng.integers(0, 1_000_000, n)).astype(np.int64)
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 20_000, n), "key": rng.integers(0, 20, n)}
                     ).write_parquet(tmp_path / f"{name}.parquet")
    return tmp_path


ARGS = ["--stream", "a=a.parquet", "--stream", "b=b.parquet", "--arrival", "arrival", "--unit", "us",
        "--key", "key", "--window", "50ms", "--policy", "kslack", "--k", "10ms", "--engine", "local"]


def _report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report


def _stable(report: dict) -> dict:
    r = {k: v for k, v in report.items() if k not in VOLATILE + ("flow_control",)}
    r["config"] = {k: v for k, v in r["config"].items() if k not in ("out", "flow_control")}
    return r


def test_without_the_option_nothing_changes_and_ample_capacity_changes_nothing(data: Path) -> None:
    run_cli(["run", *ARGS, "--out", "plain"], data)
    # 3,500 tuples/s on average; 1e7 tuples/s leaves every unit far above its busiest 10 ms
    run_cli(["run", *ARGS, "--flow-control", "buffer=100,rate=1e7", "--out", "ample"], data)
    plain, ample = _report(data / "plain"), _report(data / "ample")
    assert "flow_control" not in plain and "flow_control" not in plain["config"]
    assert ample["flow_control"]["added_delay_us"]["all"]["max"] == 0
    assert _stable(plain) == _stable(ample)
    assert pl.read_parquet(data / "plain" / "results.parquet").equals(pl.read_parquet(data / "ample" / "results.parquet"))


def test_flow_control_report_page_and_results(data: Path) -> None:
    # 2,500 tuples/s of service for ~3,500 tuples/s of input: back-pressure builds up
    proc = run_cli(["run", *ARGS, "--flow-control", "buffer=50,rate=2500,interval=5ms,policy=max-flow,lambda=0.5:0.1,"
                    "mu=0.2", "--out", "slow"], data)
    r = _report(data / "slow")
    f = r["flow_control"]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("flow_control: "))
    assert f"max-flow, {f['added_delay_us']['all']['delayed']:,} tuples delayed" in line
    assert f["settings"] == {"buffer": 50, "rate": 2500.0, "target": 25.0, "interval_us": 5000, "policy": "max-flow",
                             "lambdas": [0.5, 0.1], "mus": [0.2], "surge": 0.0, "bucket": 2.0}
    assert r["config"]["flow_control"] == f["settings"]
    delays = f["added_delay_us"]
    assert set(delays["streams"]) == {"a", "b"}
    assert delays["all"]["delayed"] > 0 and 0 < delays["all"]["p50"] <= delays["all"]["p99"] <= delays["all"]["max"]
    assert delays["all"]["max"] == max(d["max"] for d in delays["streams"].values())
    assert all(0 < o["peak"] <= 50 for o in f["occupancy"].values())
    s = f["series"]
    assert 0 < s["points"] == len(s["time_us"]) == len(s["occupancy_mean"]["a"]) == len(s["rate_per_s"]["b"])
    assert f["intervals"] * 5000 == f["drained_us"] - f["start_us"]
    # results: members keep their own arrival; latency counts from the newest of them
    res = pl.read_parquet(data / "slow" / "results.parquet")
    assert len(res) == r["emitted_results"] > 0
    newest = np.maximum(res["a_arrival_us"].to_numpy(), res["b_arrival_us"].to_numpy())
    assert (res["latency_us"].to_numpy() == res["emit_us"].to_numpy() - newest).all()
    src = {n: pl.read_parquet(data / f"{n}.parquet") for n in ("a", "b")}
    assert (res["a_arrival_us"].to_numpy() == src["a"]["arrival"].to_numpy()[res["a_row"].to_numpy()]).all()
    assert r["latency_us"]["max"] >= delays["all"]["p50"]    # the wait upstream is in the latency
    html = (data / "slow" / "report.html").read_text()
    assert "Flow control (seed 001)" in html and "buffer occupancy over time" in html
    assert html.count("data:image/svg+xml;base64,") >= 2


def test_min_flow_delays_more_than_max_flow_here(data: Path) -> None:
    # min-flow paces both units by the slower one, head of line: no tuple arrives sooner than under max-flow
    runs = {}
    for policy in ("max-flow", "min-flow"):
        run_cli(["run", *ARGS, "--flow-control", f"buffer=50,rate=2500,policy={policy}", "--out", policy], data)
        runs[policy] = _report(data / policy)["flow_control"]["added_delay_us"]["all"]
    assert runs["min-flow"]["mean"] >= runs["max-flow"]["mean"]


@pytest.mark.parametrize("value, needle", [("buffer=10", "rate= is required"), ("buffer=10,rate=5,b0=3", "'b0=3'"),
                                           ("buffer=10,rate=5,policy=fast", "policy=fast")])
def test_bad_flow_control_is_one_line_exit_2(data: Path, value: str, needle: str) -> None:
    proc = run_cli(["run", *ARGS, "--flow-control", value, "--out", "bad"], data, ok=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "--flow-control" in lines[0]
    assert not (data / "bad").exists()


def test_flow_control_with_chunks_or_nightly_is_refused(data: Path) -> None:
    # --engine spark runs it (tests/capacity/test_flow_spark.py)
    for extra in (["--chunk-rows", "1000"], ["--date", "2024-01-01"]):
        proc = run_cli(["run", *ARGS, *extra, "--flow-control", "buffer=10,rate=5", "--out", "bad"], data, ok=False)
        assert proc.returncode == 2 and "--flow-control" in proc.stderr


def test_outer_join_padded_rows_count_latency_from_their_own_arrival(data: Path) -> None:
    args = ["--stream", "a=a.parquet", "--stream", "b=b.parquet", "--arrival", "arrival", "--unit", "us",
            "--key", "key", "--window", "5ms", "--policy", "spark-ss", "--watermark", "20ms", "--trigger", "100ms",
            "--join", "left", "--engine", "local"]
    run_cli(["run", *args, "--flow-control", "buffer=50,rate=2500", "--out", "outer"], data)
    r = _report(data / "outer")
    res = pl.read_parquet(data / "outer" / "results.parquet")
    padded = res.filter(pl.col("b_row").is_null())
    assert r["outer_join"]["rows"] == len(padded) > 0
    assert (padded["latency_us"] == padded["emit_us"] - padded["a_arrival_us"]).all()
    paired = res.filter(pl.col("b_row").is_not_null())
    newest = np.maximum(paired["a_arrival_us"].to_numpy(), paired["b_arrival_us"].to_numpy())
    assert (paired["latency_us"].to_numpy() == paired["emit_us"].to_numpy() - newest).all()
