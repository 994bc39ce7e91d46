"""base/jit.py: the kernels are built ahead of time once and later processes load them
without importing numba; where no module can be built, numba's jit gives the same results."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from streamjoin.pipelines.base import jit
from streamjoin.pipelines.capacity import queueing


QUEUE_SIGNATURE = "Tuple((i8[:], i1[:], i8[:]))(i8[:], i8[:], i8[:], i8, i8, b1)"   # queueing.compiled_kernel's


def _queue_case():
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.integers(0, 1_000_000, 400)).astype(np.int64)
    stream = rng.integers(0, 2, 400).astype(np.int64)
    service = rng.integers(1_000, 9_000, 400).astype(np.int64)
    return arrival, stream, service


def test_a_built_kernel_is_loaded_without_importing_numba():
    queueing.compiled_kernel()          # builds the module if this machine has none yet
    code = ("import sys\nfrom streamjoin.pipelines.base import jit\nfrom streamjoin.pipelines.capacity import queueing\nqueueing.compiled_kernel()\n"
            "print(jit.how(queueing._bounded_kernel), 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["aot", "False"]


def _without_a_compiler(monkeypatch, cache) -> None:
    """This process has loaded no kernel, its one cache directory is ``cache`` and it has no C compiler."""
    def no_compiler(*_args):
        raise AssertionError("a build without a compiler")

    monkeypatch.setattr(jit, "_cache_dirs", lambda: [cache])
    monkeypatch.setattr(jit, "missing_toolchain", lambda: "no C compiler: gcc not found")
    monkeypatch.setattr(jit, "_build", no_compiler)
    monkeypatch.setattr(jit, "_KERNELS", {})
    monkeypatch.setattr(jit, "_HOW", {})


def test_without_a_buildable_module_numba_jit_gives_the_same_outcome(tmp_path, monkeypatch, capsys):
    arrival, stream, service = _queue_case()
    expected = queueing.compiled_kernel()(arrival, stream, service, 2, 3, True)

    _without_a_compiler(monkeypatch, tmp_path)
    capsys.readouterr()
    fallback = queueing.compiled_kernel()
    assert jit.how(queueing._bounded_kernel) == "jit"
    # no build to wait for: no 'building' line, one line saying why
    err = capsys.readouterr().err
    assert "building" not in err and err.count("could not build the bounded_kernel kernel (no C compiler") == 1
    got = fallback(arrival, stream, service, 2, 3, True)
    assert all(np.array_equal(g, e) for g, e in zip(got, expected))
    assert (got[1] != 0).any()          # the case sheds: the comparison covers the queue cap


def test_no_compiler_is_marked_in_the_user_cache_for_a_day(tmp_path, monkeypatch, capsys):
    """Without a C compiler the first process says so once and uses the jit; later processes go to
    the jit at once -- no line, no check -- for a day, or until the marker it names is deleted.
    The marker goes to the user's cache directory (the last one), not the install-wide one."""
    checks = []

    def no_compiler():
        checks.append(1)
        return "no C compiler: gcc not found"

    monkeypatch.setattr(jit, "_cache_dirs", lambda: [tmp_path / "install", tmp_path / "user"])
    monkeypatch.setattr(jit, "missing_toolchain", no_compiler)
    capsys.readouterr()
    kernel, how = jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)
    assert how == "jit"
    err = capsys.readouterr().err
    assert "could not build" in err and "no C compiler" in err and len(err.splitlines()) == 1
    markers = list(tmp_path.rglob("*.nobuild"))
    assert [m.parent.name for m in markers] == ["user"] and markers[0].name in err and "for a day" in err
    # a later process (the same lookup again): straight to the jit, silently
    kernel, how = jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)
    assert how == "jit" and len(checks) == 1 and capsys.readouterr().err == ""
    arrival, stream, service = _queue_case()
    assert (kernel(arrival, stream, service, 2, 3, True)[1] != 0).any()
    # a day later the marker has expired: checked (and said) again
    old = time.time() - jit.MARKER_TTL_S - 60
    os.utime(markers[0], (old, old))
    jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)
    assert len(checks) == 2 and "could not build" in capsys.readouterr().err
    # deleting the marker tries again at once
    markers[0].unlink()
    jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)
    assert len(checks) == 3


def test_a_failed_build_leaves_no_marker_and_the_next_process_tries_again(tmp_path, monkeypatch, capsys):
    """A build that fails for a passing reason (an OOM-killed compiler, a full disk) marks nothing:
    one failure must not disable the kernels for good."""
    builds = []

    def killed(*_args):
        builds.append(1)
        raise OSError("compiler killed")

    monkeypatch.setattr(jit, "_cache_dirs", lambda: [tmp_path / "install", tmp_path / "user"])
    monkeypatch.setattr(jit, "_build", killed)
    capsys.readouterr()
    assert jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)[1] == "jit"
    err = capsys.readouterr().err
    assert err.count("building the bounded_kernel kernel") == 1 and "compiler killed" in err
    assert "tries again" in err and list(tmp_path.rglob("*.nobuild")) == []
    tried = len(builds)
    assert jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)[1] == "jit"
    assert len(builds) == 2 * tried


def test_prebuilt_without_a_buildable_module_is_none_not_the_jit(tmp_path, monkeypatch, capsys):
    """The replay's kernels (base/kernels.py) ask for a built module only: where none can be built the
    caller keeps its numpy path (None here), numba is not jitted, and later lookups stay silent."""
    from streamjoin.pipelines.base import kernels

    _without_a_compiler(monkeypatch, tmp_path)
    capsys.readouterr()
    assert jit.prebuilt(kernels._band_fill, kernels.BAND_SIGNATURE) is None
    assert jit.how(kernels._band_fill) == "none"
    assert "using numpy instead" in capsys.readouterr().err
    monkeypatch.setattr(jit, "_KERNELS", {})
    monkeypatch.setattr(jit, "_HOW", {})
    assert jit.prebuilt(kernels._band_fill, kernels.BAND_SIGNATURE) is None   # the marker: no retry, no line
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(jit.KERNELS_ENV, "numpy")   # asked for numpy: no lookup at all
    monkeypatch.setattr(jit, "_build", lambda *_args: builds.append(1))
    builds = []
    assert jit.prebuilt(kernels._progress_pass, kernels.REPLAY_SIGNATURE) is None
    assert builds == [] and jit.how(kernels._progress_pass) is None


def test_no_home_directory_does_not_fail_a_run(tmp_path):
    """``$HOME`` unset and a uid without a passwd entry: ``Path.home()`` raises; the kernels
    fall back to the other cache directory or numpy, never an exception out of a run."""
    code = ("import pathlib\nfrom streamjoin.pipelines.base import jit, kernels\n"
            "def no_home(): raise RuntimeError('Could not determine home directory')\n"
            "pathlib.Path.home = staticmethod(no_home)\n"
            "print(len(jit._cache_dirs()))\n"
            "jit._cache_dirs = lambda: [pathlib.Path('/proc/streamjoin-nowhere')]\n"
            "pathlib.Path.mkdir = lambda *a, **k: (_ for _ in ()).throw(RuntimeError('odd'))\n"
            "print(jit.prebuilt(kernels._band_fill, kernels.BAND_SIGNATURE), jit.how(kernels._band_fill))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME", jit.KERNELS_ENV)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "None", "none"]


def test_the_module_name_changes_with_numpys_major_minor(monkeypatch):
    """A built module checks numpy's C API on import: another numpy (major.minor) is another module."""
    real = jit.importlib.metadata.version
    before = jit._module_name(queueing._bounded_kernel, QUEUE_SIGNATURE)
    numpy_version = real("numpy")
    major, minor = numpy_version.split(".")[:2]
    for other, same in ((f"{major}.{int(minor) + 1}.0", False), (f"{major}.{minor}.99", True)):
        monkeypatch.setattr(jit.importlib.metadata, "version", lambda p, o=other: o if p == "numpy" else real(p))
        assert (jit._module_name(queueing._bounded_kernel, QUEUE_SIGNATURE) == before) is same


def test_concurrent_first_runs_build_once_and_the_other_loads(tmp_path):
    """Two processes ask at once for a kernel this machine has not built: one builds it (under
    ``<name>.lock``), the other waits for the lock and loads that module -- one build, one line."""
    from streamjoin.pipelines.base import kernels

    assert jit.prebuilt(kernels._band_fill, kernels.BAND_SIGNATURE) is not None   # a real module stands for a build
    name = jit._module_name(kernels._band_fill, kernels.BAND_SIGNATURE)
    filename = name + jit.importlib.machinery.EXTENSION_SUFFIXES[0]
    built = next(d / filename for d in jit._cache_dirs() if (d / filename).is_file())
    code = ("import pathlib, shutil, sys, time\nfrom streamjoin.pipelines.base import jit, kernels\n"
            "cache = pathlib.Path(sys.argv[1])\njit._cache_dirs = lambda: [cache]\n"
            "def build(fn, signature, name, out_dir):   # as slow as a real build: the other process waits\n"
            "    with open(cache.parent / 'builds', 'a') as f:\n        f.write('1\\n')\n"
            f"    time.sleep(3)\n    shutil.copy({str(built)!r}, pathlib.Path(out_dir) / {filename!r})\n"
            "jit._build = build\n"
            "print(jit.prebuilt(kernels._band_fill, kernels.BAND_SIGNATURE) is not None, jit.how(kernels._band_fill))\n")
    env = {k: v for k, v in os.environ.items() if k != jit.KERNELS_ENV}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "cache")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sorted(tuple(o[0].split()) for o in outs) == [("True", "aot"), ("True", "aot-built")]
    assert (tmp_path / "builds").read_text() == "1\n"
    assert sum(o[1].count("building the band_fill kernel") for o in outs) == 1


def test_no_writable_cache_directory_is_silent(tmp_path, monkeypatch, capsys):
    """Where no cache directory can be written, no build is tried or announced and nothing is said:
    every process would repeat the line forever.  The numpy path (prebuilt) or the jit (compiled) runs."""
    from streamjoin.pipelines.base import kernels

    (tmp_path / "file").write_text("")
    builds = []
    monkeypatch.setattr(jit, "_cache_dirs", lambda: [tmp_path / "file" / "a", tmp_path / "file" / "b"])
    monkeypatch.setattr(jit, "_build", lambda *_args: builds.append(1))
    capsys.readouterr()
    for _ in range(2):
        assert jit._ahead_of_time(kernels._band_fill, kernels.BAND_SIGNATURE, jit_fallback=False) == (None, "none")
    assert builds == [] and capsys.readouterr().err == ""


def test_numba_pyccs_failed_compiler_probe_is_marked_like_no_compiler(tmp_path, monkeypatch, capsys):
    """numba.pycc probes the compiler itself (C and C++): where that fails -- a ``cc`` without a
    C++ front end -- the cause is as permanent as no compiler: marked, not retried by every run."""
    def probe_failed(*_args):
        raise RuntimeError("Attempted to compile AOT function without the compiler used by `numpy.distutils` present.")

    monkeypatch.setattr(jit, "_cache_dirs", lambda: [tmp_path / "install", tmp_path / "user"])
    monkeypatch.setattr(jit, "missing_toolchain", lambda: None)
    monkeypatch.setattr(jit, "_build", probe_failed)
    capsys.readouterr()
    assert jit._ahead_of_time(queueing._bounded_kernel, QUEUE_SIGNATURE)[1] == "jit"
    assert [m.parent.name for m in tmp_path.rglob("*.nobuild")] == ["user"] and "for a day" in capsys.readouterr().err


def test_a_helper_stays_python_and_its_source_names_the_module(tmp_path):
    """A :func:`jit.helper` is called as a plain function by the plain-Python kernel,
    compiled into the built one, and an edited helper gives another module name
    (so it is rebuilt)."""
    import importlib.util

    def module(body: str, name: str):
        path = tmp_path / f"{name}.py"
        path.write_text("from streamjoin.pipelines.base import jit\n\n"
                        f"@jit.helper\ndef _twice(x):\n    return {body}\n\n"
                        "def _kernel(x):\n    return _twice(x) + 1\n")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    a, b = module("2 * x", "helper_a"), module("x + x", "helper_b")
    assert a._kernel(5) == b._kernel(5) == 11 and not hasattr(a._twice, "py_func")   # plain Python
    assert jit._helpers(a._kernel) == [a._twice]
    assert jit._module_name(a._kernel, "i8(i8)").split("_")[-1] != jit._module_name(b._kernel, "i8(i8)").split("_")[-1]
    compiled = jit._jit(a._kernel, "i8(i8)")
    assert compiled(5) == 11 and a._twice(5) == 10 and not hasattr(a._twice, "py_func")   # the module unchanged
