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
"""

from __future__ import annotations

import ctypes
import ctypes.util

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
