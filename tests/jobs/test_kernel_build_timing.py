"""A first run's kernel build is timed apart (report.json ``timings_s.kernel_build``),
not folded into the stage it happened in: the join stage is the join's own time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"

# every kernel lookup finds an empty cache and its build takes 1.5 s before failing (numpy then runs)
RUN = """
import pathlib, sys, time
from streamjoin.pipelines.base import jit, kernels
kernels.MIN_ROWS = 0
cache = pathlib.Path(sys.argv[1])   # read before sys.argv becomes the command's
jit._cache_dirs = lambda: [cache]
def slow_failure(*_args):
    time.sleep(1.5)
    raise OSError("compiler killed")
jit._build = slow_failure
sys.argv = ["streamjoin", "run", sys.argv[2], "--engine", "local", "--out", sys.argv[3]]
from streamjoin.cli.main import main
main()
"""


def test_a_first_runs_kernel_build_is_timed_apart_from_the_join(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "STREAMJOIN_KERNELS"}
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path / "cache"), str(SAMPLE), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("compiler killed") >= 2   # the band fill and the progress pass both tried
    timings = json.loads((tmp_path / "out" / "report.json").read_text())["timings_s"]
    assert timings["kernel_build"] >= 3.0
    assert timings["join"] < 3.0 and timings["join"] + timings["kernel_build"] <= timings["total"]
    # the cache it was given: one build lock per kernel that tried (and only there)
    locks = sorted(p.name for p in (tmp_path / "cache").iterdir())
    tried = re.findall(r"could not build the (\w+) kernel", proc.stderr)
    assert locks and all(name.endswith(".lock") for name in locks)
    assert sorted({name.split("_sj_")[1].rsplit("_", 1)[0] for name in locks}) == sorted(set(tried))
