"""``streamjoin run --capacity ... --flow-control ...``: one run, both models
(docs/semantics.md, "Capacity with flow control").  Each model off reduces the
combined run to the other one's run, and the report's numbers are those of the
composition the per-arrival reference is checked against
(tests/capacity/test_capacity_with_flow.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.cli import run_cli
from test_flow_cli import data  # noqa: F401  (the fixture: two keyed streams over ~1 s, disordered)
from streamjoin.pipelines.analysis import metrics
from streamjoin.pipelines.analysis.capacity import queueing_delay_us
from streamjoin.pipelines.capacity import model
from streamjoin.pipelines.capacity.flow import delay_arrivals
from streamjoin.pipelines.capacity.spec import parse_capacity
from streamjoin.pipelines.config.flow_control import parse_flow_control
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.report.json import validate

VOLATILE = ("timings_s", "outputs", "input_tuples_per_s", "command")
ARGS = ["--stream", "a=a.parquet", "--stream", "b=b.parquet", "--arrival", "arrival", "--unit", "us",
        "--key", "key", "--window", "50ms", "--policy", "static", "--retention", "30ms", "--engine", "local"]
FLOW = "buffer=40,rate=2500,interval=5ms"
CAP = "tuple=300us,queue=4,shed=replace-oldest,state=60"


def _run(data: Path, out: str, *extra: str) -> dict:
    run_cli(["run", *ARGS, *extra, "--out", out], data)
    report = json.loads((data / out / "report.json").read_text())
    validate(report)
    return report


def _without(report: dict, *sections: str) -> dict:
    r = {k: v for k, v in report.items() if k not in VOLATILE + sections}
    r["config"] = {k: v for k, v in r["config"].items() if k not in ("out", *sections)}
    return r


def test_an_infinite_operator_or_ample_units_reduce_the_combined_run(data: Path) -> None:
    flow = _run(data, "flow", "--flow-control", FLOW)
    zero = _run(data, "zero", "--flow-control", FLOW, "--capacity", "tuple=0")
    assert flow["flow_control"]["added_delay_us"]["all"]["delayed"] > 0
    # tuple=0: the operator serves at the arrival at the join; everything but the capacity object is the flow run's
    assert _without(zero, "capacity") == _without(flow)
    assert zero["flow_control"] == flow["flow_control"]
    assert zero["capacity"]["latency_without_capacity_us"] == flow["latency_us"]
    cap = _run(data, "cap", "--capacity", CAP)
    ample = _run(data, "ample", "--capacity", CAP, "--flow-control", "buffer=100,rate=1e7")
    assert ample["flow_control"]["added_delay_us"]["all"]["max"] == 0
    assert _without(ample, "flow_control") == _without(cap)
    assert pl.read_parquet(data / "cap" / "results.parquet").equals(pl.read_parquet(data / "ample" / "results.parquet"))


def test_the_combined_report_is_the_composition(data: Path) -> None:
    proc = run_cli(["run", *ARGS, "--flow-control", FLOW, "--capacity", CAP, "--out", "both"], data)
    r = json.loads((data / "both" / "report.json").read_text())
    validate(r)
    # the terminal and the page show both models
    assert {x.split(":")[0] for x in proc.stdout.splitlines()} >= {"flow_control", "capacity"}
    html = (data / "both" / "report.html").read_text()
    assert "<h2>Flow control (seed 001)</h2>" in html and "<h2>Capacity</h2>" in html
    src = [pl.read_parquet(data / f"{n}.parquet") for n in ("a", "b")]
    original = [s["arrival"].to_numpy().astype(np.int64) for s in src]
    flow = delay_arrivals(original, parse_flow_control(FLOW))
    keys = [s.select("key") for s in src]
    policy = PolicySpec("static", retention=(30_000, 30_000))
    out = join([s["ts"].to_numpy().astype(np.int64) for s in src], flow.arrival, keys, (50_000, 50_000), policy)
    cap = model.apply(parse_capacity(CAP), out.replay, out.decisions, out.combos, out.emission, out.memory,
                      (50_000, 50_000), policy, keys=keys)
    model.count_from_own_arrivals(cap, out.emission, out.combos.rows, original)
    em = cap.emission
    c = r["capacity"]
    assert c["shed"]["queue_replaced"] > 0 and c["shed"]["state_evicted"] > 0    # both limits bite here
    assert r["flow_control"]["added_delay_us"]["all"]["delayed"] > 0
    assert r["emitted_results"] == int(np.count_nonzero(em.emitted))
    assert r["latency_us"] == pytest.approx(metrics.latency_summary_of(em.latency_us, em.emitted))
    assert c["queueing_delay_us"] == pytest.approx(metrics.latency_summary(queueing_delay_us(cap)))
    assert c["latency_without_capacity_us"] == pytest.approx(
        metrics.latency_summary_of(cap.plain_latency_us, cap.plain_emitted))
    # end to end: the newest member's own arrival is the origin, so the upstream wait counts
    res = pl.read_parquet(data / "both" / "results.parquet")
    newest = np.maximum(res["a_arrival_us"].to_numpy(), res["b_arrival_us"].to_numpy())
    assert (res["latency_us"].to_numpy() == res["emit_us"].to_numpy() - newest).all()
    assert r["flow_control"]["latency_at_join_us"]["max"] <= r["latency_us"]["max"]
