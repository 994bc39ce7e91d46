"""Early re-decisions of the recall-target controllers (seed 003): when a stream's
arrival rate departs, or bad rows burst, the controller re-decides at once
instead of waiting for the next interval ``L``.

Seed 003 (window triggers driven by tuple rate and exception counts) names
three forms of a condition -- an absolute threshold, a rate, and a deviation
from history -- and conditions that combine several sources.  Each is a
setting here (``[run.triggers]`` in TOML, ``--trigger KEY=VALUE`` on the
command line); the defaults are the ones the controller always used:

==================  ========  ==========================================================
key                 default   a probe (``L / 10``) of stream ``i`` fires when ...
==================  ========  ==========================================================
``rate_ratio``      3.0       its arrival count departs from its history by this factor
                              (``< expected / ratio`` or ``> expected * ratio``)
``rate_history``    recent    what "its history" is: ``recent`` (the last ``10 L``) or
                              ``run`` (the mean rate since the stream's first arrival)
``rate_above``      off       its rate exceeds this many tuples/s (absolute)
``rate_below``      off       its rate falls under this many tuples/s, having arrived before
``rate_min_count``  20        (counts below this are noise: no ratio trigger, no stall)
``bad_rows_min``    5         its quarantined rows in the probe reach this count and ...
``bad_rows_factor`` 3.0       ... exceed this multiple of their history
``bad_rows_reason`` any       only quarantined rows with this ``reason`` count
``min_streams``     1         at least this many streams fire in the same probe
                              (``2``: "two links degrade together"; a condition over streams)
==================  ========  ==========================================================

A probe is checked on the operator's clock only when something can come of
it: at the last probe tick before each arrival (an idle operator's timers
coalesce -- with nothing arriving, nothing can be decided differently), so the
cost is bounded by the number of arrivals, never by the span.

Decision times (events)
-----------------------
* ``interval``: every ``L`` of replay time from the first arrival (seed 002,
  Algorithm 1); a tick is taken only when an arrival follows it before the
  next tick (an idle stretch of a year costs nothing).  Before the first
  decision the policy uses MP-K-slack's bound (running maximum delay).
* ``rate`` / ``bad_rows``: checked every *probe* (``L / 10``) before an
  arrival; thresholds are :class:`~.triggers.Triggers` settings (seed 003).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..base.errors import InputError

RATE_HISTORIES = ("recent", "run")


@dataclass(frozen=True)
class Triggers:
    """Thresholds of the early re-decisions (see the module table)."""

    rate_ratio: float = 3.0
    rate_history: str = "recent"
    rate_above: float | None = None
    rate_below: float | None = None
    rate_min_count: int = 20
    bad_rows_min: int = 5
    bad_rows_factor: float = 3.0
    bad_rows_reason: str | None = None
    min_streams: int = 1

    def __post_init__(self) -> None:
        if not self.rate_ratio > 1.0:
            raise InputError(f"trigger rate_ratio={self.rate_ratio}: must be > 1")
        if self.rate_history not in RATE_HISTORIES:
            raise InputError(f"trigger rate_history={self.rate_history!r}: expected one of {', '.join(RATE_HISTORIES)}")
        for key in ("rate_above", "rate_below"):
            v = getattr(self, key)
            if v is not None and not v >= 0:
                raise InputError(f"trigger {key}={v}: must be >= 0 tuples/s")
        if self.rate_min_count < 1 or self.bad_rows_min < 1 or self.min_streams < 1:
            raise InputError("triggers rate_min_count, bad_rows_min and min_streams must be >= 1")
        if not self.bad_rows_factor > 0:
            raise InputError(f"trigger bad_rows_factor={self.bad_rows_factor}: must be > 0")

    @classmethod
    def parse(cls, items: dict[str, Any]) -> Triggers:
        """From ``[run.triggers]`` / ``--trigger KEY=VALUE`` pairs (values as TOML gives them, or strings)."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in items.items():
            if key not in known:
                raise InputError(f"unknown trigger {key!r}: expected one of {', '.join(known)}")
            kind = str(known[key].type)
            try:
                if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "off", "none", "any")):
                    if "None" not in kind:
                        raise ValueError
                    kwargs[key] = None
                elif kind.startswith("int"):
                    if isinstance(raw, bool) or float(raw) != int(float(raw)):
                        raise ValueError
                    kwargs[key] = int(float(raw))
                elif kind.startswith("float"):
                    if isinstance(raw, bool):
                        raise ValueError
                    kwargs[key] = float(raw)
                else:
                    kwargs[key] = str(raw)
            except (TypeError, ValueError):
                raise InputError(f"trigger {key}={raw!r}: expected {kind.replace(' | None', ' or off')}") from None
        return cls(**kwargs)


def probe_ticks(arrival: np.ndarray, first: int, step: int, skip: int) -> np.ndarray:
    """The ticks ``first + k * step`` (``k >= 1``, tick ``>= first + skip``) that
    precede an arrival with no other tick in between: one per gap, at most one
    per arrival, whatever the span."""
    if not len(arrival):
        return np.empty(0, np.int64)
    k = -((first - arrival) // step) - 1          # last tick strictly before each arrival
    k = np.unique(k[k >= 1])
    ticks = first + k * step
    return ticks[ticks >= first + skip]


def fired(cfg: Triggers, ticks: np.ndarray, probe: int, first: int, history: int,
          arrivals: list[np.ndarray], bad: list[np.ndarray], offsets=None, firsts=None) -> dict[int, list[dict]]:
    """Triggers firing at each tick: ``{tick: [trigger, ...]}`` (vectorised per stream).

    ``arrivals[i]`` / ``bad[i]``: sorted arrival times of stream ``i``'s tuples /
    quarantined rows; a streaming caller holds only the recent ones:
    ``offsets[i]`` tuples of stream ``i`` came before ``arrivals[i]``
    (every one at or before ``ticks - max(history, probe)``) and ``firsts[i]``
    is its first arrival.  A trigger dict has ``kind`` (``rate`` / ``bad_rows``),
    ``stream``, ``observed`` (count in the probe) and ``expected``.
    """
    out: dict[int, list[dict]] = {}
    if not len(ticks):
        return out
    per_stream: list[list[tuple[np.ndarray, dict[str, np.ndarray]]]] = []
    for i, times in enumerate(arrivals):
        found = []
        off = offsets[i] if offsets is not None else 0
        for kind, t in (("rate", times), ("bad_rows", bad[i] if i < len(bad) else np.empty(0, np.int64))):
            base = off if kind == "rate" else 0
            if not len(t) + base:
                continue
            upto = base + np.searchsorted(t, ticks, side="right")            # <= tick
            before = base + np.searchsorted(t, ticks - probe, side="right")  # <= tick - probe
            observed = upto - before
            if kind == "rate" and cfg.rate_history == "run":   # since the stream's first arrival
                t_first = firsts[i] if firsts is not None else int(t[0])
                hist_lo = np.full(len(ticks), int(t_first) - 1, dtype=np.int64)
                start = np.zeros(len(ticks), dtype=np.int64)
            else:
                hist_lo = np.maximum(ticks - history, first - 1)
                start = base + np.searchsorted(t, hist_lo, side="right")
            span = np.maximum(ticks - probe - hist_lo, 1)
            expected = (before - start) * (probe / span)
            if kind == "rate":
                low = (expected >= cfg.rate_min_count) & (observed < expected / cfg.rate_ratio)
                high = (observed >= cfg.rate_min_count) & (observed > expected * cfg.rate_ratio)
                fire = low | high
                per_s = observed * (1_000_000 / probe)
                if cfg.rate_above is not None:
                    fire |= per_s > cfg.rate_above
                if cfg.rate_below is not None:
                    fire |= (before > 0) & (per_s < cfg.rate_below)
            else:
                fire = (observed >= cfg.bad_rows_min) & (observed > expected * cfg.bad_rows_factor)
            found.append((fire, {"kind": kind, "stream": i, "observed": observed, "expected": expected}))
        per_stream.append(found)
    if cfg.min_streams > 1:
        streams_firing = np.zeros(len(ticks), dtype=np.int64)
        for found in per_stream:
            any_fire = np.zeros(len(ticks), dtype=bool)
            for fire, _ in found:
                any_fire |= fire
            streams_firing += any_fire
        enough = streams_firing >= cfg.min_streams
    else:
        enough = np.ones(len(ticks), dtype=bool)
    for found in per_stream:
        for fire, d in found:
            for m in np.flatnonzero(fire & enough).tolist():
                out.setdefault(int(ticks[m]), []).append({
                    "kind": d["kind"], "stream": d["stream"], "observed": int(d["observed"][m]),
                    "expected": round(float(d["expected"][m]), 2)})
    return out
