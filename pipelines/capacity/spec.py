"""``--capacity KEY=VALUE,...``: the capacity model's settings (issue 20).

The settings object is separate from the logic that uses it (like bytewax's
``EventClock``): :class:`CapacitySpec` is a frozen value, parsed once by
:func:`parse_capacity`, and read by :mod:`.queueing`, :mod:`.shedding` and
:mod:`.model`.  Keys (docs/semantics.md, "Capacity (issue 20)")::

    tuple=DUR    service time per input tuple (required; e.g. 5us, 800ns)
    result=DUR   service time per result the tuple's processing emits (default 0)
    cpu=F        the operator's CPU share, 0 < F <= 1 (service times / F; default 1)
    queue=N      per-stream input queue cap in tuples, N >= 1 (default unbounded)
    shed=P       drop-new | replace-oldest: what a full queue does (default drop-new)
    state=N      join-state cap per stream in tuples, N >= 1 (evict-oldest; default unbounded)

Service times are kept in integer **nanoseconds** (a tuple often costs less
than the replay's microsecond).  Bad input is a one-line
:class:`~streamjoin.pipelines.base.errors.InputError` naming the key.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..base.errors import InputError
from ..base.timeunits import UNIT_US

SHED_POLICIES = ("drop-new", "replace-oldest")
KEYS = ("tuple", "result", "cpu", "queue", "shed", "state")
_DUR = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zµ]+)\s*$")
#: the largest service time accepted (1 hour): cumulative sums stay far inside int64 ns
MAX_SERVICE_NS = 3_600 * 10**9


@dataclass(frozen=True)
class CapacitySpec:
    """One operator's capacity.  ``queue`` / ``state``: ``None`` = unbounded."""

    tuple_ns: int
    result_ns: int = 0
    cpu: float = 1.0
    queue: int | None = None
    shed: str = "drop-new"
    state: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """The option as a user would write it (canonical order)."""
        parts = [f"tuple={self.tuple_ns}ns", f"result={self.result_ns}ns", f"cpu={self.cpu:g}"]
        if self.queue is not None:
            parts += [f"queue={self.queue}", f"shed={self.shed}"]
        if self.state is not None:
            parts.append(f"state={self.state}")
        return ",".join(parts)


def _service_ns(key: str, value: str) -> int:
    if value.strip() in ("0", "0.0"):   # no unit needed for nothing (as parse_duration)
        return 0
    m = _DUR.match(value)
    if not m or m.group(2) not in UNIT_US:
        raise InputError(f"--capacity {key}={value!r}: expected a duration with a unit, e.g. 5us, 800ns, 1.5ms")
    ns = float(m.group(1)) * UNIT_US[m.group(2)] * 1000
    if not math.isfinite(ns) or ns > MAX_SERVICE_NS:
        raise InputError(f"--capacity {key}={value!r}: expected a service time of at most 1h")
    return int(round(ns))


def _count(key: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1 or not value.strip().isdigit():
        raise InputError(f"--capacity {key}={value!r}: expected a whole number of tuples >= 1")
    return n


def parse_capacity(text: str | None) -> CapacitySpec | None:
    """``None`` (no model) or the parsed :class:`CapacitySpec`; raises ``InputError``."""
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise InputError("--capacity: expected KEY=VALUE,... with at least tuple=DUR (e.g. tuple=5us,queue=1000)")
    seen: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        key = key.strip()
        if not eq or not key:
            raise InputError(f"--capacity {part.strip()!r}: expected KEY=VALUE with KEY one of {', '.join(KEYS)}")
        if key not in KEYS:
            raise InputError(f"--capacity: unknown key {key!r}; expected one of {', '.join(KEYS)}")
        if key in seen:
            raise InputError(f"--capacity: key {key!r} is given twice")
        seen[key] = value.strip()
    if "tuple" not in seen:
        raise InputError("--capacity: tuple=DUR (service time per input tuple) is required, e.g. tuple=5us")
    cpu = 1.0
    if "cpu" in seen:
        try:
            cpu = float(seen["cpu"])
        except ValueError:
            cpu = math.nan
        if not (0 < cpu <= 1):
            raise InputError(f"--capacity cpu={seen['cpu']!r}: expected a CPU share F with 0 < F <= 1")
    shed = seen.get("shed", "drop-new")
    if shed not in SHED_POLICIES:
        raise InputError(f"--capacity shed={shed!r}: expected one of {', '.join(SHED_POLICIES)}")
    if "shed" in seen and "queue" not in seen:
        raise InputError("--capacity shed=...: needs queue=N (an unbounded queue never sheds)")
    return CapacitySpec(
        tuple_ns=_service_ns("tuple", seen["tuple"]),
        result_ns=_service_ns("result", seen["result"]) if "result" in seen else 0,
        cpu=cpu,
        queue=_count("queue", seen["queue"]) if "queue" in seen else None,
        shed=shed,
        state=_count("state", seen["state"]) if "state" in seen else None,
    )
