"""Exact quantiles of integer settings, overall and per period (SPEC §7's required
slacks; :mod:`.tuning`, :mod:`.hindsight`).

With ``C`` values and a target ``q``, the least setting meeting ``q`` is the
``m``-th smallest value, ``m`` = :func:`needed_count` -- the least count with
``m / C >= q`` in the same float comparison a report's recall makes.  Per
period: one stable sort of the values, then one of the period numbers
(:func:`~streamjoin.pipelines.base.sorting.stable_order` both times), and the
``m_p``-th value of each period's run -- O(C log C), never O(span / P).
"""

from __future__ import annotations

import math

import numpy as np

from ..base.sorting import stable_order


def needed_count(total: int, q: float) -> int:
    """Least ``m`` with ``m / total >= q`` in float arithmetic (0 when ``total`` is 0)."""
    if total == 0:
        return 0
    m = min(total, max(0, math.ceil(q * total)))
    while m < total and m / total < q:
        m += 1
    while m > 0 and (m - 1) / total >= q:
        m -= 1
    return m


def needed_counts(totals: np.ndarray, q: float) -> np.ndarray:
    """:func:`needed_count` of each total (int64), computed once per distinct total."""
    distinct, inverse = np.unique(np.asarray(totals, dtype=np.int64), return_inverse=True)
    return np.array([needed_count(int(t), q) for t in distinct], dtype=np.int64)[inverse.reshape(-1)]


def exact_quantile(values: np.ndarray, q: float) -> int:
    """The smallest setting ``s`` (us) with ``#{v <= s} / len >= q``."""
    m = needed_count(len(values), q)
    if m == 0:
        return 0
    return int(np.partition(values, m - 1)[m - 1])


def period_groups(pidx: np.ndarray, values: np.ndarray, by_value: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The values sorted by (period, value), and per period with values (in period order):
    its first position in that order, its size and its id.  O(C log C), never O(span / P).

    ``by_value``: the stable sort order of ``values`` when already known (several
    groupings of the same values sort them once)."""
    if by_value is None:
        by_value = stable_order(values)[0]
    order = by_value[stable_order(pidx[by_value])[0]]
    pv, pp = values[order], pidx[order]
    heads = np.flatnonzero(np.concatenate([[True], pp[1:] != pp[:-1]])) if len(pp) else np.empty(0, np.int64)
    sizes = np.diff(np.append(heads, len(pv)))
    return pv, heads, sizes, pp[heads]


def group_needs(pv: np.ndarray, heads: np.ndarray, sizes: np.ndarray, q: float) -> np.ndarray:
    """Per group of :func:`period_groups`: the exact least setting meeting ``q`` in it
    (its ``m``-th smallest value, :func:`needed_counts`)."""
    m = needed_counts(sizes, q)
    return np.where(m > 0, pv[heads + np.maximum(m - 1, 0)], 0) if len(pv) else np.empty(0, np.int64)
