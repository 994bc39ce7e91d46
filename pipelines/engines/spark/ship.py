"""Shipping the streamjoin package to Spark's executors (issue 19, cluster hygiene).

Every task's Python worker imports streamjoin: the functions Spark runs are
pickled by reference to their modules (``streamjoin.pipelines.engines.spark.*``).
On a local master the workers run this interpreter, which has the package;
on a cluster they run the cluster's Python, which may not.  The Spark conf
``spark.streamjoin.ship`` (``--spark-conf``, ``[run.spark_conf]``) decides:

* ``auto`` (the default): ship on a master whose executors are on other hosts
  (not ``local*``, :func:`~streamjoin.pipelines.config.options.same_host`);
* ``true``: ship on any master;
* ``false``: the executors' Python has streamjoin (installed there, or
  ``spark-submit --py-files``).

Shipping is :func:`package_zip` + ``SparkContext.addPyFile``: Spark copies the
zip to every executor and puts it on its workers' ``sys.path``.  The zip holds
the installed package's Python files as ``streamjoin/...`` (an editable
install's source tree, or site-packages'); it is built once per content --
its name carries the package version and a SHA-256 digest of every file's
path and bytes -- in ``$XDG_CACHE_HOME/streamjoin/ship/`` (``~/.cache/...``;
where that is not writable, one temporary directory per process, removed when
it exits), written under a
temporary name and renamed into place, so concurrent first runs each leave a
whole zip and readers never see half of one.  The compiled kernels are not
in it: an executor without them runs the numpy kernels (the same answer,
pipelines/base/jit.py).

A worker that cannot import streamjoin fails the first job (the warm-up; the
read on the native path) with a Python traceback inside a Java one;
:func:`executor_imports` around those jobs turns it into
:func:`executor_import_error`'s one line.

The zip's digest is computed once per process (:func:`package_zip` remembers
it by the package files' stat identity): a run that opens its session twice
(``--out`` as a Hadoop URI) reads and hashes the package once.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...base.errors import InputError
from ...base.version import tool_version
from ...config.options import SHIP_CONF_KEY, same_host, ship_mode

#: the package's importable parts, each shipped as ``streamjoin/<part>/``
PARTS = ("cli", "pipelines")
#: zip entries' timestamp: the same files make the same bytes
_EPOCH = (1980, 1, 1, 0, 0, 0)


def ship_wanted(master: str, conf) -> bool:
    """``spark.streamjoin.ship`` for ``master``: ``true``; ``auto`` (the default) on a
    master whose executors are on other hosts; never with ``false``."""
    mode = ship_mode(conf)
    return mode == "true" or (mode == "auto" and not same_host(master))


def package_files() -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for every Python file of the installed package, sorted."""
    out = []
    for part in PARTS:
        spec = importlib.util.find_spec(f"streamjoin.{part}")
        for root in spec.submodule_search_locations:
            root = Path(root)
            for f in root.rglob("*.py"):
                if "__pycache__" not in f.parts:
                    out.append((f"streamjoin/{part}/{f.relative_to(root).as_posix()}", f))
    return sorted(out)


def _cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/streamjoin/ship`` (``~/.cache/...``) if it can be written, else None."""
    try:
        home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        d = Path(home) / "streamjoin" / "ship"
        d.mkdir(parents=True, exist_ok=True)
    except (RuntimeError, KeyError, OSError):
        return None
    return d if os.access(d, os.W_OK) else None


_temporary: Path | None = None


def _temporary_cache() -> Path:
    """This process's cache where the user's is not writable: one directory, removed at exit
    (the session that shipped its zip has stopped by then)."""
    global _temporary
    if _temporary is None:
        _temporary = Path(tempfile.mkdtemp(prefix="streamjoin-ship-"))
        atexit.register(shutil.rmtree, _temporary, True)
    return _temporary


#: this process's zips: (cache directory, every package file's name and stat identity) -> zip
_known: dict[tuple, Path] = {}


def _identity(files: list[tuple[str, Path]]) -> tuple:
    """The package files as they are now: name, inode, size and modification time of each
    (an edit, a reinstall or a checkout changes one of them)."""
    out = []
    for name, f in files:
        st = f.stat()
        out.append((name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def package_zip(cache: Path | None = None) -> Path:
    """The zip of the installed package (module docstring): the cached one for this
    content, or built now (under a temporary name, renamed into place).  Hashed once per
    process while the files' stat identity holds: a run's second session (a Hadoop URI
    ``--out`` opens one before the join's) finds this process's zip without reading the
    package again."""
    files = package_files()
    cache = cache if cache is not None else _cache_dir()
    if cache is None:
        cache = _temporary_cache()
    key = (str(cache), _identity(files))
    known = _known.get(key)
    if known is not None and known.is_file():
        return known
    contents = [(name, f.read_bytes()) for name, f in files]
    digest = hashlib.sha256()
    for name, data in contents:
        digest.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    target = cache / f"streamjoin-{tool_version()}-{digest.hexdigest()[:16]}.zip"
    if target.is_file() and zipfile.is_zipfile(target):
        _known[key] = target
        return target
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
            # a regular package on the executors (the install's top level is a namespace)
            z.writestr(zipfile.ZipInfo("streamjoin/__init__.py", _EPOCH), b"")
            for name, data in contents:
                info = zipfile.ZipInfo(name, _EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    _known[key] = target
    return target


def ship(spark, master: str, conf) -> Path | None:
    """Add the package zip to ``spark``'s context when :func:`ship_wanted`; returns it (None: not shipped)."""
    if not ship_wanted(master, conf):
        return None
    path = package_zip()
    spark.sparkContext.addPyFile(str(path))
    return path


def executor_import_error(exc: BaseException, mode: str) -> InputError | None:
    """The one-line error for a Spark job that failed because a worker could not import
    streamjoin (None: ``exc`` is another failure); ``mode``: the run's ``spark.streamjoin.ship``."""
    if "No module named 'streamjoin" not in str(exc):
        return None
    return InputError(f"the executors' Python cannot import streamjoin ({SHIP_CONF_KEY}={mode}): ship it with "
                      f"--spark-conf {SHIP_CONF_KEY}=true (or spark-submit --py-files), or install streamjoin "
                      f"in the executors' Python (spark.pyspark.python / PYSPARK_PYTHON)")


@contextmanager
def executor_imports(spark) -> Iterator[None]:
    """Spark jobs whose workers import streamjoin: a failure to import it becomes
    :func:`executor_import_error`'s one line, any other exception passes unchanged.
    The one place that mapping is made (the warm-up, the native path's read)."""
    try:
        yield
    except Exception as exc:
        one_line = executor_import_error(exc, spark.conf.get(SHIP_CONF_KEY, "auto"))
        if one_line is None:
            raise
        raise one_line from None
