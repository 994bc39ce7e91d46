"""Join predicates beyond time windows (SPEC §3, condition 2).

* **keys** -- equality on one or more key columns (handled by enumeration).
* **distance** -- ``--distance x,y<=5000``: Euclidean distance ``<=`` the
  threshold between *every pair* of members on the named vector columns
  (present in every stream, in the columns' own units).  Enumeration uses a
  spatial grid (see :class:`~streamjoin.pipelines.replay.candidates.Space`).
* **where** -- ``--where "ball_z < 500 AND players_sensor_id <> 13"``: a
  SQL expression over *prefixed* columns, evaluated on candidates.  For every
  stream ``s``: ``s_<payload column>``, ``s_ts_us``, ``s_arrival_us``,
  ``s_row``.  It is parsed by polars' SQL expression parser
  (``pl.sql_expr``), so anything polars SQL accepts in a ``WHERE`` works:
  arithmetic, comparisons, ``AND``/``OR``/``NOT``, ``ABS``, ``SQRT``,
  ``IN (...)``, ``LIKE``, ``IS NULL``.  A null result counts as false.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..base.errors import InputError
from ..config.settings import RunConfig
from ..io.load import LoadedStream
from .candidates import Combos, Space

@dataclass(frozen=True)
class Where:
    """A compiled ``--where`` expression and the prefixed columns it reads."""

    text: str
    expr: pl.Expr
    columns: tuple[str, ...]


def compile_where(text: str, available: Sequence[str]) -> Where:
    """Parse ``text`` and check every column it names exists.

    Args:
        available: every prefixed column name a combination offers.
    """
    try:
        expr = pl.sql_expr(text)
    except Exception as exc:  # polars raises several error types for bad SQL
        raise InputError(f"--where {text!r}: not a valid SQL expression ({str(exc).splitlines()[0]})") from None
    names = tuple(dict.fromkeys(expr.meta.root_names()))
    missing = [c for c in names if c not in set(available)]
    if missing:
        raise InputError(f"--where {text!r}: unknown column {missing[0]!r} (columns are prefixed by stream name, "
                         f"e.g. {', '.join(list(available)[:4])})")
    return Where(text=text, expr=expr, columns=names)


def prefixed_columns(names: Sequence[str], payload_columns: Sequence[Sequence[str]]) -> list[str]:
    """Every column a ``--where`` expression may name."""
    out = []
    for name, cols in zip(names, payload_columns):
        out += [f"{name}_row", f"{name}_ts_us", f"{name}_arrival_us"] + [f"{name}_{c}" for c in cols]
    return out


def where_mask(where: Where, rows: Sequence[np.ndarray], names: Sequence[str], ts: Sequence[np.ndarray],
               arrival: Sequence[np.ndarray], payloads: Sequence[pl.DataFrame]) -> np.ndarray:
    """Evaluate ``where`` on candidate combinations; only the named columns are gathered."""
    cols = {}
    for col in where.columns:
        for k, name in enumerate(names):
            if not col.startswith(name + "_"):
                continue
            field = col[len(name) + 1:]
            r = rows[k]
            if field == "row":
                cols[col] = pl.Series(col, r.astype(np.int64))
            elif field == "ts_us":
                cols[col] = pl.Series(col, ts[k][r])
            elif field == "arrival_us":
                cols[col] = pl.Series(col, arrival[k][r])
            elif field in payloads[k].columns:
                cols[col] = payloads[k][field].gather(r).alias(col)
            else:
                continue
            break
    frame = pl.DataFrame(list(cols.values())) if cols else pl.DataFrame({"_": np.zeros(len(rows[0]))})
    mask = frame.select(where.expr.fill_null(False).alias("m"))["m"]
    if mask.len() == 1 and len(rows[0]) != 1:  # a constant expression
        return np.full(len(rows[0]), bool(mask[0]))
    return mask.to_numpy().astype(bool)


# ---------------------------------------------------------------------------
# the predicates of a run, over its loaded streams
# ---------------------------------------------------------------------------


def space_of(cfg: RunConfig, streams: list[LoadedStream]) -> Space | None:
    """The distance predicate over the loaded vector columns."""
    if cfg.distance is None:
        return None
    return Space([s.vectors for s in streams], cfg.distance.threshold)


def where_of(cfg: RunConfig, streams: list[LoadedStream]):
    """``--where`` compiled against the streams' prefixed columns, as a mask function."""
    if not cfg.where:
        return None
    names = [s.name for s in streams]
    payloads = [s.payload for s in streams]
    compiled = compile_where(cfg.where, prefixed_columns(names, [p.columns for p in payloads]))
    ts = [s.ts for s in streams]
    arrival = [s.arrival for s in streams]

    def mask(combos: Combos) -> np.ndarray:
        return where_mask(compiled, combos.rows, names, ts, arrival, payloads)

    return mask
