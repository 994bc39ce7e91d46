"""The results writer (issue 21): whole processes with results.parquet, and its parts.

Two modes on the core benchmark data (``bench_core.py`` generates it; 2M + 1M
tuples, ``--policy static --retention 50ms``: 7.9M emitted pairs):

* default -- rounds of fresh processes, alternating: ``streamjoin run`` with
  results.parquet on this checkout, the same on another checkout
  (``--compare PYTHONPATH``, as ``bench_core.py --compare``), and DuckDB
  writing the exact band join's pairs to Parquet (``bench_peers.py``'s
  child).  Wall time, CPU time (user + system), the ``write`` stage from
  report.json, peak RSS; medians over the rounds after one warm-up round.
* ``--parts`` -- one process: runs the job up to the results, then times the
  writer's parts on those combinations, alternating within each repetition:
  the writer before issue 21 (general sort, one frame, polars
  ``write_parquet``), the row-group writer, the two orders, the gathers, and
  the Parquet options (statistics, dictionary, row group size); with
  ``--writer-at REV`` also the row-group writer of git revision ``REV``
  (its ``io/results_file.py``) on the same combinations, and whether its
  file is the same bytes.
* ``--encoders`` -- one process, the same capture: the row groups are built
  once, then only their Parquet encode is timed, alternating: the writer's
  (:class:`~streamjoin.pipelines.io.results_file.ResultsFile`, Arrow's encoder
  on one thread), polars' streaming ``sink_parquet`` fed by the same frames
  (its encoder on every core) and DuckDB's ``COPY`` from an Arrow table of
  them (every core; the ``bench`` extra); each file is read back and compared
  with the frames, and its encodings, row groups and footer are printed
  (issue 21, tenth pass: is there an encoder that uses the second core?).

    python benchmarks/bench_writer.py --rounds 5 --compare <old checkout>
    python benchmarks/bench_writer.py --parts --rounds 5 [--writer-at main]
    python benchmarks/bench_writer.py --encoders --rounds 5

On a loaded shared host wall time mostly measures the queue; compare CPU.
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
from bench_core import child_env, ensure_data  # noqa: E402  (benchmarks/ is not a package)

HERE = Path(__file__).resolve().parent
POLICY = ["--policy", "static", "--retention", "50ms"]
W_US = 100_000   # the bench set's window (bench.toml)


def _measure(cmd: list[str], env: dict | None, stdout=subprocess.DEVNULL) -> tuple[dict, bytes]:
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[:4]} failed: {err.decode()[-2000:]}")
    return dict(wall=wall, cpu=usage.ru_utime + usage.ru_stime, rss=usage.ru_maxrss / 1024,
                load=os.getloadavg()[0]), out


def run_streamjoin(config: Path, pythonpath: str | None) -> dict:
    env = child_env(pythonpath)
    with tempfile.TemporaryDirectory() as tmp:
        r, _ = _measure([sys.executable, "-m", "streamjoin.cli.main", "run", str(config), "--engine", "local",
                         "--router", "none", *POLICY, "--out", f"{tmp}/out"], env)
        report = json.loads(Path(tmp, "out", "report.json").read_text())
        r.update(write=report["timings_s"]["write"], mb=Path(tmp, "out", "results.parquet").stat().st_size / 1e6)
    return r


def run_duckdb() -> dict:
    r, out = _measure([sys.executable, str(HERE / "bench_peers.py"), "--child", "duckdb-write-pairs",
                       "--band", str(W_US), "--kmin", "0", "--tmin", "0", "--t0", repr(time.time())], None,
                      stdout=subprocess.PIPE)
    child = json.loads(out.decode().strip().splitlines()[-1])
    r.update(write=float("nan"), mb=child["bytes"] / 1e6)
    return r


def whole(config: Path, rounds: int, compare: str | None) -> None:
    sides = {"this checkout": lambda: run_streamjoin(config, None)}
    if compare:
        sides = {"--compare": lambda: run_streamjoin(config, compare), **sides}
    sides["DuckDB COPY pairs"] = run_duckdb
    res: dict[str, list[dict]] = {k: [] for k in sides}
    for rnd in range(rounds + 1):
        for name, fn in sides.items():
            r = fn()
            print(f"round {rnd}{' (warm-up)' if not rnd else ''} {name}: wall {r['wall']:.2f} cpu {r['cpu']:.2f} "
                  f"write {r['write']:.2f} rss {r['rss']:.0f} MB, load {r['load']:.1f}", flush=True)
            if rnd:
                res[name].append(r)
    med = statistics.median
    print(f"\nmedians of {rounds} alternating rounds after a warm-up")
    print(f"{'':20} {'wall s':>7} {'cpu s':>6} {'write s':>7} {'RSS MB':>7} {'file MB':>7}  walls")
    for name, rs in res.items():
        print(f"{name:20} {med(r['wall'] for r in rs):7.2f} {med(r['cpu'] for r in rs):6.2f} "
              f"{med(r['write'] for r in rs):7.2f} {med(r['rss'] for r in rs):7.0f} {rs[0]['mb']:7.0f}  "
              + " ".join(f"{r['wall']:.2f}" for r in rs))
    duck = res["DuckDB COPY pairs"]
    for name, rs in res.items():
        if rs is not duck:
            print(f"{name} / DuckDB: wall {med(a['wall'] / b['wall'] for a, b in zip(rs, duck)):.2f}x, "
                  f"cpu {med(a['cpu'] / b['cpu'] for a, b in zip(rs, duck)):.2f}x (medians of per-round ratios)")


class _Captured(BaseException):
    """Stops the job once the writer's inputs are captured (not an Exception: the CLI reports those)."""


def _writer_at(rev: str):
    """``write_row_groups`` of git revision ``rev``'s ``io/results_file.py``, loaded beside this one."""
    import types

    where = f"{rev}:pipelines/io/results_file.py"
    src = subprocess.run(["git", "-C", str(HERE.parent), "show", where], check=True, capture_output=True,
                         text=True).stdout.replace("from .output import", "from streamjoin.pipelines.io.output import")
    module = types.ModuleType(f"results_file_at_{rev}")
    exec(compile(src, where, "exec"), module.__dict__)
    return module.write_row_groups


def _capture(config: Path) -> tuple:
    """The core run's (combinations, emission, streams), taken where its results writer starts (the run
    imports ``emitted_row_groups`` from its module when it writes results, so that name is replaced for
    the run; the writer's thread stops there and the run fails with ``_Captured`` at its end)."""
    from streamjoin.pipelines.replay import results as R

    got = {}

    def capture(combos, em, streams):
        got.update(combos=combos, em=em, streams=streams)
        raise _Captured

    from streamjoin.cli.main import app
    real, R.emitted_row_groups = R.emitted_row_groups, capture
    try:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                app(["run", str(config), "--engine", "local", "--router", "none", *POLICY, "--out", f"{tmp}/out"],
                    standalone_mode=False)
            except _Captured:
                pass
    finally:
        R.emitted_row_groups = real
    return got["combos"], got["em"], got["streams"]


def parts(config: Path, rounds: int, writer_at: str | None = None) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from streamjoin.pipelines.io.results_file import write_row_groups
    from streamjoin.pipelines.replay import results as R
    from streamjoin.pipelines.replay.emit import emission_order

    combos, em, streams = _capture(config)
    m = em.emitted
    rows = [r[m] for r in combos.rows]
    emit, last, lat = np.asarray(em.emit_us)[m], em.last[m], np.asarray(em.latency_us)[m]
    order = emission_order(emit, last, rows)
    frame = R.results_frame(streams, rows, emit, last, lat)
    table = frame.to_arrow()
    path = Path(tempfile.mkdtemp()) / "results.parquet"
    cases = {
        "writer before issue 21 (whole)": lambda: R.results_frame(streams, rows, emit, last, lat).write_parquet(
            path, compression="snappy"),
        "row-group writer (whole)": lambda: write_row_groups(path, R.emitted_row_groups(combos, em, streams)),
        "order: general 4-column sort": lambda: emission_order(emit, last, rows),
        "order: by last member": lambda: emission_order(emit, last, rows, by_last=True),
        "gathers: whole frame": lambda: R.frame_at(order, streams, rows, emit, last, lat),
        "write: polars snappy": lambda: frame.write_parquet(path, compression="snappy"),
        "write: polars snappy, statistics=False": lambda: frame.write_parquet(path, compression="snappy",
                                                                              statistics=False),
        "write: pyarrow snappy, dictionary": lambda: pq.write_table(table, path, compression="snappy"),
        "write: pyarrow snappy, no dictionary": lambda: pq.write_table(table, path, compression="snappy",
                                                                       use_dictionary=False),
        "write: pyarrow, no dictionary, no statistics": lambda: pq.write_table(
            table, path, compression="snappy", use_dictionary=False, write_statistics=False),
        "write: pyarrow, no dictionary, 128Ki-row groups": lambda: pq.write_table(
            table, path, compression="snappy", use_dictionary=False, row_group_size=1 << 17),
    }
    if writer_at:
        old, old_path = _writer_at(writer_at), path.with_name(f"at-{writer_at}.parquet")
        cases = {f"row-group writer at {writer_at} (whole)": lambda: old(old_path, R.emitted_row_groups(
            combos, em, streams)), **cases}
    print(f"{len(rows[0]):,} emitted combinations; {rounds} repetitions, parts alternating")
    res = {k: ([], []) for k in cases}
    size = {}
    for _ in range(rounds):
        for k, fn in cases.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            res[k][0].append(time.perf_counter() - w0)
            res[k][1].append(time.process_time() - c0)
            if k.startswith(("write", "writer", "row-group")):
                size[k] = (old_path if " at " in k else path).stat().st_size / 1e6
            if writer_at and k == "row-group writer (whole)":
                same = path.read_bytes() == old_path.read_bytes()
    med = statistics.median
    print(f"{'part':48} {'wall s':>7} {'cpu s':>6} {'file MB':>7}  walls")
    for k, (w, c) in res.items():
        mb = f"{size[k]:7.0f}" if k in size else " " * 7
        print(f"{k:48} {med(w):7.2f} {med(c):6.2f} {mb}  " + " ".join(f"{x:.2f}" for x in w))
    if writer_at:
        print(f"row-group writer's file the same bytes as at {writer_at}: {same}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 vCPU)")


def encoders(config: Path, rounds: int) -> None:
    import duckdb
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq
    from polars.io.plugins import register_io_source

    from streamjoin.pipelines.io.output import RESULTS_COMPRESSION
    from streamjoin.pipelines.io.results_file import ROW_GROUP_ROWS, ResultsFile
    from streamjoin.pipelines.replay import results as R

    frames = list(R.emitted_row_groups(*_capture(config)))
    whole = pl.concat(frames, rechunk=False)
    folder = Path(tempfile.mkdtemp())

    def arrow_one_thread(path: Path) -> None:
        out = ResultsFile(path)
        for f in frames:
            out.write(f)
        out.close()

    def polars_sink(path: Path) -> None:
        source = register_io_source(lambda *_: iter(frames), schema=frames[0].schema)
        source.sink_parquet(path, compression=RESULTS_COMPRESSION, statistics=True, row_group_size=ROW_GROUP_ROWS)

    def duckdb_copy(path: Path) -> None:
        table = pa.Table.from_batches([b for f in frames for b in f.to_arrow().to_batches()])   # no copy
        with duckdb.connect() as con:
            con.register("frames", table)
            con.execute(f"COPY (SELECT * FROM frames) TO '{path}' (FORMAT parquet, COMPRESSION {RESULTS_COMPRESSION}, "
                        f"ROW_GROUP_SIZE {ROW_GROUP_ROWS})")

    cases = {"ResultsFile (Arrow, one encoding thread)": arrow_one_thread,
             "polars sink_parquet (every core)": polars_sink,
             "DuckDB COPY from an Arrow table (every core)": duckdb_copy}
    print(f"{whole.height:,} rows in {len(frames)} frames; {rounds} repetitions after a warm-up, encoders alternating")
    res = {k: ([], []) for k in cases}
    for rnd in range(rounds + 1):
        for k in (list(cases) if rnd % 2 == 0 else list(cases)[::-1]):
            path = folder / f"{list(cases).index(k)}.parquet"
            w0, c0 = time.perf_counter(), time.process_time()
            cases[k](path)
            if rnd:
                res[k][0].append(time.perf_counter() - w0)
                res[k][1].append(time.process_time() - c0)
        print(f"  round {rnd}{' (warm-up)' if not rnd else ''}: load average {os.getloadavg()[0]:.1f}", flush=True)
    med = statistics.median
    print(f"{'encoder':46} {'wall s':>7} {'spread':>11} {'cpu s':>6} {'spread':>11} {'file MB':>7}")
    for i, (k, (w, c)) in enumerate(res.items()):
        path = folder / f"{i}.parquet"
        print(f"{k:46} {med(w):7.2f} {min(w):5.2f}..{max(w):<5.2f} {med(c):6.2f} {min(c):5.2f}..{max(c):<5.2f} "
              f"{path.stat().st_size / 1e6:7.0f}")
    for i, k in enumerate(cases):   # what a reader sees, and how each file is made
        path = folder / f"{i}.parquet"
        meta = pq.ParquetFile(path).metadata
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        encodings = sorted({e for g in range(meta.num_row_groups) for c in range(meta.num_columns)
                            for e in meta.row_group(g).column(c).encodings})
        stats = all(meta.row_group(g).column(c).statistics is not None
                    and meta.row_group(g).column(c).statistics.has_min_max
                    for g in range(meta.num_row_groups) for c in range(meta.num_columns))
        print(f"{k}: read back equal {pl.read_parquet(path).equals(whole)}, row groups {len(groups)} "
              f"(largest {max(groups):,}), encodings {encodings}, min/max everywhere {stats}, "
              f"footer keys {sorted(k.decode() for k in (meta.metadata or {}))}, format {meta.format_version}, "
              f"created by {meta.created_by!r}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 vCPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="counted rounds (default 5)")
    ap.add_argument("--compare", metavar="PYTHONPATH", help="alternate with another checkout's code")
    ap.add_argument("--parts", action="store_true", help="time the writer's parts in one process")
    ap.add_argument("--writer-at", metavar="REV", help="--parts: also the row-group writer of git revision REV")
    ap.add_argument("--encoders", action="store_true",
                    help="time only the Parquet encode of the same row groups: Arrow (the writer's), polars, DuckDB")
    args = ap.parse_args()
    config = ensure_data(1.0)
    if args.encoders:
        encoders(config, args.rounds)
    elif args.parts:
        parts(config, args.rounds, args.writer_at)
    else:
        whole(config, args.rounds, args.compare)


if __name__ == "__main__":
    main()
