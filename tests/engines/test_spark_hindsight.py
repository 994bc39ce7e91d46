"""``report.json`` ``hindsight`` from the Spark engine: with the results on the driver it is
computed from the same arrays as the local engine (equal numbers, verdict and sentence); with
the results on the executors it is absent from the computation and the report says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl


def _inputs(tmp: Path) -> Path:
    rng = np.random.default_rng(5)
    for name in ("a", "b"):
        ts = np.sort(rng.integers(0, 20_000_000, 1_500))
        late = np.where(ts > 10_000_000, rng.exponential(40_000, len(ts)), rng.exponential(500, len(ts)))
        pl.DataFrame({"ts": ts, "arrival": ts + late.astype(np.int64)}).write_parquet(tmp / f"{name}.parquet")
    (tmp / "job.toml").write_text("".join(
        f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
        f'window = "20ms"\n\n' for s in "ab"))
    return tmp / "job.toml"


def test_spark_driver_equals_local_and_executors_say_why_not(tmp_path):
    job = _inputs(tmp_path)
    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    common = ["--policy", "qkslack", "--recall", "0.9", "--period", "1s"]
    found = {}
    for name, extra in (("local", ["--engine", "local"]), ("driver", ["--engine", "spark"]),
                        ("executors", ["--engine", "spark", "--spark-conf", "spark.streamjoin.results=executors"])):
        proc = subprocess.run([exe, "run", str(job), *extra, "--out", str(tmp_path / name), *common],
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[name] = json.loads((tmp_path / name / "report.json").read_text())
    assert found["driver"]["config"]["engine"] == "spark" and found["driver"]["routing"]["results"] == "driver"
    assert found["local"]["hindsight"]["computed"] is True
    assert found["driver"]["hindsight"] == found["local"]["hindsight"]
    ex = found["executors"]
    assert ex["routing"]["results"] == "executors"
    assert ex["hindsight"]["computed"] is False and "executors" in ex["hindsight"]["text"]
