"""``streamjoin inspect``: what a stream's timing looks like, before joining it.

Per stream: rows, event-time span, rate, the delay distribution
(``delta(x)`` = how far a tuple trails the largest timestamp its stream had
shown by its arrival, SPEC §2; ``delay_us`` in JSON, "lag behind max" in the
text line) and the share of out-of-order tuples (``delta > 0``).

Inspecting is looking: the unit and schema guards of
:mod:`~streamjoin.pipelines.load` apply, the quarantine share does not -- a
stream with every row quarantined shows ``rows 0`` and its reasons.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config.settings import StreamConfig
from ..io.load import load_stream, reason_counts
from ..analysis.metrics import distribution

DELAY_QUANTILES = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]


def stream_timing(ts: np.ndarray, arrival: np.ndarray) -> dict[str, Any]:
    """Timing facts of one stream replayed alone, in arrival order."""
    n = len(ts)
    if n == 0:
        return {"rows": 0, "span_us": 0, "rate_per_s": None, "delay_us": distribution(np.empty(0), DELAY_QUANTILES),
                "out_of_order_share": 0.0}
    order = np.lexsort((np.arange(n), arrival))
    t = ts[order]
    delay = np.maximum.accumulate(t) - t
    span = int(ts.max() - ts.min())
    return {
        "rows": n,
        "ts_min_us": int(ts.min()),
        "ts_max_us": int(ts.max()),
        "span_us": span,
        "rate_per_s": n / (span / 1e6) if span > 0 else None,
        "delay_us": distribution(delay, DELAY_QUANTILES),
        "out_of_order_share": float((delay > 0).mean()),
    }


def inspect_stream(cfg: StreamConfig) -> dict[str, Any]:
    s = load_stream(cfg, max_quarantine=None)
    facts = stream_timing(s.ts, s.arrival)
    facts = {"name": cfg.name, "path": cfg.path, **facts, "quarantined": int(s.quarantine.height),
             "quarantine_reasons": reason_counts(s.quarantine)}
    return facts
