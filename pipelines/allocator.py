"""Allocator tuning for a batch job that streams large temporary columns.

The engine allocates and frees many column-sized numpy arrays (tens of MB
each).  glibc serves every allocation above 32 MB with a fresh ``mmap`` and
returns it with ``munmap`` when freed, so each new temporary pays page faults
on every page again -- on a virtual machine whose memory is faulted in from
the host, measurably more than the arithmetic itself (docs/performance.md).

:func:`reuse_freed_memory` tells glibc to serve large blocks from the heap and
keep freed memory for reuse.  The process keeps its peak footprint until it
exits instead of returning it early -- the right trade for a CLI that runs one
job and exits.  It is a no-op where glibc is not the allocator.

:func:`no_huge_page_advice` stops numpy from asking for transparent huge
pages for its large arrays.  With the kernel's THP ``defrag`` setting at its
default ``madvise``, every fault in an advised region may first *compact*
memory to find a free 2 MB page: on the benchmark VM, once a JVM had been
started beside the driver, that turned the 0.4 s progress pass into 4.6 s of
mostly system time (docs/performance.md, "Huge pages").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def reuse_freed_memory() -> bool:
    """Keep freed heap memory for reuse; True if glibc accepted the settings."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_MAX, 0) == 1
    ok &= mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
    return bool(ok)


def no_huge_page_advice() -> None:
    """numpy: no ``madvise(MADV_HUGEPAGE)`` for new arrays, here and in child
    processes (Spark's Python workers inherit the environment)."""
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    if os.environ["NUMPY_MADVISE_HUGEPAGE"] != "0":
        return  # the user asked for huge pages explicitly
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover - numpy < 2
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return
    _set_madvise_hugepage(False)
