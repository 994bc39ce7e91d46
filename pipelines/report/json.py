"""``report.json``: the machine contract (SPEC §9, ``schema_version`` 1).

Keys listed in the SPEC keep their meaning forever; extra keys are allowed.
One such extra key is ``time_origin`` (:func:`calendar_origin`): what replay
time 0 is, so that pages can show calendar dates; another is ``capacity``
(``run --capacity``, issue 20: :data:`CAPACITY_KEYS`), and ``hindsight`` (``qjoin`` /
``qkslack`` against the best fixed setting chosen in hindsight, issue 15:
:data:`HINDSIGHT_KEYS`), each checked when present.
:func:`validate` checks a report against that contract and is used by the
tests and before publishing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..base.timeunits import in_calendar_range

SCHEMA_VERSION = 1

REQUIRED = {
    "schema_version": int,
    "tool_version": str,
    "command": str,
    "config": dict,
    "streams": list,
    "truth_results": int,
    "emitted_results": int,
    "recall": float,
    "duplicates": int,
    "latency_us": dict,
    "memory_tuples": dict,
    "memory_bytes": dict,
    "periods": list,
    "routing": dict,
    "timings_s": dict,
    "outputs": dict,
}
STREAM_KEYS = ("name", "rows", "quarantined", "rate_per_s", "delay_us", "dropped_late", "expired_on_arrival")
PERIOD_KEYS = ("start_us", "end_us", "truth", "emitted", "recall", "target")
#: ``time_origin`` when replay times are microseconds since the Unix epoch
EPOCH = "1970-01-01T00:00:00Z"


def calendar_origin(first_us: int | None, last_us: int | None) -> str | None:
    """``report.json``'s ``time_origin``: :data:`EPOCH` when the replay times read as
    calendar times (Parquet timestamps or epoch-unit integers put the whole span in
    1990-2100 UTC), else ``None`` (times from an arbitrary origin, e.g. a sensor clock)."""
    if first_us is None or last_us is None:
        return None
    return EPOCH if in_calendar_range(first_us, last_us) else None


#: ``capacity`` (extra key, issue 20; present only with ``run --capacity``): its keys, and
#: per stream in ``shed.per_stream`` the causes.  Added in schema_version 1 without a
#: version bump: a report without the capacity model has no ``capacity`` key at all.
CAPACITY_KEYS = ("settings", "offered_load", "processed", "shed", "queueing_delay_us", "occupancy_tuples",
                 "recall_without_capacity", "recall_lost_to_disorder", "recall_lost_to_capacity",
                 "recall_gained_under_capacity", "results_lost", "occupancy_series", "queueing_histogram")
SHED_CAUSES = ("queue_drop_new", "queue_replaced", "state_evicted")
#: ``hindsight`` (extra key, issue 15 item 4; present only for ``qjoin`` / ``qkslack`` runs with a
#: recall target): its keys when computed, and per setting (``fixed``, ``fixed_plus``, ``adaptive``)
#: the numbers compared.  Added in schema_version 1 without a version bump, as ``capacity``: other
#: runs have no ``hindsight`` key at all, and no existing key changes meaning.
HINDSIGHT_KEYS = ("computed", "policy", "fixed_policy", "measure", "recall_target", "period_share", "period_us",
                  "periods_with_results", "overall_need_us", "per_period_need_us", "fixed", "fixed_plus",
                  "adaptive", "ratio", "ratio_plus", "stationarity", "verdict", "reason", "text")
HINDSIGHT_SETTING_KEYS = ("recall", "periods_meeting_target", "memory_tuples_mean", "latency_us_mean")
ROUTING_KEYS = ("router", "partitions", "replication_factor", "overhead_measured", "overhead_predicted", "load_imbalance")
#: a routed run's ``routing.per_partition`` entries (docs/semantics.md, "Load of a partition")
PARTITION_KEYS = ("partition", "cpu", "mem", "net", "phi_cpu", "phi_mem", "phi_net", "load")


def validate(report: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first key that breaks the contract."""
    for key, typ in REQUIRED.items():
        if key not in report:
            raise ValueError(f"report.json: missing key {key!r}")
        value = report[key]
        if typ is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, typ):
            raise ValueError(f"report.json: {key!r} should be {typ.__name__}, got {type(value).__name__}")
    if report["schema_version"] != SCHEMA_VERSION:
        raise ValueError("report.json: schema_version must be 1")
    for s in report["streams"]:
        for k in STREAM_KEYS:
            if k not in s:
                raise ValueError(f"report.json: stream entry missing {k!r}")
        for k in ("p50", "p95", "max"):
            if k not in s["delay_us"]:
                raise ValueError(f"report.json: stream delay_us missing {k!r}")
    for k in ("mean", "p50", "p95", "p99", "max"):
        if k not in report["latency_us"]:
            raise ValueError(f"report.json: latency_us missing {k!r}")
    for section in ("memory_tuples", "memory_bytes"):
        for k in ("peak", "mean"):
            if k not in report[section]:
                raise ValueError(f"report.json: {section} missing {k!r}")
    for p in report["periods"]:
        for k in PERIOD_KEYS:
            if k not in p:
                raise ValueError(f"report.json: period entry missing {k!r}")
    for k in ROUTING_KEYS:
        if k not in report["routing"]:
            raise ValueError(f"report.json: routing missing {k!r}")
    for p in report["routing"].get("per_partition", []):
        for k in PARTITION_KEYS:
            if k not in p:
                raise ValueError(f"report.json: routing.per_partition entry missing {k!r}")
            if k != "partition" and not isinstance(p[k], (int, float)):
                raise ValueError(f"report.json: routing.per_partition {k!r} should be a number")
    if "capacity" in report:
        _validate_capacity(report["capacity"], len(report["streams"]))
    if "hindsight" in report:
        _validate_hindsight(report["hindsight"])


def _validate_hindsight(h: Any) -> None:
    if not isinstance(h, dict) or not isinstance(h.get("computed"), bool) or not isinstance(h.get("text"), str):
        raise ValueError("report.json: 'hindsight' should be dict with 'computed' and 'text'")
    if not h["computed"]:
        return
    for k in HINDSIGHT_KEYS:
        if k not in h:
            raise ValueError(f"report.json: hindsight missing {k!r}")
    for part in ("fixed", "fixed_plus", "adaptive"):
        for k in HINDSIGHT_SETTING_KEYS:
            if k not in h[part]:
                raise ValueError(f"report.json: hindsight.{part} missing {k!r}")


def _validate_capacity(cap: Any, streams: int) -> None:
    if not isinstance(cap, dict):
        raise ValueError("report.json: 'capacity' should be dict")
    for k in CAPACITY_KEYS:
        if k not in cap:
            raise ValueError(f"report.json: capacity missing {k!r}")
    per_stream = cap["shed"].get("per_stream", [])
    if len(per_stream) != streams:
        raise ValueError("report.json: capacity.shed.per_stream needs one entry per stream")
    for entry in [cap["shed"], *per_stream]:
        for k in SHED_CAUSES:
            if not isinstance(entry.get(k), int):
                raise ValueError(f"report.json: capacity.shed entry missing {k!r}")
    for k in ("mean", "p50", "p95", "p99", "max"):
        if k not in cap["queueing_delay_us"]:
            raise ValueError(f"report.json: capacity.queueing_delay_us missing {k!r}")


def json_safe(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null rather than invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write(report: dict[str, Any], path: Path) -> None:
    validate(report)
    path.write_text(json.dumps(json_safe(report), indent=2, sort_keys=False) + "\n")


def read(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
