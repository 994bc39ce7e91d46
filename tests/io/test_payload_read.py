"""``load_stream(..., payload=False)`` (issue 21): only the configured columns
are read, yet the times, keys, quarantine and ``row_bytes`` are those of the
whole-file read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.io.load import load_stream, unread_columns


def _write(tmp_path, extra: dict, null_ts: bool = False):
    n = 50
    ts = [1_700_000_000_000_000 + 1000 * i for i in range(n)]
    if null_ts:
        ts[7] = None
    cols = {"ts": pa.array(ts, pa.int64()), "arr": pa.array([t + 5 for t in range(n)], pa.int64()),
            "k": pa.array([i % 3 for i in range(n)], pa.int32())}
    cols.update({name: f(n) for name, f in extra.items()})
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table(cols), path)
    return StreamConfig("s", str(path), ts="ts", arrival="arr", unit="us", keys=("k",))


FIXED = {"value": lambda n: pa.array([0.5 * i for i in range(n)], pa.float64()),
         "flag": lambda n: pa.array([i % 2 == 0 for i in range(n)]),
         "small": lambda n: pa.array([None if i % 4 == 0 else i for i in range(n)], pa.int16())}


@pytest.mark.parametrize("null_ts", [False, True])
def test_projection_keeps_every_fact(tmp_path, null_ts):
    cfg = _write(tmp_path, FIXED, null_ts)
    assert unread_columns(cfg)[:2] == (["ts", "arr", "k"], (1 + 64) + (1 + 1) + (1 + 16))
    full, lean = load_stream(cfg), load_stream(cfg, payload=False)
    assert (full.ts == lean.ts).all() and (full.arrival == lean.arrival).all()
    assert full.keys.equals(lean.keys)
    assert full.row_bytes == lean.row_bytes
    assert full.quarantine.equals(lean.quarantine)   # with a bad row: every column, read after all
    assert full.quarantine.height == int(null_ts)
    assert lean.payload.columns == (full.payload.columns if null_ts else ["k"])


def test_variable_width_column_is_read(tmp_path):
    cfg = _write(tmp_path, {"name": lambda n: pa.array([f"x{i}" for i in range(n)])})
    assert unread_columns(cfg) is None
    assert load_stream(cfg, payload=False).row_bytes == load_stream(cfg).row_bytes


_TRUNCATED_WHILE_READ = """
import os, sys
import pyarrow.parquet as pq
from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.io.load import load_stream

path = sys.argv[1]
read = pq.ParquetFile.read
def read_after_truncation(self, *args, **kwargs):   # the producer rewrites the file in place meanwhile
    os.truncate(path, 4096)
    return read(self, *args, **kwargs)
pq.ParquetFile.read = read_after_truncation
try:
    load_stream(StreamConfig("s", path, ts="ts", arrival="arr", unit="us", keys=("k",)), payload=sys.argv[2] == "1")
except InputError as exc:
    print(exc)
    sys.exit(2)
"""


@pytest.mark.parametrize("payload", [True, False])
def test_file_truncated_while_read_is_bad_input_not_a_crash(tmp_path, payload):
    """A single file cut short while it is read (rewritten in place) is a one-line error,
    exit 2 -- never SIGBUS from a memory map whose pages vanished."""
    import subprocess
    import sys

    n = 200_000
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"ts": pa.array(range(1_700_000_000_000_000, 1_700_000_000_000_000 + n), pa.int64()),
                             "arr": pa.array(range(n), pa.int64()), "k": pa.array([i % 3 for i in range(n)], pa.int32()),
                             "value": pa.array([0.5 * i for i in range(n)], pa.float64())}), path)
    got = subprocess.run([sys.executable, "-c", _TRUNCATED_WHILE_READ, str(path), "1" if payload else "0"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 2, (got.returncode, got.stderr[-500:])
    assert "not a readable Parquet dataset" in got.stdout and str(path) in got.stdout


def test_distance_vectors_are_read(tmp_path):
    """The distance predicate's columns are configured columns: read, kept in ``vectors``
    and (as every column but the times) in the payload beside the keys."""
    cfg = _write(tmp_path, {"x": lambda n: pa.array([0.25 * i for i in range(n)], pa.float64()),
                            "value": lambda n: pa.array([1.5 * i for i in range(n)], pa.float64())})
    cfg = StreamConfig(cfg.name, cfg.path, ts="ts", arrival="arr", unit="us", keys=("k",), vectors=("x",))
    full, lean = load_stream(cfg), load_stream(cfg, payload=False)
    assert (full.vectors == lean.vectors).all() and full.row_bytes == lean.row_bytes
    assert lean.payload.columns == ["k", "x"]
