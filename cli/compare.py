"""``streamjoin compare``: parse, call :func:`~streamjoin.pipelines.jobs.compare.run_compare`, print.

Registered on the ``streamjoin`` app by ``cli/main.py``; options and failure handling from ``cli/common.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (ArrivalOpt, DistanceOpt, KeyOpt, MaxQuarantineOpt, Multi, PeriodOpt, StreamOpt, TsOpt, UnitOpt,
                     WhereOpt, WindowOpt, command_line, outcome_of)


def compare(
    config: Annotated[Optional[Path], typer.Argument(help="TOML config of the job (optional; flags override it); its [[compare]] tables list the policies")] = None,
    policy: Annotated[Multi, typer.Option("--policy", help="a policy with its settings, as after run's --policy, e.g. \"spark-ss --watermark 10min --trigger 1min\", \"static --retention 10min\"; or job | ideal | tuned (repeatable; default: the config's [[compare]] tables, else job, ideal and tuned)")] = None,
    recall: Annotated[Optional[float], typer.Option("--recall", help="recall target in (0, 1]: the tuned policy meets it, periods are counted against it (default: the job's, else 0.99)")] = None,
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
    out: Annotated[str, typer.Option("--out", help="output directory for compare.json + compare.html (replaced atomically)")] = "out/compare",
    json_summary: Annotated[bool, typer.Option("--json", help="print compare.json to stdout instead of the table")] = False,
) -> None:
    """The same input under several policies side by side: recall (overall and per period), results,
    memory, latency, and why results were lost (late, evicted, batch boundaries).

    Without --policy and [[compare]]: the job's own policy, the ideal operator (static) with the same
    delay, and the job's policy tuned for the recall target.  Runs in memory on the local engine.
    """
    from streamjoin.pipelines.config.settings import Flags, read_toml, resolve
    from streamjoin.pipelines.config.variants import compare_tables, parse_policy_text
    from streamjoin.pipelines.jobs.compare import run_compare
    from streamjoin.pipelines.report.terminal import compare_lines, render_compare_rich

    command = command_line()

    def job():
        variants = [parse_policy_text(p) for p in policy or []]
        if not variants and config is not None:
            variants = compare_tables(read_toml(config), config)
        # the job as run would resolve it, on the local engine (compare replays in-process)
        flags = Flags(streams=stream or [], ts=ts or [], arrival=arrival or [], keys=key or [], unit=unit or [],
                      window=window or [], out=out, period=period, distance=distance, where=where, recall=recall,
                      max_quarantine=max_quarantine, engine="local", router="none")
        cfg = resolve(config, flags, output_kind="compare")
        return run_compare(cfg, variants, command=command)

    result = outcome_of(job)
    if json_summary:
        typer.echo(json.dumps(result, indent=2))
    elif sys.stdout.isatty():
        from rich.console import Console

        render_compare_rich(result, Console())
    else:
        for line in compare_lines(result):
            typer.echo(line)
