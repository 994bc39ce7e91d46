"""Where the Spark engine's driver memory goes, stage by stage (issue 19).

    python benchmarks/profile_spark_driver.py --size 3 [--results] [--path driver|executors] [--tracemalloc]

Runs ``streamjoin run <data>/bench.toml --engine spark --master local[2]
--router atr --policy mpkslack`` (bench_scale.py's Spark run) *in this
process*, with the driver's stages wrapped so that a sampler thread (every
10 ms, ``/proc/self/statm``) knows which stages are running.  Prints, per
stage: RSS when it starts, the highest RSS while it runs (over the RSS
before the run's first stage: the interpreter and its imports), in bytes per
input tuple, and which stages were running at the process's peak.

``--tracemalloc``: also the numpy arrays alive when each stage ends, by the
line that allocated them (numpy reports its buffers to tracemalloc; polars
frames are not traced -- their sizes are printed apart).  It slows the run
down; the RSS columns are then not comparable with a plain run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scale import DATA, ensure_data  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
NUMPY_DOMAIN = 389047   # numpy's tracemalloc domain (NPY_TRACE_DOMAIN)


def top_arrays(snapshot, limit: int = 14):
    """(total, [(bytes, allocating line in streamjoin)]) of the numpy buffers in ``snapshot``."""
    import tracemalloc

    s = snapshot.filter_traces([tracemalloc.DomainFilter(True, NUMPY_DOMAIN)])
    top = []
    for st in s.statistics("traceback"):
        if st.size < 4 << 20:
            continue
        frame = next((fr for fr in reversed(st.traceback) if "streamjoin" in fr.filename or "pipelines" in fr.filename),
                     st.traceback[0])
        top.append((st.size, f"{Path(frame.filename).name}:{frame.lineno}"))
    return sum(t.size for t in s.traces), sorted(top, reverse=True)[:limit]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Sampler:
    def __init__(self):
        self.active: list[str] = []
        self.stats: dict[str, dict] = {}
        self.peak, self.peak_at = 0, ()
        self.traced_peak, self.traced_at, self.peak_snapshot = 0, (), None
        self.lock = threading.Lock()
        self.done = False

    def run(self):
        import tracemalloc

        snapped = 0
        while not self.done:
            r = rss()
            traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
            with self.lock:
                for s in self.active:
                    st = self.stats[s]
                    st["max"] = max(st["max"], r)
                    st["traced"] = max(st.get("traced", 0), traced)
                if r > self.peak:
                    self.peak, self.peak_at = r, tuple(self.active)
                if traced > self.traced_peak:
                    self.traced_peak, self.traced_at = traced, tuple(self.active)
            if traced > snapped * 1.05 and traced > 64 << 20:   # arrays alive near the traced peak
                snapped = traced
                self.peak_snapshot = (tuple(self.active), top_arrays(tracemalloc.take_snapshot()))
            time.sleep(0.01)

    def wrap(self, name: str, fn, snap):
        def inner(*a, **kw):
            r = rss()
            with self.lock:
                st = self.stats.setdefault(name, {"start": r, "max": r, "end": r, "calls": 0})
                st["calls"] += 1
                self.active.append(name)
            try:
                return fn(*a, **kw)
            finally:
                with self.lock:
                    self.active.remove(name)
                    self.stats[name]["end"] = rss()
                if snap is not None:
                    snap(name)
        return inner


def patch(sampler: Sampler, snap) -> None:
    import importlib

    targets = {
        "streamjoin.pipelines.jobs.run": ["load_all", "build_summary_report", "build_report",
                                          "write_row_groups"],
        "streamjoin.pipelines.engines.spark.engine": ["key_ids", "compact_ids", "probe_order", "make_route_plans",
                                                      "kernel_inputs", "add_sink_columns", "join_for_job", "spark_plane",
                                                      "outcome_from", "SummaryOutcome", "memory_per_stream",
                                                      "spark_session", "warm_up", "occupied_periods", "merge"],
        "streamjoin.pipelines.replay.partitioned_progress": ["driver_facts", "replay_from_facts"],
        "streamjoin.pipelines.report.build": ["extras_of_summary", "extras"],
    }
    for mod, names in targets.items():
        m = importlib.import_module(mod)
        for nm in names:
            if hasattr(m, nm):
                setattr(m, nm, sampler.wrap(nm, getattr(m, nm), snap))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=float, default=3, help="millions of input tuples")
    ap.add_argument("--results", action="store_true", help="write results (default --no-results)")
    ap.add_argument("--path", choices=["driver", "executors"], default="executors")
    ap.add_argument("--tracemalloc", action="store_true")
    args = ap.parse_args()
    # as the CLI does first, before any thread starts (one malloc arena, freed memory reused)
    from streamjoin.pipelines.base.allocator import no_huge_page_advice, reuse_freed_memory

    reuse_freed_memory()
    no_huge_page_advice()
    config = ensure_data(args.size)
    snap = None
    snaps: dict[str, list] = {}
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(6)

        def snap(name):
            snaps.setdefault(name, []).append(top_arrays(tracemalloc.take_snapshot()))

    from streamjoin.cli.main import main as cli_main

    import streamjoin.pipelines.jobs.run  # noqa: F401  (the imports are not the run's)

    base = rss()
    sampler = Sampler()
    patch(sampler, snap)
    th = threading.Thread(target=sampler.run, daemon=True)
    th.start()
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        sys.argv = ["streamjoin", "run", str(config), "--engine", "spark", "--master", "local[2]", "--router", "atr",
                    "--policy", "mpkslack", "--spark-conf", f"spark.streamjoin.results={args.path}",
                    *([] if args.results else ["--no-results"]), "--out", str(Path(tmp) / "out")]
        try:
            cli_main()
        except SystemExit as e:
            if e.code not in (0, None):
                raise
        import json

        report = json.loads((Path(tmp) / "out" / "report.json").read_text())
    sampler.done = True
    th.join()
    N = sum(s["rows"] for s in report["streams"])
    print(f"\n{N:,} input tuples, results {'written' if args.results else 'not written'}, path {args.path}; "
          f"RSS before the run {base / 2**20:.0f} MiB, peak {sampler.peak / 2**20:.0f} MiB "
          f"({(sampler.peak - base) / N:.0f} B/tuple over the base) during {' > '.join(sampler.peak_at)}")
    print(f"truth {report['truth_results']:,} emitted {report['emitted_results']:,}\n")
    print("| stage | calls | RSS at start MiB | max RSS in stage MiB | at end MiB | max over base B/tuple | "
          "max traced in stage B/tuple |")
    print("|---|---|---|---|---|---|---|")
    for name, st in sorted(sampler.stats.items(), key=lambda kv: kv[1]["start"]):
        print(f"| {name} | {st['calls']} | {st['start'] / 2**20:.0f} | {st['max'] / 2**20:.0f} | {st['end'] / 2**20:.0f} | "
              f"{(st['max'] - base) / N:.0f} | {st.get('traced', 0) / N:.0f} |")
    if sampler.peak_snapshot is not None:
        at, (total, top) = sampler.peak_snapshot
        print(f"\ntraced peak {sampler.traced_peak / 2**20:.0f} MiB during {' > '.join(sampler.traced_at)}; "
              f"numpy alive near it ({' > '.join(at)}): {total / 2**20:.0f} MiB ({total / N:.0f} B/tuple)")
        for size, where in top:
            print(f"    {size / 2**20:8.1f} MiB  {size / N:6.1f} B/tuple  {where}")
    for name, lst in snaps.items():
        for total, top in lst:
            print(f"\nnumpy alive after {name}: {total / 2**20:.0f} MiB ({total / N:.0f} B/tuple)")
            for size, where in top:
                print(f"    {size / 2**20:8.1f} MiB  {size / N:6.1f} B/tuple  {where}")


if __name__ == "__main__":
    main()
