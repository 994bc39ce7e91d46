"""Emission: which valid combinations an online operator outputs, and when.

The per-arrival replay (``reference.py``) walks buffers tuple by tuple; this
module gets the same answer from the SPEC's closed forms, one column
operation per condition.  For a valid combination ``c`` let ``y`` be its
last-arriving member (largest arrival index ``a_y``):

* **symmetric family** (SPEC §4.1) -- ``c`` is emitted at ``arrival[a_y]``
  with latency 0 iff every *other* member ``x`` was still buffered when ``y``
  arrived::

      x.ts + W_{s(x)} >= H_{s(x)}(a_y)

  (an ``x`` expired on arrival fails this too, as ``H`` never decreases).

* **sorting family** (SPEC §4.2) -- ``c`` is emitted iff no member was
  dropped as late; it leaves the in-order join when its last member is
  released::

      emit_time = arrival[max_members rel]     (rel = N -> last arrival)
      latency   = emit_time - arrival[a_y]

Worked example (sorting, K = 0): ``x = (S0, ts 10)`` arrives at ``a = 0``,
``y = (S1, ts 12)`` at ``a = 1``; ``R(1) = min(10, 12) = 10`` releases ``x``
at 1, ``y`` waits for ``S0`` to pass 12, say at ``a = 5``: the pair is
emitted at ``arrival[5]`` with latency ``arrival[5] - arrival[1]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .candidates import Combos
from .policies import SYMMETRIC
from .progress import Decisions, Replay


@dataclass
class Emission:
    """Per valid combination (parallel to :class:`~streamjoin.pipelines.candidates.Combos`).

    ``a[k]``: arrival index of member ``k``; ``last``: the last-arriving
    member's index; ``emitted``: the mask; ``emit_us`` / ``latency_us``:
    meaningful only where ``emitted`` (computed for all rows to avoid copies).
    """

    a: list[np.ndarray]
    last: np.ndarray
    emitted: np.ndarray
    emit_us: np.ndarray
    latency_us: np.ndarray


def emission(combos: Combos, replay: Replay, windows: Sequence[int], decisions: Decisions) -> Emission:
    """Apply the closed forms to every valid combination."""
    n = replay.n
    N = replay.N
    W = np.asarray(windows, dtype=np.int64)
    a = [replay.index_of[k][combos.rows[k]] for k in range(n)]
    last = np.maximum.reduce(a) if len(combos) else np.empty(0, np.int64)
    emitted = np.ones(len(combos), dtype=bool)
    if decisions.family == SYMMETRIC:
        for k in range(n):
            still_buffered = combos.ts(k) + W[k] >= decisions.H[k][last]
            emitted &= (a[k] == last) | still_buffered
        emit_index = last
    else:
        for k in range(n):
            emitted &= ~decisions.dropped[a[k]]
        # rel = N means "flushed at end of input": emitted at the last arrival.
        emit_index = np.maximum.reduce([decisions.release[a[k]] for k in range(n)]) if len(combos) else last
        np.minimum(emit_index, N - 1, out=emit_index)
    emit_us = replay.arrival[emit_index]
    if decisions.family == SYMMETRIC:
        latency = np.zeros(len(last), dtype=np.int64)  # emitted the moment the last member arrives
    else:
        latency = emit_us - replay.arrival[last]
    return Emission(a=a, last=last, emitted=emitted, emit_us=emit_us, latency_us=latency)
