"""``--flow-control`` on ``--engine spark`` (real Spark, ``local[2]``), alone and with
``--capacity``: the units delay the arrivals on the driver before the join, the Spark
join replays the delayed arrivals, and the run reports exactly the local engine's
numbers and the same results.parquet bytes (docs/semantics.md, "Flow control on
Spark")."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.spark_capacity import SPARK, keyed_streams, report_of_run, streamjoin_run

#: ~330 tuples/s offered, 250 tuples/s of unit service: back-pressure builds up
FLOW = "buffer=8,rate=250,interval=5ms,lambda=0.5:0.1,mu=0.2"
#: the operator behind the units sheds (replace-oldest) and its state cap evicts
CAP = "tuple=3ms,result=500us,queue=3,shed=replace-oldest"


#: what differs by engine and run: the engine, the output paths, the timings, the Spark routing
ENGINE_KEYS = {"command", "config", "input_tuples_per_s", "outputs", "routing", "timings_s"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return keyed_streams(tmp_path_factory.mktemp("flowspark"), 11)


@pytest.mark.parametrize("policy, cap, router", [
    (["--policy", "kslack", "--k", "10ms"], None, "atr"),
    (["--policy", "qjoin", "--recall", "0.9", "--period", "500ms"], None, "none"),
    (["--policy", "static", "--retention", "30ms"], CAP + ",state=5", "ctr"),
])
def test_spark_reports_the_local_engine_s_flow_control_numbers(data: Path, policy, cap, router):
    name = policy[1]
    extra = [*policy, "--flow-control", FLOW, *(["--capacity", cap] if cap else [])]
    local = report_of_run(data, f"{name}-local", *extra, "--engine", "local")
    f = local["flow_control"]
    assert f["added_delay_us"]["all"]["delayed"] > 0      # the units delay tuples on this input
    plain = report_of_run(data, f"{name}-plain", *policy, *(["--capacity", cap] if cap else []), "--engine", "local")
    assert local["recall"] != plain["recall"] or local["latency_us"] != plain["latency_us"]   # and that shows
    if cap:
        assert local["capacity"]["shed"]["queue_replaced"] > 0 and local["capacity"]["shed"]["state_evicted"] > 0
    out = f"{name}-spark"
    spark = report_of_run(data, out, *extra, *SPARK, "--router", router)
    assert spark["config"]["engine"] == "spark" and local["config"]["engine"] == "local"
    for key in ("flow_control", "capacity", "policy", "streams"):
        assert spark["config"].get(key) == local["config"].get(key), key
    assert spark["routing"]["router"] == router    # every report has routing: a missing one must fail
    # every number (flow_control, capacity, recall, latency, memory, periods, policy decisions, hindsight, ...)
    assert set(spark) - ENGINE_KEYS == set(local) - ENGINE_KEYS
    for key in set(local) - ENGINE_KEYS:
        assert spark[key] == local[key], key
    # the same bytes, not only the same rows
    assert (data / out / "results.parquet").read_bytes() == (data / f"{name}-local" / "results.parquet").read_bytes()


def test_results_on_the_executors_are_refused_with_flow_control(data: Path):
    proc = streamjoin_run(data, "bad", "--policy", "static", "--retention", "30ms", "--flow-control", FLOW,
                          *SPARK[:4], "--spark-conf", "spark.streamjoin.results=executors")
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "spark.streamjoin.results=executors: not with --flow-control or --capacity" in lines[0]
    assert not (data / "bad").exists()
