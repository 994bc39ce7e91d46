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
