"""``io/load.normalise``'s quarantine: which rows, and each one's reason.

A row is quarantined when any check fails (a null or out-of-range time, a null
key, a null or NaN distance column) and its reason is the first failing check in
the order ts, arrival, keys, vectors.  ``normalise`` finds the rows with a
boolean column and builds the reasons' text only when some row fails (issue 21,
ninth pass); the reference below checks row by row in Python.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.timeunits import MAX_ABS_TS
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.io.columns import QUARANTINE_REASON
from streamjoin.pipelines.io.load import normalise

TIMES = st.one_of(st.none(), st.integers(-10**6, 10**6), st.sampled_from([MAX_ABS_TS + 1, -MAX_ABS_TS - 5, MAX_ABS_TS, -2**63, 2**63 - 1]))
KEYS = st.one_of(st.none(), st.integers(0, 3))
VECTORS = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=False, width=64))


def reference_reason(row: dict, cfg: StreamConfig) -> str | None:
    for col in (cfg.ts, cfg.arrival):
        v = row[col]
        if v is None:
            return f"null {col}"
        if abs(v) > MAX_ABS_TS:
            return f"{col} out of range"
    for k in cfg.keys:
        if row[k] is None:
            return f"null key {k}"
    for v in cfg.vectors:
        if row[v] is None or math.isnan(row[v]):
            return f"null {v}"
    return None


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({"ts": TIMES, "arrival": TIMES, "k": KEYS, "x": VECTORS}), max_size=30),
       with_key=st.booleans(), with_vector=st.booleans())
def test_quarantined_rows_and_reasons_are_the_first_failing_check(rows, with_key, with_vector):
    cfg = StreamConfig(name="s", path="s.parquet", ts="ts", arrival="arrival", unit="us",
                       keys=("k",) if with_key else (), vectors=("x",) if with_vector else ())
    table = pa.table({"ts": pa.array([r["ts"] for r in rows], pa.int64()),
                      "arrival": pa.array([r["arrival"] for r in rows], pa.int64()),
                      "k": pa.array([r["k"] for r in rows], pa.int64()),
                      "x": pa.array([r["x"] for r in rows], pa.float64())})
    part = normalise(table, cfg, check_units=False)
    want = [reference_reason(r, cfg) for r in rows]
    assert part.quarantine[QUARANTINE_REASON].to_list() == [w for w in want if w is not None]
    assert part.quarantine["ts"].to_list() == [r["ts"] for r, w in zip(rows, want) if w is not None]
    kept = [r for r, w in zip(rows, want) if w is None]
    assert part.ts.tolist() == [r["ts"] for r in kept]
    assert part.arrival.tolist() == [r["arrival"] for r in kept]
    assert (part.kept is None) == (len(kept) == len(rows))
    if part.kept is not None:
        assert part.kept.tolist() == [w is None for w in want]
    assert part.quarantine.height + len(part.ts) == len(rows)
    assert np.asarray(part.ts).dtype == np.int64


def test_the_smallest_int64_time_is_out_of_range_not_kept():
    """``abs(-2**63)`` wraps to itself in int64: the range check compares both bounds."""
    cfg = StreamConfig(name="s", path="s.parquet", ts="ts", arrival="arrival", unit="us")
    table = pa.table({"ts": pa.array([-2**63, 0, 5], pa.int64()), "arrival": pa.array([0, -2**63, 5], pa.int64())})
    part = normalise(table, cfg, check_units=False)
    assert part.quarantine[QUARANTINE_REASON].to_list() == ["ts out of range", "arrival out of range"]
    assert part.ts.tolist() == [5]
