"""Atomic publication of one output partition ``out/date=D/``.

Guarantee: **a run killed at any moment (even by SIGKILL) leaves either the
previous published partition or the new one, never a mix**, and the next run
cleans up whatever the killed one left.

How (the caller holds the partition's lock, :mod:`.lock`):

1. :func:`clean_leftovers` removes ``.date=D.staging-*`` / ``.date=D.trash-*``
   directories of earlier, dead runs (and, after a crash inside the fallback
   swap, puts the previous partition back first);
2. files are written into ``out/.date=D.staging-<pid>-<id>/`` and fsynced;
3. the caller validates the staging directory (:func:`validate`), then
   ``_SUCCESS`` is written last;
4. the staging directory replaces ``date=D`` in **one** ``renameat2(...,
   RENAME_EXCHANGE)`` (Linux): readers see the old directory or the new one;
   the old one, now under the staging name, is deleted.  Where the exchange
   is not supported (other kernels, some file systems) two renames are used
   (``date=D`` -> ``.date=D.trash-*``, staging -> ``date=D``): a kill between
   them leaves no ``date=D`` for a moment, and step 1 of the next run restores
   the old partition from the trash directory.

A partition counts as published only if it holds ``_SUCCESS``; dot-prefixed
names (staging, trash, lock) are ignored by Spark, pyarrow and Hive readers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import time
import uuid
from pathlib import Path

from ..base.errors import InputError, StreamjoinError
from .manifest import SUCCESS

_PART_RE = re.compile(r"^\.?date=\d{4}-\d{2}-\d{2}(\.(lock|staging-.*|trash-.*))?$")

#: test hook: ``STREAMJOIN_FAULT=pause-before-publish`` (or ``pause-after-exchange``)
#: makes the writer stop at that point (touching ``<staging>/.paused``) so a
#: test can kill it there; ``fail-before-publish`` raises instead.  Never set
#: in production.
FAULT_ENV = "STREAMJOIN_FAULT"


class PublishError(StreamjoinError):
    """The staged partition failed validation; nothing was published."""


def partition_dir(out: Path, day) -> Path:
    return Path(out) / f"date={day.isoformat()}"


def lock_path(out: Path, day) -> Path:
    return Path(out) / f".date={day.isoformat()}.lock"


def check_root(out: Path) -> None:
    """``out`` must be new, empty, or hold only partitions (and their dot-files)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: output path exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if not _PART_RE.match(p.name))
        if foreign:
            raise InputError(f"{out}: not a partitioned streamjoin output (holds {foreign[0]!r}); choose another --out")


def remove_stale_locks(out: Path) -> list[str]:
    """Remove the ``.date=D.lock`` files of runs that died (no live holder); returns their names."""
    from .lock import remove_stale

    out = Path(out)
    if not out.is_dir():
        return []
    return [p.name for p in sorted(out.glob(".date=*.lock")) if remove_stale(p)]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clean_leftovers(out: Path, day) -> list[str]:
    """Remove what dead runs left for this partition; returns what was done."""
    out = Path(out)
    if not out.is_dir():
        return []
    name = f".date={day.isoformat()}."
    final = partition_dir(out, day)
    done = []
    trash = sorted(p for p in out.iterdir() if p.name.startswith(name + "trash-"))
    if not final.exists():
        for t in trash:  # killed between the two renames of the fallback swap
            if (t / SUCCESS).is_file():
                os.rename(t, final)
                done.append(f"restored {final.name} from {t.name}")
                break
    for p in out.iterdir():
        if p.name.startswith((name + "staging-", name + "trash-")):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {p.name}")
    return done


def new_staging(out: Path, day) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".date={day.isoformat()}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    return staging


def _fault(point: str, staging: Path) -> None:
    if os.environ.get(FAULT_ENV) == "fail-" + point.removeprefix("pause-"):
        raise RuntimeError(f"injected fault at {point}")
    if os.environ.get(FAULT_ENV) == point:
        (staging / ".paused").touch() if staging.exists() else None
        while True:  # wait to be killed
            time.sleep(0.05)


_RENAME_EXCHANGE = 2
_libc = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); False if unsupported."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fn = _libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD = -100
    rc = fn(AT_FDCWD, os.fsencode(str(a)), AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def commit(staging: Path, out: Path, day) -> None:
    """Mark ``staging`` complete and put it in place of ``out/date=D`` (module docstring)."""
    (staging / SUCCESS).touch()
    _fsync_dir(staging)
    _fault("pause-before-publish", staging)
    final = partition_dir(out, day)
    if final.exists():
        if _exchange(staging, final):
            _fsync_dir(final.parent)
            _fault("pause-after-exchange", staging)
            shutil.rmtree(staging, ignore_errors=True)  # now holds the old partition
            return
        trash = final.parent / f".date={day.isoformat()}.trash-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
        os.rename(staging, final)
        _fsync_dir(final.parent)
        shutil.rmtree(trash, ignore_errors=True)
        return
    os.rename(staging, final)
    _fsync_dir(final.parent)


def abandon(staging: Path | None) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
