"""The small keyed input and the ``streamjoin run`` call that the ``--capacity`` /
``--flow-control`` tests on real Spark (``local[2]``) compare with the local engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

SPARK = ["--engine", "spark", "--master", "local[2]", "--partitions", "2", "--spark-conf", "spark.ui.enabled=false"]


def keyed_streams(d: Path, seed: int) -> Path:
    """``left`` (300 tuples) and ``right`` (200) over 1.5 s, 5 keys, arrivals up to ~100 ms late."""
    rng = np.random.default_rng(seed)
    for name, n in (("left", 300), ("right", 200)):
        ts = np.sort(rng.integers(0, 1_500_000, n))
        arrival = ts + rng.exponential(20_000, n).astype(np.int64)
        pl.DataFrame({"ts": ts, "arrival": arrival, "key": rng.integers(0, 5, n)}).write_parquet(d / f"{name}.parquet")
    return d


def streamjoin_run(d: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    """``streamjoin run`` over :func:`keyed_streams` (50 ms window) into ``d/out``."""
    exe = str(Path(sys.executable).with_name("streamjoin"))
    args = ["run", "--stream", "left=left.parquet", "--stream", "right=right.parquet", "--ts", "ts",
            "--arrival", "arrival", "--unit", "us", "--key", "key", "--window", "50ms", "--out", out, *extra]
    return subprocess.run([exe, *args], cwd=d, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, STREAMJOIN_ENGINE="local"))


def report_of_run(d: Path, out: str, *extra: str) -> dict:
    """:func:`streamjoin_run`, which must succeed; its report.json."""
    proc = streamjoin_run(d, out, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((d / out / "report.json").read_text())
