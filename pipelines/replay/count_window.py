"""Count windows ``S_i[N]``: a stream's window as its last ``N`` arrivals.

Seed 000 lets a window be time based ("the frames that arrived in the last
60 seconds") or count based ("the last 1000 frames"); its MJoin probes, for
each new tuple, the windows ``S_k[W_k]`` of the other streams as they stand
when the tuple arrives.  With a count window those are the last ``N_k``
tuples of stream ``k`` in the replay order (docs/semantics.md, "Count
windows").

Everything here is a statement about arrival indexes.  Let a count-window
tuple ``x`` of stream ``k`` be the ``r``-th arrival of its stream (0-based)
and ``A_k`` its stream's arrival indexes in ascending order.  ``x`` is in
``S_k[N_k]`` at index ``a`` iff ``a_x <= a < E(x)`` with the *count expiry*

    E(x) = A_k[r + N_k]      (the arrival that pushes x out; if none, the
                              replay's length L, ``replay.N``: never)

A combination is valid iff every count member ``x`` is still in its window
when the last member arrives, ``a_last < E(x)``, and every duration member
``t_k`` has ``max_ts - t_k.ts <= W_k`` (SPEC §3).  Both are pairwise:
``a_last < E(x)`` iff ``a_z < E(x)`` for every member ``z``, and the duration
bands are pairwise (:mod:`~streamjoin.pipelines.replay.candidates`).

:func:`enumerate_counted` grows combinations from an anchor stream with a
count window.  For each other stream ``k``, sorted by ``(key, arrival)``,
the partners of an anchor ``x`` lie in one contiguous range:

* upper end: ``a_z < E(x)`` -- an arrival bound;
* lower end, ``k`` counted: ``a_x < E(z)``, i.e. ``z`` is among the last
  ``N_k`` of its stream at ``a_x`` or arrives later -- an arrival bound;
* lower end, ``k`` a duration: ``z.ts >= x.ts - W_k``; every tuple before
  the first whose running maximum of ``ts`` (within the key) reaches the
  bound is below it, so the range starts there and the bound is then
  checked exactly (the extra candidates are those the disorder put in
  between).

Conditions between non-anchor members are checked after each stream is
added.  No per-tuple Python loop: searches, repeats and gathers on columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..base.sorting import GroupedCodes, gather_ranges
from .candidates import Combos, Space
from .progress import Replay


def arrival_order(replay: Replay, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Stream ``k``'s rows in arrival order, and their arrival indexes (ascending)."""
    a = replay.index_of[k]
    order = np.argsort(a, kind="stable")
    return order, a[order]


def count_expiry(replay: Replay, k: int, count: int) -> np.ndarray:
    """Per row of stream ``k`` (row order): ``E(x)``, the first arrival index
    at which the row is no longer among its stream's last ``count`` arrivals
    (the replay's length, ``replay.N``, if it still is at the end)."""
    order, sorted_a = arrival_order(replay, k)
    out = np.full(len(order), replay.N, dtype=np.int64)
    pushed = sorted_a[count:]                       # the arrival of rank r + count
    out[order[:len(pushed)]] = pushed
    return out


def with_count_expiry(ends: list[np.ndarray], replay: Replay, counts: Sequence[int | None]) -> list[np.ndarray]:
    """The symmetric family's expiry index (:func:`~streamjoin.pipelines.replay.progress.expiry`)
    with every count-window stream's replaced by its count expiry: such a
    buffer holds the stream's last ``N`` arrivals, whatever the horizon."""
    out = list(ends)
    for k, count in enumerate(counts):
        if count is not None:
            out[k] = count_expiry(replay, k, count).astype(ends[k].dtype)
    return out


def _grouped_search(group: np.ndarray, values: np.ndarray, q_group: np.ndarray, q_value: np.ndarray,
                    side: str) -> np.ndarray:
    """Per query, the position in ``(group, values)``-sorted rows (``values``
    non-decreasing within a group) of the first row of group ``q_group`` with
    ``value >= q_value`` (``side="left"``) or ``value > q_value`` (``"right"``);
    the group's end if none.  ``(group, value)`` packs into one int64
    (:class:`~streamjoin.pipelines.base.sorting.GroupedCodes`)."""
    if not len(values):
        return np.zeros(len(q_value), np.int64)
    gc = GroupedCodes(values, int(group[-1]) + 1)
    packed = group * gc.width + gc.codes(values)
    return np.searchsorted(packed, q_group * gc.width + gc.query(q_value, side), side="left")


class _Sorted:
    """One stream sorted by ``(key, arrival)``: rows, key ids, arrival indexes,
    event times and the running maximum of ``ts`` within each key."""

    def __init__(self, replay: Replay, k: int, key: np.ndarray):
        order, _ = arrival_order(replay, k)
        by_key = np.argsort(key[order], kind="stable")  # stable: arrival order within a key
        self.rows = order[by_key]
        self.key = key[self.rows]
        self.a = replay.index_of[k][self.rows].astype(np.int64)
        self.ts = replay.ts_of[k][self.rows]
        start = np.r_[True, self.key[1:] != self.key[:-1]] if len(self.rows) else np.zeros(0, bool)
        # running max within each key: lift each group above every earlier one, accumulate, lift back
        # (GroupedCodes: through the ranks of ts when span x keys could overflow int64)
        if len(self.rows):
            group = np.cumsum(start) - 1
            gc = GroupedCodes(self.ts, int(group[-1]) + 1)
            lifted = np.maximum.accumulate(gc.codes(self.ts) + group * gc.width) - group * gc.width
            self.ts_max = gc.decode(lifted)
        else:
            self.ts_max = self.ts


def enumerate_counted(replay: Replay, keys: list[np.ndarray] | None, windows: Sequence[int],
                      counts: Sequence[int | None], *, space: Space | None = None,
                      order: Sequence[int] | None = None) -> Combos:
    """Every valid combination when some streams have count windows.

    Args:
        replay: the replay order (arrival indexes per stream).
        keys: per stream, int64 key ids in row order
            (:func:`~streamjoin.pipelines.replay.candidates.key_ids`), or ``None``.
        windows: ``W_k`` (us) of the duration-window streams (ignored where counted).
        counts: ``N_k`` per stream, ``None`` for a duration window; at least one set.
        space: the distance predicate, if any.
        order: the streams after the anchor in the order they are added (default: by index).
    Returns: the combinations, rows per stream (int64).
    """
    n = replay.n
    counted = [k for k in range(n) if counts[k] is not None]
    if not counted:
        raise ValueError("enumerate_counted needs a count window")
    anchor = counted[0]
    ids = keys if keys is not None else [np.zeros(len(replay.index_of[k]), np.int64) for k in range(n)]
    expiry = {k: count_expiry(replay, k, counts[k]) for k in counted}
    sorted_a = {k: np.sort(replay.index_of[k]).astype(np.int64) for k in range(n)}
    rows: dict[int, np.ndarray] = {anchor: np.arange(len(replay.index_of[anchor]), dtype=np.int64)}
    rest = [k for k in (order if order is not None else range(n)) if k != anchor]
    for k in rest:
        x = rows[anchor]
        if not len(x) or not len(replay.index_of[k]):   # an empty stream: no combination at all
            rows = {j: r[:0] for j, r in rows.items()}
            rows[k] = np.empty(0, np.int64)
            continue
        st = _Sorted(replay, k, ids[k])
        qkey = ids[anchor][x]
        # the group of each query: key ids are compared through their position among stream k's keys
        ukeys = st.key[np.r_[True, st.key[1:] != st.key[:-1]]]   # sorted already
        gk = np.searchsorted(ukeys, st.key)
        qg = np.searchsorted(ukeys, qkey)
        present = (qg < len(ukeys)) & (ukeys[np.minimum(qg, max(len(ukeys) - 1, 0))] == qkey) if len(ukeys) \
            else np.zeros(len(x), bool)
        hi = _grouped_search(gk, st.a, qg, expiry[anchor][x], "left")          # a_z < E(x)
        a_x = replay.index_of[anchor][x].astype(np.int64)
        if counts[k] is not None:   # a_x < E(z): z's rank >= rank_k(a_x) - N_k
            first = np.searchsorted(sorted_a[k], a_x, side="right") - counts[k]
            lo_a = np.where(first <= 0, -1, sorted_a[k][np.maximum(first, 0)])
            lo = _grouped_search(gk, st.a, qg, lo_a, "left")
        else:                       # z.ts >= x.ts - W_k: from the first whose running max reaches it
            lo = _grouped_search(gk, st.ts_max, qg, replay.ts_of[anchor][x] - int(windows[k]), "left")
        lo = np.where(present, lo, 0)
        size = np.where(present, np.maximum(hi - lo, 0), 0)
        parent = np.repeat(np.arange(len(x), dtype=np.int64), size)
        member = gather_ranges(st.rows.astype(np.int64), lo.astype(np.int64), size)
        rows = {j: r[parent] for j, r in rows.items()}
        rows[k] = member
        keep = _pair_conditions(replay, windows, counts, expiry, rows, k, anchor, space)
        if keep is not None:
            rows = {j: r[keep] for j, r in rows.items()}
    return Combos([rows[k] for k in range(n)], replay.ts_of)


def _pair_conditions(replay: Replay, windows: Sequence[int], counts: Sequence[int | None],
                     expiry: dict[int, np.ndarray], rows: dict[int, np.ndarray], k: int, anchor: int,
                     space: Space | None) -> np.ndarray | None:
    """Mask of the combinations whose new member ``k`` meets every pairwise
    condition with the members already there (``None``: all do).  With the
    (counted) anchor only a duration ``k``'s ``ts`` bound is left to check:
    the range met the arrival bounds exactly."""
    keep = None

    def both(mask):
        nonlocal keep
        keep = mask if keep is None else keep & mask

    tk = replay.ts_of[k][rows[k]]
    ak = replay.index_of[k][rows[k]] if len(rows) > 2 else None   # only read against non-anchor members
    for j in rows:
        if j == k:
            continue
        tj = replay.ts_of[j][rows[j]]
        if space is not None:
            both(space.within(j, rows[j], k, rows[k]))
        if j == anchor:
            if counts[k] is None:
                both(tj - tk <= int(windows[k]))
            continue
        aj = replay.index_of[j][rows[j]]
        if counts[j] is None:
            both(tk - tj <= int(windows[j]))
        else:
            both(ak < expiry[j][rows[j]])
        if counts[k] is None:
            both(tj - tk <= int(windows[k]))
        else:
            both(aj < expiry[k][rows[k]])
    return keep
