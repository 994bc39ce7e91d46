"""Time columns become int64 microseconds exactly as Arrow's own cast gives them (issue 21).

``io/load.py`` converts ``ts`` / ``arrival`` without ``pyarrow.compute`` (importing
it costs ~0.1 s CPU of every run).  The reference here is the conversion it
replaced: ``pyarrow.compute.cast`` to int64, then the unit's scale (times 10^k
with out-of-range values nulled, or floor division).  A property test compares
the two on random columns of every timestamp unit (with and without a time
zone) and every integer type, with nulls, in several chunks; then a fresh
process that loads a stream must not have imported ``pyarrow.compute``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.base.timeunits import MAX_ABS_TS
from streamjoin.pipelines.io.load import to_micros

SCALE = {"s": (1_000_000, 1), "ms": (1_000, 1), "us": (1, 1), "ns": (1, 1_000), "ps": (1, 1_000_000)}
INTS = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
        "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64()}


def reference(col: pa.ChunkedArray, unit: str) -> list[int | None]:
    """The old conversion, value by value: Arrow's cast to int64, then the unit's scale."""
    raw = pc.cast(col, pa.int64()).to_pylist()
    mul, div = SCALE[unit]
    out = []
    for v in raw:
        if v is None or (mul != 1 and abs(v) > MAX_ABS_TS // mul):
            out.append(None)
        else:
            out.append(v * mul // div)
    return out


@st.composite
def columns(draw):
    kind = draw(st.sampled_from(["timestamp", "integer"]))
    if kind == "timestamp":
        unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
        tz = draw(st.sampled_from([None, "UTC", "Europe/Paris"]))
        typ = pa.timestamp(unit, tz=tz)
        lo, hi = -(2**62), 2**62
    else:
        typ = INTS[draw(st.sampled_from(sorted(INTS)))]
        unit = draw(st.sampled_from(sorted(SCALE)))
        info = np.iinfo(typ.to_pandas_dtype())
        lo, hi = int(info.min), min(int(info.max), 2**63 - 1)
    chunks = draw(st.lists(st.lists(st.one_of(st.none(), st.integers(lo, hi)), max_size=20), min_size=1, max_size=4))
    return pa.chunked_array([pa.array(c, type=typ) for c in chunks], type=typ), unit


@settings(max_examples=200, deadline=None)
@given(columns())
def test_times_equal_arrows_cast_then_scale(case) -> None:
    col, unit = case
    if pa.types.is_integer(col.type):
        try:
            got = to_micros(col, "t", unit, "f.parquet")
        except InputError as exc:   # integers that look like another epoch unit: the check is unchanged
            assert "looks like epoch" in str(exc)
            return
    else:
        got = to_micros(col, "t", None, "f.parquet")
        unit = col.type.unit
    assert got.dtype.is_integer() and str(got.dtype) == "Int64"
    assert got.to_list() == reference(col, unit)


def test_an_unsigned_time_past_int64_is_bad_input_naming_the_column() -> None:
    col = pa.chunked_array([pa.array([1, 2**63], type=pa.uint64())])
    with pytest.raises(InputError, match=r"f\.parquet: column 't' \(uint64\) has values beyond the int64 range"):
        to_micros(col, "t", "us", "f.parquet")


def test_loading_a_stream_does_not_import_pyarrow_compute(tmp_path: Path) -> None:
    pq.write_table(pa.table({"ts": pa.array([1, 2, None], pa.timestamp("ms")), "k": [1, 1, 2],
                             "arrival": pa.array([5, 6, 7], pa.int64())}), tmp_path / "s.parquet")
    code = f"""
import sys
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.io.load import load_stream
s = load_stream(StreamConfig(name="s", path={str(tmp_path / 's.parquet')!r}, ts="ts", arrival="arrival", unit="ms",
                             keys=("k",), window_us=1000))
assert s.ts.tolist() == [1000, 2000] and s.arrival.tolist() == [5000, 6000], (s.ts, s.arrival)
assert s.quarantine.height == 1
print("pyarrow.compute" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_quarantined_arrivals_are_read_in_the_columns_unit_not_their_own(tmp_path: Path) -> None:
    """Review: bad_arrivals_of re-checked the unit on the quarantined rows only; two
    arrivals ~1.6e12 us look like epoch ms on their own, the InputError was swallowed
    and both were dropped (the bad-rows trigger of qjoin / qkslack never saw them)."""
    from streamjoin.pipelines.config.settings import StreamConfig
    from streamjoin.pipelines.io.load import bad_arrivals_of, load_stream

    kept = np.arange(20, dtype=np.int64) * 1_000_000
    bad = np.array([1_600_000_000_000, 1_600_000_000_500], dtype=np.int64)
    table = pa.table({"ts": pa.array(list(kept) + [None, None], pa.int64()),
                      "arr": pa.array(np.concatenate([kept, bad])), "k": pa.array([1] * 22)})
    pq.write_table(table, tmp_path / "a.parquet")
    cfg = StreamConfig("a", str(tmp_path / "a.parquet"), ts="ts", arrival="arr", unit="us", keys=("k",),
                       window_us=1000)
    stream = load_stream(cfg, max_quarantine=None)
    assert stream.quarantine.height == 2
    (got,) = bad_arrivals_of([stream])
    assert got.tolist() == bad.tolist()


def test_the_bounded_survey_reports_the_first_bad_time_column_as_the_loader_does(tmp_path: Path) -> None:
    """Review: with ts in the wrong unit and an arrival past int64, the in-memory loader
    names ts's unit (it checks ts, then arrival); the bounded engine's survey named
    arrival's int64 range first."""
    from streamjoin.pipelines.config.settings import StreamConfig
    from streamjoin.pipelines.io.chunks import survey
    from streamjoin.pipelines.io.load import load_stream

    ts = [1_600_000_000_000 + i for i in range(20)]   # epoch ms, declared us
    arr = pa.array(ts[:-1] + [2**63 + 5], pa.uint64())
    pq.write_table(pa.table({"ts": pa.array(ts, pa.int64()), "arr": arr, "k": pa.array([1] * 20)}),
                   tmp_path / "a.parquet", row_group_size=5)
    cfg = StreamConfig("a", str(tmp_path / "a.parquet"), ts="ts", arrival="arr", unit="us", keys=("k",),
                       window_us=1000)
    with pytest.raises(InputError) as local:
        load_stream(cfg)
    with pytest.raises(InputError) as bounded:
        survey([cfg], chunk_rows=5)
    assert "looks like epoch" in str(local.value) and "'ts'" in str(local.value)
    assert str(bounded.value) == str(local.value)
