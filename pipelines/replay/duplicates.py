"""Duplicate check of emitted combinations (SPEC §9: ``duplicates`` must be 0).

Engines produce each valid combination once (theorems A and C for the
routers); the report counts the emitted combinations that occur more than
once so that a broken engine shows up in ``report.json``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..base.sorting import PACK_LIMIT, sort_values


def count_duplicates(rows: list[np.ndarray], sizes: list[int], mask: np.ndarray | None = None) -> int:
    """Emitted combinations that occur more than once (must be 0).

    ``mask``: count over ``[r[mask] for r in rows]`` only (without copying).

    Exact, and usually without sorting every combination: engines produce
    combinations in runs -- all combinations of one anchor tuple together
    (local truth: the anchor stream's rows; a CTR partition: each prober's),
    the other members in increasing rows within a run.  Member by member,
    a row value that heads a single run whose other members strictly
    increase cannot occur in a duplicate (a duplicate has the same value,
    so it would be in that run); the combinations of every other value are
    kept, and that set is closed under duplication, so the next member
    looks only at it (:func:`_unsettled`).  What no member settles is
    counted by sorting packed codes (:func:`_duplicates_of_all`).
    """
    if not len(rows[0]) or (mask is not None and not mask.any()):
        return 0
    pick = None                      # the combinations still in question (None: all)
    for g in range(len(rows)) if len(rows) >= 2 else ():
        sub = rows if pick is None else [r[pick] for r in rows]
        keep = _unsettled(sub, sizes, g)
        if keep is None:
            continue
        pick = np.flatnonzero(keep) if pick is None else pick[keep]
        if not len(pick):
            return 0
    if pick is not None and mask is not None:
        pick = pick[mask[pick]]
    elif pick is None and mask is not None:
        pick = np.flatnonzero(mask)
    sub = rows if pick is None else [r[pick] for r in rows]
    return _duplicates_of_all(sub, sizes) if len(sub[0]) else 0


def _unsettled(rows: list[np.ndarray], sizes: list[int], g: int) -> np.ndarray | None:
    """Which combinations member ``g``'s runs leave in question (see
    :func:`count_duplicates`): those whose ``g`` row heads more than one run,
    or a run whose other members do not strictly increase.  ``None`` if the
    rows are not small non-negative ints, or if most runs are of values that
    head several (``g`` does not structure them: a CTR partition's pairs
    probed by the other stream), so that nearly everything would stay in
    question."""
    r = rows[g]
    size = max(sizes[g], 1)
    if not _runs_look_distinct(r) or not 0 <= int(r.min()) <= int(r.max()) < size:
        return None
    others = [rows[k] for k in range(len(rows)) if k != g]
    other = others[0] if len(others) == 1 else _pack(others, [sizes[k] for k in range(len(rows)) if k != g])
    if other is None:
        return None
    change = r[1:] != r[:-1]                        # change[i]: a run starts at i + 1
    heads = np.bincount(r[1:][change], minlength=size)
    heads[r[0]] += 1
    unsettled = heads > 1                           # per row value
    if int(heads[unsettled].sum()) * 2 > int(np.count_nonzero(change)) + 1:
        return None  # most runs share their value with another run: g does not structure these
    del heads
    # a step inside a run whose other members do not increase: its value is in question
    unordered = other[1:] <= other[:-1]
    unordered &= ~change
    del change
    unsettled[r[1:][unordered]] = True
    del unordered
    return unsettled[r]


def _runs_look_distinct(r: np.ndarray, slices: int = 8, width: int = 8192) -> bool:
    """A cheap look before :func:`_unsettled`'s full pass: in a few evenly
    spread slices, are there about as many distinct values as runs?  (Only
    a shortcut: the full pass decides, and what it leaves is sorted.)"""
    if len(r) <= slices * width:
        return True
    runs = distinct = 0
    for start in np.linspace(0, len(r) - width, slices).astype(np.int64).tolist():
        part = r[start:start + width]
        runs += int(np.count_nonzero(part[1:] != part[:-1])) + 1
        distinct += len(np.unique(part))
    return runs <= 1.25 * distinct


def _pack(rows: list[np.ndarray], sizes: list[int]) -> np.ndarray | None:
    """One int64 per combination (a mixed-radix number), or None if it would overflow."""
    capacity = 1
    for size in sizes:
        capacity *= max(size, 1)
    if capacity >= PACK_LIMIT:
        return None
    code = rows[0].astype(np.int64)
    for r, size in zip(rows[1:], sizes[1:]):
        code *= max(size, 1)
        code += r
    return code


def _duplicates_of_all(rows: list[np.ndarray], sizes: list[int]) -> int:
    code = _pack(rows, sizes)  # exact packing: one int64 per combination, built in place
    if code is not None:
        # equal codes are adjacent once sorted: a value sort of the (fresh)
        # packed array is ~3x faster than hashing it (8.1M: 0.10 vs 0.30 s)
        sort_values(code)
        return int(np.count_nonzero(code[1:] == code[:-1]))
    unique = pl.DataFrame({f"r{k}": r for k, r in enumerate(rows)}).n_unique()
    return len(rows[0]) - unique
