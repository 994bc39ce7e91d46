"""Time inside streamjoin: int64 microseconds, durations, units.

Every time in the engine is an ``int64`` count of microseconds (SPEC §1).
"Minus infinity" (no tuple seen yet) is :data:`NEG_INF`, a sentinel far below
any real timestamp but far enough above ``int64`` min that subtracting a
duration from it cannot overflow.  Input timestamps are checked to lie within
``±MAX_ABS_TS`` so that arithmetic on them never meets the sentinel.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .errors import InputError

NEG_INF = -(2**62)
MAX_ABS_TS = 2**60  # ~36,000 years of microseconds either side of 0
#: the largest duration (window, K, retention, period, ...): a time plus or minus
#: a few of them stays far inside int64, and so does NEG_INF minus one
MAX_DURATION_US = MAX_ABS_TS

#: microseconds per unit, for integer timestamp columns and durations
UNIT_US = {
    "ps": 1e-6,
    "ns": 1e-3,
    "us": 1,
    "µs": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "min": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
    "w": 604_800_000_000,
}

#: times in [1990-01-01, 2100-01-01) UTC, as microseconds since the Unix epoch:
#: calendar times (docs/semantics.md).  A stream's integer times that land here
#: under another unit than the declared one are a likely --unit mistake
#: (io/load.py); a replay span inside it gets dated axes (report/json.py).
CALENDAR_RANGE_US = (631_152_000_000_000, 4_102_444_800_000_000)


def in_calendar_range(first_us: float, last_us: float) -> bool:
    """Whether ``first_us .. last_us`` (microseconds since the epoch) lies in
    :data:`CALENDAR_RANGE_US`."""
    lo, hi = CALENDAR_RANGE_US
    return lo <= first_us and last_us < hi


#: the units an integer timestamp column may be declared in (SPEC §1)
TS_UNITS = ("s", "ms", "us", "ns", "ps")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ps|ns|us|µs|ms|s|min|m|h|d|w)\s*$")


def parse_duration(text: str | int, *, what: str = "duration") -> int:
    """Parse ``250ms``, ``2s``, ``1.5s``, ``1h``, ``500us`` into microseconds.

    ``0`` alone is accepted (no unit needed for nothing).  Negative values,
    missing units and unknown units raise :class:`InputError` naming ``what``.
    Fractions that do not land on a whole microsecond are rounded to nearest.
    Durations above :data:`MAX_DURATION_US` (2^60 us, ~36,000 years) raise
    too: time arithmetic on them would overflow int64.
    """
    if isinstance(text, bool):
        raise InputError(f"bad {what} {text!r}: expected e.g. 250ms, 2s, 1.5s, 1h, 500us")
    if isinstance(text, int):
        if text < 0:
            raise InputError(f"bad {what} {text!r}: must be >= 0")
        return _bounded(text, text, what)
    s = str(text).strip()
    if s in ("0", "0.0"):
        return 0
    if s.startswith("-"):
        raise InputError(f"bad {what} {text!r}: must be >= 0")
    m = _DURATION.match(s)
    if not m:
        raise InputError(f"bad {what} {text!r}: expected a number with a unit, e.g. 250ms, 2s, 1.5s, 1h, 500us")
    value, unit = m.groups()
    us = float(value) * UNIT_US[unit]  # inf for a number too long for a float: refused below
    return _bounded(round(us) if us <= MAX_DURATION_US else us, text, what)


def _bounded(us: int | float, text: str | int, what: str) -> int:
    if not us <= MAX_DURATION_US:
        shown = repr(text) if len(str(text)) <= 32 else f"{str(text)[:16]!r}... ({len(str(text))} characters)"
        raise InputError(f"bad {what} {shown}: too large: durations are at most 2^60 us "
                         f"(about 36,000 years, {MAX_DURATION_US // UNIT_US['w']}w)")
    return int(us)


def format_duration(us: float | int | None, digits: int = 3) -> str:
    """Human form of a microsecond count: ``365d``, ``1.25s``, ``340ms``, ``12us``
    (``digits`` significant digits, trailing zeros dropped)."""
    if us is None:
        return "-"
    us = float(us)
    a = abs(us)
    for size, unit in ((86_400_000_000, "d"), (3_600_000_000, "h"), (60_000_000, "min"), (1_000_000, "s"),
                       (1_000, "ms")):
        if a >= size:
            break
    else:
        size, unit = 1, "us"
    text = f"{us / size:.{digits}g}"
    if "e" in text:  # rounded up to a power of ten: 999.95ms with 3 digits is 1000ms, not 1e+03ms
        text = f"{us / size:.0f}"
    return text + unit


def format_durations(values: Sequence[float | int | None]) -> list[str]:
    """:func:`format_duration` of each value, with as many significant digits
    (3 at least) as it takes to print different values differently:
    ``330.4ms`` next to ``330ms``, ``10.001s`` next to ``10s``."""
    distinct = len({float(v) for v in values if v is not None})
    for digits in range(3, 16):
        texts = [format_duration(v, digits) for v in values]
        if len({t for t, v in zip(texts, values) if v is not None}) == distinct:
            break
    return texts


def format_rate(per_s: float | None) -> str:
    """A rate, 3 significant digits, per second -- or per min / h / d when under
    one a second, so a slow stream does not read ``0.0/s``: ``1,234/s``,
    ``12.3/s``, ``2.32/min``, ``4.5/h``."""
    if per_s is None:
        return "-"
    for factor, unit in ((1, "s"), (60, "min"), (3_600, "h")):
        if per_s * factor >= 1:
            value = per_s * factor
            return f"{value:,.0f}/{unit}" if value >= 100 else f"{value:.3g}/{unit}"
    value = per_s * 86_400
    return f"{value:,.0f}/d" if value >= 100 else f"{value:.3g}/d"


#: the human units a default period (or any automatic time step) is rounded to
HUMAN_STEPS_US = (
    1_000_000, 10_000_000, 60_000_000, 600_000_000, 3_600_000_000, 86_400_000_000, 604_800_000_000)

#: a default period gives at most about this many periods over the replay span
MAX_DEFAULT_PERIODS = 1_000


def default_period(span_us: int, max_periods: int = MAX_DEFAULT_PERIODS,
                   steps: tuple[int, ...] = HUMAN_STEPS_US) -> int:
    """The default recall period for a replay spanning ``span_us``: the smallest
    of ``steps`` (1s, 10s, 1min, 10min, 1h, 1d, 1w) giving at most ``max_periods``
    periods (a span over ~19 years gets 1w and more periods: the ladder stops
    there).  Any automatic time step over a span is this choice with its own
    ladder and bound (flow control's interval: config/flow_control.py).

    >>> default_period(5 * 60_000_000)          # 5 minutes -> 1s (300 periods)
    1000000
    >>> default_period(365 * 86_400_000_000)    # a year -> 1d (365 periods)
    86400000000
    """
    span = max(int(span_us), 0)
    for step in steps:
        if span // step + 1 <= max_periods:
            return step
    return steps[-1]


#: the 1-2-5 ladder an automatic grid step (tune-buffer's --granularity) is taken from:
#: 1, 2, 5 x 10^k us up to 500ms, then 1s 2s 5s 10s 20s, 1min 2min 5min 10min 20min, 1h
GRID_STEPS_US = tuple(
    [m * 10**e for e in range(6) for m in (1, 2, 5)]
    + [1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000]
    + [60_000_000, 120_000_000, 300_000_000, 600_000_000, 1_200_000_000, 3_600_000_000])

#: an automatic grid has about this many steps up to the largest value
GRID_STEPS_PER_RANGE = 100


def default_granularity(largest_us: int, steps: int = GRID_STEPS_PER_RANGE) -> int:
    """The grid step for settings up to ``largest_us`` when the user gives none: the
    largest step of :data:`GRID_STEPS_US` at most ``largest_us / steps`` (1us below
    that; 1h at most), so the grid holds ``steps`` to ``3 x steps`` steps up to
    ``largest_us`` whatever the data's time scale (ladder steps are at most 3x apart).

    >>> default_granularity(1_200_000)               # 1.2s -> 10ms
    10000
    >>> default_granularity(8 * 3_600_000_000)       # 8h -> 2min
    120000000
    """
    limit = max(int(largest_us), 0) / steps
    best = GRID_STEPS_US[0]
    for step in GRID_STEPS_US:
        if step <= limit:
            best = step
    return best
