"""The maths of ``streamjoin calibrate`` (issue 20 item 1): service times from measured joins.

Each measured run ``i`` processed ``n_i`` input tuples, emitted ``r_i``
results and took ``t_i`` seconds.  The capacity model charges
``tuple + result * r_a`` per tuple ``a`` (docs/semantics.md, "Capacity",
rule 2), so a whole run costs ``tuple * n + result * r``; :func:`fit`
estimates both by ordinary least squares on

    t_i = a * n_i + b * r_i + c

(``c``: what a run costs whatever its size -- start-up, thread pools; the
model has no such term, so it is reported, not used).  Pure: numbers in,
numbers out, no timing -- the job (``jobs/calibrate.py``) measures.

A design whose runs do not vary the tuple count and the result count
independently (all runs the same size, or results a fixed multiple of the
tuples) cannot separate ``a`` from ``b`` from ``c``: refused with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..base.errors import InputError

#: unknowns of the fit: per tuple, per result, per run
UNKNOWNS = 3


@dataclass(frozen=True)
class Fit:
    """Least-squares service times.  Seconds throughout; ``r2`` is ``None`` when every time is equal."""

    tuple_s: float
    result_s: float
    intercept_s: float
    r2: float | None
    residual_s: tuple[float, ...]     # measured - fitted, per run
    residual_rms_s: float
    residual_max_abs_s: float
    residual_max_relative: float      # max |residual| / measured time

    def to_dict(self) -> dict:
        return {
            "tuple_ns": self.tuple_s * 1e9, "result_ns": self.result_s * 1e9, "intercept_s": self.intercept_s,
            "r2": self.r2, "residual_s": list(self.residual_s), "residual_rms_s": self.residual_rms_s,
            "residual_max_abs_s": self.residual_max_abs_s, "residual_max_relative": self.residual_max_relative,
        }


def fit(tuples: Sequence[float], results: Sequence[float], seconds: Sequence[float]) -> Fit:
    """Fit ``seconds = a * tuples + b * results + c`` by least squares (see the module doc).

    Raises :class:`~streamjoin.pipelines.base.errors.InputError` (one line) for a
    design that cannot separate the three terms, or for bad numbers."""
    n = np.asarray(tuples, dtype=np.float64)
    r = np.asarray(results, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if not (n.ndim == r.ndim == t.ndim == 1 and n.size == r.size == t.size):
        raise InputError("calibrate: tuples, results and times must be three lists of the same length")
    if n.size < UNKNOWNS + 1:
        raise InputError(f"calibrate: {n.size} runs cannot fit {UNKNOWNS} terms and say how well they fit; "
                         f"need at least {UNKNOWNS + 1} inputs")
    if not (np.all(np.isfinite(n)) and np.all(np.isfinite(r)) and np.all(np.isfinite(t))):
        raise InputError("calibrate: a tuple count, result count or time is not a finite number")
    if np.any(n <= 0) or np.any(r < 0) or np.any(t <= 0):
        raise InputError("calibrate: every run needs tuples > 0, results >= 0 and a time > 0")
    if np.all(n == n[0]):
        raise InputError(f"calibrate: every run has the same tuple count ({n[0]:,.0f}); the per-tuple time cannot be "
                         "told from the per-run constant: vary the input size")
    # each column scaled to at most 1: the rank test and the solve do not depend on units
    scale = np.array([n.max(), max(r.max(), 1.0), 1.0])
    design = np.column_stack([n, r, np.ones_like(n)]) / scale
    if np.linalg.matrix_rank(design) < UNKNOWNS:
        raise InputError("calibrate: the runs do not vary tuples and results independently (results are a fixed "
                         "multiple of the tuples, or none); the per-tuple and per-result times cannot be told apart: "
                         "vary the results per tuple (window widths)")
    coef, *_ = np.linalg.lstsq(design, t, rcond=None)
    a, b, c = (coef / scale).tolist()
    fitted = design @ coef
    residual = t - fitted
    total = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual ** 2)) / total if total > 0 else None
    return Fit(
        tuple_s=a, result_s=b, intercept_s=c, r2=r2, residual_s=tuple(residual.tolist()),
        residual_rms_s=float(np.sqrt(np.mean(residual ** 2))),
        residual_max_abs_s=float(np.max(np.abs(residual))),
        residual_max_relative=float(np.max(np.abs(residual) / t)),
    )


def capacity_option(f: Fit) -> str | None:
    """The ``--capacity`` text of a fit (whole nanoseconds, as ``capacity/spec.py`` parses them),
    or ``None`` when a service time comes out negative (the measurements are too noisy to say)."""
    tuple_ns, result_ns = round(f.tuple_s * 1e9), round(f.result_s * 1e9)
    if tuple_ns < 0 or result_ns < 0:
        return None
    return f"tuple={tuple_ns}ns,result={result_ns}ns"
