"""replay/results.py: the columns and order of results.parquet, shared by every writer."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import numpy as np
import polars as pl

from streamjoin.pipelines.replay.results import member_columns, result_order, results_frame, with_emission


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
