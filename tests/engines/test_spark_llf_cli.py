"""Issue 20 item 4 on real Spark (``local[2]``), through the CLI: ``--load-weights`` and
``--partition-capacity`` change where ATR places the segments, report.json's
``routing.per_partition`` gives each partition's cpu / mem / net and their Phi,
and the results are the local engine's, byte for byte, whatever the weights.

The bundled flights sample: flights (window 0) and weather (window 1 h), so the
segments differ in tuples (cpu, net) and in state held (mem)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "flights"


def _run(d: Path, out: str, *extra: str) -> dict:
    exe = str(Path(sys.executable).with_name("streamjoin"))
    proc = subprocess.run([exe, "run", "flights.toml", "--out", out, *extra], cwd=d, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, STREAMJOIN_ENGINE="local"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((d / out / "report.json").read_text())


def test_load_weights_and_capacity_change_the_placement_not_the_result(tmp_path):
    d = tmp_path / "flights"
    shutil.copytree(SAMPLE, d)
    spark = ["--engine", "spark", "--master", "local[2]", "--router", "atr", "--partitions", "3",
             "--spark-conf", "spark.ui.enabled=false"]
    local = _run(d, "local", "--engine", "local")
    even = _run(d, "even", *spark, "--load-weights", "1,1,1")
    heavy = _run(d, "heavy", *spark, "--load-weights", "0.1,5,0.1", "--partition-capacity", "mem=2,net=0.01")

    # the placement follows the weights ...
    assert even["routing"]["atr"]["segment_partitions"] != heavy["routing"]["atr"]["segment_partitions"]
    # ... the join does not
    for rep in (even, heavy):
        assert (rep["truth_results"], rep["emitted_results"], rep["recall"]) == \
            (local["truth_results"], local["emitted_results"], local["recall"])
    for name in ("even", "heavy"):
        assert (d / name / "results.parquet").read_bytes() == (d / "local" / "results.parquet").read_bytes()

    # the per-partition resource table
    g = heavy["routing"]
    assert g["capacity"]["given"] == {"cpu": None, "mem": 2.0, "net": 0.01}
    assert (g["capacity"]["mem"], g["capacity"]["net"]) == (2.0, 0.01)
    table = g["per_partition"]
    assert [p["partition"] for p in table] == [0, 1, 2]
    cpu = np.array([p["cpu"] for p in table])
    assert g["capacity"]["cpu"] == pytest.approx(cpu.mean())          # not given: the fair share
    w = np.array([0.1, 5, 0.1]) / 5.2
    for p in table:
        assert p["phi_mem"] == pytest.approx(p["mem"] / 2.0)
        assert p["phi_net"] == pytest.approx(p["net"] / 0.01)
        assert p["load"] == pytest.approx(w @ [p["phi_cpu"], p["phi_mem"], p["phi_net"]])
        # default costs: a tuple costs 1, a candidate 0 -- cpu and net both count the tuples received
        assert p["cpu"] == pytest.approx(p["net"]) and p["cpu"] > 0 and p["mem"] > 0
    # net is what was shipped, per second of the replay span
    assert sum(p["n_in"] for p in table) == g["shipped_tuples"]
    span_s = g["shipped_tuples"] / sum(p["net"] for p in table)
    for p in table:
        assert p["net"] * span_s == pytest.approx(p["n_in"])
