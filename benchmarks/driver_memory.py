"""Where the native Spark path's driver Python memory goes (issue 19): one
``streamjoin`` command run in this process under ``tracemalloc``, a JSON report.

    python benchmarks/driver_memory.py --report mem.json -- run bench.toml --engine spark ...

(``bench_scale.py --engine spark --native --trace DIR`` runs every driver this way.)
Each stage function of the native path (the read, the progress pass, the memory
series, the stream facts, the histogram, the join and metrics, the report, its
extras, the HTML report, report.json, the session's close) is wrapped: before and after it, the process's ``VmRSS`` / ``VmHWM``
(``/proc/self/status``), ``tracemalloc``'s current size and its peak during the
call (the Python heap, numpy arrays included), and Arrow's default pool (bytes
allocated and its peak: Arrow buffers are not traced).  At the end the
allocations still held against the start, the top 25 by ``file:line``; the
process's peak before that snapshot (``before_snapshot``) is the run's own: taking
the snapshot raises the RSS by ~100-150 MB, so ``end`` and ``bench_scale``'s driver
peak of a traced run are the instrument's.  Nothing
goes to the command's own output; the wrapping is this script's alone (no
hook in the package).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import time
import tracemalloc

#: (module, function): the stages wrapped, outermost call only
STAGES = [
    ("streamjoin.pipelines.jobs.run", "_read_on_spark"),
    ("streamjoin.pipelines.jobs.run", "build_summary_report"),
    ("streamjoin.pipelines.engines.spark.native", "progress_frame"),
    ("streamjoin.pipelines.engines.spark.native", "_selectivities"),
    ("streamjoin.pipelines.engines.spark.native", "memory_stats"),
    ("streamjoin.pipelines.engines.spark.native", "stream_facts"),
    ("streamjoin.pipelines.engines.spark.native", "_histogram"),
    ("streamjoin.pipelines.engines.spark.native", "route_plans_from"),
    ("streamjoin.pipelines.engines.spark.native", "combination_metrics"),
    # after the join: the report's extras (a thread beside build_summary_report), the HTML
    # report, report.json, the Spark session's close
    ("streamjoin.pipelines.report.build", "extras_of_summary"),
    ("streamjoin.pipelines.report.build", "finish"),
    ("streamjoin.pipelines.report.html", "render_report"),
    ("streamjoin.pipelines.report.json", "write"),
    ("streamjoin.pipelines.engines.spark.outcome", "SummaryOutcome.close"),
]
MB = 1024 ** 2


def status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024 / MB
    return out


def arrow_pool() -> dict:
    import pyarrow as pa

    pool = pa.default_memory_pool()
    return {"arrow_mb": pool.bytes_allocated() / MB, "arrow_peak_mb": pool.max_memory() / MB}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", required=True, help="the JSON report's path")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the streamjoin command's arguments")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    tracemalloc.start(8)
    from streamjoin.cli import main as cli

    for mod, _ in STAGES:
        importlib.import_module(mod)
    import threading

    stages, local = [], threading.local()

    def wrap(name, fn):
        @functools.wraps(fn)
        def inner(*x, **kw):
            if getattr(local, "depth", 0):   # outermost call per thread (extras_of_summary runs in its own)
                return fn(*x, **kw)
            local.depth = 1
            before, cur0 = status(), tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            t0 = time.perf_counter()
            try:
                return fn(*x, **kw)
            finally:
                local.depth = 0
                cur, peak = tracemalloc.get_traced_memory()
                after = status()
                stages.append({"stage": name, "s": round(time.perf_counter() - t0, 2),
                               "rss_before_mb": before["VmRSS"], "rss_after_mb": after["VmRSS"],
                               "hwm_before_mb": before["VmHWM"], "hwm_after_mb": after["VmHWM"],
                               "traced_before_mb": cur0 / MB, "traced_after_mb": cur / MB,
                               "traced_peak_mb": peak / MB, **arrow_pool()})
        return inner

    for mod, fn in STAGES:
        owner = sys.modules[mod]
        *outer, name = fn.split(".")
        for attr in outer:   # a method: Class.name
            owner = getattr(owner, attr)
        setattr(owner, name, wrap(fn, getattr(owner, name)))
    start, snap0 = status(), tracemalloc.take_snapshot()
    code = 0
    try:
        sys.argv = ["streamjoin", *args]
        cli.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        done = status()   # the run's own peak: the snapshot below costs RSS itself (~100-150 MB)
        snap1 = tracemalloc.take_snapshot()
        top = snap1.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]).compare_to(snap0, "lineno")
        report = {"start": start, "before_snapshot": done, "end": status(), **arrow_pool(), "stages": stages,
                  "held_at_end": [{"where": str(s.traceback[0]), "mb": s.size / MB, "diff_mb": s.size_diff / MB,
                                   "count": s.count} for s in top[:a.top]]}
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(code)


if __name__ == "__main__":
    main()
