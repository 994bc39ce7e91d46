"""Bounded join state: evict the oldest tuple when a buffer exceeds its size
(seed 002, QJoin §1.2 step 3; ``--capacity state=N``).

Symmetric family only (SPEC §4.1, ``static`` and ``qjoin``).  A tuple ``x``
of stream ``i`` is buffered over the arrival indexes ``[a_x, e_x)``, ``e_x``
its expiry index (:func:`~streamjoin.pipelines.replay.progress.expiry`; the
horizon does not depend on what the buffer holds).  With a cap ``N`` the
operator, processing tuple ``y`` at index ``a``, purges (step 2), probes
(step 3), inserts ``y`` (step 4) and then, if stream ``s(y)``'s buffer holds
more than ``N`` tuples, evicts the oldest one -- the earliest inserted still
buffered.  An evicted ``x`` is gone for every probe after ``a``: its expiry
index becomes ``a + 1`` (for memory, counted after each step, it is gone
from step ``a`` on).  Everything downstream (emission's closed form
``last < min_k max(e_k, a_k + 1)``, memory's difference arrays) takes the new
expiry indexes unchanged.

An insertion raises a buffer by one, so each insertion evicts at most one
tuple, and a tuple's natural expiry never comes before its insertion unless
it expired on arrival (never inserted).  One pass per stream in insertion
order with a pointer over the tuples sorted by natural expiry
(:func:`evict_oldest`, machine code: :mod:`.jit`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..base import jit


def evict_oldest(index_of: Sequence[np.ndarray], ends: Sequence[np.ndarray], cap: int
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per stream, in row order: the expiry indexes under the cap and whether
    the cap evicted the tuple.  ``index_of[i]``: arrival index of each row;
    ``ends[i]``: natural expiry index of each row."""
    kernel = compiled_kernel()
    new_ends, evicted = [], []
    for pos, end in zip(index_of, ends):
        order = np.argsort(pos, kind="stable")          # insertion order
        p = pos[order].astype(np.int64)
        e = end[order].astype(np.int64)
        by_end = np.argsort(e, kind="stable")
        ne, ev = kernel(p, e, by_end, cap)
        out_e = np.empty_like(end)
        out_e[order] = ne
        out_ev = np.empty(len(end), bool)
        out_ev[order] = ev
        new_ends.append(out_e)
        evicted.append(out_ev)
    return new_ends, evicted


def compiled_kernel():
    """The state cap's kernel (machine code, built once per machine: :mod:`.jit`)."""
    return jit.compiled(_evict_kernel, "Tuple((i8[:], b1[:]))(i8[:], i8[:], i8[:], i8)")


def _evict_kernel(p, e, by_end, cap):
    m = p.shape[0]
    new_e = e.copy()
    evicted = np.zeros(m, np.bool_)
    present = np.zeros(m, np.bool_)
    ptr = 0
    oldest = 0
    count = 0
    for k in range(m):
        a = p[k]
        # step 2: tuples whose horizon passed by a are purged (inserted ones only:
        # e <= a with p >= e means expired on arrival, never present)
        while ptr < m and e[by_end[ptr]] <= a:
            j = by_end[ptr]
            ptr += 1
            if present[j]:
                present[j] = False
                count -= 1
        if e[k] <= a:      # expired on arrival: joined, never inserted
            continue
        present[k] = True
        count += 1
        if count > cap:    # step 3 of seed 002: over the size, the oldest leaves
            while not present[oldest]:
                oldest += 1
            present[oldest] = False
            evicted[oldest] = True
            new_e[oldest] = a + 1
            count -= 1
    return new_e, evicted
