"""``static``: symmetric join with a fixed retention ``d_i`` per stream.

Stream ``i``'s state horizon trails the frontier by ``d_i``:
``H_i(a) = T(a) - d_i`` (the frontier never decreases, so neither does
``H_i``).  A buffered tuple leaves once ``ts + W_i < H_i``.
"""

from __future__ import annotations

import numpy as np


def retention(replay, policy) -> np.ndarray:
    return np.asarray(policy.retention, dtype=np.int64).reshape(replay.n, 1)
