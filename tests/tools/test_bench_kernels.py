"""benchmarks/bench_kernels.py refuses to report when the compiled kernels did not load:
its "kernel" rows would time the numpy path against itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_kernels.py"


def test_bench_kernels_refuses_without_the_kernels(tmp_path):
    code = ("import runpy, sys\nfrom streamjoin.pipelines.base import jit\n"
            "jit._cache_dirs = lambda: []   # no module, nowhere to build one\n"
            f"sys.argv = ['bench_kernels.py', {str(tmp_path / 'bench.toml')!r}]\n"
            f"runpy.run_path({str(BENCH)!r}, run_name='__main__')\n")
    env = {k: v for k, v in os.environ.items() if k != "STREAMJOIN_KERNELS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "did not load" in proc.stderr
    assert "_band_fill" in proc.stderr and proc.stdout == ""
