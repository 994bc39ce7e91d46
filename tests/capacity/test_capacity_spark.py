"""``--capacity`` on ``--engine spark`` (real Spark, ``local[2]``): the capacity model
runs on the driver over the replay facts and combinations the Spark path already
holds there, and reports exactly the local engine's numbers, with either router
(docs/semantics.md, "Capacity (issue 20)", where it runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.spark_capacity import SPARK, keyed_streams, report_of_run

#: the queue sheds (replace-oldest) and the state cap evicts on this input
CAP = "tuple=3ms,result=500us,queue=3,shed=replace-oldest"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return keyed_streams(tmp_path_factory.mktemp("capspark"), 5)


def _run(d: Path, out: str, policy: list[str], *extra: str) -> dict:
    return report_of_run(d, out, *policy, *extra)


def _same(spark: dict, local: dict) -> None:
    assert spark["config"]["engine"] == "spark" and local["config"]["engine"] == "local"
    for key in ("truth_results", "emitted_results", "recall", "latency_us", "memory_tuples", "capacity"):
        assert spark[key] == local[key], key


@pytest.mark.parametrize("policy, cap, routers", [
    (["--policy", "static", "--retention", "30ms"], CAP + ",state=5", ("atr", "ctr")),
    (["--policy", "kslack", "--k", "10ms"], CAP, ("ctr",)),
])
def test_spark_reports_the_local_engine_s_capacity_numbers(data: Path, policy, cap, routers):
    name = policy[1]
    local = _run(data, f"{name}-local", policy, "--engine", "local", "--capacity", cap)
    c = local["capacity"]
    assert c["shed"]["queue_replaced"] > 0 and c["recall_lost_to_capacity"] > 0   # the model changes the outcome
    if "state=" in cap:
        assert c["shed"]["state_evicted"] > 0
    for router in routers:
        out = f"{name}-{router}"
        spark = _run(data, out, policy, *SPARK, "--router", router, "--capacity", cap)
        assert spark["routing"]["router"] == router
        _same(spark, local)
        assert (data / out / "results.parquet").read_bytes() == \
            (data / f"{name}-local" / "results.parquet").read_bytes()
