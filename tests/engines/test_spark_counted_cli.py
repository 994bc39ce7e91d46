"""``streamjoin run --engine spark --no-results`` counts the pairs in its tasks
(engines/spark/counted.py): report.json's numbers
are the local engine's, field by field, and the routing section's per-partition
numbers are the materialising plane's (a run that writes its results), partition by
partition -- under ``none``, ATR and CTR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

#: report.json fields that differ between engines or runs by design (timings, where, how)
NOT_NUMBERS = {"command", "config", "input_tuples_per_s", "outputs", "routing", "timings_s"}


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """Two keyed streams, out of order on disk and in arrival, above the counting
    kernel's ``MIN_ROWS`` (a run below it materialises)."""
    tmp = tmp_path_factory.mktemp("counted")
    rng = np.random.default_rng(5)
    for name, n in (("a", 45_000), ("b", 30_000)):
        ts = np.sort(rng.integers(0, 60_000_000, n))
        late = np.where(rng.random(n) < 0.1, rng.exponential(80_000, n), rng.exponential(2_000, n))
        pl.DataFrame({"ts": ts, "arrival": ts + late.astype(np.int64), "key": rng.integers(0, 40, n),
                      "v": rng.random(n)}).sample(fraction=1.0, shuffle=True, seed=1).write_parquet(tmp / f"{name}.parquet")
    (tmp / "job.toml").write_text("".join(
        f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
        f'keys = ["key"]\nwindow = "30ms"\n\n' for s in "ab"))
    return tmp / "job.toml"


def _run(job: Path, out: Path, *args: str) -> dict:
    exe = str(Path(sys.executable).with_name("streamjoin"))
    proc = subprocess.run([exe, "run", str(job), *args, "--out", str(out)], env=dict(os.environ, STREAMJOIN_ENGINE="local"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def _numbers(report: dict, *skip: str) -> dict:
    return {k: v for k, v in report.items() if k not in NOT_NUMBERS and k not in skip}


def _per_partition(report: dict) -> list[tuple]:
    return [(p["n_in"], p["n_cand"], p["n_out"]) for p in report["routing"]["per_partition"]]


@pytest.mark.parametrize("policy", [["--policy", "static", "--retention", "20ms"], ["--policy", "mpkslack"]])
def test_spark_counts_in_its_tasks_as_the_local_engine_counts(job, tmp_path, policy):
    local = _run(job, tmp_path / "local", "--engine", "local", "--no-results", *policy)
    assert local["truth_results"] > 10_000
    spark = ["--engine", "spark", "--master", "local[2]"]
    for router, partitions in (("none", 1), ("atr", 3)):
        got = _run(job, tmp_path / router, *spark, "--router", router, "--partitions", str(partitions),
                   "--no-results", *policy)
        assert got["routing"]["counted_in_tasks"] is True
        assert _numbers(got) == _numbers(local), router
        # the band plan is timed on its thread beside the progress pass; its stage keeps the
        # local engine's place in report.json whichever thread finishes first
        stages = [k for k in got["timings_s"] if k in ("join.candidates", "join.progress")]
        assert stages == [k for k in local["timings_s"] if k in ("join.candidates", "join.progress")], stages
        assert sum(p["n_out"] for p in got["routing"]["per_partition"]) == local["truth_results"]
        if router == "atr" and policy[1] == "static":
            # the materialising plane (results written): the same partitions own the same pairs
            built = _run(job, tmp_path / "built", *spark, "--router", "atr", "--partitions", "3", *policy)
            assert built["routing"]["counted_in_tasks"] is False
            assert _per_partition(got) == _per_partition(built)
            assert [p["n_out"] for p in got["routing"]["per_partition"]].count(0) == 0
            for key in ("replication_factor", "shipped_tuples"):
                assert got["routing"][key] == built["routing"][key], key
            # (the materialising Spark path reports the probe order's sampled selectivity)
            assert _numbers(built, "plan") == _numbers(local, "plan")


def test_ctr_counts_in_its_tasks_as_the_local_engine_and_its_plane_route(job, tmp_path):
    """CTR too: the pairs counted where their older member is stored; report.json's
    numbers are the local engine's and the whole routing section (per partition: rows,
    probe copies, candidates, pairs, the loads from them) the materialising CTR run's."""
    policy = ["--policy", "static", "--retention", "20ms"]
    ctr = ["--engine", "spark", "--master", "local[2]", "--router", "ctr", "--partitions", "3", *policy]
    got = _run(job, tmp_path / "ctr", *ctr, "--no-results")
    local = _run(job, tmp_path / "local", "--engine", "local", "--no-results", *policy)
    assert got["routing"]["counted_in_tasks"] is True
    assert _numbers(got) == _numbers(local)
    built = _run(job, tmp_path / "built", *ctr)   # results written: the materialising CTR plane
    assert built["routing"]["counted_in_tasks"] is False
    assert [p["n_out"] for p in got["routing"]["per_partition"]].count(0) == 0
    assert got["routing"]["shipped_tuples"] > 75_000   # the 75,000 tuples and their probe copies
    assert _routing(got) == _routing(built)


def _routing(report: dict) -> dict:
    """The routing section without the run's timings and how it ran."""
    skip = {"stage_s", "counted_in_tasks"}
    out = {k: v for k, v in report["routing"].items() if k not in skip}
    out["per_partition"] = [{k: v for k, v in p.items() if k != "t_us"} for p in out["per_partition"]]
    return out


@pytest.mark.parametrize("router", ["atr", "ctr"])
def test_tasks_without_the_counting_kernel_materialise(job, tmp_path, router):
    """Executors that cannot load the compiled kernels (a cluster whose workers have
    none built: here ``$STREAMJOIN_KERNELS=numpy`` in the executors only) run the
    materialising path's numpy fallbacks, as before: the counted run does not fail
    there, it materialises with the local engine's numbers (CTR: through ``ctr_spark``,
    with the memory series started before it)."""
    policy = ["--policy", "static", "--retention", "20ms"]
    local = _run(job, tmp_path / "local", "--engine", "local", "--no-results", *policy)
    got = _run(job, tmp_path / "numpy", "--engine", "spark", "--master", "local[2]", "--router", router,
               "--partitions", "3", "--no-results", "--spark-conf", "spark.executorEnv.STREAMJOIN_KERNELS=numpy",
               *policy)
    assert got["routing"]["counted_in_tasks"] is False
    assert _numbers(got, "plan") == _numbers(local, "plan")


def test_a_partition_without_a_segment_counts_nothing(job, tmp_path):
    """ATR with more partitions than segments (25 s segments over 60 s: three, on four
    partitions): the counted run's numbers are still the local engine's, and the
    partition without a segment receives, joins and owns nothing -- each task finds
    its own pieces and candidates, an empty one included."""
    policy = ["--policy", "static", "--retention", "20ms"]
    local = _run(job, tmp_path / "local", "--engine", "local", "--no-results", *policy)
    got = _run(job, tmp_path / "atr4", "--engine", "spark", "--master", "local[2]", "--router", "atr",
               "--partitions", "4", "--segment", "25s", "--no-results", *policy)
    assert got["routing"]["counted_in_tasks"] is True
    assert _numbers(got) == _numbers(local)
    per = _per_partition(got)
    assert len(per) == 4 and per.count((0, 0, 0)) == 1, per
    assert sum(p[2] for p in per) == local["truth_results"]
    assert all(p[1] >= p[2] > 0 for p in per if p != (0, 0, 0))
