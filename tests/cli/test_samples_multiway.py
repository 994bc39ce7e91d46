"""Issue 3 samples, end to end through the real command.

* ``samples/bench3/bench3.toml`` -- three keyed streams;
* ``samples/soccer/soccer_near.toml`` -- ball within 1 m of a foot sensor.

Each run's truth is recomputed here independently (numpy, no engine code)
and its report is checked against the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import run_cli

from streamjoin.pipelines.report.json import validate

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def test_three_stream_sample(tmp_path):
    run_cli(["run", str(SAMPLES / "bench3" / "bench3.toml"), "--out", str(tmp_path / "o")], cwd=tmp_path)
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    validate(report)
    a, b, c = (pl.read_parquet(SAMPLES / "bench3" / f"{x}.parquet") for x in "abc")
    # independent truth: per key, every triple within 100 ms pairwise (sorted sweep)
    W = 100_000
    expected = 0
    for key, ga in a.group_by("key"):
        gb = b.filter(pl.col("key") == key[0])["ts"].sort().to_numpy()
        gc = c.filter(pl.col("key") == key[0])["ts"].sort().to_numpy()
        for t in ga["ts"].to_numpy():
            bs = gb[(gb >= t - W) & (gb <= t + W)]
            cs = gc[(gc >= t - W) & (gc <= t + W)]
            if len(bs) and len(cs):
                expected += int((np.abs(bs[:, None] - cs[None, :]) <= W).sum())
    assert report["truth_results"] == expected
    assert report["duplicates"] == 0
    assert len(report["streams"]) == 3
    assert sorted(report["plan"]["probe_order"]) == ["a", "b", "c"]
    results = pl.read_parquet(tmp_path / "o" / "results.parquet")
    assert results.height == report["emitted_results"]
    assert (results["a_key"] == results["b_key"]).all() and (results["b_key"] == results["c_key"]).all()


def test_soccer_near_sample(tmp_path):
    run_cli(["run", str(SAMPLES / "soccer" / "soccer_near.toml"), "--out", str(tmp_path / "o")], cwd=tmp_path)
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    validate(report)
    assert report["config"]["distance"] == {"columns": ["x", "y", "z"], "threshold": 1000.0}
    ball = pl.read_parquet(SAMPLES / "soccer" / "ball.parquet")
    players = pl.read_parquet(SAMPLES / "soccer" / "players.parquet")
    bt = ball["ts"].to_numpy() // 1_000_000  # ps -> us, floored like the loader
    pt = players["ts"].to_numpy() // 1_000_000
    order = np.argsort(pt, kind="stable")
    pt_sorted = pt[order]
    bxyz = ball.select("x", "y", "z").to_numpy().astype(np.float64)
    pxyz = players.select("x", "y", "z").to_numpy().astype(np.float64)[order]
    lo = np.searchsorted(pt_sorted, bt - 5_000, side="left")
    hi = np.searchsorted(pt_sorted, bt + 5_000, side="right")
    expected = 0
    for i in range(len(bt)):
        d = pxyz[lo[i]:hi[i]] - bxyz[i]
        expected += int(((d * d).sum(axis=1) <= 1000.0 ** 2).sum())
    assert report["truth_results"] == expected
    results = pl.read_parquet(tmp_path / "o" / "results.parquet")
    dist = np.sqrt(sum((results[f"ball_{c}"].cast(pl.Float64) - results[f"players_{c}"].cast(pl.Float64)).to_numpy() ** 2
                       for c in "xyz"))
    assert results.height == report["emitted_results"] and (dist <= 1000.0).all()


@pytest.mark.parametrize("args, words", [
    (["--distance", "x,y<5"], ["--distance", "COLS<=THRESHOLD"]),
    (["--distance", "x,nosuch<=5"], ["nosuch", "missing column"]),
    (["--distance", "x,name<=5"], ["name", "numbers"]),
    (["--where", "a_nosuch > 1"], ["--where", "unknown column", "a_nosuch"]),
    (["--where", "a_v >>> ("], ["--where", "SQL"]),
])
def test_predicate_bad_input(tmp_path, args, words):
    for name in ("a", "b"):
        pl.DataFrame({"ts": [1, 2, 3], "x": [0, 1, 2], "v": [1.0, 2.0, 3.0], "name": ["p", "q", "r"]}).write_parquet(
            tmp_path / f"{name}.parquet")
    proc = run_cli(["run", "--stream", f"a={tmp_path / 'a.parquet'}", "--stream", f"b={tmp_path / 'b.parquet'}",
                    "--unit", "us", "--window", "5us", "--out", str(tmp_path / "o"), *args], cwd=tmp_path, ok=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "o").exists()
