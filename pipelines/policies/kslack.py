"""``kslack``: a fixed sort buffer of K per stream (Babu / Abadi K-slack).

A tuple waits until the release horizon ``R`` passes its timestamp; with
``K_i = K`` tuples delayed by at most ``K`` are never dropped.
"""

from __future__ import annotations

import numpy as np


def slack(replay, policy) -> np.ndarray:
    """``K_i(a) = policy.k[i]`` for every index."""
    return np.asarray(policy.k, dtype=np.int64).reshape(replay.n, 1)
