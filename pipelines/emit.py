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

import numpy as np
import polars as pl

from .policies import SYMMETRIC
from .progress import Decisions, Replay


def emission(combos: pl.DataFrame, replay: Replay, windows: Sequence[int], decisions: Decisions) -> pl.DataFrame:
    """Add ``a{k}`` (arrival indexes), ``last``, ``emitted``, ``emit_us`` and ``latency_us``.

    Args:
        combos: truth from :func:`~streamjoin.pipelines.candidates.enumerate_truth`.
    Returns: ``combos`` with the new columns; emission columns are null where
    the combination was not emitted.
    """
    n = replay.n
    N = replay.N
    W = np.asarray(windows, dtype=np.int64)
    a = [replay.index_of[k][combos[f"r{k}"].to_numpy()] for k in range(n)]
    last = np.maximum.reduce(a) if n > 1 else a[0]
    if decisions.family == SYMMETRIC:
        emitted = np.ones(len(last), dtype=bool)
        for k in range(n):
            still_buffered = combos[f"t{k}"].to_numpy() + W[k] >= decisions.H[k][last]
            emitted &= (a[k] == last) | still_buffered
        emit_index = last
    else:
        emitted = np.ones(len(last), dtype=bool)
        rel = []
        for k in range(n):
            emitted &= ~decisions.dropped[a[k]]
            rel.append(decisions.release[a[k]])
        # rel = N means "flushed at end of input": emitted at the last arrival.
        emit_index = np.minimum(np.maximum.reduce(rel), N - 1) if len(last) else last
    emit_us = replay.arrival[emit_index] if len(last) else np.empty(0, np.int64)
    latency = emit_us - replay.arrival[last] if len(last) else np.empty(0, np.int64)
    return combos.with_columns(
        [pl.Series(f"a{k}", a[k]) for k in range(n)]
        + [
            pl.Series("last", last, dtype=pl.Int64),
            pl.Series("emitted", emitted),
            pl.when(pl.Series(emitted)).then(pl.Series(emit_us, dtype=pl.Int64)).alias("emit_us"),
            pl.when(pl.Series(emitted)).then(pl.Series(latency, dtype=pl.Int64)).alias("latency_us"),
        ]
    )
