"""What every ``streamjoin`` command shares: the input options, the command line a
report records (:func:`command_line`), how a command fails (:func:`outcome_of`) and
the cyclic garbage collector's pause while the process starts (:func:`pause_gc`,
:func:`startup_done`, :func:`end_gc_pause`).

``cli/main.py`` (run, tune-buffer, ...) and ``cli/compare.py`` both import from
here, so neither imports the other."""

from __future__ import annotations

import gc
import shlex
import sys
from typing import Annotated, Optional

import typer

from streamjoin.pipelines.base.errors import StreamjoinError

Multi = Optional[list[str]]

#: ``paused``: :func:`pause_gc` turned the collector off and :func:`startup_done` has not turned it on
#: yet; ``frozen``: :func:`startup_done` froze the objects then alive and :func:`end_gc_pause` has not
#: unfrozen them yet
_GC = {"paused": False, "frozen": False}


def pause_gc() -> None:
    """No cyclic garbage collection while the command's modules are imported.

    Importing numpy, polars, pyarrow and streamjoin creates some hundred thousand
    objects that live as long as the process, and the collector traverses them
    again and again as they accumulate: ~140 collections, ~0.04 s of CPU in every
    ``run`` before its first stage (docs/performance.md, issue 21 ninth pass).
    :func:`startup_done` turns it on again.  Only ``main`` calls this (importing
    this module changes nothing).  A caller that runs ``main()`` with the collector
    off or with objects of its own frozen keeps that state untouched (``gc.unfreeze``
    would unfreeze its objects with ours)."""
    if gc.isenabled() and gc.get_freeze_count() == 0:
        _GC["paused"] = True   # before the step (startup_done says why)
        gc.disable()


def startup_done() -> None:
    """The command's modules are imported: the collector runs again, over what is
    created from now on (``gc.freeze``: the objects that exist now -- the modules'
    functions, classes, constants -- are not traversed again while the command
    runs; :func:`end_gc_pause` unfreezes them).  A no-op unless :func:`pause_gc`
    paused it; idempotent."""
    # each flag is set before its step and cleared after it: an interrupt in between (the guard of
    # pipelines/io/output.py raises KeyboardInterrupt anywhere) still leaves end_gc_pause its work
    if _GC["paused"]:
        _GC["frozen"] = True
        gc.freeze()
        gc.enable()
        _GC["paused"] = False


def end_gc_pause() -> None:
    """``main`` is done: the collector is on and nothing stays frozen, as before
    :func:`pause_gc` -- for a caller that goes on (tests) and for an interpreter
    teardown, where there is one (coverage.py, PySpark), which then collects as it
    always did.  ``gc.unfreeze`` is one list splice."""
    startup_done()
    if _GC["frozen"]:
        gc.unfreeze()
        _GC["frozen"] = False

StreamOpt = Annotated[Multi, typer.Option("--stream", help="NAME=PATH (repeatable): Parquet file, glob or directory")]
TsOpt = Annotated[Multi, typer.Option("--ts", help="event-time column, COL or NAME=COL (default: ts)")]
ArrivalOpt = Annotated[Multi, typer.Option("--arrival", help="arrival-time column, COL or NAME=COL (default: arrival = ts)")]
KeyOpt = Annotated[Multi, typer.Option("--key", help="equality key column (repeatable), COL or NAME=COL (default: none, no key)")]
UnitOpt = Annotated[Multi, typer.Option("--unit", help="unit of integer time columns: s | ms | us | ns | ps, or NAME=UNIT (required for integer columns; default: none, timestamp columns carry their unit)")]
WindowOpt = Annotated[Multi, typer.Option("--window", help="window W: a duration (100ms), or NAME=W (required, here or in the config)")]
RunWindowOpt = Annotated[Multi, typer.Option("--window", help="window W: a duration (100ms) or a count (1000tuples, with --policy static), or NAME=W (required, here or in the config)")]
MaxQuarantineOpt = Annotated[Optional[float], typer.Option(
    "--max-quarantine", help="largest share of a stream's rows that may be quarantined (default 0.5); "
                             "a stream with all rows quarantined is always an error")]
PeriodOpt = Annotated[Optional[str], typer.Option("--period", help="recall period length (default: from the replay span, <= 1000 periods: the smallest of 1s 10s 1min 10min 1h 1d 1w that gives at most 1,000; a nightly run: 10min)")]
DistanceOpt = Annotated[Optional[str], typer.Option("--distance", help="COLS<=THRESHOLD, e.g. x,y<=1000: every pair of members within this Euclidean distance (default: none)")]
WhereOpt = Annotated[Optional[str], typer.Option("--where", help="SQL predicate over prefixed columns, e.g. \"ball_z < 500\" (default: none)")]


def fail(exc: StreamjoinError, log=None) -> None:
    """One ``error:`` line on stderr (with ``--log-format json`` also the error and summary events), exit."""
    if log is not None:
        log.error(str(exc), exc.exit_code)
        log.summary(exc.exit_code, status="failed")
    else:
        typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(exc.exit_code)


def interrupted(log=None) -> None:
    """Ctrl-C / SIGTERM before anything was published: say so (one line; JSON events too), exit 130."""
    from streamjoin.pipelines.base.errors import EXIT_INTERRUPTED

    message = "interrupted; nothing was published"
    if log is not None:
        log.error(message, EXIT_INTERRUPTED)
        log.summary(EXIT_INTERRUPTED, status="interrupted")
    else:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def command_line() -> str:
    """This process's command line as the outputs record it (``command``): ``streamjoin``
    and its arguments, shell-quoted."""
    return "streamjoin " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def outcome_of(job, log=None):
    """``job()``'s result; a :class:`StreamjoinError` or an interrupt before it publishes is
    one line and an exit (:func:`fail`, :func:`interrupted`; ``log``: ``--log-format json``'s
    events too).  Interrupts are held from then on (:func:`reporting`): what was published
    is reported."""
    try:
        result = job()
    except StreamjoinError as exc:
        reporting()
        fail(exc, log)
    except KeyboardInterrupt:
        reporting()
        interrupted(log)
    reporting()
    return result


def reporting():
    """The process's interrupt guard, switched to holding: the outcome is being reported.

    (``main`` installs it; see ``pipelines/io/output.py``: published means done.)"""
    from streamjoin.pipelines.io.output import install_interrupt_guard

    guard = install_interrupt_guard()
    guard.hold()
    return guard
