"""Cron-friendly run logs: plain lines, or one JSON object per line.

``text`` (default): progress lines go to stderr as ``streamjoin: ...``; the
per-day and final summaries go to stdout as plain ``key=value`` lines.  No
colours, no progress bars, no multi-line messages.

``json`` (``--log-format json``): every event is one JSON object on stdout,
flushed at once -- ``{"event": "stage", ...}`` per stage, ``"day"`` per
partition, ``"plan"`` per planned day, ``"summary"`` last (with
``exit_code``).  Errors are also printed to stderr as ``error: ...`` so cron
mail shows them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ..base.errors import InputError

LOG_FORMATS = ("text", "json")


def check_format(value: str | None) -> str:
    value = value or "text"
    if value not in LOG_FORMATS:
        raise InputError(f"--log-format {value}: expected one of {', '.join(LOG_FORMATS)}")
    return value


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if value is None:
        return "-"
    return str(value)


class RunLog:
    def __init__(self, fmt: str = "text", out=None, err=None):
        self.fmt = check_format(fmt)
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.started = time.perf_counter()

    def _json(self, event: str, fields: dict[str, Any]) -> None:
        self.out.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        self.out.flush()

    def stage(self, name: str, seconds: float, **fields: Any) -> None:
        if self.fmt == "json":
            self._json("stage", {"stage": name, "seconds": round(seconds, 4), **fields})
        else:
            where = f"{fields['date']} " if "date" in fields else ""
            self.err.write(f"streamjoin: {where}stage {name} done in {seconds:.2f}s\n")
            self.err.flush()

    def info(self, message: str, **fields: Any) -> None:
        if self.fmt == "json":
            self._json("info", {"message": message, **fields})
        else:
            self.err.write(f"streamjoin: {message}\n")
            self.err.flush()

    def warning(self, message: str, **fields: Any) -> None:
        if self.fmt == "json":
            self._json("warning", {"message": message, **fields})
        self.err.write(f"warning: {message}\n")
        self.err.flush()

    def record(self, event: str, **fields: Any) -> None:
        """A result line: a day, a plan entry, a validated stream."""
        if self.fmt == "json":
            self._json(event, fields)
        else:
            self.out.write(f"{event} " + " ".join(f"{k}={_fmt(v)}" for k, v in fields.items()) + "\n")
            self.out.flush()

    def error(self, message: str, exit_code: int, **fields: Any) -> None:
        if self.fmt == "json":
            self._json("error", {"message": message, "exit_code": exit_code, **fields})
        self.err.write(f"error: {message}\n")
        self.err.flush()

    def summary(self, exit_code: int, **fields: Any) -> None:
        fields = {**fields, "exit_code": exit_code, "seconds": round(time.perf_counter() - self.started, 3)}
        self.record("summary", **fields)
