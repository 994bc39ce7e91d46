"""What every ``streamjoin`` command shares: the input options, the command line a
report records (:func:`command_line`) and how a command fails (:func:`outcome_of`).

``cli/main.py`` (run, tune-buffer, ...) and ``cli/compare.py`` both import from
here, so neither imports the other."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from streamjoin.pipelines.base.errors import StreamjoinError

Multi = Optional[list[str]]

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


class PlainValues:
    """typer's coercion of one option, skipped where it returns the value unchanged.

    typer (0.2x) coerces every option through a pydantic ``TypeAdapter``, built
    for each option of the command -- absent ones too -- and imports pydantic
    for the first (~0.07 s of CPU, a sixth of a small run's start-up;
    docs/performance.md, issue 21 fourth pass).  Here an absent value is what
    typer makes of it (``None``, or ``()`` for a repeatable option), a string
    for a ``str`` option and strings for a ``list[str]`` one are kept as they
    are (typer's ``str(value)``), and a path for a plain ``Path`` argument is
    ``Path(value)`` with typer's readable check; anything else -- numbers, a
    path with checks, a custom parser -- goes to typer's own coercion, built
    when first needed.  ``tests/cli/test_plain_values.py`` compares the two.
    """

    def __init__(self, param) -> None:
        d = param.type_descriptor
        info = d.parameter_info
        self.kind = None
        if d.file_annotation is None and getattr(info, "parser", None) is None:
            if d.annotation is str:
                self.kind = "str"
            elif d.annotation == list[str]:
                self.kind = "strs"
            elif d.annotation is Path and _plain_path(info):
                self.kind = "path"
        self.real = None

    @staticmethod
    def install(param) -> None:
        """Put one on ``param`` where typer has this hook and has built nothing yet
        (another typer: nothing changes)."""
        if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = PlainValues(param)

    def coerce(self, value, param, ctx):
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        if self.kind == "str" and not multi and type(value) is str:
            return value
        if self.kind == "strs" and multi and isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        if self.kind == "path" and not multi and type(value) is str and value and "\0" not in value:
            path = Path(value)
            try:
                os.stat(path)
            except OSError:
                return path
            if os.access(path, os.R_OK):
                return path
        if self.real is None:
            from typer._coercion import build_runtime_param

            self.real = build_runtime_param(param.type_descriptor)
        return self.real.coerce(value, param=param, ctx=ctx)


def _plain_path(info) -> bool:
    """A ``Path`` option without typer's checks beyond "readable if it exists"."""
    return (not info.exists and info.file_okay and info.dir_okay and not info.writable and info.readable
            and not info.resolve_path and not info.allow_dash and info.path_type is None
            and not getattr(info, "executable", False))
