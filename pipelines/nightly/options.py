"""Nightly options: ``--date`` / ``--from`` / ``--to`` / ``--lookback`` and the
``[run]`` settings of a nightly run, read before any run (the ``run``
command reads them on every call to see whether a run is nightly).

Kept apart from :mod:`.backfill` and :mod:`.partitions` so that a plain run
imports none of the nightly machinery (issue 21: start-up time).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import InputError
from ..base.timeunits import parse_duration
from ..config.settings import read_toml
from .runlog import check_format

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass
class NightlyOptions:
    """Nightly settings, from ``[run]`` in the TOML and the command line (which wins)."""

    days: list[dt.date]
    lookback_us: int | None = None  # None: default_lookback(cfg)
    force: bool = False
    fail_under_target: bool = False
    log_format: str = "text"
    json: bool = False


def parse_day(value: str, option: str = "--date", *, today: dt.date | None = None) -> dt.date:
    """``YYYY-MM-DD``, ``today`` or ``yesterday`` (UTC) -> a date."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    text = str(value).strip()
    if text == "today":
        return today
    if text == "yesterday":
        return today - dt.timedelta(days=1)
    if not _DATE_RE.match(text):
        raise InputError(f"{option} {value}: expected a date YYYY-MM-DD, 'today' or 'yesterday'")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise InputError(f"{option} {value}: not a calendar date") from None


def day_range(first: dt.date, last: dt.date) -> list[dt.date]:
    if last < first:
        raise InputError(f"--from {first} --to {last}: --to is before --from")
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def nightly_options(config_path: Path | None, *, date: str | None = None, from_: str | None = None,
                    to: str | None = None, lookback: str | None = None, force: bool | None = None,
                    fail_under_target: bool | None = None, log_format: str | None = None,
                    json: bool | None = None, today: dt.date | None = None) -> NightlyOptions:
    run: dict[str, Any] = {}
    if config_path is not None:
        doc = read_toml(config_path)
        run = doc.get("run", {}) if isinstance(doc.get("run", {}), dict) else {}

    def pick(flag, key):
        return flag if flag is not None else run.get(key)

    # a date range on the command line replaces a date in the TOML, and vice versa
    cli_days = date is not None or from_ is not None or to is not None
    d = date if cli_days else run.get("date")
    f = from_ if cli_days else run.get("from")
    t = to if cli_days else run.get("to")
    if d is not None and (f is not None or t is not None):
        raise InputError("give either --date or --from/--to, not both")
    if d is not None:
        days = [parse_day(d, "--date", today=today)]
    elif f is not None or t is not None:
        if f is None or t is None:
            raise InputError("--from and --to go together: give both")
        days = day_range(parse_day(f, "--from", today=today), parse_day(t, "--to", today=today))
    else:
        days = []
    lb = pick(lookback, "lookback")
    lookback_us = parse_duration(str(lb), what="lookback") if lb is not None else None
    if lookback_us is not None and lookback_us < 0:
        raise InputError("--lookback must be >= 0")
    for key, value in (("force", pick(force, "force")), ("fail_under_target", pick(fail_under_target, "fail_under_target"))):
        if value is not None and not isinstance(value, bool):
            raise InputError(f"{config_path}: [run] {key} = {value!r}: expected true or false")
    return NightlyOptions(
        days=days, lookback_us=lookback_us, force=bool(pick(force, "force")),
        fail_under_target=bool(pick(fail_under_target, "fail_under_target")),
        log_format=check_format(pick(log_format, "log_format")), json=bool(pick(json, "json")),
    )
