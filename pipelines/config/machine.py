"""Settings of the finite-machine models (issue 20), checked against what runs them.

``--capacity`` (the processing queue, bounded queues and state cap of
``pipelines/capacity/``; its keys are parsed by ``capacity/spec.py`` when the
job starts) and ``--flow-control`` (seed 001; parsed by
:mod:`.flow_control`): which engines, policies and commands model them, and
the one-line errors for the others.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import InputError
from .flow_control import FlowControl, parse_flow_control


def flow_control_setting(value: Any, output_kind: str, engine: str, *,
                         spark_chosen: bool) -> tuple[FlowControl | None, str]:
    """``--flow-control`` / ``[run] flow_control``: the parsed settings and the engine that
    runs them: the local engine, which the default engine gives way to (as with
    ``--capacity``), or Spark when the user chose it (``spark_chosen``: config/choice.py;
    the units delay the arrivals on the driver before the load ends; the Spark join
    replays the delayed arrivals)."""
    flow = parse_flow_control(value) if value is not None else None
    if flow is not None and output_kind in ("tune-buffer", "compare"):
        raise InputError(f"[run] flow_control: {output_kind} replays the input's own arrivals and does not apply "
                         "flow control yet; run it on a config without flow_control (streamjoin run applies it)")
    if flow is not None and engine == "spark" and not spark_chosen:
        engine = "local"   # the default engine with flow control, not the user's choice
    return flow, engine


def check_flow_control(flow: FlowControl | None, chunk_rows: int | None, trigger_files: int | None) -> None:
    """What ``--flow-control`` does not run with: bounded-memory chunks (it replays in memory)
    and spark-ss's file-cut micro-batches (a row arrives when its file's batch runs)."""
    if flow is not None and chunk_rows:
        raise InputError("--flow-control replays in memory: give --chunk-rows 0 (or leave it out)")
    if flow is not None and trigger_files is not None:
        raise InputError("--flow-control with --trigger-files: rows arrive when their file's batch runs, which "
                         "flow control would move; use --trigger DUR")


def capacity_setting(value: Any, policy_name: str, engine: str, chunk_rows: int | None, *, output_kind: str,
                     spark_chosen: bool) -> tuple[str | None, str]:
    """``--capacity`` / ``[run] capacity``: the text, checked against what runs it (its keys
    are parsed by pipelines/capacity/spec.py when the job starts), and the engine that runs
    it: the local engine, which the default engine gives way to (as with ``--flow-control``),
    or Spark when the user chose it (``spark_chosen``: config/choice.py; the model runs on
    the driver, over the replay facts it computes).  Refused: ``tune-buffer`` / ``compare``,
    ``--chunk-rows N`` and the spark-ss / flink / flink-sql policies; nightly runs
    (``nightly/backfill.py``) refuse it after resolving their settings."""
    if value is None:
        return None, engine
    if not isinstance(value, str):
        raise InputError(f"--capacity {value!r}: expected a string KEY=VALUE,... (e.g. \"tuple=5us,queue=1000\")")
    if output_kind in ("tune-buffer", "compare"):
        raise InputError(f"[run] capacity: {output_kind} replays an infinite machine and does not apply the "
                         "capacity model yet; run it on a config without capacity (streamjoin run applies it)")
    if engine == "spark" and not spark_chosen:
        engine = "local"   # the default engine with a capacity model, not the user's choice
    if chunk_rows not in (None, 0):
        raise InputError("--capacity: the capacity model replays in memory; the bounded-memory engine "
                         "(--chunk-rows N) does not model it; use --chunk-rows 0")
    if policy_name in ("spark-ss", "flink", "flink-sql"):
        raise InputError(f"--capacity: policy {policy_name} is not modelled under a capacity model yet; "
                         "use none, kslack, mpkslack, qkslack, static or qjoin")
    return value, engine
