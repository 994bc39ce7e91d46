"""``streamjoin calibrate``: parse, call :func:`~streamjoin.pipelines.jobs.calibrate.run_calibrate`, print.

Registered on the ``streamjoin`` app by ``cli/main.py``; failure handling from ``cli/common.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import command_line, outcome_of
from streamjoin.pipelines.base.errors import EXIT_FAILURE


def _progress():
    """A rich bar over the measured joins on a terminal; a plain line per join otherwise (cron)."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), transient=True, console=Console(stderr=True))
        task = progress.add_task("calibrate: generating inputs ...", total=None)

        def on_run(done: int, total: int, label: str, seconds: float) -> None:
            progress.update(task, completed=done, total=total, description=f"calibrate: {label}")

        return progress, on_run

    def log(done: int, total: int, label: str, seconds: float) -> None:
        typer.echo(f"streamjoin: calibrate join {done}/{total} ({label}) done in {seconds:.3f}s", err=True)

    return None, log


def calibrate(
    engine: Annotated[str, typer.Option("--engine", help="the engine to measure: local (the capacity model runs on it only)")] = "local",
    policy: Annotated[Optional[str], typer.Option("--policy", help="the policy joined, with its settings, as after compare's --policy, e.g. \"kslack --k 1s\" (one the capacity model runs; default: static --retention 2s, which emits every result)")] = None,
    out: Annotated[str, typer.Option("--out", help="output directory for calibrate.json (replaced atomically)")] = "out/calibrate",
    runs: Annotated[int, typer.Option("--runs", help="timed joins per input; the median counts")] = 5,
    scale: Annotated[float, typer.Option("--scale", help="multiplies the input sizes (150,000 .. 600,000 tuples at 1)")] = 1.0,
    json_summary: Annotated[bool, typer.Option("--json", help="print calibrate.json to stdout instead of the summary")] = False,
) -> None:
    """Measure the per-tuple and per-result service times of run --capacity on this machine.

    Joins generated inputs of 3 sizes x 3 window widths, times the join stage (median of --runs),
    fits time = tuple * tuples + result * results + intercept, and prints the fit, the machine
    and a paste-ready --capacity option.
    """
    from streamjoin.pipelines.jobs.calibrate import DEFAULT_POLICY, CalibrateSettings, run_calibrate
    from streamjoin.pipelines.report.calibrate import calibrate_lines
    from streamjoin.pipelines.tools.generate import generate

    command = command_line()

    def job():
        settings = CalibrateSettings(out=Path(out), engine=engine, policy=policy or DEFAULT_POLICY, runs=runs,
                                     scale=scale)
        progress, on_run = _progress()   # shown once the settings are checked
        return run_calibrate(settings, generate=generate, command=command, on_run=on_run, display=progress)

    result = outcome_of(job)
    if json_summary:
        typer.echo(json.dumps(result, indent=2))
    else:
        for line in calibrate_lines(result):
            typer.echo(line)
    if result["capacity_option"] is None:
        raise typer.Exit(EXIT_FAILURE)
