"""numba, lazily: the capacity model's two sequential kernels (the bounded
queue, the state cap) are compiled -- cached on disk -- the first time they
are needed, and numba is imported only then (a plain run never loads it;
docs/performance.md, "Capacity model")."""

from __future__ import annotations

import threading
from collections.abc import Callable

_KERNELS: dict[Callable, Callable] = {}
_LOCK = threading.Lock()


def compiled(fn: Callable, *warm_args) -> Callable:
    """``fn`` compiled by numba (``nogil``, cached), once per process; the first
    call with ``warm_args`` loads its machine code before anyone waits on it."""
    with _LOCK:
        kernel = _KERNELS.get(fn)
        if kernel is None:
            from numba import njit

            kernel = njit(cache=True, nogil=True)(fn)
            kernel(*warm_args)
            _KERNELS[fn] = kernel
    return kernel
