"""``mpkslack``: K grows to the largest delay seen so far (Mutschler & Philippsen).

``K_i(a)`` is the running maximum of ``delta(x)`` over stream ``i``'s tuples
with index ``<= a`` (0 before the stream's first tuple).  The buffer only ever
grows, so after the first long stall every later tuple waits that long too --
the latency cost QJoin-style policies are measured against.
"""

from __future__ import annotations

import numpy as np


def slack(replay, policy) -> np.ndarray:
    K = np.empty((replay.n, replay.N), dtype=np.int64)
    for i in range(replay.n):
        K[i] = slack_row(replay, i)
    return K


def slack_row(replay, i: int) -> np.ndarray:
    """Stream ``i``'s row of :func:`slack`."""
    if not replay.N:
        return np.zeros(0, np.int64)
    return np.maximum.accumulate(np.where(replay.stream == i, replay.delay, 0))
