"""Whole-process breakdown of ``streamjoin run --engine local --no-results`` (issue 21).

    python benchmarks/bench_startup.py [--runs 5] [--compare PYTHONPATH] [CONFIG ...]

Where the wall time of one fresh process goes, outside and inside the job:

* **spawn + interpreter**: from ``Popen`` to the first line of the driver
  (interpreter start, ``site``, the venv's ``.pth`` files);
* **cli import**: ``streamjoin.cli.main`` (typer, numpy / pyarrow through the
  allocator set-up's imports);
* **run imports**: what the ``run`` command imports before it starts (settings,
  the run job and, through them, polars and every pipeline module);
* **parse + resolve**: the rest of ``main()`` outside the job (typer's parsing,
  the config, the report's summary printed at the end);
* the job's own stages from ``report.json`` (``load``, ``join`` with its
  ``join.candidates`` / ``join.progress`` on two threads, ``metrics``,
  ``write``: report.json and report.html with its SVG plots);
* **exit**: from ``main()`` raising ``SystemExit`` to the process gone
  (``atexit`` handlers, the interpreter's teardown unless skipped, the
  kernel freeing the address space).

Each run is a fresh process driven by a few lines of Python that call the same
``main()`` as the ``streamjoin`` script; runs alternate with ``--compare`` (another
checkout's code on ``PYTHONPATH``), after one uncounted warm-up each; medians.
Then the CPU time (user + system) of importing the libraries alone, cumulatively
(``python -c "import numpy, polars"`` and so on; the minimum of ``--runs`` x 3
processes), the import cost by package.  Timed processes run without
``PYTHONDONTWRITEBYTECODE`` (``bench_core.child_env``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import child_env  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT = [HERE.parent / "samples" / "flights" / "flights.toml", HERE / "data" / "bench" / "bench.toml"]
POLICY = {"bench.toml": ["--policy", "static", "--retention", "50ms"]}

DRIVER = """
import json, sys, time
t0 = time.time()
import streamjoin.cli.main as m
t1 = time.time()
from streamjoin.pipelines.config.settings import Flags
from streamjoin.pipelines.jobs.run import STAGES, run_job
from streamjoin.pipelines.report.terminal import render_rich, summary_lines
t2 = time.time()
marks = sys.argv.pop(1)
sys.argv[0] = "streamjoin"
try:
    m.main()
finally:
    open(marks, "w").write(json.dumps([t0, t1, t2, time.time()]))
"""

IMPORTS = [("numpy", "import numpy"), ("+ polars", "import numpy, polars"),
           ("+ pyarrow, pyarrow.parquet", "import numpy, polars, pyarrow, pyarrow.parquet"),
           ("+ pyarrow.compute", "import numpy, polars, pyarrow, pyarrow.parquet, pyarrow.compute"),
           ("+ typer", "import numpy, polars, pyarrow, pyarrow.parquet, pyarrow.compute, typer")]


def one(config: Path, pythonpath: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        marks = Path(tmp) / "marks.json"
        cmd = [sys.executable, "-c", DRIVER, str(marks), "run", str(config), "--engine", "local", "--router", "none",
               *POLICY.get(config.name, []), "--no-results", "--out", f"{tmp}/out"]
        t_spawn = time.time()
        proc = subprocess.Popen(cmd, env=child_env(pythonpath), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        t_end = time.time()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"run failed: {err.decode()[-2000:]}")
        t0, t1, t2, t3 = json.loads(marks.read_text())
        timings = json.loads(Path(tmp, "out", "report.json").read_text())["timings_s"]
    parts = {"spawn + interpreter": t0 - t_spawn, "cli import": t1 - t0, "run imports": t2 - t1,
             "parse + resolve": (t3 - t2) - timings["total"]}
    parts.update({k: timings.get(k, 0.0) for k in ("load", "join", "join.candidates", "join.progress", "metrics",
                                                   "write")})
    parts["exit"] = t_end - t3
    parts["wall"] = t_end - t_spawn
    parts["CPU"] = usage.ru_utime + usage.ru_stime
    return parts


def import_cpu(pythonpath: str | None, n: int) -> dict[str, float]:
    steps = IMPORTS + [("+ streamjoin run's imports (all)",
                        "import streamjoin.cli.main; from streamjoin.pipelines.jobs.run import run_job; "
                        "import streamjoin.pipelines.report.terminal")]
    out = {}
    for name, code in [("python -c pass", "pass")] + steps:
        cpus = []
        for _ in range(n):
            proc = subprocess.Popen([sys.executable, "-c", code], env=child_env(pythonpath))
            _, _, usage = os.wait4(proc.pid, 0)
            cpus.append(usage.ru_utime + usage.ru_stime)
        out[name] = min(cpus)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--compare", metavar="PYTHONPATH", help="alternate with another checkout's code")
    args = ap.parse_args()
    sides = {"A": None} | ({"B": args.compare} if args.compare else {})
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for config in args.configs:
        got: dict[str, list[dict]] = {s: [] for s in sides}
        for rnd in range(args.runs + 1):
            for side in (list(sides) if rnd % 2 == 0 else list(sides)[::-1]):
                r = one(config, sides[side])
                if rnd:
                    got[side].append(r)
        print(f"\n{config} (A = this checkout" + (f", B = {args.compare}" if args.compare else "")
              + f"; medians of {args.runs} after a warm-up; s)")
        keys = list(got["A"][0])
        print(f"{'part':<22}" + "".join(f"{s:>8}" for s in sides))
        for k in keys:
            print(f"{k:<22}" + "".join(f"{statistics.median(r[k] for r in got[s]):>8.3f}" for s in sides))
    print(f"\nimport CPU (user + system s, min of {3 * args.runs} processes, cumulative)")
    cpu = {s: import_cpu(p, 3 * args.runs) for s, p in sides.items()}
    print(f"{'imports':<36}" + "".join(f"{s:>8}" for s in sides))
    for k in cpu["A"]:
        print(f"{k:<36}" + "".join(f"{cpu[s][k]:>8.2f}" for s in sides))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
