"""Bounded memory (issue 7): 20M and 40M input tuples on one machine, peak RSS.

    python benchmarks/bench_scale.py [--sizes 20 40] [--results]
    python benchmarks/bench_scale.py --engine spark --sizes 1.5 3 [--results]

Generates the core benchmark's streams at a constant rate (the ``bench`` set:
two keyed streams, 2:1 rows, 278 keys, W = 100 ms, ~2.7 valid pairs per input
tuple) but longer: ``N`` million tuples over ``N/3 * 300`` seconds, so the
window, the rate and the disorder stay those of the core benchmark while the
input grows.  Up to 3M one ``generate bench`` run; above, in bounded memory,
whole 3M chunks (seed 7 + i, shifted by i x 300 s) appended as row groups to
one file per stream (:func:`ensure_data`).  Then runs, as a fresh process under ``/usr/bin/time -v``::

    streamjoin run <data>/bench.toml --engine local --router none \
        --policy static --retention 50ms --no-results --out <tmp>

(``--results``: also with results written to Parquet) and prints wall time,
peak RSS (``Maximum resident set size``), chunks, the state held between
chunks and the results.  The bounded-memory engine is chosen automatically
above 6M input rows (``--chunk-rows`` default); ``--in-memory`` also runs
``--chunk-rows 0`` for comparison (it needs memory proportional to the input).

``--engine spark`` (issue 19) runs instead, on ``local[2]``::

    streamjoin run <data>/bench.toml --engine spark --master local[2] --router atr \
        --policy mpkslack [--no-results] --spark-conf spark.streamjoin.results=driver|executors

alternating the results paths (``--runs`` rounds, medians), and samples every process's peak RSS (``VmHWM`` in
``/proc/PID/status``, read every 0.2 s): the driver's Python process, the JVM
it starts (in local mode the tasks' JVM side runs there too) and the largest
Python worker.  JVM heap use is not read separately (the JVM's RSS bounds it).

``--engine spark --native`` (issue 19) alternates instead the current path
(``spark.streamjoin.native=false``) and the native path
(``spark.streamjoin.native=true``, pipelines/engines/spark/native.py), both
``--no-results`` unless ``--results``, and also samples the JVM's heap in use
(``jstat -gc``: survivor, eden and old generation used, every 2 s), apart
from the driver Python's peak RSS.  ``--only local`` runs the local engine
instead with the same policy (``--engine local --policy mpkslack``, its
default chunking: bounded above 6M rows), for throughput per core beside it.
``--per-partition M`` passes ``--partitions ceil(size / M)``: every size's tasks
then hold about M million tuples (each range partition of the progress scans and
each join group is one Python task; without either the native path chooses
from the input's size, at most 1.5M tuples per task, engines/spark/sizing.py);
``--partitions P`` a fixed count instead.
``--spark-conf K=V`` (repeatable) goes to every Spark run (e.g.
``spark.driver.memory=10g``); ``--trace DIR`` runs each driver under
``driver_memory.py`` (per stage RSS, ``tracemalloc`` heap and peak, JSON in DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def streamjoin_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("streamjoin")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "streamjoin.cli.main"]


#: the generator's unit: 3M tuples (``generate bench --scale 1``, 300 s); larger sizes are chunks of it
CHUNK_MILLIONS = 3
CHUNK_SECONDS = 300


def ensure_data(millions: float) -> Path:
    """``millions`` M tuples at the core benchmark's rate (3M per 300 s), written in
    bounded memory: up to 3M one ``generate bench`` run; above, whole 3M chunks
    (``generate bench --scale 1 --seed 7+i``, each chunk's ts and arrival shifted by
    ``i x 300 s``) appended as row groups to one file per stream, so the generator
    holds one chunk at a time whatever the size (48M: 16 chunks)."""
    out = DATA / f"scale{millions:g}"
    config = out / "bench.toml"
    if not (config.exists() and (out / ".complete").exists()):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t0 = time.perf_counter()
        if millions <= CHUNK_MILLIONS:
            scale = millions / 3
            subprocess.run([*streamjoin_cmd(), "generate", "bench", "--out", str(out), "--seed", "7",
                            "--scale", f"{scale:g}", "--duration", f"{300 * scale:g}"], check=True,
                           stdout=subprocess.DEVNULL)
        else:
            _chunked_data(out, millions)
        (out / ".complete").touch()
        print(f"generated {millions}M tuples in {time.perf_counter() - t0:.0f}s -> {out}", file=sys.stderr)
    return config


def _chunked_data(out: Path, millions: float) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    chunks = round(millions / CHUNK_MILLIONS)
    if abs(chunks * CHUNK_MILLIONS - millions) > 1e-9:
        raise SystemExit(f"--sizes {millions:g}: above {CHUNK_MILLIONS}M, a multiple of {CHUNK_MILLIONS}M")
    writers: dict[str, pq.ParquetWriter] = {}
    try:
        for i in range(chunks):
            with tempfile.TemporaryDirectory(dir=DATA) as tmp:
                subprocess.run([*streamjoin_cmd(), "generate", "bench", "--out", tmp, "--seed", str(7 + i),
                                "--scale", "1", "--duration", str(CHUNK_SECONDS)], check=True,
                               stdout=subprocess.DEVNULL)
                if i == 0:
                    shutil.copy(Path(tmp) / "bench.toml", out / "bench.toml")
                for name in ("left", "right"):
                    t = pq.read_table(Path(tmp) / f"{name}.parquet")
                    shift = i * CHUNK_SECONDS * 1_000_000
                    for c in ("ts", "arrival"):
                        t = t.set_column(t.schema.get_field_index(c), c,
                                         pc.add(t.column(c), shift))
                    if name not in writers:
                        writers[name] = pq.ParquetWriter(out / f"{name}.parquet", t.schema, compression="zstd")
                    writers[name].write_table(t, row_group_size=1_000_000)
            print(f"  chunk {i + 1}/{chunks}", file=sys.stderr, flush=True)
    finally:
        for w in writers.values():
            w.close()


def timed_run(config: Path, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        out = Path(tmp) / "out"
        cmd = ["/usr/bin/time", "-v", *streamjoin_cmd(), "run", str(config), "--engine", "local", "--router", "none",
               "--policy", "static", "--retention", "50ms", *extra, "--out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
        report = json.loads((out / "report.json").read_text())
        results_bytes = sum(p.stat().st_size for p in out.glob("results.parquet*"))
    rows = sum(s["rows"] for s in report["streams"])
    bounded = report.get("bounded") or {}
    return {
        "rows": rows, "wall_s": wall, "rss_gb": rss_kb / 1024 ** 2, "tuples_per_s": rows / wall,
        "truth": report["truth_results"], "emitted": report["emitted_results"],
        "chunks": bounded.get("chunks", 1), "state_peak": bounded.get("state_peak_tuples"),
        "results_mb": results_bytes / 1e6, "timings": report["timings_s"],
    }


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[tuple[int, str]]:
    """``(pid, command name)`` of every descendant of ``pid``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        for task in Path(f"/proc/{p}/task").glob("*"):   # children of every thread (the JVM forks off its main one)
            try:
                kids += (task / "children").read_text().split()
            except OSError:
                pass
        for k in map(int, kids):
            try:
                name = Path(f"/proc/{k}/comm").read_text().strip()
            except OSError:
                continue
            out.append((k, name))
            todo.append(k)
    return out


def _heap_used_kb(pid: int) -> int:
    """The JVM's heap in use (``jstat -gc``: S0U + S1U + EU + OU, KB); 0 if unreadable."""
    try:
        out = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=10).stdout.split("\n")
        head, vals = out[0].split(), out[1].split()
        return int(sum(float(vals[head.index(c)]) for c in ("S0U", "S1U", "EU", "OU")))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return 0


def spark_run(config: Path, results: str, write: bool, conf: str | None = None, engine: str = "spark",
              partitions: int | None = None, extra_conf: list[str] = (), trace: Path | None = None) -> dict:
    """One ``--engine spark`` run with the peak RSS of the driver's Python process,
    its JVM and the largest Python worker, sampled from /proc, and the JVM's peak heap
    in use (``jstat``).  ``conf``: the ``--spark-conf`` (default: the results path).
    ``engine="local"``: the same policy on the local engine (its defaults otherwise).
    ``partitions``: ``--partitions`` (None: the engine's default: on the native path
    from the input's size, engines/spark/sizing.py; else the master's default parallelism).
    ``extra_conf``: more ``--spark-conf K=V`` (e.g. ``spark.driver.memory=10g``).
    ``trace``: run the driver under :mod:`driver_memory` (tracemalloc), its JSON report
    written there."""
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        out = Path(tmp) / "out"
        how = (["--engine", "spark", "--master", "local[2]", "--router", "atr",
                "--spark-conf", conf or f"spark.streamjoin.results={results}",
                *[a for kv in extra_conf for a in ("--spark-conf", kv)],
                *([] if partitions is None else ["--partitions", str(partitions)])] if engine == "spark"
               else ["--engine", "local"])
        head = streamjoin_cmd() if trace is None else [sys.executable, str(HERE / "driver_memory.py"),
                                                       "--report", str(trace), "--"]
        cmd = [*head, "run", str(config), *how, "--policy", "mpkslack",
               *([] if write else ["--no-results"]), "--out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak = {"driver": 0, "jvm": 0, "worker": 0, "heap": 0}
        tick = 0
        while proc.poll() is None:
            tick += 1
            peak["driver"] = max(peak["driver"], _hwm_kb(proc.pid))
            for pid, name in _tree(proc.pid):
                kind = "jvm" if name == "java" else "worker" if name.startswith("python") else None
                if kind:
                    peak[kind] = max(peak[kind], _hwm_kb(pid))
                if kind == "jvm" and tick % 10 == 0:   # jstat starts a JVM itself: every 2 s
                    peak["heap"] = max(peak["heap"], _heap_used_kb(pid))
            time.sleep(0.2)
        err = proc.stderr.read()
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"run failed ({proc.returncode}):\n{err[-3000:]}")
        report = json.loads((out / "report.json").read_text())
    rows = sum(s["rows"] for s in report["streams"])
    return {"rows": rows, "wall_s": wall, "truth": report["truth_results"], "emitted": report["emitted_results"],
            **{f"{k}_gb": v / 1024 ** 2 for k, v in peak.items()}, "timings": report["timings_s"]}


def spark_main(sizes: list[float], with_results: bool, runs: int, extra_conf: list[str] = ()) -> None:
    """Both results paths alternating, ``runs`` rounds; medians of wall time and of each peak."""
    import statistics

    configs = {m: ensure_data(m) for m in sizes}
    rows = []
    for m in sizes:
        for write in ([False, True] if with_results else [False]):
            got: dict[str, list[dict]] = {"driver": [], "executors": []}
            for _ in range(runs):
                for results in ("driver", "executors"):   # alternating
                    r = spark_run(configs[m], results, write, extra_conf=extra_conf)
                    got[results].append(r)
                    print(f"  {m:g}M {results} {'results' if write else '--no-results'}: {r['wall_s']:.1f}s, "
                          f"driver {r['driver_gb']:.2f} GB", file=sys.stderr)
            for results, rs in got.items():
                med = dict(rs[0])
                for k in ("wall_s", "driver_gb", "jvm_gb", "worker_gb"):
                    med[k] = statistics.median(r[k] for r in rs)
                med["timings"] = {k: statistics.median(r["timings"][k] for r in rs) for k in rs[0]["timings"]}
                rows.append((m, results, write, med))
    print()
    print("| input tuples | results | path | wall s | driver Python peak RSS GB | JVM peak RSS GB | "
          "largest worker GB | truth | emitted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m, results, write, r in rows:
        print(f"| {r['rows']:,} | {'written' if write else 'no'} | {results} | {r['wall_s']:.1f} | "
              f"{r['driver_gb']:.2f} | {r['jvm_gb']:.2f} | {r['worker_gb']:.2f} | {r['truth']:,} | {r['emitted']:,} |")
    print("\nstage timings (s) of each run:")
    keys = ["load", "join", "join.progress", "join.route_plan", "join.join", "join.collect", "metrics", "write", "total"]
    for m, results, write, r in rows:
        t = r["timings"]
        print(f"  {m:g}M {results} {'results' if write else '--no-results'}: "
              + ", ".join(f"{k} {t[k]:.1f}" for k in keys if k in t))


def native_main(sizes: list[float], with_results: bool, runs: int, only: str | None = None,
                per_partition: float | None = None, extra_conf: list[str] = (), partitions: int | None = None,
                trace: Path | None = None) -> None:
    """The current and the native path alternating (``only``: one of them), ``runs`` rounds; medians.
    ``per_partition`` (millions of tuples): ``--partitions`` = size / per_partition, rounded up, so
    every size's tasks hold the same number of tuples (None: the engine's default: the native
    path's choice from the input's size, engines/spark/sizing.py; the current path's master parallelism);
    ``partitions``: a fixed ``--partitions`` instead.  ``trace``: a directory for each run's
    :mod:`driver_memory` report (``<size>M-<path>-<round>.json``)."""
    import statistics

    configs = {m: ensure_data(m) for m in sizes}
    paths = {"current": "spark.streamjoin.native=false", "native": "spark.streamjoin.native=true", "local": None}
    paths = {only: paths[only]} if only is not None else {p: paths[p] for p in ("current", "native")}
    rows = []
    for m in sizes:
        got: dict[str, list[dict]] = {p: [] for p in paths}
        for _ in range(runs):
            for path, conf in paths.items():   # alternating
                parts = partitions if per_partition is None else max(1, math.ceil(m / per_partition))
                at = None if trace is None else trace / f"{m:g}M-{path}-{len(got[path])}.json"
                r = spark_run(configs[m], "auto", with_results, conf, engine="local" if path == "local" else "spark",
                              partitions=parts, extra_conf=extra_conf, trace=at)
                got[path].append(r)
                print(f"  {m:g}M {path}: {r['wall_s']:.1f}s, driver {r['driver_gb']:.2f} GB, "
                      f"heap {r['heap_gb']:.2f} GB", file=sys.stderr, flush=True)
        for path, rs in got.items():
            med = dict(rs[0])
            for k in ("wall_s", "driver_gb", "jvm_gb", "worker_gb", "heap_gb"):
                med[k] = statistics.median(r[k] for r in rs)
            rows.append((m, path, med))
    print()
    print("| input tuples | path | wall s | tuples/s per core | driver Python peak RSS GB | JVM peak heap used GB | "
          "JVM peak RSS GB | largest worker GB | truth | emitted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m, path, r in rows:   # cores: local[2]; the local engine's threads on this machine
        cores = 2 if path != "local" else os.cpu_count()
        print(f"| {r['rows']:,} | {path} | {r['wall_s']:.1f} | {r['rows'] / r['wall_s'] / cores:,.0f} | "
              f"{r['driver_gb']:.2f} | {r['heap_gb']:.2f} | "
              f"{r['jvm_gb']:.2f} | {r['worker_gb']:.2f} | {r['truth']:,} | {r['emitted']:,} |")
    print("\nstage timings (s) of each run:")
    keys = ["load", "join", "join.input", "join.plan", "join.progress", "join.memory", "join.route_plan",
            "join.join", "join.collect", "metrics", "write", "total"]
    for m, path, r in rows:
        t = r["timings"]
        print(f"  {m:g}M {path}: " + ", ".join(f"{k} {t[k]:.1f}" for k in keys if k in t))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[20, 40], help="millions of input tuples")
    ap.add_argument("--engine", choices=["local", "spark"], default="local",
                    help="spark: local[2], ATR, mpkslack, both results paths (issue 19)")
    ap.add_argument("--native", action="store_true",
                    help="--engine spark: the current path against the native one (spark.streamjoin.native)")
    ap.add_argument("--only", choices=["current", "native", "local"],
                    help="--native: run one path only (local: the local engine, same policy, its default chunking)")
    ap.add_argument("--runs", type=int, default=1, help="--engine spark: alternating rounds (medians)")
    ap.add_argument("--results", action="store_true", help="also run with results written to Parquet")
    ap.add_argument("--per-partition", type=float,
                    help="--native: millions of input tuples per --partitions (default: native path: from the input size; current path: the master's parallelism)")
    ap.add_argument("--partitions", type=int, help="--native: a fixed --partitions for every size")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="K=V",
                    help="--engine spark: passed to every run's streamjoin run (repeatable)")
    ap.add_argument("--trace", type=Path, metavar="DIR",
                    help="--native: run each driver under driver_memory.py (tracemalloc per stage), reports in DIR")
    ap.add_argument("--in-memory", action="store_true", help="also run --chunk-rows 0 (memory grows with input)")
    args = ap.parse_args()
    if args.engine == "spark" and args.native:
        if args.trace is not None:
            args.trace.mkdir(parents=True, exist_ok=True)
        return native_main(args.sizes, args.results, args.runs, args.only, args.per_partition, args.spark_conf,
                           args.partitions, args.trace)
    if args.engine == "spark":
        return spark_main(args.sizes, args.results, args.runs, args.spark_conf)
    modes = [("bounded, --no-results", ["--no-results"])]
    if args.results:
        modes.append(("bounded, results written", []))
    if args.in_memory:
        modes.append(("in memory, --no-results", ["--no-results", "--chunk-rows", "0"]))
    configs = {m: ensure_data(m) for m in args.sizes}
    rows = []
    for m in args.sizes:
        for label, extra in modes:
            r = timed_run(configs[m], extra)
            rows.append((m, label, r))
            print(f"  {m:g}M {label}: {r['wall_s']:.1f}s, peak RSS {r['rss_gb']:.2f} GB", file=sys.stderr)
    print()
    print("| input tuples | mode | wall s | tuples/s | peak RSS GB | chunks | state peak | truth | emitted | results MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m, label, r in rows:
        print(f"| {r['rows']:,} | {label} | {r['wall_s']:.1f} | {r['tuples_per_s']:,.0f} | {r['rss_gb']:.2f} | "
              f"{r['chunks']} | {r['state_peak'] if r['state_peak'] is not None else '-'} | {r['truth']:,} | "
              f"{r['emitted']:,} | {r['results_mb']:.0f} |")
    by_size = {(m, label): r for m, label, r in rows}
    sizes = sorted(args.sizes)
    if len(sizes) >= 2:
        small, big = sizes[0], sizes[-1]
        for label, _ in modes:
            if (small, label) in by_size and (big, label) in by_size:
                ratio = by_size[(big, label)]["rss_gb"] / by_size[(small, label)]["rss_gb"]
                print(f"\npeak RSS {big}M / {small}M ({label}): {ratio:.2f}x")
    print("\nstage timings (s) of each run:")
    for m, label, r in rows:
        t = r["timings"]
        keys = ["load", "join", "join.progress", "join.memory", "join.candidates", "join.emit", "join.results",
                "metrics", "write", "total"]
        print(f"  {m:g}M {label}: " + ", ".join(f"{k} {t[k]:.1f}" for k in keys if k in t))


if __name__ == "__main__":
    main()
