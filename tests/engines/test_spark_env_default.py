"""``STREAMJOIN_ENGINE`` is a default, not a choice (config/choice.engine_of), through the
real command: with ``STREAMJOIN_ENGINE=local``, ``--master`` and ``--partitions`` without
``--engine`` run on Spark (they used to be ignored without a word and the run was local)
and give the local engine's results.parquet byte for byte.  One small Spark run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
from helpers.cli import CMD


def _streams(d: Path) -> list[str]:
    rng = np.random.default_rng(3)
    args = []
    for i, name in enumerate(("a", "b")):
        n = 200
        ts = np.sort(rng.integers(0, 200_000, n)) + 100 * i
        arrival = ts + rng.integers(0, 5_000, n)
        pl.DataFrame({"ts": ts, "arrival": arrival, "k": rng.integers(0, 4, n), "v": np.arange(n)}) \
            .write_parquet(d / f"{name}.parquet")
        args += ["--stream", f"{name}={name}.parquet"]
    return args + ["--unit", "us", "--arrival", "arrival", "--key", "k", "--window", "3ms", "--policy", "kslack",
                   "--k", "2ms"]


def test_spark_settings_over_the_local_environment_default_run_on_spark(tmp_path: Path) -> None:
    args = _streams(tmp_path)
    env = dict(os.environ, STREAMJOIN_ENGINE="local")

    def run(*extra: str, out: str) -> dict:
        proc = subprocess.run([*CMD, "run", *args, *extra, "--out", out], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads((tmp_path / out / "report.json").read_text())

    local = run(out="local")
    spark = run("--master", "local[1]", "--partitions", "2", out="spark")
    assert local["config"]["engine"] == "local"
    assert spark["config"]["engine"] == "spark"
    assert spark["config"]["master"] == "local[1]" and spark["config"]["partitions"] == 2
    assert local["emitted_results"] > 0 and spark["emitted_results"] == local["emitted_results"]
    assert (tmp_path / "spark" / "results.parquet").read_bytes() == (tmp_path / "local" / "results.parquet").read_bytes()
