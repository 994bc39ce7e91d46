"""replay/results.py: the columns and order of results.parquet, shared by every writer; and
io/results_file.py, which writes them in row groups."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.io.results_file import write_row_groups
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.emit import emission_order
from streamjoin.pipelines.replay.results import (emitted_frame, emitted_row_groups, member_columns, result_order,
                                                 results_frame, with_emission)


def _streams():
    a = SimpleNamespace(name="a", ts=np.array([10, 20, 30], np.int64), arrival=np.array([11, 21, 31], np.int64),
                        payload=pl.DataFrame({"v": [1.0, 2.0, 3.0]}))
    b = SimpleNamespace(name="b", ts=np.array([12, 25], np.int64), arrival=np.array([40, 26], np.int64),
                        payload=pl.DataFrame({"s": ["x", "y"]}))
    return [a, b]


def test_results_frame_columns_and_results_order():
    # three combinations given out of order: (a2,b1) and (a0,b0) share emit 40 but differ in last
    rows = [np.array([2, 0, 1], np.int32), np.array([1, 0, 1], np.int32)]
    emit_us = np.array([40, 40, 26], np.int64)
    last = np.array([4, 3, 2], np.int64)
    latency = np.array([9, 0, 0], np.int64)
    frame = results_frame(_streams(), rows, emit_us, last, latency)
    assert frame.columns == ["a_row", "a_ts_us", "a_arrival_us", "a_v", "b_row", "b_ts_us", "b_arrival_us", "b_s",
                             "emit_us", "latency_us"]
    assert frame["a_row"].to_list() == [1, 0, 2]  # emit 26, then emit 40 with last 3, then last 4
    assert frame["b_s"].to_list() == ["y", "x", "y"]
    assert frame["a_ts_us"].to_list() == [20, 10, 30]
    assert frame["latency_us"].to_list() == [0, 0, 9]
    assert frame["emit_us"].dtype == pl.Int64


def test_nightly_form_numbers_rows_in_their_day_and_dates_them():
    rows = [np.array([0, 2], np.int32), np.array([0, 1], np.int32)]
    day = (dt.date(2026, 11, 21) - dt.date(1970, 1, 1)).days
    frame = results_frame(_streams(), rows, np.array([40, 31], np.int64), np.array([3, 4], np.int64),
                          np.zeros(2, np.int64), row_numbers=[np.array([7, 8, 9]), np.array([5, 6])],
                          dates=[np.full(3, day), np.full(2, day)])
    assert frame.columns[:2] == ["a_date", "a_row"]
    assert frame["a_date"].to_list() == [dt.date(2026, 11, 21)] * 2
    assert frame["a_row"].to_list() == [9, 7] and frame["a_row"].dtype == pl.Int64


def test_chunk_frames_put_in_results_order_equal_the_ordered_frame():
    """The bounded engine's path (member columns, emission with __last, result_order)
    gives the same frame as results_frame."""
    streams = _streams()
    rows = [np.array([2, 0, 1], np.int32), np.array([1, 0, 1], np.int32)]
    emit_us, last, latency = np.array([40, 40, 26], np.int64), np.array([4, 3, 2], np.int64), np.array([9, 0, 0])
    members = pl.concat([member_columns(s.name, r, s.ts[r], s.arrival[r], s.payload[r]) for s, r in zip(streams, rows)],
                        how="horizontal")
    chunked = result_order(with_emission(members, emit_us, latency, last), ["a", "b"])
    assert chunked.equals(results_frame(streams, rows, emit_us, last, latency))


# --- issue 21: the results order by last member, and results.parquet in row groups ----------------

def _replay_indexes(arrivals: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """Per stream, each row's arrival index in replay order ``(arrival, stream, row)``;
    and the arrival time at each index (non-decreasing, ties common)."""
    keys = [(int(t), k, r) for k, a in enumerate(arrivals) for r, t in enumerate(a)]
    index = [np.empty(len(a), np.int64) for a in arrivals]
    for i, (_, k, r) in enumerate(sorted(keys)):
        index[k][r] = i
    return index, np.array(sorted(t for t, _, _ in keys), np.int64)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_emission_order_by_last_is_the_lexicographic_results_order(data):
    """``by_last`` (emission at the last member's arrival): the order by
    ``(last, rows)`` -- for two streams one int64 key -- equals ``np.lexsort``
    on (emission time, last, rows), with ties in arrival time and the
    combinations in any order; and a wrong promise (emission times not a
    non-decreasing function of ``last``) still gives the lexicographic order."""
    n = data.draw(st.integers(2, 3))
    sizes = [data.draw(st.integers(1, 6)) for _ in range(n)]
    arrivals = [np.array(data.draw(st.lists(st.integers(0, 5), min_size=m, max_size=m)), np.int64) for m in sizes]
    index, arrival = _replay_indexes(arrivals)
    tuples = data.draw(st.lists(st.tuples(*[st.integers(0, m - 1) for m in sizes]), max_size=40, unique=True))
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    rows = [np.array([t[k] for t in tuples], dtype=dtype) for k in range(n)]
    last = np.array([max(int(index[k][t[k]]) for k in range(n)) for t in tuples], np.int64)
    emit_us = arrival[last]
    want = np.lexsort([*reversed(rows), last, emit_us])
    assert np.array_equal(emission_order(emit_us, last, rows, by_last=True), want)
    wrong = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(tuples), max_size=len(tuples))), np.int64)
    assert np.array_equal(emission_order(wrong, last, rows, by_last=True),
                          np.lexsort([*reversed(rows), last, wrong]))


def _policies():
    return {
        "static": PolicySpec("static", retention=(3_000, 3_000)),
        "kslack": PolicySpec("kslack", k=(2_000, 2_000)),
        "flink": PolicySpec("flink", watermark=(2_000, 2_000), watermark_interval_us=0),
        "spark-ss-left": PolicySpec("spark-ss", watermark=(2_000, 2_000), trigger_us=4_000, watermark_policy="min",
                                    join="left"),
    }


def _problem(seed: int):
    """Two streams with jittered arrivals (whole ms: flink), a shared key and a payload of every common type."""
    rng = np.random.default_rng(seed)
    out = []
    for name, m in (("a", 60), ("b", 45)):
        ts = np.sort(rng.integers(0, 40, m)) * 1_000   # whole milliseconds (flink), ties in arrival
        arrival = ts + rng.integers(0, 6, m) * 1_000
        key = rng.integers(0, 3, m)
        payload = pl.DataFrame({
            "key": key,
            "f": rng.normal(size=m),
            "s": pl.Series([None if i % 7 == 0 else f"s{i}" for i in range(m)], dtype=pl.String),
            "b": rng.integers(0, 2, m).astype(bool),
            "i32": pl.Series(rng.integers(-5, 5, m), dtype=pl.Int32),
            "u32": pl.Series(rng.integers(0, 5, m), dtype=pl.UInt32),
            "d": pl.Series([dt.date(2026, 1, 1 + i % 28) for i in range(m)], dtype=pl.Date),
            "t": pl.Series(ts, dtype=pl.Int64).cast(pl.Datetime("us")),
        })
        out.append(SimpleNamespace(name=name, ts=ts.astype(np.int64), arrival=arrival.astype(np.int64),
                                   payload=payload, key=key))
    return out


@pytest.mark.parametrize("policy", list(_policies()))
def test_row_group_writer_writes_the_frame_writers_rows_in_results_order(tmp_path, policy):
    """results.parquet from ``write_row_groups(emitted_row_groups(...))`` (small
    row groups, so several) holds exactly the rows, columns and types of the
    whole frame written by polars (the writer before issue 21), read back by
    polars and by pyarrow, in results order: (emission time, last member's
    arrival index, member rows) by ``np.lexsort``."""
    streams = _problem(len(policy))
    spec = _policies()[policy]
    out = join([s.ts for s in streams], [s.arrival for s in streams],
               [pl.DataFrame({"__key0": s.key}) for s in streams], [5_000, 5_000], spec)
    em = out.emission
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    emitted_frame(out.combos, em, streams).write_parquet(old, compression="snappy")
    rows = write_row_groups(new, emitted_row_groups(out.combos, em, streams, rows_per_group=5))
    got, want = pl.read_parquet(new), pl.read_parquet(old)
    assert got.schema == want.schema and got.equals(want)
    assert rows == got.height and got.height > 10
    assert pq.read_schema(new).equals(pq.read_schema(old))
    assert pq.ParquetFile(new).metadata.num_row_groups == (-(-got.height // 5) if em.outer is None else 1)
    # the inner rows in results order, computed here from the emission
    mask = em.emitted
    r = [x[mask] for x in out.combos.rows]
    order = np.lexsort([r[1], r[0], em.last[mask], np.asarray(em.emit_us)[mask]])
    inner = got.filter(pl.col("a_row").is_not_null() & pl.col("b_row").is_not_null())
    assert inner["a_row"].to_list() == r[0][order].tolist()
    assert inner["b_row"].to_list() == r[1][order].tolist()
    assert got["emit_us"].is_sorted()


def test_row_group_writer_writes_an_empty_file_with_the_schema(tmp_path):
    streams = _problem(3)
    far = [s.ts + 10**9 * k for k, s in enumerate(streams)]   # no pair within the window
    out = join(far, [t + 1 for t in far], [None, None], [5_000, 5_000], _policies()["static"])
    path = tmp_path / "r.parquet"
    assert write_row_groups(path, emitted_row_groups(out.combos, out.emission, streams)) == 0
    frame = pl.read_parquet(path)
    assert frame.height == 0 and frame.schema == emitted_frame(out.combos, out.emission, streams).schema
