"""``streamjoin`` end to end, through the real console command.

Small generated data exercising keys, arrival columns, integer units and
Parquet timestamp columns, per-stream overrides, TOML + flags, ``--no-results``,
``report.json`` against ``results.parquet``, plain-text output without a TTY,
``inspect``, hive-partitioned and glob inputs, and ``--help``.
"""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.cli import run_cli

from streamjoin.pipelines.report.json import validate

# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def assert_plain(text: str) -> None:
    assert "\x1b" not in text, f"ANSI escape in non-TTY output: {text!r}"


def read_report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report


def brute_force_pairs(ts_a, key_a, w_a, ts_b, key_b, w_b) -> set[tuple[int, int]]:
    """SPEC §3 for two streams: (row_a, row_b) with equal keys and both members in window."""
    pairs = set()
    for i, j in product(range(len(ts_a)), range(len(ts_b))):
        if key_a[i] != key_b[j]:
            continue
        top = max(ts_a[i], ts_b[j])
        if top - ts_a[i] <= w_a and top - ts_b[j] <= w_b:
            pairs.add((i, j))
    return pairs


@pytest.fixture
def sensors(tmp_path: Path) -> dict:
    """Two streams that differ in every way the loader must reconcile.

    * ``temp``: integer milliseconds (``ts``, ``arrival``), key ``sensor`` (int64),
      payload ``value``;
    * ``hum``: Parquet ``timestamp[ms]`` event time named ``event_time``,
      ``timestamp[us]`` arrival named ``arr``, key ``sid`` (int32), payload ``h``.
    """
    rng = np.random.default_rng(11)
    n_t, n_h = 60, 50
    t_ts = np.sort(rng.integers(0, 600, n_t)).astype(np.int64)             # ms
    t_arr = t_ts + rng.integers(0, 30, n_t)                                # ms, disordered arrivals
    t_key = rng.integers(1, 4, n_t).astype(np.int64)
    pl.DataFrame({"ts": t_ts, "arrival": t_arr, "sensor": t_key, "value": rng.random(n_t)}).write_parquet(
        tmp_path / "temp.parquet")
    h_ts = np.sort(rng.integers(0, 600, n_h)).astype(np.int64)             # ms
    h_arr_us = h_ts * 1000 + rng.integers(0, 25_000, n_h)                  # us
    h_key = rng.integers(1, 4, n_h).astype(np.int32)
    pl.DataFrame({
        "event_time": pl.Series(h_ts).cast(pl.Datetime("ms")),
        "arr": pl.Series(h_arr_us).cast(pl.Datetime("us")),
        "sid": h_key,
        "h": np.arange(n_h) * 0.5,
    }).write_parquet(tmp_path / "hum.parquet")
    return {
        "dir": tmp_path,
        "temp": {"ts_us": t_ts * 1000, "arrival_us": t_arr * 1000, "key": t_key},
        "hum": {"ts_us": h_ts * 1000, "arrival_us": h_arr_us, "key": h_key.astype(np.int64)},
    }


SENSOR_ARGS = [
    "--stream", "temp=temp.parquet", "--stream", "hum=hum.parquet",
    "--ts", "hum=event_time", "--arrival", "temp=arrival", "--arrival", "hum=arr",
    "--unit", "temp=ms", "--key", "temp=sensor", "--key", "hum=sid",
    "--window", "20ms", "--window", "hum=35ms",
]


# ----------------------------------------------------------------------------
# run
# ----------------------------------------------------------------------------


def test_run_end_to_end_report_matches_results_and_truth(sensors: dict) -> None:
    d = sensors["dir"]
    proc = run_cli(["run", *SENSOR_ARGS, "--policy", "static", "--retention", "1h", "--out", "out"], cwd=d)
    assert_plain(proc.stdout)
    assert_plain(proc.stderr)
    out = d / "out"
    report = read_report(out)
    res = pl.read_parquet(out / "results.parquet")

    # resolved config: per-stream overrides landed on the right stream
    cfg = {s["name"]: s for s in report["config"]["streams"]}
    assert cfg["temp"]["window_us"] == 20_000 and cfg["hum"]["window_us"] == 35_000
    assert cfg["temp"]["ts"] == "ts" and cfg["hum"]["ts"] == "event_time"
    assert cfg["temp"]["arrival"] == "arrival" and cfg["hum"]["arrival"] == "arr"
    assert cfg["temp"]["unit"] == "ms" and cfg["hum"]["unit"] is None
    assert cfg["temp"]["keys"] == ["sensor"] and cfg["hum"]["keys"] == ["sid"]
    assert report["config"]["policy"]["name"] == "static"
    assert [s["name"] for s in report["streams"]] == ["temp", "hum"]
    assert [s["rows"] for s in report["streams"]] == [60, 50]
    assert [s["quarantined"] for s in report["streams"]] == [0, 0]

    # results columns
    expected = {"temp_row", "temp_ts_us", "temp_arrival_us", "temp_value",
                "hum_row", "hum_ts_us", "hum_arrival_us", "hum_h", "emit_us", "latency_us"}
    keys_carried = {"temp_sensor", "hum_sid"}
    assert expected <= set(res.columns) <= expected | keys_carried, res.columns
    assert res.columns[-2:] == ["emit_us", "latency_us"]
    assert res["temp_ts_us"].dtype == pl.Int64 and res["latency_us"].dtype == pl.Int64

    # report numbers against results.parquet
    assert report["emitted_results"] == res.height > 0
    assert report["duplicates"] == 0 == res.select("temp_row", "hum_row").is_duplicated().sum()
    lat = res["latency_us"]
    assert report["latency_us"]["max"] == lat.max()
    assert report["latency_us"]["mean"] == pytest.approx(lat.mean())
    assert report["recall"] == pytest.approx(report["emitted_results"] / report["truth_results"])
    assert report["outputs"]["results"].endswith("results.parquet")
    assert report["outputs"]["report"].endswith("report.json")

    # times converted to microseconds, rows index the input in file order
    t, h = sensors["temp"], sensors["hum"]
    rows_t = res["temp_row"].to_numpy()
    rows_h = res["hum_row"].to_numpy()
    assert (res["temp_ts_us"].to_numpy() == t["ts_us"][rows_t]).all()
    assert (res["temp_arrival_us"].to_numpy() == t["arrival_us"][rows_t]).all()
    assert (res["hum_ts_us"].to_numpy() == h["ts_us"][rows_h]).all()
    assert (res["hum_arrival_us"].to_numpy() == h["arrival_us"][rows_h]).all()
    # emission happens at an arrival, after (or at) the last member's arrival
    last_arrival = np.maximum(res["temp_arrival_us"].to_numpy(), res["hum_arrival_us"].to_numpy())
    assert (res["latency_us"].to_numpy() == res["emit_us"].to_numpy() - last_arrival).all()
    assert (res["latency_us"].to_numpy() >= 0).all()

    # with a retention of 1 h nothing is purged: emitted == truth == brute force
    truth = brute_force_pairs(t["ts_us"], t["key"], 20_000, h["ts_us"], h["key"], 35_000)
    assert report["truth_results"] == len(truth)
    assert set(zip(rows_t.tolist(), rows_h.tolist())) == truth
    assert report["recall"] == 1.0

    # the plain summary says the same
    assert f"emitted_results: {res.height}" in proc.stdout
    assert f"truth_results: {len(truth)}" in proc.stdout
    # cron-style stage log lines on stderr, no progress bar
    assert "stage load done" in proc.stderr


def test_run_json_prints_the_report(sensors: dict) -> None:
    d = sensors["dir"]
    proc = run_cli(["run", *SENSOR_ARGS, "--policy", "mpkslack", "--json", "--out", "out"], cwd=d)
    assert_plain(proc.stdout)
    printed = json.loads(proc.stdout)
    validate(printed)
    on_disk = read_report(d / "out")
    assert printed["emitted_results"] == on_disk["emitted_results"]
    assert printed["streams"] == on_disk["streams"]
    res = pl.read_parquet(d / "out" / "results.parquet")
    assert on_disk["emitted_results"] == res.height
    assert on_disk["latency_us"]["max"] == (res["latency_us"].max() if res.height else on_disk["latency_us"]["max"])
    assert on_disk["emitted_results"] <= on_disk["truth_results"]


def test_no_results_writes_report_only(sensors: dict) -> None:
    d = sensors["dir"]
    run_cli(["run", *SENSOR_ARGS, "--no-results", "--out", "out"], cwd=d)
    out = d / "out"
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json"]
    report = read_report(out)
    assert "results" not in report["outputs"]
    assert report["config"]["write_results"] is False
    assert report["truth_results"] > 0 and report["emitted_results"] > 0


def test_toml_config_with_flag_overrides(sensors: dict) -> None:
    d = sensors["dir"]
    conf = d / "conf"
    conf.mkdir()
    # input paths are relative to the TOML file
    (conf / "job.toml").write_text(
        '[run]\n'
        'policy = "static"\n'
        'retention = "10ms"\n'
        'window = "3ms"\n'
        'out = "toml_out"\n'
        '\n'
        '[[stream]]\n'
        'name = "temp"\n'
        'path = "../temp.parquet"\n'
        'ts = "ts"\n'
        'arrival = "arrival"\n'
        'unit = "ms"\n'
        'keys = ["sensor"]\n'
        'window = "4ms"\n'
        '\n'
        '[[stream]]\n'
        'name = "hum"\n'
        'path = "../hum.parquet"\n'
        'ts = "event_time"\n'
        'arrival = "arr"\n'
        'keys = ["sid"]\n'
    )
    # TOML alone
    run_cli(["run", "conf/job.toml"], cwd=d)
    base = read_report(d / "toml_out")
    cfg = {s["name"]: s for s in base["config"]["streams"]}
    assert cfg["temp"]["window_us"] == 4_000          # stream table beats [run]
    assert cfg["hum"]["window_us"] == 3_000           # [run] default
    assert base["config"]["policy"] == {"name": "static", "k": None, "retention": [10_000, 10_000]}

    # flags win over the TOML
    proc = run_cli(["run", "conf/job.toml", "--retention", "20ms", "--window", "hum=7ms",
                    "--out", "flag_out"], cwd=d)
    assert_plain(proc.stdout)
    report = read_report(d / "flag_out")
    cfg = {s["name"]: s for s in report["config"]["streams"]}
    assert cfg["temp"]["window_us"] == 4_000
    assert cfg["hum"]["window_us"] == 7_000
    assert report["config"]["policy"]["retention"] == [20_000, 20_000]
    assert report["config"]["out"] == "flag_out"
    assert cfg["temp"]["path"] == str(Path("conf") / "../temp.parquet")

    proc = run_cli(["run", "conf/job.toml", "--policy", "kslack", "--k", "5ms", "--window", "15ms",
                    "--out", "flag_out"], cwd=d)
    report = read_report(d / "flag_out")
    assert report["config"]["policy"] == {"name": "kslack", "k": [5_000, 5_000], "retention": None}
    assert [s["window_us"] for s in report["config"]["streams"]] == [15_000, 15_000]
    res = pl.read_parquet(d / "flag_out" / "results.parquet")
    assert report["emitted_results"] == res.height


def test_integer_units_scale_to_microseconds(tmp_path: Path) -> None:
    """The same instants given in s, ms, us, ns and ps all land on the same microseconds."""
    base_us = np.array([0, 1_000_000, 2_000_000, 3_500_000], dtype=np.int64)
    scale = {"s": None, "ms": 1_000, "us": 1, "ns": 1_000, "ps": 1_000_000}
    for unit, f in scale.items():
        if unit == "s":
            values = np.array([0, 1, 2, 3], dtype=np.int64)  # 3.5 s is not whole seconds
        elif unit == "ms":
            values = base_us // f
        else:
            values = base_us * f if unit in ("ns", "ps") else base_us
        pl.DataFrame({"ts": values, "i": np.arange(4)}).write_parquet(tmp_path / f"{unit}.parquet")
    for unit in ("ms", "ns", "ps", "s"):
        run_cli(["run", "--stream", "ref=us.parquet", "--stream", f"x={unit}.parquet", "--unit", "us",
                 "--unit", f"x={unit}", "--window", "0", "--out", f"out_{unit}"], cwd=tmp_path)
        res = pl.read_parquet(tmp_path / f"out_{unit}" / "results.parquet").sort("ref_row")
        expected = [0, 1, 2] if unit == "s" else [0, 1, 2, 3]
        assert res["ref_row"].to_list() == expected, unit
        assert res["x_row"].to_list() == expected, unit
        assert (res["ref_ts_us"] == res["x_ts_us"]).all(), unit


# ----------------------------------------------------------------------------
# inputs: hive partitions and globs, sorted path order
# ----------------------------------------------------------------------------


def test_hive_directory_and_glob_inputs_read_in_sorted_path_order(tmp_path: Path) -> None:
    hive = tmp_path / "hive"
    # written out of order; the sorted order is 2024-01-01, then 2024-01-02 --
    # and the event times deliberately run the other way, so `row` must follow
    # the paths, not the times
    for date, seq0, ts0 in (("2024-01-02", 100, 0), ("2024-01-01", 200, 10)):
        part = hive / f"date={date}"
        part.mkdir(parents=True)
        pl.DataFrame({"ts": (np.arange(5, dtype=np.int64) + ts0) * 1_000, "seq": np.arange(5) + seq0}).write_parquet(
            part / "part-0.parquet")
    (hive / "_SUCCESS").write_text("")  # marker files are not data
    globbed = tmp_path / "globbed"
    globbed.mkdir()
    # lexicographic path order: f0, f1, f10, f2
    for name, seq0 in (("f2", 20), ("f10", 10), ("f1", 1), ("f0", 0)):
        ts = (np.arange(15, dtype=np.int64)) * 1_000 + 10
        pl.DataFrame({"ts": ts[seq0 % 15: seq0 % 15 + 1], "seq": [seq0]}).write_parquet(globbed / f"{name}.parquet")

    run_cli(["run", "--stream", "a=hive", "--stream", "b=globbed/*.parquet", "--unit", "us",
             "--window", "1h", "--out", "out"], cwd=tmp_path)
    report = read_report(tmp_path / "out")
    assert [s["rows"] for s in report["streams"]] == [10, 4]
    res = pl.read_parquet(tmp_path / "out" / "results.parquet")
    assert res.height == 40 == report["emitted_results"]
    a = res.select("a_row", "a_seq", "a_date").unique().sort("a_row")
    assert a["a_row"].to_list() == list(range(10))
    assert a["a_seq"].to_list() == [200, 201, 202, 203, 204, 100, 101, 102, 103, 104]
    assert [str(v) for v in a["a_date"].to_list()] == ["2024-01-01"] * 5 + ["2024-01-02"] * 5
    b = res.select("b_row", "b_seq").unique().sort("b_row")
    assert b["b_seq"].to_list() == [0, 1, 10, 20]

    # inspect reads the same datasets
    proc = run_cli(["inspect", "a=hive", "b=globbed/*.parquet", "--unit", "us", "--json"], cwd=tmp_path)
    facts = json.loads(proc.stdout)
    assert [(f["name"], f["rows"]) for f in facts] == [("a", 10), ("b", 4)]


# ----------------------------------------------------------------------------
# inspect
# ----------------------------------------------------------------------------


def test_inspect_text_and_json(tmp_path: Path) -> None:
    # stream x: 10 tuples, 1 ms apart; arrival order of ts: 0 1 3 2 4 5 8 7 6 9 -> 3 late tuples
    ts = np.arange(10, dtype=np.int64) * 1_000
    arrival = ts.copy()
    arrival[[2, 3]] = arrival[[3, 2]]
    arrival[[6, 8]] = arrival[[8, 6]]
    pl.DataFrame({"t": ts, "arr": arrival}).write_parquet(tmp_path / "x.parquet")
    # stream y: in order, with a Parquet timestamp column
    pl.DataFrame({"t": pl.Series(np.arange(5, dtype=np.int64) * 2).cast(pl.Datetime("ms")),
                  "arr": pl.Series(np.arange(5, dtype=np.int64) * 2).cast(pl.Datetime("ms"))}).write_parquet(
        tmp_path / "y.parquet")

    proc = run_cli(["inspect", "x.parquet", "y.parquet", "--ts", "t", "--arrival", "arr", "--unit", "us"], cwd=tmp_path)
    assert_plain(proc.stdout)
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    x_line, y_line = lines
    assert x_line.startswith("x: rows 10 ")
    assert y_line.startswith("y: rows 5 ")
    for line in lines:
        assert "rate " in line and "lag-behind-max p50 " in line and "max " in line and "out-of-order " in line
    assert "out-of-order 30.00%" in x_line
    assert "out-of-order 0.00%" in y_line
    assert "max 2ms" in x_line            # tuple ts=6ms arrives after ts=8ms

    proc = run_cli(["inspect", "x.parquet", "named=y.parquet", "--ts", "t", "--arrival", "arr", "--unit", "us",
                    "--json"], cwd=tmp_path)
    facts = json.loads(proc.stdout)
    x, y = facts
    assert (x["name"], x["rows"], y["name"], y["rows"]) == ("x", 10, "named", 5)
    assert x["out_of_order_share"] == pytest.approx(0.3)
    assert x["delay_us"]["max"] == 2_000
    assert x["span_us"] == 9_000
    assert x["rate_per_s"] == pytest.approx(10 / 0.009)
    assert y["out_of_order_share"] == 0.0 and y["delay_us"]["max"] == 0
    assert y["span_us"] == 8_000
    assert x["quarantined"] == 0


def test_inspect_bad_input_is_one_line(tmp_path: Path) -> None:
    proc = run_cli(["inspect", "nothing.parquet"], cwd=tmp_path, ok=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: ") and "nothing.parquet" in proc.stderr
    proc = run_cli(["inspect", "nothing.parquet", "--unit", "weeks"], cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --unit weeks")


# ----------------------------------------------------------------------------
# help
# ----------------------------------------------------------------------------


def test_help_exits_0_and_lists_exit_codes(tmp_path: Path) -> None:
    proc = run_cli(["--help"], cwd=tmp_path)
    assert_plain(proc.stdout)
    text = " ".join(proc.stdout.split())
    assert "Exit codes" in text
    for code in ("0 success", "1 failure", "2 usage or bad input"):
        assert code in text, text
    for command in ("run", "inspect", "generate"):
        assert command in text
    for command in ("run", "inspect"):
        proc = run_cli([command, "--help"], cwd=tmp_path)
        assert_plain(proc.stdout)
        assert "--help" in proc.stdout
