"""Atomic output directories: a run publishes everything or nothing.

Files are written into a staging directory beside ``--out``
(``.<name>.staging-<id>``) and renamed into place only after every file is
complete.  A failure or Ctrl-C removes the staging directory; a previous
output stays untouched until the new one is complete, so readers see either
the old result or the new one, never a mix.  (The rename of a directory over
an existing one is two renames; the window between them is reported to
readers as "no output" rather than a partial one.)
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..config.options import check_target



@contextmanager
def sigint_held() -> Iterator[list[int]]:
    """Hold Ctrl-C while directories are created, renamed or removed.

    A SIGINT landing between two of those steps would leave a staging or old
    directory behind (or a previous output moved aside).  Inside this block a
    SIGINT is only recorded; the list yielded tells the caller whether one
    came.  Outside the main thread (no signal handlers there) it does nothing.
    """
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield pending
    finally:
        signal.signal(signal.SIGINT, previous)


def _redeliver_sigint() -> None:
    """Act on a held SIGINT as the process's own handler would have."""
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler or handler == signal.SIG_DFL:
        raise KeyboardInterrupt
    if callable(handler):
        handler(signal.SIGINT, None)


class AtomicOutput:
    """Context manager yielding a staging directory published on success.

    Args:
        out: the final output directory.  It may not exist, be empty, or be a
            previous output of the same command (holds its marker file,
            :data:`MARKERS`); anything else is refused rather than overwritten.
        kind: the command writing it, a key of :data:`MARKERS`.
    """

    def __init__(self, out: Path, kind: str = "run"):
        self.out = Path(out)
        self.kind = kind
        self.staging: Path | None = None

    def __enter__(self) -> Path:
        out = self.out
        check_target(out, self.kind)
        parent = out.parent if str(out.parent) else Path(".")
        parent.mkdir(parents=True, exist_ok=True)
        staging = parent / f".{out.name}.staging-{uuid.uuid4().hex[:12]}"
        with sigint_held() as interrupted:
            staging.mkdir()
        if interrupted:  # Ctrl-C came while staging was being made: leave nothing
            with sigint_held():
                staging.rmdir()
            _redeliver_sigint()
        self.staging = staging
        return staging

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self.staging is not None
        if exc_type is not None:
            with sigint_held():  # a second Ctrl-C must not stop the clean-up
                shutil.rmtree(self.staging, ignore_errors=True)
            return False
        # Publishing is a few renames; a Ctrl-C during them is held and then
        # ignored: the run is complete and its output is whole.
        with sigint_held():
            old = None
            if self.out.exists():
                old = self.out.parent / f".{self.out.name}.old-{uuid.uuid4().hex[:12]}"
                os.replace(self.out, old)
            os.replace(self.staging, self.out)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        return False
