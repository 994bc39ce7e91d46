"""base/kernels.py: the compiled band-join fill, key order and progress pass give exactly the numpy paths' arrays.

Each property draws an input, runs the caller once with the kernel and once with
``$STREAMJOIN_KERNELS=numpy`` (the numpy path), and compares every array element
for element (values and dtypes) -- and checks that the kernel really ran, so a
kernel that failed to build cannot pass by falling back.  The numpy paths are in
turn checked against the per-arrival reference by the replay's own property tests.
"""

from __future__ import annotations

import importlib.machinery
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base import jit, kernels
from streamjoin.pipelines.base.timeunits import NEG_INF
from streamjoin.pipelines.base.sorting import sorted_band_ranges
from streamjoin.pipelines.replay.candidates import BandBounds, BandPlan, band_pairs, enumerate_sorted
from streamjoin.pipelines.policies import PolicySpec, RecallTarget
from streamjoin.pipelines.replay.progress import build_replay, decide, expiry

SETTINGS = settings(max_examples=200, deadline=None)
RUN_MIN_ROWS = kernels.MIN_ROWS   # a run's threshold (the fixture below lowers it for the properties)


@pytest.fixture(autouse=True, scope="module")
def built():
    """The kernels built (once per machine) before the properties run, and used
    on inputs of any size (not only from ``MIN_ROWS`` rows, as in a run)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, "MIN_ROWS", 0)
        _check_built()
        yield


def _check_built():
    assert kernels.band_pairs(np.zeros(1, np.int64), np.zeros(1, np.int32), np.zeros(1, np.int64),
                              np.zeros(1, np.int64), np.zeros(1, np.int32), input_rows=1) is not None
    assert kernels.replay_facts(np.zeros(1, np.int32), np.array([0, 1]), np.zeros(1, np.int64),
                                keep_running_max=False) is not None
    assert kernels.key_order(np.zeros(1, np.int64), np.zeros(1, np.int64), 1) is not None
    assert kernels.plan_bands(*[np.zeros(1, t) for t in (np.int32, np.int64, np.int32)] * 2, 1, 0, 0, 0) is not None
    for fn in (kernels._band_fill, kernels._progress_pass, kernels._key_order, kernels._plan_bands):
        assert jit.how(fn) in ("aot", "aot-built")


def both(fn):
    """``fn()`` with the kernels, then with the numpy paths."""
    with pytest.MonkeyPatch.context() as m:
        m.delenv(jit.KERNELS_ENV, raising=False)
        fast = fn()
    with pytest.MonkeyPatch.context() as m:
        m.setenv(jit.KERNELS_ENV, "numpy")
        slow = fn()
    return fast, slow


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


@st.composite
def bands(draw):
    """A sorted stored side with many duplicates and bands of any width,
    including empty ones (``hi < lo``) and ends that go back and forth."""
    stored = np.sort(np.array(draw(st.lists(st.integers(-50, 50), max_size=60)), np.int64))
    q = draw(st.integers(0, 40))
    lo = np.array(draw(st.lists(st.integers(-60, 60), min_size=q, max_size=q)), np.int64)
    width = np.array(draw(st.lists(st.integers(-5, 30), min_size=q, max_size=q)), np.int64)
    return stored, lo, lo + width


@SETTINGS
@given(bands())
def test_band_fill_equals_searches_repeat_and_gather(case):
    stored, lo, hi = case
    rows = np.random.default_rng(len(stored)).permutation(len(stored)).astype(np.int32)
    fast, slow = both(lambda: band_pairs(stored, rows, lo.copy(), hi, np.int32, input_rows=len(stored)))
    same(fast[0], slow[0])
    same(fast[1], slow[1])


@st.composite
def streams(draw, max_streams: int = 4):
    """2-4 streams with tied and decreasing event times, tied arrivals across
    streams, empty streams, and time values near the int64 extremes."""
    n = draw(st.integers(1, max_streams))
    base = draw(st.sampled_from([0, 10**15, NEG_INF + 1, 2**62]))
    ts, arrival = [], []
    for _ in range(n):
        size = draw(st.integers(0, 30))
        ts.append(base + np.array(draw(st.lists(st.integers(0, 40), min_size=size, max_size=size)), np.int64))
        arrival.append(np.array(draw(st.lists(st.integers(0, 40), min_size=size, max_size=size)), np.int64))
    return ts, arrival


@SETTINGS
@given(streams(), st.booleans())
def test_progress_pass_equals_the_numpy_pass(case, keep):
    ts, arrival = case
    fast, slow = both(lambda: build_replay(ts, arrival, keep_running_max=keep))
    for name in ("stream", "ts", "arrival", "T", "delay"):
        same(getattr(fast, name), getattr(slow, name))
    assert len(fast.index_of) == len(slow.index_of)
    for a, b in zip(fast.index_of, slow.index_of):
        same(a, b)
    same(fast.M, slow.M)   # kept, or computed on first use from the same order


@SETTINGS
@given(st.lists(st.integers(0, 6), max_size=60), st.lists(st.integers(0, 30), max_size=60), st.booleans())
def test_key_order_is_the_stable_sort_or_none(keys, times, in_time_order):
    n = min(len(keys), len(times))
    key = np.array(keys[:n], np.int64)
    ts = np.array(sorted(times[:n]) if in_time_order else times[:n], np.int64)
    got = kernels.key_order(key, ts, 7)
    expected = np.argsort(key * 100 + ts, kind="stable")
    per_key_ascending = all((np.diff(ts[key == k]) >= 0).all() for k in range(7))
    if n and per_key_ascending:
        same(got, expected.astype(np.int32))
    else:
        assert got is None   # a key whose times go back (or nothing to order): the caller sorts
    if n and key.max() >= 1:
        assert kernels.key_order(key, ts, int(key.max())) is None   # ids outside the radix: refused


@SETTINGS
@given(streams(max_streams=3), st.lists(st.integers(0, 12), min_size=3, max_size=3), st.integers(1, 3),
       st.booleans(), st.booleans())
def test_enumeration_with_the_kernel_equals_numpy(case, windows, keys, in_time_order, keyless):
    ts, _ = case
    ts = [t - t.min() if len(t) else t for t in ts]   # a span that packs
    if in_time_order:   # rows written in time order: the counting sort's case
        ts = [np.sort(t) for t in ts]
    ids = None if keyless else [np.arange(len(t), dtype=np.int64) % keys for t in ts]
    W = windows[:len(ts)]
    fast, slow = both(lambda: enumerate_sorted(ts, ids, W))
    assert len(fast.rows) == len(slow.rows)
    for a, b in zip(fast.rows, slow.rows):
        same(a, b)


@SETTINGS
@given(st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60)), min_size=1, max_size=40),
                min_size=2, max_size=2),
       st.tuples(st.integers(0, 12), st.integers(0, 12)), st.sampled_from([0, 10**15, NEG_INF + 10**6, 2**61]),
       st.booleans(), st.sampled_from([[0, 1], [1, 0]]))
def test_fused_band_plan_equals_the_numpy_plan_and_searches(rows, windows, base, keyless, probe):
    """``enumerate_sorted(plan=True, bounds=True)`` (two counting sorts and ``plan_bands``:
    no packed column) against the numpy path it replaces for counting -- the packed
    codes' value sort (:class:`BandPlan`, ``$STREAMJOIN_KERNELS=numpy``) and
    ``searchsorted`` of every band: the same row orders, starts, ends and total."""
    rows = [sorted(r, key=lambda kt: kt[1]) for r in rows]   # rows in time order: the counting sort's case
    ts = [base + np.array([t for _, t in r], np.int64) for r in rows]
    ids = None if keyless else [np.array([k for k, _ in r], np.int64) for r in rows]
    fused = enumerate_sorted(ts, ids, list(windows), None, probe, plan=True, bounds=True)
    assert isinstance(fused, BandBounds)
    with pytest.MonkeyPatch.context() as m:
        m.setenv(jit.KERNELS_ENV, "numpy")
        plan = enumerate_sorted(ts, ids, list(windows), None, probe, plan=True, bounds=True)
    assert isinstance(plan, BandPlan)
    assert (fused.query_stream, fused.stored_stream) == (plan.query_stream, plan.stored_stream) == tuple(probe)
    same(fused.stored_rows, plan.stored_rows)
    same(fused.query_rows, plan.query_rows)
    start, count = sorted_band_ranges(plan.sorted_values, plan.lo, plan.hi)
    assert fused.start.dtype == fused.end.dtype == np.int32
    np.testing.assert_array_equal(fused.start, start)
    np.testing.assert_array_equal(fused.end - fused.start, count)
    assert fused.total == int(count.sum())


@SETTINGS
@given(st.lists(st.integers(-50, 50), max_size=60), st.lists(st.integers(-80, 80), max_size=60),
       st.integers(-30, 30), st.sampled_from(["as drawn", "ascending", "descending"]),
       st.sampled_from([0, NEG_INF + 100, 2**62]), st.integers(0, 5))
def test_first_above_is_searchsorted_right(horizon, values, shift, layout, base, unseen):
    """The expiry index's compiled search: ``np.searchsorted(horizon, values + shift, "right")``
    for a non-decreasing horizon (ties; ``unseen`` leading ``NEG_INF`` entries, the
    frontier before every stream arrived), queries in any order (ascending: the
    galloping path; back and forth: the backward searches)."""
    horizon = np.concatenate([np.full(unseen, NEG_INF, np.int64), np.sort(np.array(horizon, np.int64)) + base])
    values = np.array(values, np.int64) + base
    if layout != "as drawn":
        values = np.sort(values)[::-1 if layout == "descending" else 1].copy()
    out = np.full(len(values), -1, np.int32)
    assert kernels.first_above(horizon, values, shift, out)
    np.testing.assert_array_equal(out, np.searchsorted(horizon, values + np.int64(shift), side="right"))


@SETTINGS
@given(streams(max_streams=3), st.integers(0, 20), st.integers(0, 20))
def test_expiry_index_with_the_kernel_equals_numpy(case, window, retention):
    """``progress.expiry`` (static: the frontier searched) with ``first_above`` and with numpy."""
    ts, arrival = case
    n = len(ts)
    policy = PolicySpec("static", retention=(retention,) * n)
    W = np.full(n, window, np.int64)

    def index():
        replay = build_replay(ts, arrival, keep_running_max=False)
        return expiry(replay, W, decide(replay, W, policy))

    fast, slow = both(index)
    for a, b in zip(fast, slow):
        same(a, b)


@SETTINGS
@given(streams(max_streams=3), st.integers(0, 20), st.integers(1, 60), st.sampled_from([0.5, 0.9, 0.99]))
def test_expiry_index_over_explicit_horizons_with_the_kernel_equals_numpy(case, window, period, target):
    """``progress.expiry`` with adaptive retention (qjoin: the horizons ``H_i`` built, not the
    frontier shifted -- the other branch of its search) with ``first_above`` and with numpy."""
    ts, arrival = case
    n = len(ts)
    policy = PolicySpec("qjoin", target=RecallTarget(target, period_us=period))
    W = np.full(n, window, np.int64)
    calls = []
    real = kernels.first_above

    def index():
        replay = build_replay(ts, arrival, keep_running_max=False)
        decisions = decide(replay, W, policy)
        assert decisions.frontier is None   # the explicit H_i
        return expiry(replay, W, decisions)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, "first_above", lambda *a: (calls.append(real(*a)), calls[-1])[1])
        fast, slow = both(index)
    assert True in calls or not any(len(t) for t in ts)   # the kernel answered (a stream with rows)
    for a, b in zip(fast, slow):
        same(a, b)


def test_small_inputs_take_the_numpy_paths():
    """Below MIN_ROWS a run neither loads nor builds a kernel (a few ms of CPU saved, no first build)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, "MIN_ROWS", 100)
        rows = np.arange(60, dtype=np.int32)
        assert kernels.band_pairs(np.arange(60), rows, np.arange(30), np.arange(30), rows[:30], input_rows=99) is None
        assert kernels.band_pairs(np.arange(60), rows, np.arange(30), np.arange(30), rows[:30],
                                  input_rows=100) is not None
        assert kernels.replay_facts(rows, np.array([0, 60]), np.arange(60), keep_running_max=False) is None
        assert kernels.key_order(np.zeros(99, np.int64), np.arange(99), 1) is None
        assert kernels.key_order(np.zeros(100, np.int64), np.arange(100), 1) is not None


#: every compiled kernel of base/kernels (a new one belongs here, in ensure_built and in main's check)
ALL_KERNELS = (kernels._band_fill, kernels._key_order, kernels._progress_pass, kernels._count_walk, kernels._bands,
               kernels._plan_bands, kernels._first_above, kernels._last_order)


def test_every_kernel_is_listed():
    """ALL_KERNELS names every function base/kernels builds (``jit.prebuilt(_x, X_SIGNATURE)``), so the two
    tests below see a kernel that ensure_built (a Spark driver, the set-up) leaves out."""
    import inspect
    import re

    built = set(re.findall(r"prebuilt\((_\w+),", inspect.getsource(kernels)))
    assert built == {f.__name__ for f in ALL_KERNELS}


def test_ensure_built_loads_every_kernel(monkeypatch):
    """A Spark driver builds (or loads) them all before its tasks run."""
    monkeypatch.setattr(jit, "_KERNELS", {})
    monkeypatch.setattr(jit, "_HOW", {})
    kernels.ensure_built()
    assert {jit.how(f) for f in ALL_KERNELS} <= {"aot", "aot-built"}


def _kernel_calls(monkeypatch) -> list[str]:
    """The kernels asked for (``jit.prebuilt``) from now on, by name."""
    calls = []
    real = jit.prebuilt
    monkeypatch.setattr(jit, "prebuilt", lambda fn, sig: (calls.append(fn.__name__), real(fn, sig))[1])
    monkeypatch.setattr(kernels, "MIN_ROWS", RUN_MIN_ROWS)
    monkeypatch.delenv(jit.KERNELS_ENV, raising=False)
    return calls


def test_a_run_uses_the_kernels_from_65536_input_rows(monkeypatch):
    """The run's threshold itself (not the tests' lowered one): 65,535 input rows take the numpy paths,
    65,536 the kernels (band fill and progress pass)."""
    assert RUN_MIN_ROWS == 65_536
    calls = _kernel_calls(monkeypatch)
    for total, expected in ((65_535, []), (65_536, ["_band_fill", "_progress_pass"])):
        calls.clear()
        ts = [np.arange(32_768, dtype=np.int64) * 10, np.arange(total - 32_768, dtype=np.int64) * 10 + 3]
        enumerate_sorted(ts, None, [5, 5])
        build_replay(ts, [t + 1 for t in ts], keep_running_max=False)
        assert sorted(set(calls)) == expected, total


def test_three_small_streams_do_not_use_the_kernels(monkeypatch):
    """With three streams the band join's queries are partial combinations: 601 input rows give
    90,000 of them.  The gate counts input rows, so a small run neither loads nor builds a kernel."""
    calls = _kernel_calls(monkeypatch)
    ts = [np.zeros(300, np.int64), np.zeros(300, np.int64), np.zeros(1, np.int64)]
    combos = enumerate_sorted(ts, None, [10, 10, 10])
    assert len(combos.rows[0]) == 90_000 and calls == []


def test_load_mode_never_builds(tmp_path, monkeypatch, capsys):
    """``$STREAMJOIN_KERNELS=load`` (what a Spark executor's workers get): a module built before is
    loaded, none is built -- no lock, no line -- and the caller keeps its numpy path."""
    builds = []
    monkeypatch.setattr(jit, "_cache_dirs", lambda: [tmp_path])
    monkeypatch.setattr(jit, "_build", lambda *_args: builds.append(1))
    monkeypatch.setattr(jit, "_KERNELS", {})
    monkeypatch.setattr(jit, "_HOW", {})
    monkeypatch.setenv(jit.KERNELS_ENV, "load")
    capsys.readouterr()
    assert jit.prebuilt(kernels._band_fill, kernels.BAND_SIGNATURE) is None
    assert builds == [] and list(tmp_path.iterdir()) == [] and capsys.readouterr().err == ""
    assert jit.executor_mode() == "load"
    monkeypatch.setenv(jit.KERNELS_ENV, "numpy")
    assert jit.executor_mode() == "numpy"


def test_the_set_up_entry_builds_every_kernel_or_says_why_not(monkeypatch, capsys):
    """``python -m streamjoin.pipelines.base.kernels --build`` (.ci/bootstrap's last step): the
    kernels built or loaded, silently; without a C compiler one line, and exit 0 either way."""
    monkeypatch.setattr(jit, "_KERNELS", {})
    monkeypatch.setattr(jit, "_HOW", {})
    monkeypatch.delenv(jit.KERNELS_ENV, raising=False)
    capsys.readouterr()
    assert kernels.main(["--build"]) == 0 and capsys.readouterr().out == ""
    assert {jit.how(f) for f in ALL_KERNELS} <= {"aot", "aot-built"}
    monkeypatch.setattr(jit, "missing_toolchain", lambda: "no C compiler: gcc not found")
    assert kernels.main(["--build"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and "no C compiler" in out and "numpy paths" in out
    assert kernels.main([]) == 2


def _module_file(fn, signature):
    name = jit._module_name(fn, signature)
    files = [d / (name + importlib.machinery.EXTENSION_SUFFIXES[0]) for d in jit._cache_dirs()]
    return next(f for f in files if f.is_file())


def test_the_kernels_release_the_gil():
    """Built with ``release_gil`` (numba.pycc has no ``nogil``; ``jit._build`` sets it): each
    module calls the interpreter's ``PyEval_SaveThread`` (a module built without it never does),
    and while the band fill runs on one thread another Python thread keeps running -- with the
    GIL held it wakes only between calls (measured: 18 wakes in 5 calls against 972)."""
    for fn, signature in ((kernels._band_fill, kernels.BAND_SIGNATURE), (kernels._key_order, kernels.KEY_ORDER_SIGNATURE),
                          (kernels._progress_pass, kernels.REPLAY_SIGNATURE)):
        assert b"PyEval_SaveThread" in _module_file(fn, signature).read_bytes(), fn.__name__
    rng = np.random.default_rng(0)
    n = 1_000_000
    stored = np.sort(rng.integers(0, 10**9, n))
    lo = np.sort(rng.integers(0, 10**9, n))
    rows = np.arange(n, dtype=np.int32)
    calls = 3
    started, done = threading.Event(), threading.Event()

    def fill():
        started.set()
        for _ in range(calls):
            parent, _member = kernels.band_pairs(stored, rows, lo, lo + 5_000, rows, input_rows=n)
        done.set()

    worker = threading.Thread(target=fill)
    worker.start()
    started.wait()
    wakes = 0
    while not done.is_set():
        time.sleep(0.001)
        wakes += 1
    worker.join()
    assert wakes > 10 * calls
