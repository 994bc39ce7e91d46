"""``streamjoin run --capacity``: the report's ``capacity`` object, the
unchanged report without the option, and one-line errors for bad options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.cli import run_cli

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.capacity.spec import CapacitySpec, parse_capacity
from streamjoin.pipelines.report.json import validate

VOLATILE = ("timings_s", "outputs", "input_tuples_per_s", "command")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    for name, n in (("left", 400), ("right", 300)):
        ts = np.sort(rng.integers(0, 2_000_000, n))
        arrival = ts + rng.exponential(20_000, n).astype(np.int64)
        pl.DataFrame({"ts": ts, "arrival": arrival, "key": rng.integers(0, 5, n)}).write_parquet(
            tmp_path / f"{name}.parquet")
    return tmp_path


def args(data: Path, out: str, *extra: str) -> list[str]:
    return ["run", "--stream", f"left={data / 'left.parquet'}", "--stream", f"right={data / 'right.parquet'}",
            "--ts", "ts", "--arrival", "arrival", "--unit", "us", "--key", "key", "--window", "50ms",
            "--policy", "static", "--retention", "30ms", "--engine", "local", "--out", str(data / out), *extra]


def report(data: Path, out: str) -> dict:
    r = json.loads((data / out / "report.json").read_text())
    validate(r)
    return r


def test_run_with_capacity_reports_the_capacity_object(data: Path):
    done = run_cli(args(data, "cap", "--capacity", "tuple=4ms,result=1ms,queue=3,shed=replace-oldest,state=40"),
                   data)
    r = report(data, "cap")
    line = [x for x in done.stdout.splitlines() if x.startswith("capacity: ")]
    assert len(line) == 1 and f"shed {r['capacity']['shed']['queue_replaced']:,} from queues" in line[0]
    c = r["capacity"]
    assert c["settings"] == {"tuple_ns": 4_000_000, "result_ns": 1_000_000, "cpu": 1.0, "queue": 3,
                             "shed": "replace-oldest", "state": 40}
    shed = c["shed"]
    assert shed["queue_replaced"] > 0 and shed["queue_drop_new"] == 0
    assert sum(s["queue_replaced"] for s in shed["per_stream"]) == shed["queue_replaced"]
    assert c["processed"] + shed["queue_replaced"] == 700
    assert c["occupancy_tuples"]["peak"] <= 6 and max(c["occupancy_tuples"]["peak_per_stream"].values()) <= 3
    # recall lost to capacity and to disorder add up with what was emitted
    lost = c["recall_lost_to_capacity"] - c["recall_gained_under_capacity"]
    assert r["recall"] == pytest.approx(c["recall_without_capacity"] - lost)
    assert c["recall_lost_to_disorder"] == pytest.approx(1 - c["recall_without_capacity"])
    assert sum(c["results_lost"].values()) == round(c["recall_lost_to_capacity"] * r["truth_results"])
    # latency now includes queueing: at least one tuple's service after its arrival
    assert r["latency_us"]["p50"] >= 4000 and c["latency_without_capacity_us"]["max"] == 0
    assert c["queueing_delay_us"]["max"] > 0
    assert len(c["occupancy_series"]["peak"]) == c["occupancy_series"]["points"] > 0
    assert sum(c["queueing_histogram"]["counts"]) == c["processed"]
    assert r["config"]["capacity"] == "tuple=4ms,result=1ms,queue=3,shed=replace-oldest,state=40"
    results = pl.read_parquet(data / "cap" / "results.parquet")
    assert results.height == r["emitted_results"]
    last_arrival = pl.max_horizontal("left_arrival_us", "right_arrival_us")
    assert (results["latency_us"] == results["emit_us"] - results.select(last_arrival).to_series()).all()
    # the page's advice says what capacity cost and where the latency comes from, not a sorting policy's slack
    from streamjoin.pipelines.report.html import what_to_do

    advice = what_to_do(r)
    assert any(f"capacity model lost {c['recall_lost_to_capacity']:.4f} of recall" in x for x in advice), advice
    assert any("queueing on the finite machine" in x for x in advice), advice
    assert not any("sorting policy" in x for x in advice), advice
    assert results["latency_us"].min() >= 4000   # every result waited for at least one service time
    html = (data / "cap" / "report.html").read_text()
    assert "Queueing delay" in html and "Queue occupancy" in html


def test_without_capacity_the_report_is_unchanged(data: Path):
    """No option: no ``capacity`` key, nothing in ``config``; an infinite machine
    (``tuple=0``) reports exactly the same numbers and results as no option."""
    run_cli(args(data, "plain"), data)
    run_cli(args(data, "zero", "--capacity", "tuple=0"), data)
    plain, zero = report(data, "plain"), report(data, "zero")
    assert "capacity" not in plain and "capacity" not in plain["config"]
    assert "<h2>Capacity</h2>" not in (data / "plain" / "report.html").read_text()
    zero.pop("capacity")
    zero["config"].pop("capacity")
    for key in VOLATILE:
        plain.pop(key), zero.pop(key)
    plain["config"].pop("out"), zero["config"].pop("out")
    assert zero == plain
    assert pl.read_parquet(data / "zero" / "results.parquet").equals(pl.read_parquet(data / "plain" / "results.parquet"))


def test_a_plain_run_never_imports_numba(data: Path):
    code = ("import sys; from streamjoin.cli.main import main; sys.argv = ['streamjoin', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nassert 'numba' not in sys.modules, 'numba imported'\n")
    done = subprocess.run([sys.executable, "-c", code, *args(data, "plain")], cwd=data, capture_output=True,
                          text=True, env={"STREAMJOIN_ENGINE": "local", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert (data / "plain" / "report.json").exists()


@pytest.mark.parametrize("option, message", [
    ("tuple=5us,speed=2", "unknown key 'speed'"),
    ("queue=10", "tuple=DUR"),
    ("tuple=5", "tuple='5': expected a duration with a unit"),
    ("tuple=5us,cpu=0", "cpu='0': expected a CPU share"),
    ("tuple=5us,queue=0", "queue='0': expected a whole number of tuples >= 1"),
    ("tuple=5us,queue=4,shed=oldest", "shed='oldest': expected one of drop-new, replace-oldest"),
    ("tuple=5us,shed=drop-new", "needs queue=N"),
    ("tuple=5us,tuple=6us", "given twice"),
])
def test_bad_capacity_options_are_one_line_errors(data: Path, option: str, message: str):
    done = run_cli(args(data, "bad", "--capacity", option), data, ok=False)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (data / "bad").exists()


@pytest.mark.parametrize("extra, message", [
    (["--policy", "kslack", "--k", "10ms", "--capacity", "tuple=5us,state=10"], "state=N"),
    (["--policy", "flink", "--watermark", "10ms", "--capacity", "tuple=5us"], "policy flink"),
    (["--engine", "spark", "--spark-conf", "spark.streamjoin.results=executors", "--capacity", "tuple=5us"],
     "spark.streamjoin.results=executors: not with --flow-control or --capacity"),
    (["--chunk-rows", "100", "--capacity", "tuple=5us"], "bounded-memory engine (--chunk-rows N) does not model it"),
    (["--date", "2024-01-02", "--capacity", "tuple=5us"], "nightly runs"),
])
def test_capacity_refused_where_it_is_not_modelled(data: Path, extra, message):
    done = run_cli(args(data, "bad", *extra), data, ok=False)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_capacity_from_the_toml(data: Path):
    (data / "job.toml").write_text(
        '[run]\npolicy = "static"\nretention = "30ms"\nengine = "local"\nout = "toml"\n'
        'capacity = "tuple=2ms,queue=2"\n'
        + "".join(f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\n'
                  f'unit = "us"\nwindow = "50ms"\nkeys = ["key"]\n' for s in ("left", "right")))
    run_cli(["run", "job.toml"], data)
    assert report(data, "toml")["capacity"]["settings"]["queue"] == 2
    done = run_cli(["run", "job.toml", "--out", "t2", "--capacity", "tuple=2ms,queues=2"], data, ok=False)
    assert done.returncode == 2 and "unknown key 'queues'" in done.stderr


def test_parse_capacity_values():
    assert parse_capacity(None) is None
    assert parse_capacity(" tuple=1.5us , result=800ns, cpu=0.5, queue=7, shed=replace-oldest, state=9 ") == \
        CapacitySpec(tuple_ns=1500, result_ns=800, cpu=0.5, queue=7, shed="replace-oldest", state=9)
    with pytest.raises(InputError, match="at most 1h"):
        parse_capacity("tuple=2h")


def test_a_service_total_beyond_int64_is_refused():
    from streamjoin.pipelines.capacity.queueing import service_times
    with pytest.raises(InputError, match="total service time"):
        service_times(parse_capacity("tuple=1h,cpu=0.000001"), np.zeros(10_000, np.int64))
    assert service_times(parse_capacity("tuple=1h"), np.zeros(1000, np.int64))[0] == 3_600 * 10**9


def test_qjoin_under_a_state_budget_says_when_the_budget_limits_recall(data: Path):
    """Issue 20 item 5: a tiny budget, not the controller, caps recall; a budget
    above every buffer changes nothing."""
    qjoin = ["--policy", "qjoin", "--recall", "0.99", "--period", "200ms", "--interval", "100ms"]
    base = [a for a in args(data, "tight") if a not in ("--policy", "static", "--retention", "30ms")]
    run_cli([*base, *qjoin, "--capacity", "tuple=0,state=2"], data)
    tight = report(data, "tight")["capacity"]
    budget = tight["state_budget"]
    assert budget["cap_tuples"] == 2 and max(budget["wanted_state_peak"].values()) > 2
    assert budget["decisions"] >= 1 and 1 <= budget["decisions_wanting_more_state"] <= budget["decisions"]
    assert budget["periods_limited_by_budget"] >= 1
    assert tight["shed"]["state_evicted"] > 0 and tight["results_lost"]["state_eviction"] > 0
    roomy_args = [a if a != str(data / "tight") else str(data / "roomy") for a in base]
    run_cli([*roomy_args, *qjoin, "--capacity", "tuple=0,state=100000"], data)
    roomy = report(data, "roomy")
    budget = roomy["capacity"]["state_budget"]
    assert budget["decisions_wanting_more_state"] == 0 and budget["periods_limited_by_budget"] == 0
    assert roomy["capacity"]["shed"]["state_evicted"] == 0
    assert roomy["recall"] == roomy["capacity"]["recall_without_capacity"]


def _entry(recall: float, emitted: int = 0) -> dict:
    return {"recall": recall, "emitted": emitted}


def test_a_missed_period_is_attributed_once_budget_then_shedding_then_controller():
    """Hand-made periods (target 0.9): the budget misses the first (met without the cap), the
    second and third miss even without the cap -- shedding lost results in the second, nothing in
    the third -- and the fourth meets the target under the cap."""
    from streamjoin.pipelines.analysis.capacity import missed_periods

    capped = [_entry(0.5), _entry(0.5), _entry(0.5), _entry(0.95)]
    free = [_entry(0.95), _entry(0.6), _entry(0.6), _entry(0.95)]
    shed_lost = [_entry(0.0, 3), _entry(0.0, 2), _entry(0.0, 0), _entry(0.0, 1)]
    assert missed_periods(capped, free, shed_lost, 0.9) == {
        "periods_limited_by_budget": 1, "periods_missed_by_shedding": 1, "periods_missed_by_controller": 1}


def test_periods_missed_under_shedding_are_capacity_s_not_the_controller_s(data: Path):
    """qjoin with a state budget, once behind an overloaded bounded queue (it sheds) and once
    with no queue cap: each period that misses the target is counted once (against report.json's
    own periods); with shedding some missed periods are capacity's, without it none is."""
    qjoin = ["--policy", "qjoin", "--recall", "0.99", "--period", "200ms", "--interval", "100ms"]
    got = {}
    for out, cap in (("shedding", "tuple=6ms,queue=2,shed=drop-new,state=4"), ("no-shedding", "tuple=0,state=4")):
        base = [a for a in args(data, out) if a not in ("--policy", "static", "--retention", "30ms")]
        run_cli([*base, *qjoin, "--capacity", cap], data)
        r = report(data, out)
        budget = r["capacity"]["state_budget"]
        missed = sum(1 for p in r["periods"] if p["recall"] < 0.99)
        assert budget["periods_limited_by_budget"] + budget["periods_missed_by_shedding"] + \
            budget["periods_missed_by_controller"] == missed
        got[out] = (r["capacity"]["shed"]["queue_drop_new"], budget["periods_missed_by_shedding"])
    assert got["shedding"][0] > 0 and got["shedding"][1] >= 1
    assert got["no-shedding"] == (0, 0)
