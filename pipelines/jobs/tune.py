"""``streamjoin tune-buffer``: load, replay once with no policy, tune
(:mod:`~streamjoin.pipelines.analysis.tuning`; ``spark-ss``'s and ``flink``'s
watermark delay: :mod:`~streamjoin.pipelines.analysis.watermark_tuning`), publish ``tune.json``
and ``tune.html`` atomically."""

from __future__ import annotations

import time
from typing import Any

from ..analysis.metrics import period_counts
from ..analysis.tuning import TUNE_POLICIES, tune
from ..analysis.watermark_tuning import WATERMARK_POLICIES, engine_settings, tune_watermark
from ..base.errors import InputError
from ..base.timeunits import parse_duration
from ..base.version import tool_version
from ..config.settings import check_recall
from ..engines.local import join
from ..io.load import load_all
from ..io.output import locks_out
from ..policies import PolicySpec
from ..replay.predicates import space_of, where_of
from ..report import html as report_html
from ..report.json import calendar_origin
from .run import arrival_span, publish_json_and_html, resolve_period


@locks_out("tune-buffer")  # the whole job holds the lock of --out (a second run exits 4)
def run_tune(cfg, *, policy: str, q: float | None, granularity: str | int | None, per_period: bool,
             command: str = "tune-buffer") -> dict[str, Any]:
    """``streamjoin tune-buffer``: load, replay once, tune, publish ``tune.json`` + ``tune.html``.

    ``cfg`` is a resolved :class:`~streamjoin.pipelines.config.settings.RunConfig`;
    its policy is ignored, except that ``spark-ss`` takes the trigger and the
    watermark policy from it, ``flink`` the watermark interval (the delay is
    what is tuned).  Bad options raise
    ``InputError`` before any work is done.
    """
    if policy == "flink-sql":
        raise InputError("--policy flink-sql: tune-buffer does not tune it: its recall is not monotone in the "
                         "delay (a pair emitted at one delay can be lost at a larger one), so there is no exact "
                         "least delay; tune --policy flink")
    if policy not in TUNE_POLICIES:
        raise InputError(f"--policy {policy}: tune-buffer tunes one of {', '.join(TUNE_POLICIES)}")
    engine = cfg.policy if policy in WATERMARK_POLICIES else None   # an engine emulation: its delay is tuned
    if engine is not None and engine.name == "spark-ss" and engine.trigger_files is not None:
        raise InputError("tune-buffer --policy spark-ss cuts micro-batches by --trigger DUR only; "
                         "[run] trigger_files is not tuned yet")
    if engine is not None and per_period:
        raise InputError(f"--per-period: not available for --policy {policy} yet (the overall delay only)")
    q = check_recall(q)
    if q is None:
        raise InputError("tune-buffer needs --recall Q (a recall target in (0, 1])")
    g = parse_duration(granularity, what="granularity") if granularity is not None else None  # None: from the data
    if g is not None and g <= 0:
        raise InputError("--granularity must be > 0")
    started = time.perf_counter()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    streams = load_all(list(cfg.streams), cfg.max_quarantine)
    where_fn = where_of(cfg, streams)
    cfg = resolve_period(cfg, streams)  # --period, or chosen from the replay span
    timings["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the same truth as `run` (keys, distance, --where); the policy is decided per setting below
    outcome = join([s.ts for s in streams], [s.arrival for s in streams],
                   [s.keys if s.keys.width else None for s in streams], cfg.windows, PolicySpec("none"),
                   space=space_of(cfg, streams), where=where_fn)
    timings["join"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if engine is not None:
        result = tune_watermark(outcome.replay, outcome.combos, cfg.windows, cfg.streams, q=q, g=g, policy=engine,
                                period_us=cfg.period_us, row_bytes=[s.row_bytes for s in streams],
                                extra_condition=bool(cfg.where or cfg.distance))
    else:
        result = tune(outcome.replay, outcome.combos, cfg.windows, [s.name for s in streams], policy=policy, q=q,
                      g=g, period_us=cfg.period_us, per_period=per_period, row_bytes=[s.row_bytes for s in streams])
    timings["tune"] = time.perf_counter() - t0
    result["period_source"] = cfg.period_source
    result["time_origin"] = calendar_origin(*arrival_span(streams))
    if per_period:
        result.update(period_counts(*arrival_span(streams), cfg.period_us, len(result["periods"])))
    config = cfg.to_dict()
    config["policy"] = {"name": policy}
    if engine is not None:
        config["policy"].update(engine_settings(engine))
    head = {"schema_version": 1, "kind": "tune-buffer", "tool_version": tool_version(), "command": command,
            "config": config}
    result = {**head, **result}
    publish_json_and_html(cfg.out, "tune-buffer", "tune", result, report_html.render_tune, started=started,
                          timings=timings)
    return result
