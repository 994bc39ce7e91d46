"""Allocator tuning for a batch job that streams large temporary columns.

The engine allocates and frees many column-sized numpy arrays (tens of MB
each).  glibc serves every allocation above 32 MB with a fresh ``mmap`` and
returns it with ``munmap`` when freed, so each new temporary pays page faults
on every page again -- on a virtual machine whose memory is faulted in from
the host, measurably more than the arithmetic itself (docs/performance.md).

:func:`reuse_freed_memory` tells glibc to serve large blocks from the heap and
keep freed memory for reuse.  The process keeps its peak footprint until it
exits instead of returning it early -- the right trade for a CLI that runs one
job and exits.  It is a no-op where glibc is not the allocator.  Three more
settings make the reuse reach every large buffer and keep first touches cheap:

* one malloc arena for all threads.  The engine runs its stages on two
  threads; glibc gives a second thread its own arena, whose heaps are at most
  64 MB and whose larger blocks are ``mmap``-ed and unmapped on free whatever
  ``M_MMAP_MAX`` says -- so the thread's temporaries were faulted in anew on
  every allocation (measured: a second join in the same process still faulted
  83k pages; with one arena and Arrow on the same heap, 4).  The engine makes
  few, large allocations, so one arena's lock costs nothing measurable.
* the heap grows in steps of :data:`HEAP_GROWTH` instead of glibc's 128 kB.
  Every ``brk`` that grows it takes the process's memory-map lock for
  writing, and while the two threads fault in fresh pages they wait on each
  other's growth: on the core benchmark the first join in a fresh process
  took 0.62-0.81 s with the default and 0.49-0.52 s with 256 MB steps
  (system time 0.26-0.43 -> 0.13-0.18 s).  The step is address space; the
  resident size does not change.
* Arrow's buffers on the same heap (``pyarrow.system_memory_pool``).  Arrow's
  default pool (mimalloc) keeps what it frees for Arrow alone, so the
  Parquet decoding buffers freed after the load could not serve the join.

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
M_TOP_PAD = -2
M_MMAP_MAX = -4
M_ARENA_MAX = -8


def reuse_freed_memory() -> bool:
    """Keep freed heap memory for reuse; True if glibc accepted the settings.

    Call it before any thread allocates (a thread's arena is chosen at its
    first allocation).  Arrow is switched to the system allocator here too,
    unless the user chose a pool with ``ARROW_DEFAULT_MEMORY_POOL``.
    """
    try:
        return _malloc_settings()
    finally:
        # only after the arena limit: importing pyarrow starts a thread, and a
        # thread that allocates before the limit is set creates an arena of
        # its own, which the engine's worker threads would later take over
        # from glibc's free list -- with its fresh-mmap behaviour (above)
        _arrow_on_system_heap()


def _malloc_settings() -> bool:
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
    ok &= mallopt(M_ARENA_MAX, 1) == 1
    ok &= mallopt(M_TOP_PAD, HEAP_GROWTH) == 1
    return bool(ok)


#: the heap grows by at least this much at a time (address space only: pages
#: are faulted in as they are touched)
HEAP_GROWTH = 256 << 20


def _arrow_on_system_heap() -> None:
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return  # the user's explicit choice
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return
    pa.set_memory_pool(pa.system_memory_pool())


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
