"""``none``: no slack at all (K = 0).

Every tuple older than the release horizon at its arrival is dropped as late:
the cheapest policy and the recall floor the others are measured against.
"""

from __future__ import annotations

import numpy as np


def slack(replay, policy) -> np.ndarray:
    """``K_i(a) = 0`` for every stream and index."""
    return np.zeros((replay.n, 1), dtype=np.int64)
