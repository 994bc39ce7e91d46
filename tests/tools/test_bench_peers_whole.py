"""benchmarks/bench_peers.py --whole checks DuckDB's pairs against streamjoin's truth
on both core rows (the bucketed count and the written pairs), with the runs faked:
no process is started, no time measured."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_peers.py"


def _bench(monkeypatch, counts: dict[str, int], truth: int = 100):
    spec = importlib.util.spec_from_file_location("bench_peers_under_test", BENCH)
    bp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bp)
    timings = {k: 0.1 for k in ("load", "join", "metrics", "write", "total")}

    def run_streamjoin(config, policy, *, results=False, pythonpath=None):
        return {"wall_s": 1.0, "user_s": 0.5, "sys_s": 0.1, "truth_results": truth, "timings_s": timings,
                **({"results_bytes": 10} if results else {})}

    def run_child(form, W, kmin, tmin):
        return {"wall_s": 0.5, "user_s": 0.2, "sys_s": 0.1, "count": counts[form], "bytes": 10}

    monkeypatch.setattr(bp, "run_streamjoin", run_streamjoin)
    monkeypatch.setattr(bp, "run_child", run_child)
    monkeypatch.setattr(bp, "ensure_small", lambda: Path("small.toml"))
    return bp


@pytest.mark.parametrize("wrong", ["duckdb-bucketed", "duckdb-write-pairs"])
def test_whole_rejects_a_duckdb_count_other_than_the_truth(monkeypatch, wrong):
    counts = {"duckdb-bucketed": 100, "duckdb-write-pairs": 100, wrong: 99}
    bp = _bench(monkeypatch, counts)
    with pytest.raises(AssertionError, match="DuckDB pairs != streamjoin truth"):
        bp.whole_process_ab(Path("core.toml"), 50, 0, 0, 1, None)


def test_whole_prints_the_ratios_when_the_counts_agree(monkeypatch, capsys):
    bp = _bench(monkeypatch, {"duckdb-bucketed": 100, "duckdb-write-pairs": 100})
    bp.whole_process_ab(Path("core.toml"), 50, 0, 0, 1, None)
    out = capsys.readouterr().out
    assert "core 2M + 1M, A / DuckDB bucketed count, wall: median 2.00x" in out
    assert "core, results.parquet, A / DuckDB COPY pairs, cpu: median 2.00x" in out
