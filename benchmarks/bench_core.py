"""Core benchmark (issue 2): two keyed streams, 2M + 1M tuples, window 100 ms.

    python benchmarks/bench_core.py [--runs 5] [--scale 1.0]

Generates the ``bench`` set once into ``benchmarks/data/`` (seeded, about
2.7 valid pairs per input tuple), then times the real command end to end::

    streamjoin run benchmarks/data/bench/bench.toml --engine local --router none \
        --policy static --retention 50ms --no-results --out <tmp>

Each run is a fresh process; the table shows the process wall time (imports
included), its CPU time (user + system) and peak memory, and the job's own
stage timings from ``report.json``.  The first run is a warm-up and is not
counted: on a VM whose memory is faulted in from the host on first touch, the
first pass over fresh memory can be many times slower than any later one (see
docs/performance.md).

``--compare PYTHONPATH`` alternates every run with the same command run on
another checkout (a directory holding a ``streamjoin`` package whose ``cli``
and ``pipelines`` point at the other tree), for A/B numbers on a noisy host.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "bench"
#: the single-machine engine this benchmark measures (Spark: benchmarks/bench_routing.py)
ENGINE = "local"


def streamjoin_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("streamjoin")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "streamjoin.cli.main"]


def child_env(pythonpath: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a timed ``streamjoin`` process: this one's, with ``PYTHONPATH``
    and ``extra`` set and without ``PYTHONDONTWRITEBYTECODE``.  With that variable set
    (some shells and CI images set it) every run compiles each streamjoin module from
    source, ~0.12 s of CPU a user never pays (pip compiles an install's bytecode); the
    uncounted warm-up run writes the ``__pycache__`` the counted runs then read."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update(extra)
    return env


def ensure_data(scale: float) -> Path:
    config = DATA / "bench.toml"
    marker = DATA / f".scale-{scale}"
    if not (config.exists() and marker.exists()):
        shutil.rmtree(DATA, ignore_errors=True)
        DATA.mkdir(parents=True)
        subprocess.run([*streamjoin_cmd(), "generate", "bench", "--out", str(DATA), "--seed", "7", "--scale", str(scale)],
                       check=True, stdout=subprocess.DEVNULL)
        marker.touch()
    return config


def one_run(config: Path, policy_args: list[str], *, pythonpath: str | None = None) -> dict:
    """One fresh ``streamjoin run``: its report plus ``wall_s``, ``cpu_s`` and ``maxrss_mb``.

    ``pythonpath``: run another checkout's code (``python -m streamjoin.cli.main``).
    """
    cmd = [sys.executable, "-m", "streamjoin.cli.main"] if pythonpath else streamjoin_cmd()
    env = child_env(pythonpath)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with open(Path(tmp) / "stderr", "w+") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                [*cmd, "run", str(config), "--engine", ENGINE, "--router", "none", *policy_args,
                 "--no-results", "--out", str(out)],
                stdout=subprocess.DEVNULL, stderr=err, env=env,
            )
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time and peak memory
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                err.seek(0)
                raise SystemExit(f"run failed: {err.read().strip()}")
        report = json.loads((out / "report.json").read_text())
    report["wall_s"] = wall
    report["cpu_s"] = usage.ru_utime + usage.ru_stime
    report["maxrss_mb"] = usage.ru_maxrss / 1024
    return report


def table(reports: list[dict], rows: int) -> None:
    stages = ["load", "join.progress", "join.candidates", "join.emit", "join", "metrics", "write", "total"]
    print(f"{'run':>4} {'wall s':>8} {'cpu s':>7} {'MB':>6} {'tuples/s (wall)':>16} {'tuples/s (job)':>15}  "
          + " ".join(f"{s:>15}" for s in stages))
    for i, r in enumerate(reports, 1):
        t = r["timings_s"]
        print(f"{i:>4} {r['wall_s']:>8.2f} {r['cpu_s']:>7.2f} {r['maxrss_mb']:>6.0f} {rows / r['wall_s']:>16,.0f} "
              f"{rows / t['total']:>15,.0f}  " + " ".join(f"{t.get(s, 0.0):>15.3f}" for s in stages))
    walls = [r["wall_s"] for r in reports]
    jobs = [r["timings_s"]["total"] for r in reports]
    cpus = [r["cpu_s"] for r in reports]
    print(f"median: wall {statistics.median(walls):.2f}s = {rows / statistics.median(walls):,.0f} tuples/s; "
          f"job {statistics.median(jobs):.2f}s = {rows / statistics.median(jobs):,.0f} tuples/s; "
          f"cpu {statistics.median(cpus):.2f}s; "
          f"best wall {min(walls):.2f}s = {rows / min(walls):,.0f} tuples/s")
    # the engine's own work: replay + truth + emission (+ the memory trace), results not
    # written -- the `join` stage of report.json (its join.* parts overlap on two threads)
    joins = [r["timings_s"]["join"] for r in reports]
    print(f"join stage (replay + truth + emission): median {statistics.median(joins):.3f}s = "
          f"{rows / statistics.median(joins):,.0f} input tuples/s; best {min(joins):.3f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--policy", default="static", help="static (default), none, kslack, mpkslack")
    ap.add_argument("--compare", metavar="PYTHONPATH", help="alternate each run with another checkout's code")
    args = ap.parse_args()
    config = ensure_data(args.scale)
    policy_args = ["--policy", args.policy]
    if args.policy == "static":
        policy_args += ["--retention", "50ms"]
    elif args.policy == "kslack":
        policy_args += ["--k", "50ms"]
    one_run(config, policy_args)  # warm-up, not counted
    if args.compare:
        one_run(config, policy_args, pythonpath=args.compare)
    reports, others = [], []
    for _ in range(args.runs):
        reports.append(one_run(config, policy_args))
        if args.compare:  # alternate, so both sides see the same host
            others.append(one_run(config, policy_args, pythonpath=args.compare))
    rows = sum(s["rows"] for s in reports[0]["streams"])
    print(f"data: {rows:,} input tuples, truth {reports[0]['truth_results']:,} "
          f"({reports[0]['truth_results'] / rows:.2f} per input tuple), emitted {reports[0]['emitted_results']:,}")
    if args.compare:
        print("this checkout:")
    table(reports, rows)
    if args.compare:
        print(f"--compare {args.compare}:")
        table(others, rows)


if __name__ == "__main__":
    main()
