"""The ``streamjoin`` command: parse, call a pipeline, print.  Nothing else.

Exit codes: 0 success, 1 failure, 2 usage or bad input, 3 recall target missed
(``--fail-under-target``), 4 locked by another run, 130 interrupted.

The process ends without the interpreter's teardown (:func:`_exit_without_teardown`).
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import sys

#: the exit code of a finished ``main()`` (None: main was not called, or did not finish)
_FINISHED: dict[str, int] = {}


def _exit_without_teardown() -> None:
    """Registered before any library is imported, so it runs after every other
    ``atexit`` handler: once those ran and the output is flushed, the process
    exits with ``main()``'s code without the interpreter's teardown (freeing every
    module and object of numpy, polars, pyarrow, ...: 0.1-0.4 s of every run,
    docs/performance.md, issue 21).  Not with PySpark loaded (its JVM is left to
    its own shutdown), not under coverage.py (its handler, registered before
    ours, saves the data after ours), not if flushing fails (the interpreter
    reports that), and not after an uncaught exception (``sys.last_exc``: a
    caller that caught ``main()``'s exit and failed afterwards exits 1, not with
    ``main()``'s code)."""
    code = _FINISHED.get("code")
    if code is None or "pyspark" in sys.modules or "coverage" in sys.modules:
        return
    if getattr(sys, "last_exc", getattr(sys, "last_value", None)) is not None:   # an uncaught exception was reported
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - e.g. a closed pipe: the usual shutdown reports it
        return
    os._exit(code)


atexit.register(_exit_without_teardown)
from pathlib import Path
from typing import Annotated, Optional, get_args

import typer
from typer.core import TyperCommand, TyperGroup

from streamjoin.pipelines.base.errors import EXIT_FAILURE, StreamjoinError

from .common import (ArrivalOpt, DistanceOpt, KeyOpt, MaxQuarantineOpt, Multi, PeriodOpt, RunWindowOpt, StreamOpt,
                     TsOpt, UnitOpt, WhereOpt, WindowOpt)
from .common import fail as _fail
from .common import command_line, end_gc_pause, pause_gc, startup_done
from .common import outcome_of as _outcome_of
from .calibrate import calibrate as _calibrate
from .compare import compare as _compare


#: what a user may type after a flag meaning "on" or "off" (``--no-results true``)
BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0"})


#: :func:`_plain_value`: typer's own coercion is needed
_TYPER = object()

#: typer's defaults of a path parameter's checks (``typer.Option(exists=..., ...)``): with
#: them a path is ``Path(value)``, refused only if it exists and is not readable
_PLAIN_PATH = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False, "readable": True,
               "resolve_path": False, "allow_dash": False, "path_type": None}


def _plain_value(param, value):
    """What typer's coercion makes of ``value`` for ``param`` where that needs no work:
    an option not given (``None``; ``()`` for a repeatable one), text, repeated text, a
    path with typer's default checks -- else :data:`_TYPER` (numbers, a path that is
    not readable, a parser, anything else: typer coerces, and says what is wrong).

    typer >= 0.2x coerces each parameter through a pydantic ``TypeAdapter`` built for
    it, importing pydantic on every command line: ~0.05 s CPU of every run for values
    that are already what the command reads (docs/performance.md, issue 21).  Only
    typer's own parameters (``type_descriptor``) are handled here; an older typer
    (click's types) coerces as it always did."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or param.required or getattr(desc, "file_annotation", None) is not None \
            or getattr(desc.parameter_info, "parser", None) is not None:
        return _TYPER
    multi = param.multiple or param.nargs == -1
    annotation = desc.annotation
    if value is None:
        return () if multi else None
    if multi:
        if annotation == list[str] and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        return _TYPER
    if annotation is str and isinstance(value, str):
        return value
    if annotation is Path and isinstance(value, str) and value \
            and all(getattr(desc.parameter_info, k, None) == v for k, v in _PLAIN_PATH.items()) \
            and (not os.path.exists(value) or os.access(value, os.R_OK)):
        return Path(value)
    return _TYPER


def _process_plainly(param):
    """``param.process_value`` with :func:`_plain_value` first (click's order after
    the coercion: the parameter's callback)."""
    typer_process = param.process_value

    def process_value(ctx, value):
        plain = _plain_value(param, value)
        if plain is _TYPER:
            return typer_process(ctx, value)
        return param.callback(ctx, param, plain) if param.callback is not None else plain

    process_value.plain = True
    return process_value


class _FlagsReadAsFlags:
    """Boolean options read as flags; plain values without typer's pydantic coercion.

    ``--help`` shows no ``<bool>`` type for them, and a yes/no word after one
    (``--no-results true``) is a usage error -- otherwise the word would be
    taken as the next positional argument, the config path.  Values that need
    no coercion skip typer's (:func:`_plain_value`).
    """

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""  # the type column stays empty: nothing to type after a flag
            if not getattr(param.process_value, "plain", False):
                param.process_value = _process_plainly(param)
        return params

    def parse_args(self, ctx, args):
        flags = {o for p in self.get_params(ctx) if getattr(p, "is_flag", False) for o in p.opts}
        for flag, word in zip(args, args[1:]):
            if flag == "--":
                break
            if flag in flags and word.lower() in BOOL_WORDS:
                raise typer.BadParameter(
                    f"{flag} is a flag and takes no value: write '{flag}' alone (or leave it out), "
                    f"not '{flag} {word}'", ctx=ctx)
        return super().parse_args(ctx, args)


class FlagCommand(_FlagsReadAsFlags, TyperCommand):
    """A ``streamjoin`` command (see :class:`_FlagsReadAsFlags`)."""


class FlagGroup(_FlagsReadAsFlags, TyperGroup):
    """``streamjoin`` itself (see :class:`_FlagsReadAsFlags`)."""


app = typer.Typer(
    name="streamjoin",
    help="Batch-replay correlation of timestamped streams: know exactly what an online join would have produced.\n\n"
         "Exit codes: 0 success, 1 failure, 2 usage or bad input, 3 recall target missed (--fail-under-target), "
         "4 locked by another run (skipped), 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=FlagGroup,
)

# stream options shared by every command that reads streams: cli/common.py; nightly's own:
OptionalStreamOpt = Annotated[Multi, typer.Option(
    "--optional-stream", help="nightly: NAME (repeatable) may have no partition on a day; that day replays it empty")]

# options of run that tune-buffer also takes (a run command line can be copied): cli/common.py

# options of run that do not change tune-buffer's answer (see tune_buffer)
RouterOpt = Annotated[Optional[str], typer.Option("--router", help="none | atr | ctr | auto: routing of the Spark engine, SPEC §6 (default: none)")]
KOpt = Annotated[Multi, typer.Option("--k", help="K of kslack, e.g. 50ms, or NAME=DUR (required by kslack)")]
RetentionOpt = Annotated[Multi, typer.Option("--retention", help="retention of static, e.g. 50ms, or NAME=DUR (required by static)")]
IntervalOpt = Annotated[Optional[str], typer.Option("--interval", help="qjoin / qkslack: re-decide every L of replay time (default: max(1s, period / 10))")]
BasicWindowOpt = Annotated[Optional[str], typer.Option("--basic-window", help="qjoin / qkslack: basic window b of the partner-density counters (default: max window / 10)")]
TriggerOpt = Annotated[Multi, typer.Option("--trigger", help="spark-ss: the micro-batch interval DUR of arrival time, e.g. 1min (required by spark-ss); qjoin/qkslack: early re-decision threshold KEY=VALUE (repeatable): rate_ratio, rate_history=recent|run, rate_above, rate_below (tuples/s), rate_min_count, bad_rows_min, bad_rows_factor, bad_rows_reason, min_streams")]
WatermarkOpt = Annotated[Multi, typer.Option("--watermark", help="spark-ss: withWatermark delay; flink, flink-sql: forBoundedOutOfOrderness delay; whole ms, e.g. 10s, or NAME=DUR (required by both)")]
WatermarkIntervalOpt = Annotated[Optional[str], typer.Option("--watermark-interval", help="flink, flink-sql: watermark emission every DUR of arrival time, as pipeline.auto-watermark-interval (default: 200ms; 0 = after every record)")]
TriggerFilesOpt = Annotated[Optional[int], typer.Option("--trigger-files", help="spark-ss: micro-batches of N input files per stream (maxFilesPerTrigger; files by modification time, then path; rows arrive when their batch runs), instead of --trigger DUR; default: batches by --trigger")]
JoinOpt = Annotated[Optional[str], typer.Option("--join", help="spark-ss, flink-sql: inner | left | right | full; an outer join emits the side's unmatched rows null-padded when the engine evicts them (default: inner)")]
MinCleanupOpt = Annotated[Optional[str], typer.Option("--min-cleanup-interval", help="flink-sql: how much later than a cached row's expiry its cleanup timer fires, Flink's interval-join min cleanup interval (whole ms; default: 0, Flink's)")]
IdlenessOpt = Annotated[Optional[str], typer.Option("--idleness", help="flink: withIdleness timeout DUR of arrival time: an input with no records for that long leaves the operator's watermark minimum (needs --watermark-interval > 0; default: none)")]
WatermarkPolicyOpt = Annotated[Optional[str], typer.Option("--watermark-policy", help="spark-ss: min | max, as Spark's multipleWatermarkPolicy setting (default: min)")]
EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="spark | local (default: spark, or $STREAMJOIN_ENGINE; spark whenever a router or a Spark setting is given)")]
MasterOpt = Annotated[Optional[str], typer.Option("--master", help="Spark master URL, e.g. spark://host:7077 (default: local[*])")]
PartitionsOpt = Annotated[Optional[int], typer.Option("--partitions", help="Spark partitions (hosts) to route over (default: the native path chooses from the input size, at most 1.5M tuples per task; else the master's default parallelism)")]
SparkConfOpt = Annotated[Multi, typer.Option("--spark-conf", help="KEY=VALUE Spark setting (repeatable)")]
SegmentOpt = Annotated[Optional[str], typer.Option("--segment", help="ATR / CTR segment length T, e.g. 2s (default: from the data)")]
LoadWeightsOpt = Annotated[Optional[str], typer.Option("--load-weights", help="LLF weights cpu,mem,net (default: 1,1,1)")]
PartitionCapacityOpt = Annotated[Optional[str], typer.Option("--partition-capacity", help="LLF capacity of each partition: cpu=work/s,mem=tuples held,net=tuples/s, any subset (default: the fair share, total use / partitions)")]
AdaptSegmentOpt = Annotated[bool, typer.Option("--adapt-segment", help="ATR: adapt T by +-dT at segment ends")]
NoResultsOpt = Annotated[bool, typer.Option("--no-results", help="write the reports only")]
FlowControlOpt = Annotated[Optional[str], typer.Option("--flow-control", help="seed 001 flow control (local or spark engine): back-pressure delays arrivals (KEY=VALUE,...: buffer=TUPLES and rate=TUPLES/s required; target=b0 (default buffer/2), interval=DUR (default 10ms, longer for a span above 100,000 intervals), policy=max-flow|min-flow (default max-flow), lambda=L0:L1:.. (default 0.5), mu=M1:.. (default none), surge=F (default 0), bucket=F (default 2); docs/semantics.md); default: off")]
ChunkRowsOpt = Annotated[Optional[int], typer.Option("--chunk-rows", help="local engine: replay in arrival-time chunks of about N tuples, in bounded memory (0: all in memory; default: chunks above 6M input rows)")]
CapacityOpt = Annotated[Optional[str], typer.Option("--capacity", help="capacity model (local or spark engine; with --flow-control the units delay arrivals first): KEY=VALUE,... with tuple=DUR (service per input tuple, required), result=DUR (per emitted result, default 0), cpu=F (0<F<=1, default 1), queue=N (per-stream queue cap, default unbounded), shed=drop-new|replace-oldest (default drop-new), state=N (join-state cap per stream, evict-oldest, default unbounded); default: infinite capacity")]
FailUnderTargetOpt = Annotated[bool, typer.Option("--fail-under-target", help="exit 3 when recall < --recall")]

#: tune-buffer's copies of the options above, shown in their own --help panel
NO_EFFECT_PANEL = "Options of run: accepted, no effect here (tune-buffer replays exactly, in-process)"


def _in_panel(alias, panel: str):
    base, info = get_args(alias)
    info = copy.copy(info)
    info.rich_help_panel = panel
    return Annotated[base, info]


RUN_ONLY = {name: _in_panel(alias, NO_EFFECT_PANEL) for name, alias in {
    "router": RouterOpt, "k": KOpt, "retention": RetentionOpt, "interval": IntervalOpt,
    "basic_window": BasicWindowOpt, "trigger": TriggerOpt, "engine": EngineOpt, "master": MasterOpt,
    "partitions": PartitionsOpt, "spark_conf": SparkConfOpt, "segment": SegmentOpt,
    "load_weights": LoadWeightsOpt, "partition_capacity": PartitionCapacityOpt, "adapt_segment": AdaptSegmentOpt, "no_results": NoResultsOpt,
    "chunk_rows": ChunkRowsOpt, "fail_under_target": FailUnderTargetOpt, "watermark": WatermarkOpt}.items()}

# nightly options of run (tune-buffer refuses them with an explanation)
DateOpt = Annotated[Optional[str], typer.Option("--date", help="nightly: run one day, YYYY-MM-DD|yesterday|today -> OUT/date=D/")]
FromOpt = Annotated[Optional[str], typer.Option("--from", help="nightly: first day of a range (with --to), one partition per day")]
ToOpt = Annotated[Optional[str], typer.Option("--to", help="nightly: last day of a range")]
LookbackOpt = Annotated[Optional[str], typer.Option("--lookback", help="nightly: tail of earlier days replayed first (default max(1h, 2x(window+K/retention)))")]
ForceOpt = Annotated[bool, typer.Option("--force", help="nightly: redo partitions that are up to date")]
LogFormatOpt = Annotated[Optional[str], typer.Option("--log-format", help="text | json: json prints one line per stage and a summary line (default: text)")]
NIGHTLY = {name: Annotated[get_args(alias)[0], copy.copy(get_args(alias)[1])] for name, alias in {
    "date": DateOpt, "from_": FromOpt, "to": ToOpt, "lookback": LookbackOpt, "force": ForceOpt,
    "log_format": LogFormatOpt}.items()}
for _alias in NIGHTLY.values():
    get_args(_alias)[1].hidden = True  # tune-buffer refuses them: not in its --help


def _given_options(ctx: typer.Context, names) -> list[str]:
    """The command-line names (``--engine``) of the parameters ``names`` given a value on this command line."""
    def given(value) -> bool:
        return value is not None and value is not False and value != [] and value != ()

    return [p.opts[0] for p in ctx.command.params if p.name in names and given(ctx.params[p.name])]


def _print_version(value: bool) -> None:
    if value:
        from streamjoin.pipelines.base.version import tool_version

        typer.echo(f"streamjoin {tool_version()}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", help="print the streamjoin version and exit",
                                          callback=_print_version, is_eager=True)] = False,
) -> None:
    pass  # options of `streamjoin` itself; the work is in the commands


def _stage_reporter(stages: tuple[str, ...], labels: dict[str, str] | None = None):
    """Progress bar on a terminal, naming the stage that is running (``labels``:
    a longer caption for some, e.g. the join on Spark); plain log lines otherwise (cron)."""
    labels = labels or {}
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        def caption(i: int) -> str:
            return f"{labels.get(stages[i], stages[i])} ..." if i < len(stages) else "done"

        # the bar writes to its own copy of the terminal's descriptor: while the Spark
        # session starts, descriptor 2 points at Spark's log (engines/spark/session.py)
        terminal = Console(file=os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8", closefd=True),
                           force_terminal=True)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True,
                            console=terminal)
        task = progress.add_task(caption(0), total=len(stages))

        def on_stage(name: str, seconds: float) -> None:
            progress.update(task, advance=1, description=caption(stages.index(name) + 1))

        return progress, on_stage

    def log(name: str, seconds: float) -> None:
        typer.echo(f"streamjoin: stage {name} done in {seconds:.2f}s", err=True)

    return None, log


def _chunk_reporter(progress):
    """Chunks of a bounded-memory run: the bar's caption on a terminal, a log line in cron."""
    if progress is not None:
        def on_chunk(done: int, chunks: int, seconds: float) -> None:
            progress.update(progress.task_ids[0], description=f"join: chunk {done}/{chunks}")
        return on_chunk

    def log(done: int, chunks: int, seconds: float) -> None:
        typer.echo(f"streamjoin: chunk {done}/{chunks} done in {seconds:.2f}s", err=True)

    return log


def _nightly(config, date=None, from_=None, to=None, lookback=None, force=False, fail_under_target=False,
             log_format=None, json_summary=False):
    """Nightly settings from the TOML and flags (booleans: only a given flag overrides the TOML)."""
    from streamjoin.pipelines.nightly.options import nightly_options

    try:
        return nightly_options(config, date=date, from_=from_, to=to, lookback=lookback, force=force or None,
                               fail_under_target=fail_under_target or None, log_format=log_format,
                               json=json_summary or None)
    except StreamjoinError as exc:
        _fail(exc)


def _json_log(nightly):
    from streamjoin.pipelines.nightly.runlog import RunLog

    return RunLog("json") if nightly.log_format == "json" else None


def _target_code(nightly, cfg, report) -> int:
    from streamjoin.pipelines.base.errors import EXIT_OK, EXIT_TARGET_MISSED

    target = cfg.recall_target
    return EXIT_TARGET_MISSED if nightly.fail_under_target and target is not None and report["recall"] < target else EXIT_OK


@app.command(cls=FlagCommand)
def run(
    config: Annotated[Optional[Path], typer.Argument(help="TOML config (optional; flags override it)")] = None,
    stream: StreamOpt = None,
    ts: TsOpt = None,
    arrival: ArrivalOpt = None,
    key: KeyOpt = None,
    unit: UnitOpt = None,
    window: RunWindowOpt = None,
    router: RouterOpt = None,
    policy: Annotated[Optional[str], typer.Option("--policy", help="none | kslack | mpkslack | static | qjoin | qkslack | spark-ss | flink | flink-sql (default: none)")] = None,
    k: KOpt = None,
    retention: RetentionOpt = None,
    recall: Annotated[Optional[float], typer.Option("--recall", help="recall target in (0, 1], reported per period (required by qjoin / qkslack; default: none, no target)")] = None,
    period: PeriodOpt = None,
    interval: IntervalOpt = None,
    granularity: Annotated[Optional[str], typer.Option("--granularity", help="qjoin / qkslack: step the chosen values are rounded up to (default: the tune-buffer grid step, 1us .. 1h, <= 1% of the largest delay seen)")] = None,
    basic_window: BasicWindowOpt = None,
    trigger: TriggerOpt = None,
    watermark: WatermarkOpt = None,
    watermark_policy: WatermarkPolicyOpt = None,
    join: JoinOpt = None,
    trigger_files: TriggerFilesOpt = None,
    watermark_interval: WatermarkIntervalOpt = None,
    idleness: IdlenessOpt = None,
    min_cleanup_interval: MinCleanupOpt = None,
    engine: EngineOpt = None,
    master: MasterOpt = None,
    partitions: PartitionsOpt = None,
    spark_conf: SparkConfOpt = None,
    segment: SegmentOpt = None,
    load_weights: LoadWeightsOpt = None,
    partition_capacity: PartitionCapacityOpt = None,
    adapt_segment: AdaptSegmentOpt = False,
    out: Annotated[Optional[str], typer.Option("--out", help="output directory, replaced atomically (required, here or in the config)")] = None,
    no_results: NoResultsOpt = False,
    chunk_rows: ChunkRowsOpt = None,
    max_quarantine: MaxQuarantineOpt = None,
    optional_stream: OptionalStreamOpt = None,
    distance: DistanceOpt = None,
    where: WhereOpt = None,
    flow_control: FlowControlOpt = None,
    capacity: CapacityOpt = None,
    json_summary: Annotated[bool, typer.Option("--json", help="print report.json to stdout instead of a summary")] = False,
    date: DateOpt = None,
    from_: FromOpt = None,
    to: ToOpt = None,
    lookback: LookbackOpt = None,
    force: ForceOpt = False,
    fail_under_target: FailUnderTargetOpt = False,
    log_format: LogFormatOpt = None,
) -> None:
    """Replay streams through a disorder policy, join them, and report recall, latency and memory.

    With --date or --from/--to: a nightly run, one atomically published partition per day
    (see 'streamjoin backfill --help').  Exit codes: 0 ok, 1 failure, 2 usage/bad input,
    3 recall target missed (--fail-under-target), 4 locked by another run, 130 interrupted.
    """
    from streamjoin.pipelines.config.settings import Flags, engine_source, resolve
    from streamjoin.pipelines.jobs.run import STAGES, run_job
    from streamjoin.pipelines.report.terminal import render_rich, summary_lines

    startup_done()   # the job's modules are imported (jobs.run imports its stages')
    flags = Flags(
        streams=stream or [], ts=ts or [], arrival=arrival or [], keys=key or [], unit=unit or [],
        window=window or [], k=k or [], retention=retention or [], policy=policy, router=router,
        engine=engine, out=out, no_results=no_results, recall=recall, period=period,
        distance=distance, where=where, interval=interval, granularity=granularity, basic_window=basic_window,
        triggers=trigger or [], master=master, partitions=partitions, spark_conf=spark_conf or [], segment=segment,
        load_weights=load_weights, partition_capacity=partition_capacity, adapt_segment=adapt_segment,
        chunk_rows=chunk_rows, max_quarantine=max_quarantine, optional_streams=optional_stream or [], watermark=watermark or [], watermark_policy=watermark_policy,
        watermark_interval=watermark_interval, join=join, trigger_files=trigger_files,
        idleness=idleness, min_cleanup_interval=min_cleanup_interval, flow_control=flow_control,
        capacity=capacity,
    )
    command = command_line()
    nightly = _nightly(config, date, from_, to, lookback, force, fail_under_target, log_format, json_summary)
    if nightly.days:
        from streamjoin.pipelines.nightly.backfill import cli_run

        raise typer.Exit(cli_run(config, flags, nightly, command))
    log = _json_log(nightly)

    def job():
        cfg = resolve(config, flags)
        spark = cfg.engine == "spark"
        if spark and cfg.master.startswith("local") and sys.stderr.isatty() and \
                engine_source(config, flags) == "default":
            typer.echo("note: the default engine is Spark; for inputs that fit one machine, --engine local gives "
                       "the same answer faster (no JVM to start)", err=True)
        labels = {"join": f"join on Spark ({cfg.master})"} if spark else {}
        progress, on_stage = _stage_reporter(STAGES, labels) if log is None else (None, log.stage)
        on_chunk = _chunk_reporter(progress) if log is None else None
        if progress is None:
            return cfg, run_job(cfg, command=command, on_stage=on_stage, on_chunk=on_chunk)
        with progress:
            return cfg, run_job(cfg, command=command, on_stage=on_stage, on_chunk=on_chunk)

    # before publishing an error or interrupt is one line; once published an interrupt is held (the run is done)
    cfg, report = _outcome_of(job, log)
    code = _target_code(nightly, cfg, report)
    if json_summary:
        typer.echo(json.dumps(report, indent=2))
    elif log is not None:
        log.summary(code, status="published", truth_results=report["truth_results"],
                    emitted_results=report["emitted_results"], recall=report["recall"],
                    recall_target=report.get("recall_target"), outputs=report["outputs"])
        raise typer.Exit(code)
    elif sys.stdout.isatty():
        from rich.console import Console

        render_rich(report, Console(), nightly.fail_under_target)
    else:
        for line in summary_lines(report, nightly.fail_under_target):
            typer.echo(line)
        typer.echo(f"published: {cfg.out} (exit {code})")
    if code:
        raise typer.Exit(code)


def _reasons(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{n} {r}' for r, n in counts.items())})" if counts else ""


@app.command(cls=FlagCommand)
def inspect(
    paths: Annotated[list[str], typer.Argument(help="Parquet files, globs or directories (NAME=PATH to name them)")],
    ts: Annotated[str, typer.Option("--ts", help="event-time column")] = "ts",
    arrival: Annotated[Optional[str], typer.Option("--arrival", help="arrival-time column (default: arrival = ts)")] = None,
    unit: Annotated[Optional[str], typer.Option("--unit", help="unit of integer time columns: s|ms|us|ns|ps")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Rows, time span, rate, lag behind max (how far a tuple's ts trails the largest ts its
    stream had shown when it arrived: the delay of SPEC §2, delay_us in --json) and out-of-order share, per stream."""
    from streamjoin.pipelines.config.settings import StreamConfig
    from streamjoin.pipelines.base.errors import InputError
    from streamjoin.pipelines.jobs.inspect import inspect_stream
    from streamjoin.pipelines.base.timeunits import TS_UNITS, format_duration, format_rate

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
        typer.echo(
            f"{f['name']}: rows {f['rows']} quarantined {f['quarantined']}{_reasons(f['quarantine_reasons'])} "
            f"span {format_duration(f['span_us'])} "
            f"rate {format_rate(f['rate_per_s'])} lag-behind-max p50 {format_duration(d['p50'])} p95 {format_duration(d['p95'])} "
            f"p99 {format_duration(d['p99'])} max {format_duration(d['max'])} "
            f"out-of-order {f['out_of_order_share']:.2%}"
        )


@app.command(cls=FlagCommand)
def generate(
    kind: Annotated[str, typer.Argument(help="soccer | sensors | bench")],
    out: Annotated[Path, typer.Option("--out", help="directory for the Parquet files and config")] = Path("."),
    seed: Annotated[int, typer.Option("--seed", help="random seed (same seed, same bytes)")] = 7,
    duration: Annotated[Optional[float], typer.Option("--duration", help="seconds of data (default per kind)")] = None,
    scale: Annotated[float, typer.Option("--scale", help="row-count multiplier (bench)")] = 1.0,
) -> None:
    """Write deterministic synthetic streams with realistic disorder, plus a ready config."""
    from streamjoin.pipelines.base.errors import InputError
    from streamjoin.pipelines.tools.generate import KINDS
    from streamjoin.pipelines.tools.generate import generate as gen

    try:
        if kind not in KINDS:
            raise InputError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
        paths = gen(kind, out, seed=seed, duration_s=duration, scale=scale)
    except StreamjoinError as exc:
        _fail(exc)
    for p in paths:
        typer.echo(str(p))


@app.command("tune-buffer", cls=FlagCommand)
def tune_buffer(
    ctx: typer.Context,
    config: Annotated[Optional[Path], typer.Argument(help="TOML config (optional; flags override it)")] = None,
    recall: Annotated[Optional[float], typer.Option("--recall", help="recall target in (0, 1] (required)")] = None,
    policy: Annotated[str, typer.Option("--policy", help="static (per-stream retention) | kslack (one K) | spark-ss (one withWatermark delay) | flink (one forBoundedOutOfOrderness delay); run's qjoin tunes static, its none / mpkslack / qkslack tune kslack")] = "static",
    per_period: Annotated[bool, typer.Option("--per-period", help="also meet the target in every --period")] = False,
    granularity: Annotated[Optional[str], typer.Option("--granularity", help="grid step of the settings, e.g. 10ms (default: from the data: the largest 1-2-5 step, 1us .. 1h, <= the largest required slack / 100, so 100-300 steps)")] = None,
    period: PeriodOpt = None,
    stream: StreamOpt = None,
    ts: TsOpt = None,
    arrival: ArrivalOpt = None,
    key: KeyOpt = None,
    unit: UnitOpt = None,
    window: WindowOpt = None,
    distance: DistanceOpt = None,
    where: WhereOpt = None,
    max_quarantine: MaxQuarantineOpt = None,
    out: Annotated[str, typer.Option("--out", help="output directory for tune.json + tune.html (replaced atomically)")] = "out/tune",
    json_summary: Annotated[bool, typer.Option("--json", help="print tune.json to stdout instead of a summary")] = False,
    watermark_policy: WatermarkPolicyOpt = None,
    watermark_interval: WatermarkIntervalOpt = None,
    idleness: IdlenessOpt = None,
    router: RUN_ONLY["router"] = None,
    k: RUN_ONLY["k"] = None,
    retention: RUN_ONLY["retention"] = None,
    interval: RUN_ONLY["interval"] = None,
    basic_window: RUN_ONLY["basic_window"] = None,
    trigger: RUN_ONLY["trigger"] = None,
    engine: RUN_ONLY["engine"] = None,
    master: RUN_ONLY["master"] = None,
    partitions: RUN_ONLY["partitions"] = None,
    spark_conf: RUN_ONLY["spark_conf"] = None,
    segment: RUN_ONLY["segment"] = None,
    load_weights: RUN_ONLY["load_weights"] = None,
    partition_capacity: RUN_ONLY["partition_capacity"] = None,
    adapt_segment: RUN_ONLY["adapt_segment"] = False,
    no_results: RUN_ONLY["no_results"] = False,
    chunk_rows: RUN_ONLY["chunk_rows"] = None,
    fail_under_target: RUN_ONLY["fail_under_target"] = False,
    watermark: RUN_ONLY["watermark"] = None,
    date: NIGHTLY["date"] = None,
    from_: NIGHTLY["from_"] = None,
    to: NIGHTLY["to"] = None,
    lookback: NIGHTLY["lookback"] = None,
    force: NIGHTLY["force"] = False,
    log_format: NIGHTLY["log_format"] = None,
) -> None:
    """Exact offline buffer recommendation for a recall target (SPEC §7): curve, per-stream values, config snippet.

    Defaults follow the data: --period from the replay span (at most 1,000 periods, a human unit).

A run command line can be reused as it is: run's other options are accepted (last panel) and do not
change the answer, and run's --policy tunes the fixed policy of its family.  With --policy spark-ss,
--trigger DUR and --watermark-policy are the Spark job's settings and are used; the withWatermark delay
is what is tuned (whole milliseconds), and the output has a PySpark snippet.  With --policy flink,
--watermark-interval is the Flink job's setting; the out-of-orderness is tuned, with a Java snippet.

    --granularity: the largest 1-2-5 step (1us .. 500ms, then 1s 2s 5s 10s 20s 1min 2min 5min 10min 20min 1h) at most the largest required slack / 100; the exact minimum is exact whatever the grid.
    """
    from streamjoin.pipelines.config.settings import Flags, check_recall, resolve
    from streamjoin.pipelines.base.errors import InputError
    from streamjoin.pipelines.analysis.tuning import FIXED_POLICY_OF
    from streamjoin.pipelines.jobs.tune import run_tune
    from streamjoin.pipelines.report.terminal import render_tune_rich, tune_lines

    command = command_line()

    def job():
        nightly = _given_options(ctx, NIGHTLY)
        if nightly:
            raise InputError(f"{', '.join(nightly)}: nightly options of run; tune-buffer replays the streams as "
                             "given and publishes no day partitions -- point --stream (or the config) at the days' files")
        if recall is None:
            raise InputError("tune-buffer needs --recall Q (a recall target in (0, 1])")
        check_recall(recall)
        # spark-ss: the trigger and watermark policy are resolved as run resolves them; the
        # delay is what is tuned (0 stands in for it)
        spark_ss = FIXED_POLICY_OF.get(policy) == "spark-ss"
        spark_flags = dict(policy="spark-ss", watermark=["0"], watermark_policy=watermark_policy,
                           triggers=[t for t in trigger or [] if "=" not in t]) if spark_ss else {"policy": "none"}
        if policy == "flink":   # likewise its watermark interval
            spark_flags = dict(policy="flink", watermark=["0"], watermark_interval=watermark_interval,
                               idleness=idleness)
        if watermark_policy is not None and not spark_ss:
            raise InputError(f"--watermark-policy: a setting of --policy spark-ss, not of {policy}")
        if (watermark_interval is not None or idleness is not None) and policy != "flink":
            flag = "--watermark-interval" if watermark_interval is not None else "--idleness"
            raise InputError(f"{flag}: a setting of --policy flink, not of {policy}")
        # run's options are checked as run checks them (a typo is an error), then left out
        flags = Flags(streams=stream or [], ts=ts or [], arrival=arrival or [], keys=key or [], unit=unit or [],
                      window=window or [], out=out, period=period, distance=distance, where=where,
                      router=router, engine=engine, master=master, partitions=partitions, spark_conf=spark_conf or [],
                      segment=segment, load_weights=load_weights, partition_capacity=partition_capacity,
                      adapt_segment=adapt_segment, chunk_rows=chunk_rows,
                      max_quarantine=max_quarantine, **spark_flags)
        cfg = resolve(config, flags, output_kind="tune-buffer")
        notes = []
        tuned = FIXED_POLICY_OF.get(policy, policy)
        if tuned != policy:
            notes.append(f"--policy {policy}: tune-buffer tunes the fixed setting of its family, {tuned}")
        ignored = _given_options(ctx, set(RUN_ONLY) - ({"trigger"} if spark_ss else set()))
        if ignored:
            notes.append(f"{', '.join(ignored)} accepted from run, ignored: tune-buffer replays exactly, in-process, "
                         "and chooses K / retention / the watermark itself, so they do not change its answer")
        if notes:
            typer.echo("note: " + "; ".join(notes), err=True)
        return run_tune(cfg, policy=tuned, q=recall, granularity=granularity, per_period=per_period, command=command)

    result = _outcome_of(job)
    if json_summary:
        typer.echo(json.dumps(result, indent=2))
    elif sys.stdout.isatty():
        from rich.console import Console

        render_tune_rich(result, Console())
    else:
        for line in tune_lines(result):
            typer.echo(line)


@app.command("report", cls=FlagCommand)
def report_cmd(
    directory: Annotated[Path, typer.Argument(help="a streamjoin --out directory (report.json or tune.json)")],
) -> None:
    """Re-render report.html (or tune.html) from the JSON in DIR."""
    from streamjoin.pipelines.report.html import rerender

    try:
        path = rerender(directory)
    except StreamjoinError as exc:
        _fail(exc)
    typer.echo(str(path))


@app.command(cls=FlagCommand)
def backfill(
    config: Annotated[Path, typer.Argument(help="TOML config of a partitioned job (stream paths with {date} or date=... dirs)")],
    from_: Annotated[Optional[str], typer.Option("--from", help="first day, YYYY-MM-DD|yesterday|today")] = None,
    to: Annotated[Optional[str], typer.Option("--to", help="last day (inclusive)")] = None,
    plan: Annotated[bool, typer.Option("--plan", help="dry run: list each day as missing, stale or up to date, and why")] = False,
    force: Annotated[bool, typer.Option("--force", help="redo days that are up to date")] = False,
    lookback: Annotated[Optional[str], typer.Option("--lookback", help="tail of earlier days replayed first")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="output root (holds date=YYYY-MM-DD/ partitions)")] = None,
    fail_under_target: Annotated[bool, typer.Option("--fail-under-target", help="exit 3 when a day's recall < recall target")] = False,
    log_format: Annotated[Optional[str], typer.Option("--log-format", help="text | json (default: text)")] = None,
    optional_stream: OptionalStreamOpt = None,
) -> None:
    """Run (or with --plan, list) every day from --from to --to, one partition per day.

    Each day: lock, skip if up to date (same inputs and config), else replay the day plus
    the lookback and publish OUT/date=D/ atomically (results.parquet, _manifest.json, _SUCCESS).
    Exit codes: 0 ok, 1 failure, 2 usage/bad input, 3 recall target missed
    (--fail-under-target), 4 locked by another run; the most serious day wins.
    """
    from streamjoin.pipelines.nightly.backfill import cli_run
    from streamjoin.pipelines.config.settings import Flags

    nightly = _nightly(config, None, from_, to, lookback, force, fail_under_target, log_format)
    command = command_line()
    try:
        code = cli_run(config, Flags(out=out, optional_streams=optional_stream or []), nightly, command, plan_only=plan)
    except StreamjoinError as exc:
        _fail(exc)
    raise typer.Exit(code)


@app.command(cls=FlagCommand)
def validate(
    config: Annotated[Path, typer.Argument(help="TOML config")],
    date: Annotated[Optional[str], typer.Option("--date", help="check this day's partitions (default: every day found)")] = None,
    from_: Annotated[Optional[str], typer.Option("--from", help="first day to check")] = None,
    to: Annotated[Optional[str], typer.Option("--to", help="last day to check")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="output directory to check")] = None,
    log_format: Annotated[Optional[str], typer.Option("--log-format", help="text | json (default: text)")] = None,
) -> None:
    """Check a config and its inputs (files, columns, types, partitions) without running. Exit 0 ok, 2 bad."""
    from streamjoin.pipelines.nightly.backfill import cli_validate
    from streamjoin.pipelines.config.settings import Flags

    nightly = _nightly(config, date, from_, to, None, False, False, log_format)
    raise typer.Exit(cli_validate(config, Flags(out=out), nightly))



app.command("compare", cls=FlagCommand)(_compare)
app.command("calibrate", cls=FlagCommand)(_calibrate)


def _click_exception_type() -> type[BaseException]:
    try:  # recent typer vendors click
        from typer._click.exceptions import ClickException
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click.exceptions import ClickException
    return ClickException


def app_for(args: list[str]) -> typer.Typer:
    """``app`` with only the command ``args`` name (its first word), so
    typer builds one command's parameters, not every command's (~0.015 s CPU of every run,
    docs/performance.md, issue 21); ``app`` itself where no command is named exactly
    (``--help``, ``--help run``, a typo: typer lists every command, or suggests one)."""
    name = args[0] if args else None   # an option first (`--help run`): options of `streamjoin` itself
    if name is None or name.startswith("-"):
        return app
    named = [c for c in app.registered_commands
             if (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
    if len(named) != 1 or app.registered_groups:
        return app
    one = copy.copy(app)
    one.registered_commands = named
    return one


def main() -> None:
    try:
        pause_gc()   # until the command's imports are done: `run` says when, every other command at its start
        _main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            _FINISHED["code"] = exc.code or 0
        raise
    finally:   # also when `run` refused its arguments: a caller that goes on (tests) has its collector back
        end_gc_pause()


def _main() -> None:
    guard = None
    try:
        from streamjoin.pipelines.io.output import install_interrupt_guard

        # Ctrl-C and SIGTERM raise KeyboardInterrupt until something is published,
        # and are held from then on: published means done (pipelines/io/output.py)
        guard = install_interrupt_guard()
        from streamjoin.pipelines.base.allocator import no_huge_page_advice, reuse_freed_memory

        reuse_freed_memory()  # large temporaries reuse pages instead of faulting anew
        no_huge_page_advice()  # no memory compaction stalls on page faults
        # not standalone: usage errors come back to us, to be printed as one
        # line (cron logs) instead of click's multi-line box
        if sys.argv[1:2] != ["run"]:
            startup_done()   # only `run` imports its job's modules before saying so
        rv = app_for(sys.argv[1:])(standalone_mode=False)
        if rv == 130 and not guard.holding:
            # typer turns a KeyboardInterrupt outside a command's own handling
            # (parsing, a command's imports) into a silent exit 130; the
            # commands' handlers switch the guard to holding before they report
            raise KeyboardInterrupt
    except StreamjoinError as exc:  # pragma: no cover - commands catch their own
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort as exc:
        # click turns a KeyboardInterrupt that reaches it (an interrupt while it
        # parses or calls a command, before the command's own handling) into Abort
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            typer.echo("error: interrupted; nothing was published", err=True)
            sys.exit(130)
        typer.echo("error: aborted", err=True)
        sys.exit(EXIT_FAILURE)
    except _click_exception_type() as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `streamjoin`: show the help
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        message = " ".join(exc.format_message().split())
        typer.echo(f"error: {message}{hint}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # an interrupt outside a command's own handling (parsing, start-up)
        typer.echo("error: interrupted; nothing was published", err=True)
        sys.exit(130)
    except Exception as exc:  # an unexpected bug: one line, exit 1, no traceback spam in cron
        if guard is not None and guard.raised and not guard.holding:
            # not a bug: an interrupt that landed inside a C extension's import came
            # back as another error ("ImportError: initialization failed"); nothing
            # was published.  Exit without finalization: the half-initialised
            # extension can crash the interpreter's shutdown (SIGABRT)
            typer.echo("error: interrupted; nothing was published", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        notes = "".join(f" ({note})" for note in getattr(exc, "__notes__", ()))  # e.g. where Spark's log is
        typer.echo(f"error: internal failure: {type(exc).__name__}: {exc}{notes}", err=True)
        sys.exit(EXIT_FAILURE)
    finally:  # whatever was reported stands: no interrupt may change the exit code from here on
        from streamjoin.pipelines.io.output import ignore_interrupts

        ignore_interrupts()
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
