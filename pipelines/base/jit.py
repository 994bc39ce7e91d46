"""Compiled kernels, built ahead of time once per machine.

The capacity model's bounded queue, state cap and flow control's interval
loop are sequential recursions; they run as machine code (:func:`compiled`).
The replay's band-join fill and progress pass use the same machinery through
:func:`prebuilt`, which never falls back to the jit: a caller that gets
``None`` keeps its numpy path (the same outcome; tests compare the two).
Importing numba and loading
a ``cache=True`` kernel costs about 0.4-0.5 s CPU in every process (numba's
typing and target registries; docs/performance.md, "Capacity"), as much as
the rest of the capacity model.  So the first use builds each kernel ahead of
time (``numba.pycc``: a CPython extension module, written into
``__pycache__`` next to this file, or the user's cache directory when that is
not writable) and every later process imports that module (about 1 ms, numba
not imported).  Its exports release the GIL while they run (numba's
``nogil=True``; ``numba.pycc`` has no such option, so :func:`_build` sets the
flag its wrappers are generated from), so other threads keep running.  Concurrent first runs build it once: the builder holds
``fcntl.flock`` on ``<name>.lock`` in the target directory, the others wait
for it and load its module.  Where no cache directory is writable nothing is
built or said (the fallback below runs); ``$STREAMJOIN_KERNELS=load`` (what
Spark's executors get) loads a module built before and never builds one.
The module's name carries a digest of the kernel's source,
its signature, numba's version, numpy's major.minor (the module checks
numpy's C API) and the interpreter, so an edited kernel -- or a new numpy --
is rebuilt.  Where the build fails the kernel is compiled with ``numba.njit(cache=True)``
instead -- the same code, the per-process load cost back.  Where it is
impossible (no C compiler, or one ``numba.pycc``'s probe rejects, a numba
without ``pycc``) a ``.nobuild`` marker in
the user's cache directory (else beside the module) says so to later
processes, which then fall back at once, without another attempt or line on
stderr, for a day (:data:`MARKER_TTL_S`; delete the marker to try sooner);
any other failure (a killed compiler, a full disk) leaves no marker and the
next process tries again.  numba is imported only when
a kernel has to be built or jitted (a plain run never loads it).  A kernel may
call plain functions marked :func:`helper`: they are compiled into its module
(and named in its digest) only then.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import marshal
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:   # not POSIX: no lock (a concurrent first run builds too; the rename keeps it whole)
    fcntl = None

_KERNELS: dict[Callable, Callable] = {}
_HOW: dict[Callable, str] = {}
_LOCK = threading.Lock()
#: ``(start, end)`` (``time.perf_counter()``) of each build in this process, waits for
#: another process's build included; builds hold ``_LOCK``, so the intervals do not overlap
_BUILDS: list[tuple[float, float]] = []


def build_seconds(start: float, end: float) -> float:
    """Wall seconds of ``[start, end]`` (``time.perf_counter()`` values) this process
    spent building kernels (or waiting for another process's build): a first run's
    one-time cost, which the jobs keep out of their stage times (report.json's
    ``timings_s.kernel_build``)."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in list(_BUILDS))


def compiled(fn: Callable, signature: str) -> Callable:
    """``fn`` as machine code for ``signature`` (numba's notation), once per process."""
    with _LOCK:
        kernel = _KERNELS.get(fn)
        if kernel is None:
            kernel, _HOW[fn] = _ahead_of_time(fn, signature)
            _KERNELS[fn] = kernel
    return kernel


#: environment variable: ``numpy`` makes :func:`prebuilt` return ``None`` (the callers' numpy paths);
#: ``load`` loads a module built before but never builds one (Spark's executors, :func:`executor_mode`)
KERNELS_ENV = "STREAMJOIN_KERNELS"
#: its values (unset or empty: ``auto``); a run refuses any other (config/settings.py)
KERNEL_MODES = ("auto", "numpy", "load")


def executor_mode() -> str:
    """``$STREAMJOIN_KERNELS`` for a Spark executor's Python workers: ``numpy`` if
    this process runs the numpy paths, else ``load`` -- a task never builds a kernel
    (several at once, inside a task); the driver builds them before the tasks run."""
    return "numpy" if os.environ.get(KERNELS_ENV) == "numpy" else "load"


def prebuilt(fn: Callable, signature: str) -> Callable | None:
    """``fn`` built ahead of time (built now if this machine has none yet), or
    ``None`` where no module can be built, anything unexpected goes wrong
    (a speed-up never fails a run) or ``$STREAMJOIN_KERNELS`` is
    ``numpy`` (``load``: a module built before, never a build): never numba's jit, whose per-process cost (about 0.5 s) is
    more than these kernels save.  Once per process."""
    mode = os.environ.get(KERNELS_ENV)
    if mode == "numpy":
        return None
    with _LOCK:
        if fn not in _HOW:
            try:
                _KERNELS[fn], _HOW[fn] = _ahead_of_time(fn, signature, jit_fallback=False, build=mode != "load")
            except Exception:   # noqa: BLE001 - a speed-up never fails a run: the numpy path instead
                _KERNELS[fn], _HOW[fn] = None, "none"
        return _KERNELS[fn]


def how(fn: Callable) -> str | None:
    """How ``fn``'s kernel was loaded in this process: ``"aot"`` (an existing
    module), ``"aot-built"`` (built now), ``"jit"`` (the fallback), ``"none"``
    (:func:`prebuilt` without a module), ``None`` (not yet)."""
    return _HOW.get(fn)


#: what the build changes beyond numba's defaults (part of the module name: a module built
#: without it -- one that holds the GIL -- is not loaded, but built again)
BUILD_OPTIONS = b"release_gil"


def helper(fn: Callable) -> Callable:
    """Mark ``fn`` as a helper a kernel calls (by its global name): it stays a plain
    Python function (the kernels' plain-Python runs call it as such), and only
    where a kernel is built or jitted is it compiled with it (``numba.njit``,
    in a copy of the kernel's globals: the module is not changed).  Its source
    is part of the kernel module's name, so an edited helper is rebuilt too."""
    fn.__sj_helper__ = True
    return fn


def _helpers(fn: Callable) -> list[Callable]:
    """The :func:`helper` functions ``fn`` calls, and theirs, each once, in order."""
    found: list[Callable] = []

    def visit(f):
        for name in f.__code__.co_names:
            g = f.__globals__.get(name)
            if getattr(g, "__sj_helper__", False) and g not in found:
                found.append(g)
                visit(g)
    visit(fn)
    return found


def _with_compiled_helpers(fn: Callable, njit: Callable) -> Callable:
    """``fn`` reading its :func:`helper` globals as ``njit`` of them (recursively)."""
    import types

    compiled_: dict[str, Callable] = {}

    def rebound(f):
        names = {n for n in f.__code__.co_names if getattr(f.__globals__.get(n), "__sj_helper__", False)}
        for n in names:
            if n not in compiled_:
                compiled_[n] = njit(rebound(f.__globals__[n]))
        if not names:
            return f
        g = types.FunctionType(f.__code__, {**f.__globals__, **{n: compiled_[n] for n in names}}, f.__name__,
                               f.__defaults__, f.__closure__)
        g.__qualname__, g.__module__ = f.__qualname__, f.__module__
        return g
    return rebound(fn)


def _module_name(fn: Callable, signature: str) -> str:
    versions = []
    for package in ("numba", "numpy"):   # the module checks numpy's C API when it is imported
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "none"
        versions.append(version if package == "numba" else ".".join(version.split(".")[:2]))
    try:
        source = b"\n".join(inspect.getsource(f).encode() for f in (fn, *_helpers(fn)))
    except OSError:   # no source file (a frozen install): the bytecode names the kernel
        source = b"".join(marshal.dumps(f.__code__) for f in (fn, *_helpers(fn)))
    digest = hashlib.sha256(b"\n".join((source, signature.encode(), *(v.encode() for v in versions),
                                          sys.version.encode(), BUILD_OPTIONS)))
    return f"_sj_{fn.__name__.strip('_')}_{digest.hexdigest()[:16]}"


def _cache_dirs() -> list[Path]:
    return [Path(__file__).resolve().parent / "__pycache__", *_user_cache()]


def _user_cache() -> list[Path]:
    """``$XDG_CACHE_HOME/streamjoin/kernels`` (``~/.cache/...``), or nothing where
    there is no home (``$HOME`` unset and a uid without a passwd entry)."""
    try:
        home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    except (RuntimeError, KeyError, OSError):
        return []
    return [Path(home) / "streamjoin" / "kernels"]


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def _load(path: Path, name: str) -> Callable | None:
    """The kernel of the module at ``path``, or ``None`` (absent, or a broken file: built again)."""
    if not path.is_file():
        return None
    try:
        return _import(path, name)
    except ImportError:
        return None


def _lock(d: Path, name: str):
    """``d/<name>.lock``, open and held exclusively (``fcntl.flock``, released when
    the file closes): one process builds a module, concurrent first runs wait for
    it and load it.  Raises ``OSError`` where ``d`` is not writable."""
    d.mkdir(parents=True, exist_ok=True)
    f = open(d / (name + ".lock"), "a")
    if fcntl is not None:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError:   # a file system without locks: build unlocked (the rename keeps the module whole)
            pass
    return f


@contextmanager
def _timed_build(t0: float):
    try:
        yield
    finally:
        _BUILDS.append((t0, time.perf_counter()))


def _ahead_of_time(fn: Callable, signature: str, *, jit_fallback: bool = True,
                   build: bool = True) -> tuple[Callable | None, str]:
    name = _module_name(fn, signature)
    filename = name + importlib.machinery.EXTENSION_SUFFIXES[0]
    dirs = _cache_dirs()
    for d in dirs:
        kernel = _load(d / filename, name)
        if kernel is not None:
            return kernel, "aot"
    if not build:   # load only (a Spark task): no build, no lock, no line
        return (None, "none") if not jit_fallback else (_jit(fn, signature), "jit")
    if any(_marker_fresh(d / (name + NOBUILD)) for d in dirs):   # no compiler here today: no retry, no line
        return (_jit(fn, signature), "jit") if jit_fallback else (None, "none")
    announced = False
    why = None
    permanent = False
    for d in dirs:
        t0 = time.perf_counter()
        try:
            lock = _lock(d, name)
        except OSError:   # not writable: the next directory
            continue
        try:
            with lock, _timed_build(t0):
                kernel = _load(d / filename, name)   # built by a concurrent process while this one waited
                if kernel is not None:
                    return kernel, "aot"
                why = missing_toolchain()
                if why is not None:
                    permanent = True
                    break
                if not announced:
                    # 5-10 s of silence would look like a hang: one line on stderr, once per kernel and machine
                    # (measured 5.0-7.4 s per kernel at load average 7: docs/performance.md)
                    sys.stderr.write(f"streamjoin: building the {fn.__name__.strip('_')} kernel once for this "
                                     "machine (about 5-10 s; later runs load it in milliseconds)\n")
                    sys.stderr.flush()
                    announced = True
                with tempfile.TemporaryDirectory(dir=d, prefix=".build-") as tmp:
                    try:
                        _build(fn, signature, name, tmp)
                    except ImportError:   # a numba without numba.pycc
                        permanent = True
                        raise
                    except RuntimeError as e:   # numba.pycc's own compiler probe failed (e.g. cc but no C++ front end)
                        permanent = NO_COMPILER in str(e)
                        raise
                    os.replace(Path(tmp) / filename, d / filename)   # atomic: a reader sees all of it or none
                return _import(d / filename, name), "aot-built"
        except Exception as e:   # noqa: BLE001 - a failed compiler (killed, disk full), no numba.pycc: the next, then fall back
            why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            if permanent:
                break
            continue
    if why is None:   # no writable cache directory: no build, and nothing to say (every process would repeat it)
        return (_jit(fn, signature), "jit") if jit_fallback else (None, "none")
    # a permanent cause (no compiler, no numba.pycc): later processes fall back at once for a day,
    # without a build attempt or a line; any other failure (a killed compiler, a full disk) is tried again
    marker = None
    if permanent:   # in the user's cache directory (the last), not install-wide where there is one
        marker = next((m for m in (d / (name + NOBUILD) for d in reversed(dirs)) if _write_marker(m, why)), None)
    sys.stderr.write(f"streamjoin: could not build the {fn.__name__.strip('_')} kernel ({why}); "
                     + ("using numba's jit instead (about 0.5 s per process)" if jit_fallback else "using numpy instead")
                     + (f"; not tried again for a day (delete {marker} to try sooner)\n" if marker is not None
                        else "; the next run tries again\n" if not permanent else "\n"))
    sys.stderr.flush()
    return (_jit(fn, signature), "jit") if jit_fallback else (None, "none")


#: a file ``<module name>`` + this in a cache directory: that module cannot be built here (no compiler)
NOBUILD = ".nobuild"
#: numba.pycc's message when its test compile fails: as permanent as a missing compiler
NO_COMPILER = "compile AOT function without the compiler"
#: a marker older than this (seconds) is ignored: the build is tried again (a compiler installed since)
MARKER_TTL_S = 24 * 3600


def _marker_fresh(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime < MARKER_TTL_S
    except OSError:
        return False


def missing_toolchain() -> str | None:
    """Why no kernel module can be built on this machine -- no C compiler
    (``$CC``, else the interpreter's, on ``PATH``) or no numba -- or ``None``."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    if not cc or shutil.which(cc[0]) is None:
        return f"no C compiler: {cc[0] if cc else '$CC'} not found"
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed"
    return None


def _write_marker(path: Path, why: str) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(why + "\n")
        return True
    except OSError:
        return False


def _jit(fn: Callable, signature: str) -> Callable:
    from numba import njit

    return njit(signature, cache=True, nogil=True)(_with_compiled_helpers(fn, njit))


def _build(fn: Callable, signature: str, name: str, out_dir: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # numba.pycc announces its deprecation
        from numba.pycc import CC

        from numba import njit
        from numba.pycc import compiler as pycc_compiler

        fn = _with_compiled_helpers(fn, njit)
        cc = CC(name)
        cc.output_dir = out_dir
        cc.verbose = False
        cc.export("kernel", signature)(fn)
        # numba.pycc has no ``nogil`` for an export (numba's jit has): its wrapper is
        # generated from a fresh ``Flags()`` (``_ModuleCompiler._cull_exports``), so
        # for this build that class sets ``release_gil`` -- the same wrapper
        # ``njit(nogil=True)`` makes (``callwrapper._GilManager``): the GIL is released
        # after the arguments are unboxed and taken back before the result is boxed
        flags = pycc_compiler.Flags

        class _ReleaseGil(flags):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.release_gil = True

        pycc_compiler.Flags = _ReleaseGil
        try:
            cc.compile()
        finally:
            pycc_compiler.Flags = flags
