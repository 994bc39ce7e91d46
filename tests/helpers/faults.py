"""Driving the test-only fault hooks of ``pipelines/io/output.py`` from a test.

``STREAMJOIN_TEST_PAUSE_AT=<step>`` makes a ``streamjoin`` process stop itself
(SIGSTOP) at a named step of the publish protocol; :func:`wait_stopped` waits
until it has, so a signal sent then to its main thread (:func:`signal_and_resume`)
lands exactly there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import time

from streamjoin.pipelines.io.output import FAIL_ENV, NO_EXCHANGE_ENV, PAUSE_ENV

HOOKS = (PAUSE_ENV, FAIL_ENV, NO_EXCHANGE_ENV)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any fault hook, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in HOOKS and k != "STREAMJOIN_FAULT"}
    env.update(extra)
    return env


def state(pid: int) -> str | None:
    """The process state letter from ``/proc/<pid>/stat`` (``T`` = stopped), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2]


def wait_stopped(proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    """Wait until ``proc`` stopped itself at its pause step; False if it ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        if state(proc.pid) in ("T", "t"):
            return True
        time.sleep(0.01)
    raise AssertionError(f"pid {proc.pid} did not reach its pause step in {timeout}s")


def send_to_main_thread(pid: int, sig: int) -> None:
    """``sig`` to the main thread of process ``pid`` (``tgkill(2)``), as the kernel gives it to a running one.

    A process-directed signal (``kill(2)``) is handed to a thread when it is
    sent: the main thread if it can take it -- which is where CPython runs
    its handlers.  A *stopped* process has no thread that can: the signal
    waits in the process's queue, and after SIGCONT whichever thread runs
    first takes it -- often a worker (polars, pyarrow, numba keep a dozen),
    whose C-level handler may run only after the main thread went on past
    the pause step, e.g. into ``interrupts_held``: the signal then counts as
    landing there, not at the step (seen: SIGTERM at ``staged`` published a
    day).  Sent to the main thread it is taken there on resuming, before any
    further Python code.

    Where libc has no ``tgkill`` (macOS, glibc before 2.30) it falls back to
    ``kill(2)``, with the race above (:data:`MAIN_THREAD_SIGNALS` is false).
    """
    tgkill = getattr(_libc, "tgkill", None)
    if tgkill is None:
        os.kill(pid, sig)
    elif tgkill(pid, pid, sig) != 0:
        err = ctypes.get_errno()
        raise (ProcessLookupError if err == errno.ESRCH else OSError)(err, os.strerror(err), pid)


_libc = ctypes.CDLL(None, use_errno=True)
#: whether :func:`send_to_main_thread` can reach the main thread (``tgkill``), not only the process
MAIN_THREAD_SIGNALS = hasattr(_libc, "tgkill")


def signal_and_resume(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to a stopped process's main thread, then let it run on to act on it (at its pause step)."""
    if proc.poll() is None:
        try:
            send_to_main_thread(proc.pid, sig)
            os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
