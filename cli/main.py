"""The ``streamjoin`` command: parse, call a pipeline, print.  Nothing else.

Exit codes: 0 success, 1 failure, 2 usage or bad input, 130 interrupted.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from streamjoin.pipelines.errors import EXIT_FAILURE, StreamjoinError

app = typer.Typer(
    name="streamjoin",
    help="Batch-replay correlation of timestamped streams: know exactly what an online join would have produced.\n\n"
         "Exit codes: 0 success, 1 failure, 2 usage or bad input, 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

Multi = Optional[list[str]]


def _fail(exc: StreamjoinError) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(exc.exit_code)


def _stage_reporter(total: int):
    """Progress bar on a terminal, plain log lines otherwise (cron)."""
    if sys.stderr.isatty():
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True)
        task = progress.add_task("streamjoin", total=total)

        def on_stage(name: str, seconds: float) -> None:
            progress.update(task, advance=1, description=f"{name} done")

        return progress, on_stage

    def log(name: str, seconds: float) -> None:
        typer.echo(f"streamjoin: stage {name} done in {seconds:.2f}s", err=True)

    return None, log


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Argument(help="TOML config (optional; flags override it)")] = None,
    stream: Annotated[Multi, typer.Option("--stream", help="NAME=PATH (repeatable): Parquet file, glob or directory")] = None,
    ts: Annotated[Multi, typer.Option("--ts", help="event-time column, COL or NAME=COL")] = None,
    arrival: Annotated[Multi, typer.Option("--arrival", help="arrival-time column, COL or NAME=COL (default: arrival = ts)")] = None,
    key: Annotated[Multi, typer.Option("--key", help="equality key column (repeatable), COL or NAME=COL")] = None,
    unit: Annotated[Multi, typer.Option("--unit", help="unit of integer time columns: s|ms|us|ns|ps (or NAME=UNIT)")] = None,
    window: Annotated[Multi, typer.Option("--window", help="window W, e.g. 100ms (or NAME=DUR)")] = None,
    router: Annotated[Optional[str], typer.Option("--router", help="none")] = None,
    policy: Annotated[Optional[str], typer.Option("--policy", help="none|kslack|mpkslack|static")] = None,
    k: Annotated[Multi, typer.Option("--k", help="K of kslack, e.g. 50ms (or NAME=DUR)")] = None,
    retention: Annotated[Multi, typer.Option("--retention", help="retention of static, e.g. 50ms (or NAME=DUR)")] = None,
    recall: Annotated[Optional[float], typer.Option("--recall", help="recall target in (0, 1], reported per period")] = None,
    period: Annotated[Optional[str], typer.Option("--period", help="recall period length (default 60s)")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", help="local")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="output directory (replaced atomically)")] = None,
    no_results: Annotated[bool, typer.Option("--no-results", help="write the reports only")] = False,
    json_summary: Annotated[bool, typer.Option("--json", help="print report.json to stdout instead of a summary")] = False,
) -> None:
    """Replay streams through a disorder policy, join them, and report recall, latency and memory."""
    from streamjoin.pipelines.config import Flags, resolve
    from streamjoin.pipelines.job import STAGES, run_job
    from streamjoin.pipelines.report.terminal import render_rich, summary_lines

    flags = Flags(
        streams=stream or [], ts=ts or [], arrival=arrival or [], keys=key or [], unit=unit or [],
        window=window or [], k=k or [], retention=retention or [], policy=policy, router=router,
        engine=engine, out=out, no_results=no_results, recall=recall, period=period,
    )
    command = "streamjoin " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        cfg = resolve(config, flags)
        progress, on_stage = _stage_reporter(len(STAGES))
        if progress is not None:
            with progress:
                report = run_job(cfg, command=command, on_stage=on_stage)
        else:
            report = run_job(cfg, command=command, on_stage=on_stage)
    except StreamjoinError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        typer.echo("error: interrupted; nothing was published", err=True)
        raise typer.Exit(130)
    if json_summary:
        typer.echo(json.dumps(report, indent=2))
    elif sys.stdout.isatty():
        from rich.console import Console

        render_rich(report, Console())
    else:
        for line in summary_lines(report):
            typer.echo(line)


@app.command()
def inspect(
    paths: Annotated[list[str], typer.Argument(help="Parquet files, globs or directories (NAME=PATH to name them)")],
    ts: Annotated[str, typer.Option("--ts", help="event-time column")] = "ts",
    arrival: Annotated[Optional[str], typer.Option("--arrival", help="arrival-time column (default: arrival = ts)")] = None,
    unit: Annotated[Optional[str], typer.Option("--unit", help="unit of integer time columns: s|ms|us|ns|ps")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Rows, time span, rate, delay distribution and out-of-order share, per stream."""
    from streamjoin.pipelines.config import StreamConfig
    from streamjoin.pipelines.errors import InputError
    from streamjoin.pipelines.inspect import inspect_stream
    from streamjoin.pipelines.timeunits import TS_UNITS, format_duration

    try:
        if unit is not None and unit not in TS_UNITS:
            raise InputError(f"--unit {unit}: expected one of {', '.join(TS_UNITS)}")
        facts = []
        for p in paths:
            name, _, path = p.partition("=") if "=" in p else (Path(p).stem, "", p)
            facts.append(inspect_stream(StreamConfig(name=name, path=path, ts=ts, arrival=arrival, unit=unit)))
    except StreamjoinError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    for f in facts:
        d = f["delay_us"]
        rate = f"{f['rate_per_s']:,.1f}/s" if f["rate_per_s"] else "-"
        typer.echo(
            f"{f['name']}: rows {f['rows']} quarantined {f['quarantined']} span {format_duration(f['span_us'])} "
            f"rate {rate} delay p50 {format_duration(d['p50'])} p95 {format_duration(d['p95'])} "
            f"p99 {format_duration(d['p99'])} max {format_duration(d['max'])} "
            f"out-of-order {f['out_of_order_share']:.2%}"
        )


@app.command()
def generate(
    kind: Annotated[str, typer.Argument(help="soccer | sensors | bench")],
    out: Annotated[Path, typer.Option("--out", help="directory for the Parquet files and config")] = Path("."),
    seed: Annotated[int, typer.Option("--seed", help="random seed (same seed, same bytes)")] = 7,
    duration: Annotated[Optional[float], typer.Option("--duration", help="seconds of data (default per kind)")] = None,
    scale: Annotated[float, typer.Option("--scale", help="row-count multiplier (bench)")] = 1.0,
) -> None:
    """Write deterministic synthetic streams with realistic disorder, plus a ready config."""
    from streamjoin.pipelines.errors import InputError
    from streamjoin.pipelines.generate import KINDS
    from streamjoin.pipelines.generate import generate as gen

    try:
        if kind not in KINDS:
            raise InputError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
        paths = gen(kind, out, seed=seed, duration_s=duration, scale=scale)
    except StreamjoinError as exc:
        _fail(exc)
    for p in paths:
        typer.echo(str(p))


def _click_exception_type() -> type[BaseException]:
    try:  # recent typer vendors click
        from typer._click.exceptions import ClickException
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click.exceptions import ClickException
    return ClickException


def main() -> None:
    from streamjoin.pipelines.allocator import reuse_freed_memory

    reuse_freed_memory()  # large temporaries reuse pages instead of faulting anew
    click_exception = _click_exception_type()
    try:
        # not standalone: usage errors come back to us, to be printed as one
        # line (cron logs) instead of click's multi-line box
        rv = app(standalone_mode=False)
    except StreamjoinError as exc:  # pragma: no cover - commands catch their own
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(EXIT_FAILURE)
    except click_exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `streamjoin`: show the help
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        message = " ".join(exc.format_message().split())
        typer.echo(f"error: {message}{hint}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # an unexpected bug: one line, exit 1, no traceback spam in cron
        typer.echo(f"error: internal failure: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
