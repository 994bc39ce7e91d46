"""One lock per output: two runs never write the same output at once.

Every output streamjoin publishes (a ``run`` / ``tune-buffer`` ``--out``, a
nightly partition ``OUT/date=D/``, see :mod:`.output`) has a lock file beside
it: ``P/.NAME.lock`` for the output ``P/NAME`` (:func:`lock_of`).  The lock is
an ``flock(2)`` on that file, taken without waiting.
The kernel drops it when the holding process exits for *any* reason
(including ``SIGKILL``), so a crashed run never blocks the next night.  The
holder writes its pid into the file so the refused run can say who holds it.

The file is removed when the lock is released (published, failed, skipped or
interrupted alike), so no lock file is left for outputs never written.
Removing a lock file is safe because of the order of steps: the holder
unlinks the path *before* unlocking, and a run that takes the lock checks
that the path still names the inode it locked -- if not (the previous holder
unlinked it meanwhile) it starts again on the new file.  So two runs never
hold locks on two different inodes of one partition.  A file a killed run
left (its lock gone with the process) is *stale*: :func:`remove_stale`
removes it by taking and releasing it.

A run that finds the lock taken raises :class:`LockedError` (exit code 4):
it does nothing, and the message is one line.

Within one process the lock is re-entrant: a job that locks its ``--out`` at
the start and then publishes through :class:`~.output.AtomicOutput` (which
locks it too) holds one ``flock`` (a second ``flock`` on a new descriptor of
the same file would refuse its own process).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..base.errors import EXIT_LOCKED, StreamjoinError


class LockedError(StreamjoinError):
    """The output is being written by another run."""

    exit_code = EXIT_LOCKED


#: locks this process holds: absolute lock path -> how many holders nest
_held: dict[str, int] = {}


def lock_of(target: Path) -> Path:
    """The lock file of the output ``target``: ``.NAME.lock`` beside it."""
    target = Path(target)
    return target.parent / f".{target.name}.lock"


class OutputLock:
    """Context manager: hold the lock file ``path``, or raise :class:`LockedError`.

    ``what`` names the output in the message (``out/date=2026-11-21``).
    """

    def __init__(self, path: Path, what: str):
        self.path = Path(path)
        self.what = what
        self.fd: int | None = None
        self.key = os.path.abspath(self.path)

    def __enter__(self) -> "OutputLock":
        if self.key in _held:  # this process holds it already (module docstring)
            _held[self.key] += 1
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                finally:
                    os.close(fd)
                raise LockedError(f"{self.what} is locked by another streamjoin run (pid {holder}); skipped") from None
            if _names(self.path, fd):
                break
            os.close(fd)  # the previous holder removed the file while we waited: lock the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        _held[self.key] = 1
        return self

    def __exit__(self, *exc) -> bool:
        if self.key in _held and self.fd is None:  # an inner, nested holder
            _held[self.key] -= 1
            return False
        if self.fd is not None:
            _held.pop(self.key, None)
            try:
                self.path.unlink(missing_ok=True)  # before unlocking: see the module docstring
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None
        return False


def _names(path: Path, fd: int) -> bool:
    """Does ``path`` still name the file open as ``fd``?"""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def remove_stale(path: Path) -> bool:
    """Remove a lock file no live process holds (left by a killed run); True if removed."""
    if not Path(path).exists() or os.path.abspath(path) in _held:
        return False
    try:
        with OutputLock(path, str(path)):
            pass
    except LockedError:
        return False
    return True
