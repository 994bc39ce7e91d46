"""One lock per output partition: two runs never write the same day at once.

The lock is an ``flock(2)`` on ``out/.date=D.lock``, taken without waiting.
The kernel drops it when the holding process exits for *any* reason
(including ``SIGKILL``), so a crashed run never leaves a stale lock that
blocks the next night; the file itself stays (removing it would let two
runs lock two different inodes).  The holder writes its pid into the file so
the refused run can say who holds it.

A run that finds the lock taken raises :class:`LockedError` (exit code 4):
it does nothing, and the message is one line.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..base.errors import EXIT_LOCKED, StreamjoinError


class LockedError(StreamjoinError):
    """The partition is being written by another run."""

    exit_code = EXIT_LOCKED


class PartitionLock:
    """Context manager: hold the lock of one partition, or raise :class:`LockedError`."""

    def __init__(self, path: Path, what: str):
        self.path = Path(path)
        self.what = what
        self.fd: int | None = None

    def __enter__(self) -> "PartitionLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
            raise LockedError(f"{self.what} is locked by another streamjoin run (pid {holder}); skipped") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> bool:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None
        return False
