"""Key columns of different streams: one common type per key position, exact or refused.

Keys are matched by position and compared in one dtype.  The dtype is chosen
so that casting every stream's column to it changes no value (docs/semantics.md,
"Bad input"):

* one dtype everywhere: that dtype;
* strings and categoricals: String;
* floats of different widths: Float64 (float32 widens exactly);
* integers of any widths and signs: Int64 when every value fits, else UInt64
  when no value is negative, else refused (a negative key and one above
  2^63 - 1 have no common 64-bit type);
* integers and floats: every float must be a whole number of magnitude below
  2^53 (float32: 2^24) -- where each float is the one image of one integer --
  and then the integer rule applies; otherwise refused.  Comparing them as
  floats, as before, matched distinct integers above 2^53;
* anything else (a string against a number, decimals of different scales):
  refused.

The choice needs the values' range, so it works on :class:`KeyFacts` -- a
summary that one pass (or several pieces, merged) gathers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from ..base.errors import InputError
from ..config.settings import StreamConfig

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
#: floats compare exactly with integers only below 2^(significand bits) in magnitude
SIGNIFICAND_BITS = {pl.Float64: 53, pl.Float32: 24}


@dataclass(frozen=True)
class KeyFacts:
    """What choosing a common type needs of one key column's values."""

    dtype: pl.DataType
    lo: int | float | None = None   # smallest value (None: no rows)
    hi: int | float | None = None   # largest value
    inexact: float | None = None    # a float that is not a whole number below 2^53 (2^24) in magnitude

    @staticmethod
    def of(column: pl.Series) -> KeyFacts:
        if not column.len() or not column.dtype.is_numeric():
            return KeyFacts(column.dtype)
        inexact = None
        if column.dtype in SIGNIFICAND_BITS:
            limit = 2.0 ** SIGNIFICAND_BITS[column.dtype]
            bad = column.filter(~((column == column.floor()) & (column.abs() < limit)))
            inexact = float(bad[0]) if bad.len() else None
        return KeyFacts(column.dtype, column.min(), column.max(), inexact)

    def merge(self, other: KeyFacts) -> KeyFacts:
        """Facts of both pieces of one column (same dtype)."""
        def pick(f, a, b):
            return b if a is None else a if b is None else f(a, b)

        return KeyFacts(self.dtype, pick(min, self.lo, other.lo), pick(max, self.hi, other.hi),
                        self.inexact if self.inexact is not None else other.inexact)


def key_facts(keys: pl.DataFrame) -> list[KeyFacts]:
    """Facts of each key column (``__key0..``) of one stream."""
    return [KeyFacts.of(keys[c]) for c in keys.columns]


def merge_key_facts(a: list[KeyFacts] | None, b: list[KeyFacts]) -> list[KeyFacts]:
    return b if a is None else [x.merge(y) for x, y in zip(a, b)]


def _textual(d: pl.DataType) -> bool:
    return d == pl.String or isinstance(d, pl.Categorical)


def common_key_type(position: int, columns: Sequence[tuple[StreamConfig, KeyFacts]]) -> pl.DataType:
    """The dtype key position ``position`` (0-based) is compared in (see the module docstring)."""
    dtypes = [f.dtype for _, f in columns]

    def name(cfg: StreamConfig, f: KeyFacts) -> str:
        return f"{cfg.name}.{cfg.keys[position]} ({f.dtype})"

    everyone = ", ".join(name(c, f) for c, f in columns)
    where = f"key columns #{position + 1}"
    if len(set(dtypes)) == 1:
        return dtypes[0]
    if all(_textual(d) for d in dtypes):
        return pl.String
    if not all(d.is_integer() or d.is_float() for d in dtypes):
        raise InputError(f"{where} have incompatible types ({everyone}); expected the same kind of type in every stream")
    if all(d.is_float() for d in dtypes):
        return pl.Float64
    integer = next(name(c, f) for c, f in columns if f.dtype.is_integer())
    for cfg, f in columns:
        if f.inexact is not None:
            bits = SIGNIFICAND_BITS[f.dtype]
            raise InputError(f"{where}: {integer} and {name(cfg, f)} cannot be compared exactly: "
                             f"{cfg.name}.{cfg.keys[position]} holds {f.inexact!r}, not a whole number of "
                             f"magnitude below 2^{bits}; store the key as an integer in every stream")
    ranged = [(c, f) for c, f in columns if f.lo is not None]
    if not ranged:
        return pl.Int64
    lo_c, lo_f = min(ranged, key=lambda cf: cf[1].lo)
    hi_c, hi_f = max(ranged, key=lambda cf: cf[1].hi)
    if lo_f.lo >= INT64_MIN and hi_f.hi <= INT64_MAX:
        return pl.Int64
    if lo_f.lo >= 0:
        return pl.UInt64
    raise InputError(f"{where}: {name(hi_c, hi_f)} holds {int(hi_f.hi)} and {name(lo_c, lo_f)} holds "
                     f"{int(lo_f.lo)}: no 64-bit integer type holds both ({everyone}); "
                     f"use one signedness for the key in every stream")


def common_key_types(streams: Sequence[tuple[StreamConfig, list[KeyFacts]]]) -> list[pl.DataType]:
    """One dtype per key position that every stream's key column casts to exactly."""
    if not streams or not streams[0][1]:
        return []
    return [common_key_type(i, [(cfg, facts[i]) for cfg, facts in streams]) for i in range(len(streams[0][1]))]


def cast_keys(keys: pl.DataFrame, dtypes: Sequence[pl.DataType]) -> pl.DataFrame:
    """``keys`` in the common dtypes (a strict cast: the dtypes keep every value)."""
    if not dtypes or not keys.width:
        return keys
    return keys.with_columns([pl.col(f"__key{i}").cast(dt, strict=True) for i, dt in enumerate(dtypes)])


__all__ = ["KeyFacts", "cast_keys", "common_key_type", "common_key_types", "key_facts", "merge_key_facts"]
