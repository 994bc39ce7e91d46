"""The bounded-memory engine equals the in-memory engine, chunk sizes and file layouts notwithstanding.

The in-memory engine is proven equal to the per-arrival reference replay
(test_engine_vs_reference.py); here the chunked replay
(pipelines/engines/bounded.py) must reproduce it exactly from real Parquet
files read row group by row group: the results file row for row (emission
time, latency, order), truth, memory after every arrival, periods, drops,
expiries, delays and quarantine -- with rows written out of arrival order,
tiny row groups, chunks of one tuple and chunks larger than the input.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.strategies import fixed_policy

from streamjoin.pipelines.jobs.chunked import chunked_report
from streamjoin.pipelines.io.chunks import read_chunks, survey
from streamjoin.pipelines.config.settings import RunConfig, StreamConfig
from streamjoin.pipelines.engines.bounded_emulation import bounded_replay
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.jobs.run import build_report
from streamjoin.pipelines.replay.results import emitted_frame, result_order
from streamjoin.pipelines.io.load import load_all
from streamjoin.pipelines.policies import PolicySpec

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def inputs(draw, n_streams=st.integers(2, 3)):
    n = draw(n_streams)
    keyed = draw(st.booleans())
    tables = []
    for _ in range(n):
        size = draw(st.integers(0, 40))
        ts = draw(st.lists(st.integers(0, 200), min_size=size, max_size=size))
        # mostly small delays, sometimes a long stall: heavy disorder
        delay = draw(st.lists(st.one_of(st.integers(0, 5), st.integers(0, 120)), min_size=size, max_size=size))
        arrival = [t + d for t, d in zip(ts, delay)]
        cols = {"ts": ts, "arrival": arrival, "payload": list(range(size))}
        if keyed:
            cols["key"] = draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
        if size and draw(st.booleans()):  # a few bad rows: quarantined, never lost
            bad = draw(st.integers(0, size - 1))
            cols[draw(st.sampled_from(["ts", "arrival"] + (["key"] if keyed else [])))][bad] = None
        frame = pl.DataFrame(cols, schema={c: pl.Int64 for c in cols})
        layout = draw(st.sampled_from(["as drawn", "ts order", "arrival order"]))
        if layout != "as drawn":
            frame = frame.sort(layout.split()[0], nulls_last=True)
        tables.append((frame, draw(st.integers(1, 16))))
    windows = tuple(draw(st.integers(0, 30)) for _ in range(n))
    policy = fixed_policy(draw, n, 60)
    return tables, windows, policy, keyed, draw(st.integers(1, 50)), draw(st.integers(1, 100))


def _config(tmp: Path, tables, windows, policy, keyed, period) -> RunConfig:
    streams = []
    for i, ((frame, row_group), w) in enumerate(zip(tables, windows)):
        path = tmp / f"s{i}.parquet"
        pq.write_table(frame.to_arrow(), path, row_group_size=row_group)
        streams.append(StreamConfig(name=f"s{i}", path=str(path), ts="ts", arrival="arrival", unit="us",
                                    window_us=w, keys=("key",) if keyed else ()))
    return RunConfig(streams=tuple(streams), policy=policy, out=tmp / "out", engine="local", period_us=period)


#: the property inputs quarantine freely: only a stream with no valid row is refused
ANY_SHARE = 1.0


def in_memory(cfg: RunConfig):
    streams = load_all(list(cfg.streams), ANY_SHARE)
    outcome = join([s.ts for s in streams], [s.arrival for s in streams],
                   [s.keys if s.keys.width else None for s in streams], cfg.windows, cfg.policy)
    return streams, outcome, build_report(cfg, "t", streams, outcome), emitted_frame(outcome.combos, outcome.emission, streams)


def bounded(cfg: RunConfig, chunk_rows: int):
    sv = survey(list(cfg.streams), chunk_rows, ANY_SHARE)
    frames: list[pl.DataFrame] = []
    engine = bounded_replay(cfg, sv, frames.append, [s.row_bytes for s in sv.streams])
    engine.trace = []
    quarantine = [[] for _ in sv.streams]
    for chunk in read_chunks(sv):
        for i, q in enumerate(chunk.quarantine):
            if q is not None:
                quarantine[i].append(q)
        engine.on_chunk(chunk)
    engine.on_eof()
    return sv, engine, chunked_report(cfg, "t", sv, engine), frames, quarantine


def assert_same(cfg: RunConfig, chunk_rows: int) -> None:
    try:
        streams, outcome, want, want_rows = in_memory(cfg)
    except InputError as exc:  # e.g. a stream with every row quarantined: the bounded engine refuses it alike
        with pytest.raises(InputError) as refused:
            bounded(cfg, chunk_rows)
        assert str(refused.value) == str(exc)
        return
    sv, engine, got, frames, quarantine = bounded(cfg, chunk_rows)
    # each chunk's frame put in order on its own: chunks emit disjoint, increasing time ranges
    names = [s.name for s in streams]
    got_rows = pl.concat([result_order(f, names) for f in frames], how="vertical") if frames else want_rows.head(0)
    assert got_rows.equals(want_rows)          # every emitted result, its emission time, latency and order
    assert got_rows.schema == want_rows.schema
    for key in ("truth_results", "emitted_results", "recall", "duplicates", "periods", "memory_tuples"):
        assert got[key] == want[key], key
    if cfg.policy.name in ("spark-ss", "flink", "flink-sql"):
        assert got["policy_settings"] == want["policy_settings"]
    assert ("outer_join" in got) == ("outer_join" in want) == (cfg.policy.join != "inner")
    if "outer_join" in want:   # the null-padded rows: how many, of which stream, their latency
        g, w = dict(got["outer_join"]), dict(want["outer_join"])
        gl, wl = dict(g.pop("latency_us")), dict(w.pop("latency_us"))
        assert g == w and (gl.pop("mean") is None) == (wl["mean"] is None)
        if wl["mean"] is not None:
            assert math.isclose(got["outer_join"]["latency_us"]["mean"], wl.pop("mean"), rel_tol=1e-9)
        wl.pop("mean", None)
        assert gl == wl
    for g, w in zip(got["streams"], want["streams"]):
        assert g == w
    lat_g, lat_w = dict(got["latency_us"]), dict(want["latency_us"])
    assert (lat_g.pop("mean") is None) == (lat_w["mean"] is None)
    if lat_w["mean"] is not None:
        assert math.isclose(got["latency_us"]["mean"], lat_w.pop("mean"), rel_tol=1e-9, abs_tol=1e-9)
    lat_w.pop("mean", None)
    assert lat_g == lat_w
    # memory after every arrival, and the truth set, chunk by chunk
    traced = [t["memory"] for t in engine.trace]
    memory = np.concatenate(traced, axis=1) if traced else np.zeros((len(streams), 0), np.int64)
    assert np.array_equal(memory, outcome.memory)
    truth = {tuple(int(r[c]) for r in t["truth"]) for t in engine.trace if "truth" in t for c in range(len(t["truth"][0]))}
    want_truth = set(zip(*[r.tolist() for r in outcome.combos.rows])) if len(outcome.combos) else set()
    assert truth == want_truth
    for i, s in enumerate(streams):  # quarantined rows: the same rows, with their reasons
        got_q = pl.concat(quarantine[i], how="vertical") if quarantine[i] else s.quarantine.head(0)
        cols = s.quarantine.columns
        assert got_q.sort(cols, nulls_last=True).equals(s.quarantine.sort(cols, nulls_last=True))


@st.composite
def emulation_inputs(draw, sql: bool = False):
    """Two streams on a millisecond scale (event times whole ms, arrivals any µs) with
    heavy disorder, and a ``spark-ss`` or ``flink`` policy (``sql``: ``flink-sql``, inner
    or outer; event times from 1 ms, as Flink SQL needs)."""
    MS = 1000
    keyed = draw(st.booleans())
    tables = []
    for _ in range(2):
        size = draw(st.integers(0, 40))
        ts = [(t + sql) * MS for t in draw(st.lists(st.integers(0, 60), min_size=size, max_size=size))]
        delay = draw(st.lists(st.one_of(st.integers(0, 5 * MS), st.integers(0, 40 * MS)), min_size=size, max_size=size))
        cols = {"ts": ts, "arrival": [t + d for t, d in zip(ts, delay)], "payload": list(range(size))}
        if keyed:
            cols["key"] = draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
        frame = pl.DataFrame(cols, schema={c: pl.Int64 for c in cols})
        layout = draw(st.sampled_from(["as drawn", "ts order", "arrival order"]))
        if layout != "as drawn":
            frame = frame.sort(layout.split()[0])
        tables.append((frame, draw(st.integers(1, 16))))
    windows = tuple(draw(st.integers(0, 8)) * MS for _ in range(2))
    watermark = tuple(draw(st.integers(0, 10)) * MS for _ in range(2))
    if sql:
        policy = PolicySpec("flink-sql", watermark=watermark,
                            watermark_interval_us=draw(st.sampled_from([0, 0, 500, 3 * MS, 10 * MS])),
                            join=draw(st.sampled_from(["inner", "left", "right", "full"])),
                            min_cleanup_us=draw(st.sampled_from([0, 0, 2 * MS, 30 * MS])))
    elif draw(st.booleans()):
        policy = PolicySpec("spark-ss", watermark=watermark, trigger_us=draw(st.sampled_from([1, 3, 7, 20])) * MS,
                            watermark_policy=draw(st.sampled_from(["min", "max"])),
                            join=draw(st.sampled_from(["inner", "inner", "left", "right", "full"])))
    else:
        policy = PolicySpec("flink", watermark=watermark,
                            watermark_interval_us=draw(st.sampled_from([0, 0, 500, 3 * MS, 10 * MS])))
    return tables, windows, policy, keyed, draw(st.integers(1, 50)), draw(st.integers(1, 30)) * MS


@SETTINGS
@given(emulation_inputs())
def test_bounded_emulations_equal_in_memory_engine(problem):
    """spark-ss (inner and outer) and flink in chunks: micro-batches and watermark ticks cut
    by chunk boundaries, late rows, state carried between chunks, null-padded rows decided
    once their removal batch is complete -- the same results file row for row, report and
    policy_settings as in memory."""
    tables, windows, policy, keyed, chunk_rows, period = problem
    with tempfile.TemporaryDirectory() as tmp:
        assert_same(_config(Path(tmp), tables, windows, policy, keyed, period), chunk_rows)


def test_spark_ss_outer_row_evicted_in_a_batch_that_straddles_two_chunks(tmp_path):
    """A left row evicted at the end of its own batch (``ts`` at or below the state watermark,
    not late), whose partner arrives later in the same batch but in the next chunk: the pair is
    emitted and the row is never padded -- the bounded engine decides a padded row only once
    its removal batch is complete (and writes it in the in-memory order)."""
    MS = 1000
    left = pl.DataFrame({"ts": [50 * MS, 10 * MS], "arrival": [100, 1100], "payload": [0, 1]})
    right = pl.DataFrame({"ts": [50 * MS, 10 * MS], "arrival": [200, 1200], "payload": [0, 1]})
    policy = PolicySpec("spark-ss", watermark=(0, 0), trigger_us=MS, watermark_policy="min", join="left")
    cfg = _config(tmp_path, [(left, 1), (right, 1)], (0, 0), policy, False, MS)
    _, outcome, _, want_rows = in_memory(cfg)
    assert outcome.decisions.batches.removal[outcome.replay.index_of[0][1]] == 1   # evicted in its own batch
    assert want_rows.height == 2 and want_rows["s1_row"].null_count() == 0        # both rows matched
    assert_same(cfg, 1)


@SETTINGS
@given(emulation_inputs(sql=True))
def test_bounded_flink_sql_equals_in_memory_engine(problem):
    """flink-sql in chunks, inner and outer: the caches' facts from the first pass, the pairs
    chunk by chunk, each null-padded row in the chunk where it leaves its cache (from the
    join state or the pending pads) -- the same results file row for row (pairs and padded
    rows, emission times, order), memory after every arrival, report and policy_settings as
    in memory."""
    tables, windows, policy, keyed, chunk_rows, period = problem
    with tempfile.TemporaryDirectory() as tmp:
        assert_same(_config(Path(tmp), tables, windows, policy, keyed, period), chunk_rows)


@SETTINGS
@given(inputs())
def test_bounded_engine_equals_in_memory_engine(problem):
    tables, windows, policy, keyed, chunk_rows, period = problem
    with tempfile.TemporaryDirectory() as tmp:
        assert_same(_config(Path(tmp), tables, windows, policy, keyed, period), chunk_rows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs(n_streams=st.just(2)))
def test_chunk_of_one_tuple_and_chunk_bigger_than_input(problem):
    tables, windows, policy, keyed, _, period = problem
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(Path(tmp), tables, windows, policy, keyed, period)
        assert_same(cfg, 1)
        assert_same(cfg, 10_000)


def test_state_grows_with_the_disorder_span_not_with_the_input(tmp_path):
    """Four times the input (same rate, window and disorder): the state held
    between chunks stays the same size, while the input grows 4x."""
    from streamjoin.pipelines.tools.generate import generate

    peaks = {}
    for duration in (30, 120):
        out = tmp_path / str(duration)
        generate("bench", out, seed=3, duration_s=duration, scale=0.01 * duration / 30)  # same rate
        cfg = RunConfig(
            streams=tuple(StreamConfig(name=s, path=str(out / f"{s}.parquet"), ts="ts", arrival="arrival", unit="us",
                                       window_us=100_000, keys=("key",)) for s in ("left", "right")),
            policy=PolicySpec("static", retention=(50_000, 50_000)), out=tmp_path / "o", engine="local")
        sv, engine, report, _, _ = bounded(cfg, 2_000)
        peaks[duration] = (sv.rows, report["bounded"]["state_peak_tuples"], sv.chunks)
    (rows_short, state_short, chunks_short), (rows_long, state_long, chunks_long) = peaks[30], peaks[120]
    assert rows_long > 3.5 * rows_short and chunks_long > 3 * chunks_short
    assert state_long < 1.5 * state_short, peaks
    assert state_long < rows_long / 10  # a few seconds of input: window + disorder span, not the input


def test_cli_chunked_run_publishes_the_same_outputs(tmp_path):
    """Through the CLI: --chunk-rows N and --chunk-rows 0 write the same results and report numbers."""
    from helpers.cli import run_cli

    sample = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"
    mem, chunked = tmp_path / "mem", tmp_path / "chunked"
    for out, rows in ((mem, "0"), (chunked, "20000")):
        run_cli(["run", str(sample), "--engine", "local", "--policy", "mpkslack", "--chunk-rows", rows,
                 "--out", str(out)], tmp_path)
    a, b = pl.read_parquet(mem / "results.parquet"), pl.read_parquet(chunked / "results.parquet")
    assert a.height > 100_000 and a.equals(b)
    import json

    ra, rb = json.loads((mem / "report.json").read_text()), json.loads((chunked / "report.json").read_text())
    assert rb["bounded"]["chunks"] > 5 and "bounded" not in ra
    for key in ("truth_results", "emitted_results", "periods", "memory_tuples", "streams", "duplicates"):
        assert ra[key] == rb[key], key
    for name in ("temperature", "humidity"):
        qa = pl.read_parquet(mem / "quarantine" / f"{name}.parquet")
        qb = pl.read_parquet(chunked / "quarantine" / f"{name}.parquet")
        assert qa.height == qb.height > 0
    assert (chunked / "report.html").stat().st_size > 10_000


@pytest.mark.parametrize("args, message", [
    (["--chunk-rows", "-1"], "--chunk-rows"),
    (["--chunk-rows", "100", "--policy", "qjoin", "--recall", "0.9"], "runs in memory"),
])
def test_bad_chunk_rows(tmp_path, args, message):
    from helpers.cli import run_cli

    sample = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"
    res = run_cli(["run", str(sample), "--engine", "local", *args, "--out", str(tmp_path / "o")], tmp_path, ok=False)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error:") and message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_interrupted_chunked_run_publishes_nothing(tmp_path, monkeypatch):
    from streamjoin.pipelines.jobs import run as job
    from streamjoin.pipelines.config.settings import Flags, resolve

    sample = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"
    cfg = resolve(sample, Flags(engine="local", chunk_rows=20_000, out=str(tmp_path / "o"), policy="none"))

    def stop(done, chunks, seconds):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        job.run_job(cfg, on_chunk=stop)
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_pieces_keep_row_numbers_with_hive_partitions(tmp_path):
    """A stream split over hive partitions and row groups numbers its rows as the in-memory loader does."""
    root = tmp_path / "s0"
    rng = np.random.default_rng(1)
    for part in range(3):
        d = root / f"day={part}"
        d.mkdir(parents=True)
        ts = np.sort(rng.integers(part * 1000, part * 1000 + 1500, 300))
        pq.write_table(pa.table({"ts": ts, "arrival": ts + rng.integers(0, 400, 300), "k": rng.integers(0, 3, 300)}),
                       d / "a.parquet", row_group_size=64)
    other = tmp_path / "s1.parquet"
    ts = np.sort(rng.integers(0, 3500, 500))
    pq.write_table(pa.table({"ts": ts, "arrival": ts + rng.integers(0, 50, 500), "k": rng.integers(0, 3, 500)}), other,
                   row_group_size=50)
    cfg = RunConfig(streams=(StreamConfig("s0", str(root), "ts", "arrival", "us", 40, ("k",)),
                             StreamConfig("s1", str(other), "ts", "arrival", "us", 40, ("k",))),
                    policy=PolicySpec("kslack", k=(100, 100)), out=tmp_path / "o", engine="local")
    assert_same(cfg, 97)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.integers(-5, 40), st.integers(-10**12, 10**12)), max_size=30), max_size=5))
def test_tally_percentiles_and_histogram_equal_those_of_the_whole_column(parts):
    """Value counts merged chunk by chunk give the whole column's nearest-rank percentiles and histogram."""
    from streamjoin.pipelines.analysis.metrics import distribution
    from streamjoin.pipelines.report.build import latency_histogram
    from streamjoin.pipelines.base.tally import Tally

    tally = Tally()
    for p in parts:
        tally.add(np.asarray(p, dtype=np.int64))
    column = np.asarray([v for p in parts for v in p], dtype=np.int64)
    qs = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]
    assert tally.quantiles(qs) == distribution(column, qs)
    assert tally.n == len(column)
    if len(column) and column.min() >= 0:  # latencies are never negative
        assert tally.histogram(60) == latency_histogram(column)


def test_unit_check_is_one_of_the_whole_column(tmp_path):
    """The unit plausibility check sees a whole integer time column, not a
    row group: a relative clock's 0 in the first group keeps the later groups
    (epoch-ms-looking values under --unit us) from being refused, and a
    refusal names the whole column's years, as the in-memory loader does."""
    ts = np.r_[0, 1_600_000_000_000 + np.arange(9)].astype(np.int64)
    pq.write_table(pa.table({"ts": ts}), tmp_path / "a.parquet", row_group_size=2)
    cfg = StreamConfig("a", str(tmp_path / "a.parquet"), unit="us")
    sv = survey([cfg], 4, ANY_SHARE)
    assert sv.streams[0].rows == load_all([cfg])[0].rows == 10
    assert sum(len(b) for c in read_chunks(sv) for b in c.batches) == 10
    pq.write_table(pa.table({"ts": ts[1:] * 1000 + ts[1:] % 3 * 10**15}), tmp_path / "b.parquet",
                   row_group_size=2)
    bad = StreamConfig("b", str(tmp_path / "b.parquet"), unit="ns")
    with pytest.raises(InputError) as local:
        load_all([bad])
    with pytest.raises(InputError) as got:
        survey([bad], 4, ANY_SHARE)
    assert str(got.value) == str(local.value)


class _Read(Exception):
    pass


@pytest.mark.parametrize("chunk_rows", [0, 20_000])
@pytest.mark.parametrize("no_results, where, payload", [(True, None, False), (False, None, True),
                                                        (True, "temperature_value > 0", True)])
def test_in_memory_and_chunked_runs_read_the_payload_alike(tmp_path, monkeypatch, chunk_rows, no_results, where,
                                                           payload):
    """One rule (io.load.payload_needed) for both paths: the payload columns are read
    only for the results or --where (the run stops at its first read)."""
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.jobs import chunked
    from streamjoin.pipelines.jobs import run as job

    seen = []

    def spy(*a, payload=True, **k):
        seen.append(payload)
        raise _Read

    monkeypatch.setattr(chunked, "read_chunks", spy)
    monkeypatch.setattr(job, "load_all", spy)
    sample = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"
    cfg = resolve(sample, Flags(engine="local", chunk_rows=chunk_rows, out=str(tmp_path / "o"), policy="none",
                                no_results=no_results, where=where))
    with pytest.raises(_Read):
        job.run_job(cfg)
    assert seen == [payload]
    from dataclasses import replace

    from streamjoin.pipelines.io.load import payload_needed
    # the Spark engine alike: its tasks carry a payload only into the results they write
    assert payload_needed(cfg) == payload == payload_needed(replace(cfg, engine="spark"))
