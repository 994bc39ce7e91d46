"""Atomic outputs: every writer publishes everything or nothing, in one step.

One protocol for everything streamjoin publishes -- a ``run`` or
``tune-buffer`` ``--out`` (:class:`AtomicOutput`), a nightly partition
``OUT/date=D/`` (:mod:`streamjoin.pipelines.nightly.publish`), a re-rendered
``report.html`` (:func:`write_file_atomic`).  For an output ``P/NAME``:

* ``P/.NAME.lock`` -- the writer holds it (:mod:`.lock`) for the whole job, so
  two writers never interleave (the second exits 4);
* ``P/.NAME.staging-<pid>-<id>`` -- the new version is written here, then its
  files and the directory are fsynced;
* publishing (:func:`commit`) is **one** rename: ``renameat2(staging, NAME,
  RENAME_EXCHANGE)`` when ``NAME`` is a directory that exists (Linux: ext4,
  xfs, btrfs, tmpfs, overlayfs), after which the staging name holds the
  previous version and is deleted; a plain ``rename(2)`` when ``NAME`` does
  not exist yet or is a file.  Readers see the previous version or the new
  one, never a mix and never nothing;
* **fallback** where the kernel or file system refuses the exchange
  (``EINVAL``/``ENOSYS``/``ENOTSUP``: other kernels, some network file
  systems): two renames, ``NAME`` -> ``P/.NAME.trash-<id>`` then staging ->
  ``NAME``.  A kill between them leaves no ``NAME`` for a moment; the next
  writer puts the trash back (:func:`recover`).

What a kill (even SIGKILL) leaves, and why the next writer recovers (it runs
:func:`recover` under the lock before anything else): before the publishing
rename, a staging directory (removed; ``NAME`` untouched); after the exchange,
a staging directory holding the *previous* version (removed; ``NAME`` is the
new one); in the fallback between the two renames, a trash directory and no
``NAME`` (the trash, a complete earlier version, is renamed back).

Interrupts (SIGINT = Ctrl-C, SIGTERM): while a version is being published
they are held (:func:`interrupts_held`); with an :class:`InterruptGuard`
installed (the CLI installs one), **published means done**: before the
publishing rename an interrupt stops the run (nothing published, exit 130),
from it on an interrupt is only recorded and the process reports the
published work with its own exit code.  Without a guard (a library caller)
a held signal is acted on, once, when the held block ends, as the process's
own handler would have: the default SIGINT handler raises
``KeyboardInterrupt`` *after* the version is in place (:func:`act_on_held`).  SIGKILL cannot be caught: it leaves
what the crash points above say, and the next writer recovers.

Test hooks (environment variables, for the fault-injection tests only; never
set them in production): ``STREAMJOIN_TEST_PAUSE_AT=<step>[,<step>]`` makes
the process print ``streamjoin: test pause at <step> (pid N)`` to stderr and
stop itself (SIGSTOP) the first time it reaches that step, so a test can
kill it there and nowhere else (an interrupt sent to its main thread:
tests/helpers/faults.py says why), or resume it (SIGCONT); ``STREAMJOIN_TEST_FAIL_AT=<step>`` raises an
internal failure there; ``STREAMJOIN_TEST_NO_EXCHANGE=1`` takes the fallback.
Steps: ``staged`` (staging complete, before publishing), ``exchanged`` (after
the exchange, before the previous version is deleted), ``trashed`` (fallback:
between the two renames), ``published`` (after publishing); a nightly day also
has ``loaded`` (inputs read, before they are checked against what was read);
a ``run`` writing results.parquet in memory has ``results`` (in the results
writer's own thread, before each row group, while the metrics are computed:
:class:`~streamjoin.pipelines.io.results_file.BackgroundWrite`).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..config.options import MARKERS, check_target, is_uri
from .lock import OutputLock, lock_of

#: results.parquet's codec: snappy, Spark's and DuckDB's default for Parquet output.
#: On the core benchmark's 7.9M results it writes in about a third of zstd's
#: time for a file about a third larger (docs/performance.md, issue 21).
RESULTS_COMPRESSION = "snappy"

PAUSE_ENV = "STREAMJOIN_TEST_PAUSE_AT"
FAIL_ENV = "STREAMJOIN_TEST_FAIL_AT"
NO_EXCHANGE_ENV = "STREAMJOIN_TEST_NO_EXCHANGE"

#: name parts (after ``.NAME.``) of what writers leave beside an output;
#: ``old-`` is what versions before the exchange left (the old two-rename swap)
_LEFTOVERS = ("staging-", "trash-", "old-")
_EARLIER_VERSIONS = ("trash-", "old-")


# ----------------------------------------------------------------------------
# interrupts: SIGINT, SIGTERM
# ----------------------------------------------------------------------------


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


#: the signals a run treats as "stop": Ctrl-C and the polite kill of cron,
#: systemd and timeout(1)
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM while directories are created, renamed or removed.

    A signal landing between two of those steps would leave a staging or old
    directory behind (or a previous output moved aside).  Inside this block
    one is only recorded; the list yielded tells the caller whether one came
    (read it after the block: one recorded while the handlers are put back
    is added then).  Outside the main thread (no signal handlers there) it
    does nothing.
    """
    pending: list[int] = []
    if not _main_thread():
        yield pending
        return
    previous: dict[int, object] = {}
    try:
        _set_handlers({sig: lambda signum, frame: pending.append(signum) for sig in INTERRUPTS}, previous)
        yield pending
    finally:
        _set_handlers(previous, {})


def _set_handlers(handlers: dict[int, object], previous: dict[int, object]) -> None:
    """Install every handler of ``handlers`` (their predecessors go into ``previous``), even when an interrupt comes.

    ``signal.signal`` first runs the Python handlers of signals that arrived
    (their C-level part already ran, maybe in another thread); one that raises
    ``KeyboardInterrupt`` would leave the remaining signals with the old
    handlers -- e.g. SIGINT recorded for a block that has ended, so a later
    Ctrl-C is silently lost.  The interrupt is raised once all are installed.
    """
    interrupt: KeyboardInterrupt | None = None
    for sig, handler in handlers.items():
        while True:
            try:
                previous[sig] = signal.signal(sig, handler)
                break
            except KeyboardInterrupt as exc:  # raised before the handler was set: set it again
                interrupt = exc
    if interrupt is not None:
        raise interrupt


class InterruptGuard:
    """SIGINT / SIGTERM around publishing: unpublished work is interrupted, published work is done.

    *Armed* (at first, and after :meth:`arm`), either signal raises
    ``KeyboardInterrupt`` (as Python's own SIGINT handler does): nothing is
    published, the writer removes its staging directory, and the command
    exits 130.  :func:`commit` switches the guard to *holding* the moment a
    version is published: a signal is then only recorded, so the process
    reports the work as done and exits with the code its summary states.
    :meth:`arm` before the next unit of work raises a recorded signal there (a
    nightly range stops before its next day); :meth:`hold` switches to
    holding when a unit of work ended without publishing (up to date, failed)
    and its outcome is being reported.
    """

    def __init__(self) -> None:
        self.holding = False
        self.pending: list[int] = []
        self.raised = False
        self.previous: dict[int, object] = {}

    def _handler(self, signum, frame) -> None:
        if self.holding:
            self.pending.append(signum)
        else:
            self.raised = True
            raise KeyboardInterrupt

    def arm(self) -> None:
        self.holding = False
        self.raised = False
        if self.pending:
            self.pending.clear()
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise an interrupt Python swallowed, before anything is published.

        A ``KeyboardInterrupt`` raised while Python runs a ``__del__`` or a
        weakref callback (garbage collection) cannot propagate: Python drops
        it.  Every handler that does catch one switches the guard to holding,
        so an interrupt raised while armed and not caught is still due here.
        """
        if self.raised and not self.holding:
            raise KeyboardInterrupt

    def hold(self) -> None:
        self.holding = True


_guard: InterruptGuard | None = None


def ignore_interrupts() -> None:
    """The outcome is reported, the process only exits now: ignore SIGINT and SIGTERM.

    (Python resets its handlers to the default -- die by the signal -- while it
    shuts down, which would replace an exit code the summary already stated;
    an ignored signal stays ignored.)"""
    if _main_thread():
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_IGN)


def install_interrupt_guard() -> InterruptGuard:
    """Install an :class:`InterruptGuard` for the rest of the process (the CLI's entry point)."""
    global _guard
    if _guard is None:
        _guard = InterruptGuard()
        if _main_thread():
            _guard.previous = {sig: signal.signal(sig, _guard._handler) for sig in INTERRUPTS}
            sys.unraisablehook = functools.partial(_unraisable, sys.unraisablehook)
    return _guard


def _unraisable(previous, unraisable) -> None:
    """A dropped interrupt is no error to print: :meth:`InterruptGuard.check` raises it again."""
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and _guard is not None):
        previous(unraisable)


@contextmanager
def interrupt_guard() -> Iterator[InterruptGuard]:
    """The process's :class:`InterruptGuard`, or one installed for this block (library callers: a signal it
    still holds at the end -- published work, then Ctrl-C -- is acted on once the caller's handlers are back)."""
    global _guard
    if _guard is not None:
        yield _guard
        return
    guard = install_interrupt_guard()
    try:
        yield guard
    finally:
        for sig, handler in guard.previous.items():
            signal.signal(sig, handler)
        _guard = None
        held, guard.pending = guard.pending, []
        act_on_held(held)


def act_on_held(pending: list[int]) -> None:
    """Act on the signals an :func:`interrupts_held` block recorded, now that it is over: each distinct one
    once, in the order they came, as the :class:`InterruptGuard` would have (armed: interrupt; holding: record)
    or, without one, the process's own handler; a ``KeyboardInterrupt`` is raised after all were acted on
    (Ctrl-C then SIGTERM: the SIGTERM handler still runs)."""
    interrupt: KeyboardInterrupt | None = None
    for signum in dict.fromkeys(pending):
        try:
            if _guard is not None:
                _guard._handler(signum, None)
            else:
                _redeliver(signum)
        except KeyboardInterrupt as exc:
            interrupt = interrupt or exc
    if interrupt is not None:
        raise interrupt


def _redeliver(signum: int) -> None:
    """Act on a held signal as the process's own handler would have."""
    handler = signal.getsignal(signum)
    if handler is signal.default_int_handler:
        raise KeyboardInterrupt
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


# ----------------------------------------------------------------------------
# test hooks
# ----------------------------------------------------------------------------


_paused: set[str] = set()


def fault_point(step: str) -> None:
    """Pause (the first time a step is reached) or fail here if a test asked for it (module docstring, "Test hooks")."""
    if step in os.environ.get(PAUSE_ENV, "").split(",") and step not in _paused:
        _paused.add(step)
        sys.stderr.write(f"streamjoin: test pause at {step} (pid {os.getpid()})\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
    if os.environ.get(FAIL_ENV) == step:
        raise RuntimeError(f"injected failure at {step} ({FAIL_ENV})")


# ----------------------------------------------------------------------------
# the protocol
# ----------------------------------------------------------------------------


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_libc = None


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2``); False where unsupported."""
    global _libc
    if os.environ.get(NO_EXCHANGE_ENV):
        return False
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fn = _libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """Flush a staged file, or every file and directory of a staged directory, to disk."""
    if not path.is_dir():
        _fsync(path)
        return
    for root, _, files in os.walk(path):
        for name in files:
            _fsync(Path(root) / name)
        _fsync(Path(root))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def leftovers(target: Path) -> list[Path]:
    """What writers of ``target`` left beside it (staging, trash and old versions)."""
    target = Path(target)
    prefix = f".{target.name}."
    parent = target.parent
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir()
                  if p.name.startswith(prefix) and p.name[len(prefix):].startswith(_LEFTOVERS))


def recover(target: Path, marker: str | None = None) -> list[str]:
    """Undo what dead writers of ``target`` left; returns what was done.

    The caller holds the lock of ``target`` (no live writer owns these).  If
    ``target`` is missing and an earlier version waits in a trash directory
    (a kill inside the fallback swap) it is put back -- if it holds
    ``marker``, the file a complete version of this output has; the rest is
    removed.
    """
    target = Path(target)
    left = leftovers(target)
    done = []
    if not target.exists():
        prefix = f".{target.name}."
        for p in left:
            if p.name[len(prefix):].startswith(_EARLIER_VERSIONS) and (marker is None or (p / marker).exists()):
                os.rename(p, target)
                left.remove(p)
                done.append(f"restored {target.name} from {p.name}")
                break
    for p in left:
        _remove(p)
        done.append(f"removed {p.name}")
    return done


def new_staging(target: Path) -> Path:
    """An empty staging directory for ``target`` (beside it, created with its parent)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    return staging


@contextmanager
def publishing() -> Iterator[None]:
    """Around the step that puts a complete staged version in place (:func:`commit`, and a
    Hadoop URI's renames, pipelines/engines/spark/hadoop_out.py): an interrupt before it
    stops the run, inside it is held, and once it is done published means done
    (:class:`InterruptGuard`)."""
    fault_point("staged")
    if _guard is not None:
        _guard.check()
    pending: list[int] = []
    try:
        with interrupts_held() as pending:
            yield
            if _guard is not None:  # published: from here on an interrupt cannot undo it (InterruptGuard)
                _guard.hold()
    finally:  # after the handlers are back: one recorded while they were put back counts too
        if _guard is not None:  # held for the guard: the next arm() (a range's next day) raises it
            _guard.pending += pending
        else:  # no guard (a library caller): act on each now that it is published (or failed: not lost either)
            act_on_held(pending)
    fault_point("published")


def commit(staging: Path, target: Path) -> None:
    """Put the complete ``staging`` (a directory or a file) in place of ``target`` in one step."""
    staging, target = Path(staging), Path(target)
    _fsync_tree(staging)
    with publishing():
        if target.is_dir() and not target.is_symlink():
            if exchange(staging, target):
                _fsync(target.parent)
                fault_point("exchanged")
                _remove(staging)  # it now holds the previous version
            else:
                trash = target.parent / f".{target.name}.trash-{uuid.uuid4().hex[:8]}"
                os.rename(target, trash)
                fault_point("trashed")
                try:
                    os.rename(staging, target)
                except OSError:
                    os.rename(trash, target)  # put the previous version back
                    raise
                _fsync(target.parent)
                _remove(trash)
        else:  # a new name, or a file: rename(2) replaces it in one step
            os.replace(staging, target)
            _fsync(target.parent)


def abandon(staging: Path | None) -> None:
    """Remove a staging directory or file that will not be published."""
    if staging is not None:
        with interrupts_held() as pending:  # a second signal must not stop the clean-up
            _remove(Path(staging))
        act_on_held(pending)  # ... nor be lost: e.g. Ctrl-C while a failed nightly day cleans up stops the range


def write_file_atomic(path: Path, text: str) -> None:
    """Replace the file ``path`` with ``text`` (UTF-8): staged beside it, then :func:`commit`."""
    path = Path(path)
    staging = path.parent / f".{path.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        staging.write_text(text, encoding="utf-8")
        commit(staging, path)
    except BaseException:
        abandon(staging)
        raise


def _say_recovered(notes: list[str]) -> None:
    for note in notes:
        sys.stderr.write(f"streamjoin: {note} (left by an interrupted run)\n")
    sys.stderr.flush()


def locks_out(kind: str = "run"):
    """Decorator for a job ``fn(cfg, ...)`` writing ``cfg.out``: hold its lock for the whole job.

    A second job on the same ``--out`` exits 4 at once, having done nothing;
    what a killed job left beside ``--out`` is recovered before the work
    starts.  ``kind`` is the command (:data:`MARKERS`).
    """
    def wrap(fn):
        @functools.wraps(fn)
        def job(cfg, *args, **kwargs):
            if is_uri(cfg.out):   # a Hadoop URI: its writer locks it there (engines/spark/hadoop_out.py)
                return fn(cfg, *args, **kwargs)
            out = Path(cfg.out)
            with OutputLock(lock_of(out), str(out)):
                _say_recovered(recover(out, MARKERS[kind]))
                return fn(cfg, *args, **kwargs)
        return job
    return wrap


class AtomicOutput:
    """Context manager yielding a staging directory published on success.

    Args:
        out: the final output directory.  It may not exist, be empty, or be a
            previous output of the same command (holds its marker file,
            :data:`MARKERS`); anything else is refused rather than overwritten.
        kind: the command writing it, a key of :data:`MARKERS`.

    It holds the lock of ``out`` while it is open (the job normally holds it
    already, :func:`locks_out`), recovers leftovers, and publishes with
    :func:`commit`; on an exception (an interrupt included) it removes the staging
    directory and publishes nothing.
    """

    def __init__(self, out: Path, kind: str = "run"):
        self.out = Path(out)
        self.kind = kind
        self.staging: Path | None = None
        self.lock = OutputLock(lock_of(self.out), str(self.out))

    def __enter__(self) -> Path:
        check_target(self.out, self.kind)
        self.lock.__enter__()
        try:
            _say_recovered(recover(self.out, MARKERS[self.kind]))
            with interrupts_held() as interrupted:
                staging = new_staging(self.out)
            if interrupted:  # a signal came while staging was being made: leave nothing, then act on it
                abandon(staging)
                act_on_held(interrupted)
        except BaseException:
            self.lock.__exit__(None, None, None)
            raise
        self.staging = staging
        return staging

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self.staging is not None
        try:
            if exc_type is not None:
                abandon(self.staging)
            else:
                try:
                    commit(self.staging, self.out)
                except BaseException:
                    abandon(self.staging)
                    raise
        finally:
            self.lock.__exit__(None, None, None)
        return False
