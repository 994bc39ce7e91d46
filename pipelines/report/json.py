"""``report.json``: the machine contract (SPEC §9, ``schema_version`` 1).

Keys listed in the SPEC keep their meaning forever; extra keys are allowed.
One such extra key is ``time_origin`` (:func:`calendar_origin`): what replay
time 0 is, so that pages can show calendar dates.
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
