"""io/parquet_footer: Parquet parts encoded by separate Arrow writers, joined under one
footer, are byte for byte the file one Arrow writer makes of the same tables in order
(the property results.parquet's two encoding threads rely on); and ResultsFile's
encoders neither hang nor leave the error behind when the first frame fails."""

from __future__ import annotations

import threading

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.io import parquet_footer as F
from streamjoin.pipelines.io.results_file import ResultsFile

OPTS = dict(compression="snappy", use_dictionary=False, write_statistics=True)


def _frame(rng: np.random.Generator, n: int) -> pl.DataFrame:
    return pl.DataFrame({
        "a_row": rng.integers(0, 100, n).astype(np.int32),
        "emit_us": np.sort(rng.integers(-10**12, 10**12, n)),
        "f": rng.normal(size=n),
        "s": pl.Series([None if i % 3 == 0 else f"x{rng.integers(0, 5)}" for i in range(n)], dtype=pl.String),
        "b": pl.Series([bool(x) for x in rng.integers(0, 2, n)], dtype=pl.Boolean),
    })


def _one_writer(tables: list[pa.Table], rows_per_group: int) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, tables[0].schema, **OPTS) as w:
        for t in tables:
            w.write_table(t, row_group_size=rows_per_group)
    return sink.getvalue().to_pybytes()


def _joined(tables: list[pa.Table], rows_per_group: int) -> bytes:
    out, groups, rows, first = bytearray(F.MAGIC), [], 0, None
    for t in tables:
        body, meta = F.split(_one_writer([t], rows_per_group))
        first = first or meta
        for g in F.row_groups(meta):
            groups.append(F.moved(g, len(out) - 4, len(groups)))
        rows += F.num_rows(meta)
        out += body
    return bytes(out + F.footer_of(first, groups, rows))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), rows_per_group=st.integers(1, 50),
       seed=st.integers(0, 2**32 - 1))
def test_parts_joined_are_one_writers_file(sizes, rows_per_group, seed):
    rng = np.random.default_rng(seed)
    tables = [_frame(rng, n).to_arrow() for n in sizes]
    ref = _one_writer(tables, rows_per_group)
    body, meta = F.split(ref)
    assert F.encode(meta) == ref[4 + len(body):-8]          # the footer decodes and re-encodes as it was
    assert _joined(tables, rows_per_group) == ref
    assert pq.read_table(pa.BufferReader(ref)).equals(pa.concat_tables(tables))


def test_many_row_groups_use_the_long_list_header():
    # more than 14 row groups: the Thrift list header carries the size in a varint
    tables = [_frame(np.random.default_rng(3), 40).to_arrow() for _ in range(3)]
    ref = _one_writer(tables, 2)
    assert pq.ParquetFile(pa.BufferReader(ref)).metadata.num_row_groups == 60
    assert _joined(tables, 2) == ref


def test_not_parquet_is_refused():
    with pytest.raises(ValueError, match="not a Parquet file"):
        F.split(b"PAR1 but not at the end")


@pytest.mark.parametrize("encoders", [1, 2])
def test_a_failing_first_frame_fails_the_writer_without_hanging(tmp_path, monkeypatch, encoders):
    from streamjoin.pipelines.io import results_file
    monkeypatch.setattr(results_file, "ENCODERS", encoders)

    def prepare(frame: pl.DataFrame) -> pl.DataFrame:
        if frame.height == 5:
            raise RuntimeError("first frame broken")
        return frame

    outcome: list[BaseException] = []

    def run() -> None:
        out = ResultsFile(tmp_path / "r.parquet", prepare=prepare)
        try:
            for n in (5, 6, 7, 8):
                out.write(_frame(np.random.default_rng(n), n))
            out.close()
        except RuntimeError as e:
            outcome.append(e)
            out.abort()

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "the writer hung waiting for the first frame's schema"
    assert [str(e) for e in outcome] == ["first frame broken"]



@pytest.mark.parametrize("encoders", [1, 2, 3])
@pytest.mark.parametrize("bound", [16, None])
def test_an_encoded_frame_past_its_buffer_goes_to_a_growing_one(tmp_path, monkeypatch, bound, encoders):
    # the fixed buffer's size is a bound guessed from the table; past it, the frame is
    # encoded again into a buffer that grows, and the file is still Arrow's -- with one
    # encoding thread or several (frames in flight at once, buffers reused)
    from streamjoin.pipelines.io import results_file
    monkeypatch.setattr(results_file, "ENCODERS", encoders)
    if bound is not None:
        monkeypatch.setattr(results_file, "_bound", lambda table: bound)
    frames = [_frame(np.random.default_rng(n), n) for n in (30, 0, 7, 12, 1, 25)]
    out = ResultsFile(tmp_path / "r.parquet")
    for f in frames:
        out.write(f)
    assert out.close() == 75
    assert (tmp_path / "r.parquet").read_bytes() == _one_writer([f.to_arrow() for f in frames], 1 << 20)
