"""Option values parsed and checked where the configuration is resolved, so a
bad value fails before any work is done: ``--distance``, ``--load-weights``,
the Spark engine's ``spark.streamjoin.handoff`` conf and ``--out``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InputError

_DISTANCE = re.compile(r"^\s*([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*<=\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*$")


@dataclass(frozen=True)
class DistanceSpec:
    """Vector columns and the largest allowed Euclidean distance."""

    columns: tuple[str, ...]
    threshold: float


def parse_distance(text: str) -> DistanceSpec:
    """``"x,y<=5000"`` -> ``DistanceSpec(("x", "y"), 5000.0)``."""
    m = _DISTANCE.match(str(text))
    if not m:
        raise InputError(f"--distance {text!r}: expected COLS<=THRESHOLD, e.g. x,y<=5000")
    cols = tuple(c.strip() for c in m.group(1).split(","))
    if len(set(cols)) != len(cols):
        raise InputError(f"--distance {text!r}: a column is named twice")
    return DistanceSpec(columns=cols, threshold=float(m.group(2)))


def parse_weights(text: str | Sequence[float] | None) -> tuple[float, float, float]:
    if text is None:
        return (1.0, 1.0, 1.0)
    parts = text.split(",") if isinstance(text, str) else list(text)
    try:
        w = tuple(float(x) for x in parts)
    except ValueError:
        raise InputError(f"--load-weights {text!r}: expected three numbers cpu,mem,net e.g. 1,1,1") from None
    if len(w) != 3 or any(x < 0 for x in w) or sum(w) == 0:
        raise InputError(f"--load-weights {text!r}: expected three numbers >= 0 (cpu,mem,net), not all 0")
    return w


#: the Spark conf that chooses the record hand-off (engines/spark/handoff.py) and its values
HANDOFF_CONF_KEY = "spark.streamjoin.handoff"
HANDOFF_MODES = ("auto", "files", "inline")


#: per kind of output (the command that writes it), the file that marks such a
#: directory, written last; its presence makes the directory safe to replace
#: by the same command -- and only by it
MARKERS = {"run": "report.json", "tune-buffer": "tune.json"}


def check_target(out: Path, kind: str = "run") -> None:
    """Refuse an ``--out`` that must not be replaced by command ``kind`` (see
    :class:`AtomicOutput`): a file, a foreign non-empty directory, or the
    output of another command (``run --out`` onto a ``tune-buffer`` output).

    Called when the configuration is resolved, so a bad ``--out`` fails before
    any work is done, and again just before staging.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: output path exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()) or (out / MARKERS[kind]).exists():
        return
    for other, marker in MARKERS.items():
        if (out / marker).exists():
            raise InputError(f"{out}: holds a {other} output ({marker}), which {kind} would replace; "
                             f"choose another --out")
    raise InputError(f"{out}: output directory is not empty and is not a streamjoin output; choose another --out")
