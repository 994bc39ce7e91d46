"""The progress pass's lean forms equal the full ones.

``build_replay`` can skip keeping ``M`` (the fixed-retention policy reads only
``T`` and ``delay``), ``Replay.M`` / ``Replay.row`` are then computed on first
use, and ``static`` keeps its horizons implicit (``H_i = T - d_i``): each
lean form is checked here against the explicit one, on inputs with ties,
heavy disorder and empty streams.  Also: the allocator settings the CLI
applies (one malloc arena, Arrow on the system heap).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.replay import progress
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.progress import Decisions, _horizons, build_replay, decide, expiry, memory_per_stream
from streamjoin.pipelines.base.timeunits import NEG_INF

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def columns(draw):
    n = draw(st.integers(1, 3))
    ts, arrival = [], []
    for _ in range(n):
        rows = draw(st.integers(0, 12))
        t = draw(st.lists(st.integers(-50, 50), min_size=rows, max_size=rows))
        late = draw(st.lists(st.integers(0, 40), min_size=rows, max_size=rows))
        ts.append(np.array(t, dtype=np.int64))
        arrival.append(np.array(t, dtype=np.int64) + np.array(late, dtype=np.int64))
    windows = np.array(draw(st.lists(st.integers(0, 10), min_size=n, max_size=n)), dtype=np.int64)
    retention = draw(st.lists(st.integers(0, 15), min_size=n, max_size=n))
    return ts, arrival, windows, retention


def _explicit_M(replay) -> np.ndarray:
    """M_i(a) straight from the definition: max ts of stream i among indexes <= a."""
    M = np.full((replay.n, replay.N), NEG_INF, dtype=np.int64)
    for i in range(replay.n):
        best = NEG_INF
        for a in range(replay.N):
            if replay.stream[a] == i:
                best = max(best, int(replay.ts[a]))
            M[i, a] = best
    return M


@SETTINGS
@given(columns())
def test_lean_replay_equals_kept_running_max(data):
    ts, arrival, _, _ = data
    full = build_replay(ts, arrival)
    lean = build_replay(ts, arrival, keep_running_max=False)
    assert "M" not in vars(lean)  # not kept: computed only when read
    for name in ("stream", "ts", "arrival", "T", "delay"):
        np.testing.assert_array_equal(getattr(lean, name), getattr(full, name), err_msg=name)
    for a, b in zip(lean.index_of, full.index_of):
        np.testing.assert_array_equal(a, b)
    M = _explicit_M(full)
    np.testing.assert_array_equal(full.M, M)
    np.testing.assert_array_equal(lean.M, M)
    if full.N:
        np.testing.assert_array_equal(lean.T, M.min(axis=0))
    for i, pos in enumerate(lean.index_of):  # the input columns, in row order
        np.testing.assert_array_equal(lean.ts_of[i], lean.ts[pos])
        np.testing.assert_array_equal(lean.ts_of[i], ts[i])
    # row: the tuple's row within its own stream
    for i, pos in enumerate(lean.index_of):
        np.testing.assert_array_equal(lean.row[pos], np.arange(len(pos)))
        assert (lean.stream[pos] == i).all()


@SETTINGS
@given(columns())
def test_static_implicit_horizons_equal_explicit(data):
    ts, arrival, windows, retention = data
    replay = build_replay(ts, arrival, keep_running_max=False)
    policy = PolicySpec(name="static", retention=tuple(retention))
    implicit = decide(replay, windows, policy)
    assert "H" not in vars(implicit)
    H = _horizons(replay.T, np.array(retention, dtype=np.int64).reshape(-1, 1), replay.n)
    # the explicit form: H given, expired from H_own, expiry searched in H
    explicit = Decisions(family=implicit.family, expired=None)
    explicit.H = H
    own = np.array([H[replay.stream[a], a] for a in range(replay.N)], dtype=np.int64)
    np.testing.assert_array_equal(implicit.expired, windows[replay.stream] + replay.ts < own)
    lean_ends = expiry(replay, windows, implicit)
    full_ends = expiry(replay, windows, explicit)
    saved = progress.PARALLEL_SEARCH
    progress.PARALLEL_SEARCH = 2  # every stream's searches split over two threads
    try:
        split_ends = expiry(replay, windows, implicit)
    finally:
        progress.PARALLEL_SEARCH = saved
    for a, b, c in zip(lean_ends, full_ends, split_ends):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(c, b)
    assert "H" not in vars(implicit)  # expiry did not need to build H
    at = np.arange(replay.N)[::-1]  # H at given arrival indexes, without building H
    for i in range(replay.n):
        np.testing.assert_array_equal(implicit.horizon_at(i, at), H[i][at])
    assert "H" not in vars(implicit)
    np.testing.assert_array_equal(implicit.H, H)  # built on demand, equal to the definition
    for i in range(replay.n):  # and read from it once it exists
        np.testing.assert_array_equal(implicit.horizon_at(i, at), H[i][at])
    memory = memory_per_stream(replay, windows, implicit)
    assert memory.dtype == np.int32
    # held after index a: arrived by a, and H_i(a) has not passed ts + W_i
    for i in range(replay.n):
        for a in range(replay.N):
            held = sum(1 for x in replay.index_of[i]
                       if x <= a and H[i, a] <= replay.ts[x] + windows[i])
            assert memory[i, a] == held, (i, a)


def test_allocator_settings_in_a_fresh_process():
    code = (
        "from streamjoin.pipelines.base.allocator import reuse_freed_memory\n"
        "ok = reuse_freed_memory()\n"
        "import pyarrow as pa\n"
        "print(ok, pa.default_memory_pool().backend_name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["True", "system"]
    # an explicit choice of Arrow pool is the user's, and is kept
    env["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc" if "jemalloc" in _pools() else "mimalloc"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["True", env["ARROW_DEFAULT_MEMORY_POOL"]]


def test_one_malloc_arena_for_the_whole_process():
    # the CLI's order: settings first, then the heavy imports (pyarrow and
    # polars start threads) and the engine's worker threads; every thread must
    # share the main arena (glibc's malloc_stats lists each arena on stderr)
    code = (
        "import ctypes, ctypes.util\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from streamjoin.pipelines.base.allocator import reuse_freed_memory\n"
        "assert reuse_freed_memory()\n"
        "import numpy as np, polars, pyarrow\n"
        "with ThreadPoolExecutor(2) as pool:\n"
        "    list(pool.map(lambda k: np.ones(1 << 23).sum(), range(4)))\n"
        "ctypes.CDLL(ctypes.util.find_library('c')).malloc_stats()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    arenas = [line for line in out.stderr.splitlines() if line.startswith("Arena ")]
    assert arenas == ["Arena 0:"], out.stderr


def test_heap_grows_in_large_steps():
    # a 40 MB block comes from the heap (no mmap), whose growth is padded by HEAP_GROWTH
    # (glibc's default pad, 128 kB, leaves the heap near 50 MB here)
    code = (
        "import ctypes, ctypes.util\n"
        "from streamjoin.pipelines.base.allocator import HEAP_GROWTH, reuse_freed_memory\n"
        "assert reuse_freed_memory()\n"
        "class Info(ctypes.Structure):\n"
        "    _fields_ = [(f, ctypes.c_size_t) for f in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd',\n"
        "                                             'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
        "libc = ctypes.CDLL(ctypes.util.find_library('c'))\n"
        "libc.mallinfo2.restype = Info\n"
        "import numpy as np\n"
        "block = np.ones(40 << 20, np.uint8)\n"
        "info = libc.mallinfo2()\n"
        "print(info.arena >= HEAP_GROWTH, info.hblkhd < (40 << 20))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr


def _pools() -> list[str]:
    import pyarrow as pa

    return list(pa.supported_memory_backends())
