"""Issue 19's Spark runs against the local engine: small keyed inputs with heavy
disorder, one ``run_job``, and the comparison of two runs (results as a set,
``report.json``'s numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.jobs.run import run_job

#: report.json keys that differ between engines by design (how the run was made, not what it found)
HOW = {"timings_s", "outputs", "routing", "config", "input_tuples_per_s", "tool_version", "command"}


def write_inputs(tmp: Path, n: int, seed: int, sizes=(300, 220, 150, 180)) -> Path:
    """Up to four keyed streams ``a``.. with about 10 % heavy disorder (K-slack drops,
    symmetric expiries) and a config with a 200 ms period."""
    rng = np.random.default_rng(seed)
    for name, m in list(zip("abcd", sizes))[:n]:
        ts = np.sort(rng.integers(0, 2_000_000, m))
        late = rng.random(m) < 0.1
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 20_000, m) + late * rng.integers(0, 300_000, m),
                      "key": rng.integers(0, 4, m), "val": rng.normal(size=m),
                      "tag": [f"t{i % 7}" for i in range(m)]}).write_parquet(tmp / f"{name}.parquet")
    cfg = tmp / "j.toml"
    cfg.write_text("\n".join(['[run]', 'period = "200ms"'] + [
        f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
        f'keys = ["key"]\nwindow = "{w}ms"' for s, w in list(zip("abcd", (50, 30, 40, 35)))[:n]]))
    return cfg


def with_null_ts(path: Path, share: float, seed: int) -> None:
    """Null ``ts`` in about ``share`` of the file's rows (quarantined: ``null ts``)."""
    df = pl.read_parquet(path)
    null = np.random.default_rng(seed).random(df.height) < share
    df.with_columns(pl.when(pl.Series(null)).then(None).otherwise(pl.col("ts")).alias("ts")).write_parquet(path)


def run(cfg: Path, out: Path, **flags) -> dict:
    return run_job(resolve(cfg, Flags(out=str(out), **flags)))


def assert_same_run(a: Path, b: Path, ra: dict, rb: dict, *, bytes_mean_exact: bool = True) -> None:
    """Runs ``ra`` (written to ``a``) and ``rb`` found the same: every report number
    (the probe order's float estimates to 1e-12; ``bytes_mean_exact=False``: the
    memory bytes' mean too, a float sum in another order) and the same results as a set."""
    what = HOW | {"plan"} | (set() if bytes_mean_exact else {"memory_bytes"})
    if ra["tuning"].get("sample_every", 1) > 1:
        # above 1M combinations the local engine samples the tuning curve, the executors count
        # every combination (docs/semantics.md): the counts agree, the curves need not
        what |= {"tuning"}
        assert rb["tuning"]["sample_every"] == 1 and rb["tuning"]["truth_results"] == ra["tuning"]["truth_results"]
    assert {k: v for k, v in ra.items() if k not in what} == {k: v for k, v in rb.items() if k not in what}
    assert ra["plan"]["probe_order"] == rb["plan"]["probe_order"]
    assert ra["plan"]["estimated_partial_sizes"] == pytest.approx(rb["plan"]["estimated_partial_sizes"], rel=1e-12)
    if not bytes_mean_exact:
        assert ra["memory_bytes"]["peak"] == rb["memory_bytes"]["peak"]
        assert ra["memory_bytes"]["mean"] == pytest.approx(rb["memory_bytes"]["mean"], rel=1e-12)
    assert json.loads((b / "report.json").read_text())["truth_results"] == rb["truth_results"]
    if (a / "results.parquet").exists() or (b / "results.parquet").exists():
        fa, fb = pl.read_parquet(a / "results.parquet"), pl.read_parquet(b / "results.parquet")
        assert fa.schema == fb.schema and fa.height == fb.height == ra["emitted_results"]
        assert fa.sort(fa.columns).equals(fb.sort(fb.columns))


def cli_local_and_spark(tmp: Path, cfg: Path, common: list[str], spark_args: list[str], name: str,
                        timeout: int = 900) -> tuple[dict, dict]:
    """``streamjoin run`` on the local engine (into ``tmp/local``) and with ``--engine spark
    spark_args`` (into ``tmp/name``), each a fresh process; their ``report.json``s."""
    import os
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    local = subprocess.run([exe, "run", str(cfg), "--engine", "local", "--out", str(tmp / "local"), *common],
                           env=env, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    sp = subprocess.run([exe, "run", str(cfg), "--engine", "spark", *spark_args, "--out", str(tmp / name), *common],
                        env=env, capture_output=True, text=True, timeout=timeout)
    assert sp.returncode == 0, sp.stderr[-3000:]
    return (json.loads((tmp / "local" / "report.json").read_text()),
            json.loads((tmp / name / "report.json").read_text()))
