"""``--flow-control KEY=VALUE,...``: the settings of seed 001's flow control (issue 20, item 3).

The model (:mod:`~streamjoin.pipelines.capacity.flow`) puts one processing
unit per stream in front of the join, each with an input buffer of ``B``
tuples (``buffer``), a target occupancy ``b0`` (``target``), a share of the
node's service capacity (``rate``, tuples/s) and seed 001's control law
(equation 8) evaluated every ``Δt`` (``interval``) with the gains
``{λ_k}`` (``lambda``, ``λ0:λ1:...``) and ``{μ_l}`` (``mu``, ``μ1:μ2:...``).
``policy`` is the upstream's forwarding policy (``max-flow``: equation 21;
``min-flow``: one FIFO paced by the slowest unit).  ``surge`` is the seed's
CPU fraction ``ρ`` shared among units above ``b0`` and ``bucket`` the token
bucket's cap, in intervals of a unit's share (seed 001, "CPU control").
Every key, its default and its source: docs/semantics.md, "Flow control
(seed 001)".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ..base.errors import InputError
from ..base.timeunits import HUMAN_STEPS_US, default_period, parse_duration

POLICIES = ("max-flow", "min-flow")
KEYS = ("buffer", "target", "rate", "interval", "policy", "lambda", "mu", "surge", "bucket")
#: the shortest default control period Δt (a longer span gets a longer one: :func:`default_interval`)
DEFAULT_INTERVAL_US = 10_000
#: a default Δt gives at most about this many control intervals over the arrivals' span
MAX_DEFAULT_INTERVALS = 100_000
#: the steps a default Δt is rounded to: 10ms, 100ms, then the human units of a default period
INTERVAL_STEPS_US = (10_000, 100_000, *HUMAN_STEPS_US[:6])
#: the longest control period (keeps the pacing arithmetic, slot = t_m + i·Δt / a_m, inside int64)
MAX_INTERVAL_US = 86_400_000_000
DEFAULT_LAMBDA = (0.5,)
DEFAULT_BUCKET = 2.0


@dataclass(frozen=True)
class FlowControl:
    """Resolved flow-control settings (times in microseconds, sizes in tuples)."""

    buffer: int                      # B: every unit's input buffer (tuples)
    rate: float                      # the node's service capacity (tuples/s), split among the units
    target: float | None = None      # b0 (None: B / 2)
    interval_us: int | None = None   # Δt, the control period (None: :func:`default_interval` of the span)
    policy: str = "max-flow"
    lambdas: tuple[float, ...] = DEFAULT_LAMBDA   # λ_0..λ_K (equation 8)
    mus: tuple[float, ...] = ()                   # μ_1..μ_L (equation 8)
    surge: float = 0.0               # the seed's ρ: CPU share given to units above b0 (Fig. 12 step 1212)
    bucket: float = DEFAULT_BUCKET   # token cap, in intervals of a unit's share

    def for_span(self, span_us: int) -> "FlowControl":
        """These settings with Δt resolved: the given one, else :func:`default_interval` of ``span_us``."""
        return self if self.interval_us is not None else replace(self, interval_us=default_interval(span_us))

    @property
    def b0(self) -> float:
        return self.buffer / 2 if self.target is None else self.target

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target"] = self.b0
        d["lambdas"], d["mus"] = list(self.lambdas), list(self.mus)
        return d


def default_interval(span_us: int) -> int:
    """The default control period for arrivals spanning ``span_us``: the smallest of
    10ms, 100ms, 1s, 10s, 1min, 10min, 1h, 1d giving at most :data:`MAX_DEFAULT_INTERVALS`
    intervals, so the interval loop's cost is bounded whatever the span (a span of
    over ~270 years gets 1d and more intervals).

    >>> default_interval(30 * 1_000_000)           # 30 s -> 10ms (3,000 intervals)
    10000
    >>> default_interval(365 * 86_400_000_000)     # a year -> 10min (52,560 intervals)
    600000000
    """
    return default_period(span_us, MAX_DEFAULT_INTERVALS, steps=INTERVAL_STEPS_US)


def _number(key: str, value: str, text: str, *, integer: bool = False) -> float:
    try:
        v = int(value) if integer else float(value)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise InputError(f"--flow-control {text!r}: {key}={value!r}: expected {kind}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise InputError(f"--flow-control {text!r}: {key}={value!r}: expected a finite number")
    return v


def _gains(key: str, value: str, text: str) -> tuple[float, ...]:
    if value == "":
        return ()
    gains = tuple(_number(key, g, text) for g in value.split(":"))
    if any(g < 0 for g in gains):
        raise InputError(f"--flow-control {text!r}: {key}={value!r}: gains must be >= 0")
    return gains


def parse_flow_control(text: Any) -> FlowControl:
    """``"buffer=1000,rate=5000,policy=min-flow"`` -> :class:`FlowControl`; one-line
    :class:`~streamjoin.pipelines.base.errors.InputError` on a bad key or value."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"--flow-control {text!r}: expected KEY=VALUE,... with keys {', '.join(KEYS)}")
    raw: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq or key not in KEYS:
            raise InputError(f"--flow-control {text!r}: {part.strip()!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(KEYS)}")
        if key in raw:
            raise InputError(f"--flow-control {text!r}: {key} is given twice")
        raw[key] = value.strip()
    for need in ("buffer", "rate"):
        if need not in raw:
            raise InputError(f"--flow-control {text!r}: {need}= is required (buffer=TUPLES, rate=TUPLES/s)")
    buffer = int(_number("buffer", raw["buffer"], text, integer=True))
    if buffer < 1:
        raise InputError(f"--flow-control {text!r}: buffer={raw['buffer']}: expected an integer >= 1")
    rate = _number("rate", raw["rate"], text)
    if rate <= 0:
        raise InputError(f"--flow-control {text!r}: rate={raw['rate']}: expected tuples/s > 0")
    target = _number("target", raw["target"], text) if "target" in raw else None
    if target is not None and not 0 <= target <= buffer:
        raise InputError(f"--flow-control {text!r}: target={raw['target']}: expected 0 <= b0 <= buffer ({buffer})")
    interval = parse_duration(raw["interval"], what="--flow-control interval") if "interval" in raw else None
    if interval is not None and not 0 < interval <= MAX_INTERVAL_US:
        raise InputError(f"--flow-control {text!r}: interval={raw['interval']}: expected a duration > 0 and <= 1d")
    policy = raw.get("policy", "max-flow")
    if policy not in POLICIES:
        raise InputError(f"--flow-control {text!r}: policy={policy}: expected one of {', '.join(POLICIES)}")
    lambdas = _gains("lambda", raw["lambda"], text) if "lambda" in raw else DEFAULT_LAMBDA
    mus = _gains("mu", raw["mu"], text) if "mu" in raw else ()
    surge = _number("surge", raw["surge"], text) if "surge" in raw else 0.0
    if not 0 <= surge < 1:
        raise InputError(f"--flow-control {text!r}: surge={raw['surge']}: expected 0 <= surge < 1")
    bucket = _number("bucket", raw["bucket"], text) if "bucket" in raw else DEFAULT_BUCKET
    if bucket < 1:
        raise InputError(f"--flow-control {text!r}: bucket={raw['bucket']}: expected >= 1 (intervals of a share)")
    return FlowControl(buffer=buffer, rate=rate, target=target, interval_us=interval, policy=policy,
                       lambdas=lambdas, mus=mus, surge=surge, bucket=bucket)
