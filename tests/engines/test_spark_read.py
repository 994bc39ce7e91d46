"""Issue 19: ``engines/spark/read.read_streams`` reads, validates and quarantines on the
executors exactly what ``io/load.load_all`` does on the driver.

* a hypothesis property on real Spark ``local[2]`` (files split into several tasks):
  the collected frame, sorted, equals load_all's columns (stream, row, ts, arrival,
  keys, payload) and the quarantine part files hold the local loader's rows;
* every bad-input case gives the local loader's one-line message;
* one run on ``local-cluster[2,1,1024]`` (separate executor JVMs and Python workers).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.engines.spark.read import read_streams
from streamjoin.pipelines.engines.spark.session import spark_session
from streamjoin.pipelines.io.load import load_all, reason_counts

#: small splits: a file's row groups are read by several tasks, so ``row`` needs the prefix count
SPLITS = [("spark.sql.files.maxPartitionBytes", "700"), ("spark.sql.files.openCostInBytes", "0"),
          ("spark.sql.shuffle.partitions", "2"), ("spark.driver.memory", "1g")]
EPOCH_US = 1_700_000_000_000_000
PER_US = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 1 / 1_000}


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 2, SPLITS) as s:
        yield s


def time_column(kind: str, us: np.ndarray, null: np.ndarray) -> pa.Array:
    """Times (us) as a Parquet column: ``int:<unit>`` integers or ``ts:<unit>`` timestamps."""
    form, unit = kind.split(":")
    raw = (us * 1000 if unit == "ns" else us // int(PER_US[unit])).astype(np.int64)
    t = pa.int64() if form == "int" else pa.timestamp(unit)
    return pa.array(raw, t, mask=null)


def key_column(kind: str, values: np.ndarray, null: np.ndarray) -> pa.Array:
    if kind == "str":
        return pa.array([f"k{v}" for v in values], pa.string(), mask=null)
    if kind == "float":
        return pa.array(values.astype(np.float64), mask=null)
    return pa.array(values.astype(np.int32), mask=null)


@st.composite
def stream_specs(draw, index: int, hive: bool):
    """One stream: its time kinds, files (rows each) and whether it has an arrival column."""
    units = ["ms", "us", "ns"]
    ts_kind = draw(st.sampled_from([f"int:{u}" for u in ("s", "ms", "us")] + [f"ts:{u}" for u in units]))
    # integer times share the stream's one declared unit
    arr_kind = draw(st.sampled_from([ts_kind] if ts_kind.startswith("int") else [f"ts:{u}" for u in units]))
    return dict(name="ab"[index] if not hive else "h", hive=hive, ts=ts_kind,
                arrival=draw(st.booleans()) and arr_kind, key=draw(st.sampled_from(["int", "float", "str"])),
                files=draw(st.lists(st.integers(0, 25), min_size=1, max_size=3)), seed=draw(st.integers(0, 2**16)),
                seen=draw(st.sampled_from(["ms", "us", "ms+UTC", "ns"])))


def write_stream(root: Path, spec: dict, key_kind: str) -> StreamConfig:
    """Parquet files of one stream (several row groups each) and its config."""
    rng = np.random.default_rng(spec["seed"])
    top = root / spec["name"]
    top.mkdir(parents=True)
    for i, n in enumerate(spec["files"]):
        step = {"int:s": 1_000_000, "int:ms": 1_000}.get(spec["ts"], 1)
        ts = EPOCH_US + np.sort(rng.integers(0, 5_000, n)) * step
        cols = {"ts": time_column(spec["ts"], ts, rng.random(n) < 0.1)}
        if spec["arrival"]:
            arr = ts + rng.integers(0, 3, n) * step
            cols["arr"] = time_column(spec["arrival"], arr, rng.random(n) < 0.1)
        cols["key"] = key_column(key_kind, rng.integers(0, 5, n), rng.random(n) < 0.1)
        cols["val"] = pa.array(rng.normal(size=n))
        cols["tag"] = pa.array([f"t{j}" for j in range(n)], pa.string())
        unit, _, tz = spec.get("seen", "us").partition("+")   # a payload timestamp
        cols["seen"] = pa.array(ts // int(PER_US[unit]) if unit != "ns" else ts * 1000, pa.timestamp(unit, tz or None),
                                mask=rng.random(n) < 0.1)
        where = top / f"day={i + 1}" if spec["hive"] else top
        where.mkdir(exist_ok=True)
        pq.write_table(pa.table(cols), where / f"part-{i}.parquet", row_group_size=4)
    unit = spec["ts"].split(":")[1] if spec["ts"].startswith("int") else None
    return StreamConfig(spec["name"], str(top), ts="ts", arrival="arr" if spec["arrival"] else None,
                        unit=unit, keys=("key",))


def expected_frame(streams) -> pl.DataFrame:
    """load_all's columns in read_streams' layout: per stream its own payload columns (null elsewhere)."""
    parts = []
    for i, s in enumerate(streams):
        parts.append(pl.concat([
            pl.DataFrame({"stream": np.full(s.rows, i, np.int32), "row": np.arange(s.rows, dtype=np.int64),
                          "ts": s.ts, "arrival": s.arrival}),
            s.keys, s.payload.rename({c: f"{s.name}_{c}" for c in s.payload.columns})], how="horizontal"))
    return pl.concat(parts, how="diagonal_relaxed").sort("stream", "row")


def raw_times(frame: pl.DataFrame, cfg: StreamConfig) -> pl.DataFrame:
    """The time columns and nanosecond timestamps as their raw counts (how Spark holds them)."""
    return frame.with_columns([pl.col(c).cast(pl.Int64) for c, t in frame.schema.items() if isinstance(t, pl.Datetime)
                               and (c in (cfg.ts, cfg.arrival) or t.time_unit == "ns")])


def assert_same_quarantine(local, facts) -> None:
    for s, f in zip(local, facts):
        assert f.reasons == reason_counts(s.quarantine)
        assert f.read == s.rows + s.quarantine.height and f.rows == s.rows
        if not s.quarantine.height:
            assert f.quarantine is None
            continue
        got = pl.read_parquet(str(f.quarantine / "*.parquet"))
        want = raw_times(s.quarantine, s.config)
        assert got.columns == want.columns
        got = got.cast(want.schema)
        assert got.sort(got.columns, nulls_last=True).equals(want.sort(want.columns, nulls_last=True))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=stream_specs(0, False), h=stream_specs(1, True), b=stream_specs(0, False),
       keys=st.sampled_from([("int", "int", "int"), ("int", "float", "int"), ("str", "str", "str")]),
       streams=st.integers(2, 3))
def test_read_streams_equals_load_all(spark, tmp_path_factory, a, h, b, keys, streams):
    root = tmp_path_factory.mktemp("read")
    b = dict(b, name="b")
    cfgs = [write_stream(root, spec, k) for spec, k in list(zip((a, h, b), keys))[:streams]]
    try:
        local = load_all(cfgs, max_quarantine=0.9)
    except InputError as exc:   # e.g. every row quarantined: the Spark reader says the same
        with pytest.raises(InputError) as got:
            read_streams(spark, cfgs, max_quarantine=0.9, quarantine_dir=root / "q")
        assert str(got.value) == str(exc)
        return
    got = read_streams(spark, cfgs, max_quarantine=0.9, quarantine_dir=root / "q")
    try:
        frame = pl.from_arrow(got.frame.toArrow()).sort("stream", "row")
        want = expected_frame(local)
        assert frame.columns == want.columns
        assert frame.equals(want.cast(frame.schema)), (frame, want)
        assert got.key_dtypes == [s.keys.schema["__key0"] for s in local][:1]
        assert_same_quarantine(local, got.streams)
        for s, f in zip(local, got.streams):
            assert f.files == s.files
            # counted batch by batch in the read's own pass; Spark's batches are not pyarrow's chunks
            assert f.row_bytes == s.row_bytes
            assert f.ts_range == ((int(s.ts.min()), int(s.ts.max())) if s.rows else None)
    finally:
        got.release()


def test_row_numbers_cross_tasks(spark, tmp_path):
    """A file split over several tasks (row groups of 4 rows, 700-byte splits): ``row``
    continues across the tasks, with quarantined rows in every task left out."""
    n = 400
    ts = EPOCH_US + np.arange(n)
    pq.write_table(pa.table({"ts": pa.array(ts, pa.timestamp("us"), mask=(np.arange(n) % 7 == 3)),
                             "v": pa.array(np.arange(n))}), tmp_path / "one.parquet", row_group_size=16)
    cfg = StreamConfig("s", str(tmp_path / "one.parquet"))
    got = read_streams(spark, [cfg], quarantine_dir=tmp_path / "q")
    frame = pl.from_arrow(got.frame.select("row", "s_v").toArrow()).sort("row")
    assert got.frame.rdd.getNumPartitions() > 1
    kept = np.arange(n)[np.arange(n) % 7 != 3]
    assert frame["row"].to_list() == list(range(len(kept))) and frame["s_v"].to_list() == kept.tolist()
    got.release()


def test_glob_hive_and_types(spark, tmp_path):
    """A glob over hive directories (partition columns from the whole path, as
    pyarrow's), and payload types Spark holds differently: a dictionary string key,
    uint32, date, float32, a time-zone-aware timestamp; integer ms times in another
    stream given by a glob of files."""
    import datetime

    n = 9
    for day in (1, 2):
        (tmp_path / f"h/day={day}").mkdir(parents=True)
        pq.write_table(pa.table({
            "ts": pa.array(EPOCH_US + np.arange(n) * 7 + day, pa.timestamp("us", tz="UTC"), mask=np.arange(n) == 4),
            "k": pa.array([f"s{i % 3}" for i in range(n)]).dictionary_encode(),
            "u": pa.array(np.arange(n), pa.uint32()), "b": pa.array([i % 2 == 0 for i in range(n)]),
            "dt": pa.array([datetime.date(2024, 1, 1 + i) for i in range(n)]),
            "seen": pa.array(EPOCH_US // 1000 + np.arange(n), pa.timestamp("ms", tz="Europe/Paris")),
            "f32": pa.array(np.arange(n), pa.float32())}), tmp_path / f"h/day={day}/x.parquet", row_group_size=3)
        pq.write_table(pa.table({"ts": pa.array(EPOCH_US // 1000 + np.arange(5), pa.int64()),
                                 "k": pa.array(["s1"] * 5)}), tmp_path / f"g{day}.parquet")
    cfgs = [StreamConfig("h", str(tmp_path / "h/*/*.parquet"), keys=("k",)),
            StreamConfig("g", str(tmp_path / "g*.parquet"), unit="ms", keys=("k",))]
    local = load_all(cfgs)
    got = read_streams(spark, cfgs, quarantine_dir=tmp_path / "q")
    frame = pl.from_arrow(got.frame.toArrow()).sort("stream", "row")
    want = expected_frame(local)
    assert frame.columns == want.columns and "h_day" in frame.columns
    assert frame.equals(want.cast(frame.schema))
    assert_same_quarantine(local, got.streams)
    # dictionary, unsigned, boolean, date and hive partition columns: the local loader's bytes per row
    assert [f.row_bytes for f in got.streams] == [s.row_bytes for s in local] and local[0].row_bytes > 0
    got.release()


# ---------------------------------------------------------------------------
# bad input: the local loader's one-line messages
# ---------------------------------------------------------------------------


def _ts(n=6, null=0):
    return pa.array(EPOCH_US + np.arange(n), pa.timestamp("us"), mask=np.arange(n) < null)


def case_missing_file(d):
    return [StreamConfig("a", str(d / "nope.parquet"))]


def case_missing_column(d):
    pq.write_table(pa.table({"time": _ts()}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_string_ts(d):
    pq.write_table(pa.table({"ts": pa.array(["x"] * 3)}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_integer_without_unit(d):
    pq.write_table(pa.table({"ts": pa.array([1, 2, 3])}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_implausible_unit(d):
    pq.write_table(pa.table({"ts": pa.array([1_700_000_000, 1_700_000_100])}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"), unit="ms")]


def case_schema_drift(d):
    (d / "a").mkdir()
    pq.write_table(pa.table({"ts": _ts()}), d / "a" / "0.parquet")
    pq.write_table(pa.table({"time": _ts()}), d / "a" / "1.parquet")
    return [StreamConfig("a", str(d / "a"))]


def case_type_drift(d):
    (d / "a").mkdir()
    pq.write_table(pa.table({"ts": _ts()}), d / "a" / "0.parquet")
    pq.write_table(pa.table({"ts": pa.array(["x"])}), d / "a" / "1.parquet")
    return [StreamConfig("a", str(d / "a"))]


def case_output_collision(d):
    pq.write_table(pa.table({"ts": _ts(), "row": pa.array(range(6))}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_too_many_quarantined(d):
    pq.write_table(pa.table({"ts": _ts(null=4)}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_all_quarantined(d):
    pq.write_table(pa.table({"ts": _ts(null=6)}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_key_types(d):
    pq.write_table(pa.table({"ts": _ts(), "k": pa.array(range(6))}), d / "a.parquet")
    pq.write_table(pa.table({"ts": _ts(), "k": pa.array([str(i) for i in range(6)])}), d / "b.parquet")
    return [StreamConfig("a", str(d / "a.parquet"), keys=("k",)), StreamConfig("b", str(d / "b.parquet"), keys=("k",))]


def case_inexact_float_key(d):
    pq.write_table(pa.table({"ts": _ts(), "k": pa.array(range(6))}), d / "a.parquet")
    pq.write_table(pa.table({"ts": _ts(), "k": pa.array([1.0, 2.5, 3.0, 0.25, 2.0**60, 1.0])}), d / "b.parquet")
    return [StreamConfig("a", str(d / "a.parquet"), keys=("k",)), StreamConfig("b", str(d / "b.parquet"), keys=("k",))]


def case_wide_keys(d):
    pq.write_table(pa.table({"ts": _ts(), "k": pa.array([-1] * 6)}), d / "a.parquet")
    pq.write_table(pa.table({"ts": _ts(), "k": pa.array([2**64 - 1] * 6, pa.uint64())}), d / "b.parquet")
    return [StreamConfig("a", str(d / "a.parquet"), keys=("k",)), StreamConfig("b", str(d / "b.parquet"), keys=("k",))]


def case_empty_file(d):
    (d / "a.parquet").write_bytes(b"")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_not_parquet(d):
    (d / "a.parquet").write_bytes(b"not parquet at all")
    return [StreamConfig("a", str(d / "a.parquet"))]


def case_string_vector(d):
    pq.write_table(pa.table({"ts": _ts(), "x": pa.array(["a"] * 6)}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"), vectors=("x",))]


def case_uint64_beyond_int64(d):
    ts = np.array([EPOCH_US + i for i in range(9)] + [2**63 + 5], np.uint64)
    pq.write_table(pa.table({"ts": pa.array(ts, pa.uint64())}), d / "a.parquet")
    return [StreamConfig("a", str(d / "a.parquet"), unit="us")]


CASES = [case_missing_file, case_missing_column, case_string_ts, case_integer_without_unit, case_implausible_unit,
         case_schema_drift, case_type_drift, case_output_collision, case_too_many_quarantined, case_all_quarantined,
         case_key_types, case_inexact_float_key, case_wide_keys, case_empty_file, case_not_parquet,
         case_string_vector, case_uint64_beyond_int64]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__[5:] for c in CASES])
def test_bad_input_same_message(spark, tmp_path, case):
    cfgs = case(tmp_path)
    with pytest.raises(InputError) as local:
        load_all(cfgs, max_quarantine=0.5)
    with pytest.raises(InputError) as got:
        read_streams(spark, cfgs, max_quarantine=0.5, quarantine_dir=tmp_path / "q")
    assert str(got.value) == str(local.value)
    assert "\n" not in str(got.value) and got.value.exit_code == 2   # the CLI prints it and exits 2
    assert not (tmp_path / "q").exists()   # refused before any quarantine is written


def test_unit_check_is_one_of_the_whole_column(spark, tmp_path):
    """A relative clock's 0 in one task keeps the other tasks' epoch-ms-looking
    values (under --unit us) from being refused: the local loader checks the
    whole column, and so does the driver's min/max (no check per batch)."""
    ts = np.r_[0, 1_600_000_000_000 + np.arange(399)].astype(np.int64)
    pq.write_table(pa.table({"ts": ts, "v": np.arange(400)}), tmp_path / "a.parquet", row_group_size=16)
    cfg = StreamConfig("a", str(tmp_path / "a.parquet"), unit="us")
    got = read_streams(spark, [cfg], quarantine_dir=tmp_path / "q")
    try:
        assert got.frame.rdd.getNumPartitions() > 1   # the 0 is in one task only
        assert got.streams[0].rows == load_all([cfg])[0].rows == 400
    finally:
        got.release()


def test_offsets_number_chunks_in_file_order_and_refuse_interleaved_ones():
    """``_offsets`` on constructed (file, task, least row, greatest row, kept, read) facts."""
    from streamjoin.pipelines.engines.spark.read import _offsets

    # file 0: task 1 rows 0..9 (8 kept), task 0 rows 10..19 (10 kept); file 1: task 0 rows 0..4 (5 kept)
    chunks = [(0, 0, 10, 19, 10, 10), (1, 0, 0, 4, 5, 5), (0, 1, 0, 9, 8, 10)]
    assert _offsets(chunks) == ([(0, 1, 0), (0, 0, 8), (1, 0, 18)], 23, 25)
    # task 0 read splits 0 and 2 of file 0 (rows 0..29), task 1 split 1 (rows 10..19): not numberable
    with pytest.raises(RuntimeError, match="interleaved"):
        _offsets([(0, 0, 0, 29, 20, 20), (0, 1, 10, 19, 10, 10)])
    # the same ranges in different files are fine
    assert _offsets([(0, 0, 0, 29, 20, 20), (1, 1, 10, 19, 10, 10)])[1:] == (30, 30)


def test_executor_input_error_is_one_line():
    """The backstop: an InputError raised on an executor reaches the driver as a
    PythonException with the worker's traceback; read_streams re-raises its line."""
    from pyspark.errors import PythonException

    from streamjoin.pipelines.engines.spark.read import executor_input_error

    exc = PythonException(message="An exception was thrown from the Python worker.\nTraceback (most recent call "
                                  "last):\n  File \"x.py\", line 1\nstreamjoin.pipelines.base.errors.InputError: "
                                  "a.parquet (stream 'a'): column 'ts' is bad\n")
    assert executor_input_error(exc) == "a.parquet (stream 'a'): column 'ts' is bad"
    assert executor_input_error(PythonException(message="ValueError: x")) is None
    assert executor_input_error(ValueError("InputError: x")) is None


# ---------------------------------------------------------------------------
# local-cluster: separate executor JVMs and Python workers
# ---------------------------------------------------------------------------

CLUSTER_SCRIPT = """
import sys
from pathlib import Path
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.engines.spark.read import read_streams
from streamjoin.pipelines.engines.spark.session import spark_session

root = Path(sys.argv[1])
cfgs = [StreamConfig("a", str(root / "a"), ts="ts", arrival="arr", unit="ms", keys=("key",)),
        StreamConfig("h", str(root / "h"), ts="ts", keys=("key",))]
with spark_session("local-cluster[2,1,1024]", 2, [("spark.sql.files.maxPartitionBytes", "700"),
                                                  ("spark.sql.files.openCostInBytes", "0")]) as spark:
    got = read_streams(spark, cfgs, max_quarantine=0.9, quarantine_dir=root / "q")
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    got.frame.write.parquet(str(root / "frame"))
    print(executors, got.streams[0].quarantine, got.streams[1].quarantine)
"""


def test_local_cluster(tmp_path):
    a = dict(name="a", hive=False, ts="int:ms", arrival="int:ms", key="int", files=[30, 17, 22], seed=3)
    h = dict(name="h", hive=True, ts="ts:ns", arrival=False, key="int", files=[25, 19], seed=4)
    cfgs = [write_stream(tmp_path, a, "int"), write_stream(tmp_path, h, "float")]
    local = load_all(cfgs, max_quarantine=0.9)
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    run = subprocess.run([sys.executable, "-c", CLUSTER_SCRIPT, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    executors = int(run.stdout.split()[0])
    assert executors == 2
    frame = pl.read_parquet(str(tmp_path / "frame" / "*.parquet")).sort("stream", "row")
    want = expected_frame(local)
    assert frame.columns == want.columns
    assert frame.equals(want.cast(frame.schema))
    for s in local:
        got = pl.read_parquet(str(tmp_path / "q" / f"{s.name}.parquet" / "*.parquet"))
        want_q = raw_times(s.quarantine, s.config)
        assert s.quarantine.height and got.height == s.quarantine.height
        got = got.cast(want_q.schema)
        assert got.sort(got.columns, nulls_last=True).equals(want_q.sort(want_q.columns, nulls_last=True))
