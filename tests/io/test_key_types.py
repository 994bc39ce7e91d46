"""Key columns of different types compare exactly, or are refused (issue 22 item 6).

A property test against a brute-force join on the values themselves: Python
compares an ``int`` with a ``float`` exactly (``2**53 + 1 != 2.0**53``), so
``{(i, j): a[i] == b[j]}`` over the values as Python numbers is the exact
answer.  For every pair of key types and values near 0, 2^53, 2^63 and 2^64
streamjoin must either give exactly those pairs or refuse with
:class:`InputError` -- and it must refuse precisely when the rule of
docs/semantics.md ("Bad input", key types) says so:

* integer keys of any widths: refused only when some value is negative and
  some is above 2^63 - 1 (no 64-bit integer type holds both);
* integer against float keys: refused when a float is not a whole number of
  magnitude below 2^53 (float32: 2^24), or then by the integer rule;
* float against float: never (float32 widens to float64 exactly).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.io.load import load_all
from streamjoin.pipelines.policies import PolicySpec

DTYPES = {"int64": np.int64, "int32": np.int32, "uint64": np.uint64, "uint32": np.uint32,
          "float64": np.float64, "float32": np.float32}
LIMITS = {"int64": (-2**63, 2**63 - 1), "int32": (-2**31, 2**31 - 1), "uint64": (0, 2**64 - 1), "uint32": (0, 2**32 - 1)}
POLARS_NAME = {"int64": "Int64", "int32": "Int32", "uint64": "UInt64", "uint32": "UInt32",
               "float64": "Float64", "float32": "Float32"}
MANTISSA = {"float64": 53, "float32": 24}
PAIRS = [("int64", "float64"), ("uint64", "int64"), ("uint64", "float64"), ("int32", "uint64"),
         ("float32", "int64"), ("uint32", "float32"), ("float32", "float64"), ("uint64", "uint32")]

#: integers near the edges where 64-bit keys go wrong
EDGES = st.one_of(
    st.integers(-3, 3),
    st.integers(2**24 - 2, 2**24 + 2),
    st.integers(2**53 - 3, 2**53 + 3), st.integers(-2**53 - 3, -2**53 + 3),
    st.integers(2**63 - 3, 2**63 + 3), st.integers(-2**63, -2**63 + 2),
    st.integers(2**64 - 3, 2**64 - 1),
)


def value_of(dtype: str, base: int, half: bool):
    """``base`` as a value of ``dtype`` (None when it does not fit); floats may be off by a half."""
    if dtype in LIMITS:
        lo, hi = LIMITS[dtype]
        return int(base) if lo <= base <= hi else None
    value = DTYPES[dtype](float(base) + (0.5 if half else 0.0))
    return value if np.isfinite(value) else None


@st.composite
def key_columns(draw):
    ta, tb = draw(st.sampled_from(PAIRS))
    bases = draw(st.lists(EDGES, min_size=1, max_size=6))
    cols = []
    for dtype in (ta, tb):
        values = []
        for _ in range(draw(st.integers(1, 6))):
            base = draw(st.sampled_from(bases)) + draw(st.sampled_from([0, 0, 0, 1, -1]))
            v = value_of(dtype, base, draw(st.integers(0, 9)) == 0)
            if v is not None:
                values.append(v)
        if not values:
            values = [value_of(dtype, 1, False)]
        cols.append((dtype, values))
    return cols


def refused_by_rule(cols) -> bool:
    """docs/semantics.md's rule for a lossless common key type."""
    kinds = {"float" if dt in MANTISSA else "int" for dt, _ in cols}
    if len({dt for dt, _ in cols}) == 1 or kinds == {"float"}:
        return False
    numbers = []
    for dt, values in cols:
        for v in values:
            if dt in MANTISSA:
                f = float(v)
                if f != int(f) or abs(f) >= 2 ** MANTISSA[dt]:
                    return True
                numbers.append(int(f))
            else:
                numbers.append(int(v))
    return min(numbers) < 0 and max(numbers) > 2**63 - 1


def exact_pairs(a: list, b: list) -> set[tuple[int, int]]:
    """The brute-force answer: Python compares int and float exactly."""
    as_py = [[int(v) if isinstance(v, (int, np.integer)) else float(v) for v in col] for col in (a, b)]
    return {(i, j) for i, x in enumerate(as_py[0]) for j, y in enumerate(as_py[1]) if x == y}


def write(path: Path, dtype: str, values: list) -> StreamConfig:
    n = len(values)
    pl.DataFrame({"ts": np.zeros(n, np.int64), "k": pl.Series(np.array(values, dtype=DTYPES[dtype]))}).write_parquet(path)
    return StreamConfig(name=path.stem, path=str(path), unit="us", keys=("k",))


def streamjoin_pairs(configs: list[StreamConfig]) -> set[tuple[int, int]]:
    streams = load_all(configs)
    outcome = join([s.ts for s in streams], [s.arrival for s in streams], [s.keys for s in streams], (0, 0),
                   PolicySpec("none"))
    a, b = outcome.combos.rows
    return set(zip(a.tolist(), b.tolist()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(cols=key_columns())
def test_mixed_key_types_join_exactly_or_are_refused_by_the_rule(tmp_path: Path, cols) -> None:
    (ta, a), (tb, b) = cols
    configs = [write(tmp_path / "a.parquet", ta, a), write(tmp_path / "b.parquet", tb, b)]
    refused = refused_by_rule(cols)
    event(f"{ta}/{tb}: {'refused' if refused else 'joined'}")
    if refused:
        with pytest.raises(InputError) as err:
            load_all(configs)
        message = str(err.value)
        for needle in (f"a.k ({POLARS_NAME[ta]})", f"b.k ({POLARS_NAME[tb]})"):
            assert needle in message, (needle, message)
        return
    assert streamjoin_pairs(configs) == exact_pairs(a, b)


def test_int64_against_float64_above_2_53_is_refused_not_matched_as_floats(tmp_path: Path) -> None:
    """The gauntlet's case: distinct int64 keys above 2^53 all round to one float."""
    ints = [2**53 + i for i in range(4)]
    floats = [float(2**53), float(2**53 + 2)]
    configs = [write(tmp_path / "a.parquet", "int64", ints), write(tmp_path / "b.parquet", "float64", floats)]
    with pytest.raises(InputError, match=r"a\.k \(Int64\).*b\.k \(Float64\).*9007199254740992"):
        load_all(configs)


def test_uint64_above_2_63_joins_exactly_with_non_negative_int64(tmp_path: Path) -> None:
    big = [2**63 + 5, 2**64 - 1, 7]
    configs = [write(tmp_path / "a.parquet", "uint64", big), write(tmp_path / "b.parquet", "int64", [7, 2**63 - 1, 7])]
    assert streamjoin_pairs(configs) == {(2, 0), (2, 2)}


def test_uint64_keys_in_a_small_range_near_2_64_join(tmp_path: Path) -> None:
    """The dense-id shortcut for integer keys over a small range subtracts the
    minimum before narrowing to int64 (it used to cast 2^64 - 1 first and fail)."""
    values = [2**64 - 1, 2**64 - 2, 2**64 - 1]
    configs = [write(tmp_path / "a.parquet", "uint64", values), write(tmp_path / "b.parquet", "uint64", values[:2])]
    assert streamjoin_pairs(configs) == {(0, 0), (1, 1), (2, 0)}
