"""What a finite machine cost (issue 20): ``report.json``'s ``capacity`` object.

From a :class:`~streamjoin.pipelines.capacity.model.CapacityOutcome`: the
settings, the offered load, tuples shed per stream and cause, the queueing
delay, recall lost to capacity beside recall lost to disorder (the same
policy without the capacity model), and, with a state cap, whether the
budget, the queue's shedding or the recall-target controller missed the
target in a period (issue 20 item 5).
The series the HTML report draws (occupancy, queueing-delay histogram) are
added by the job (:func:`~streamjoin.pipelines.report.build.capacity_series`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..capacity.model import CapacityOutcome
from ..capacity.queueing import DROPPED_NEW, REPLACED
from ..replay.progress import Replay
from . import metrics


def queueing_delay_us(cap: CapacityOutcome) -> np.ndarray:
    """Per processed tuple: time waiting before its service started, in
    microseconds rounded up (the emission times' rounding)."""
    q = cap.queue
    done = q.kept
    origin_ns = q.finish_ns[done] - q.service_ns[done]
    return -(-(origin_ns - cap.arrival_ns[done]) // 1000)


def capacity_section(cap: CapacityOutcome, names: Sequence[str], replay: Replay, *, period_us: int,
                     target: float | None) -> dict[str, Any]:
    """``report.json`` ``capacity`` (docs/semantics.md, "Capacity (issue 20)")."""
    q, em = cap.queue, cap.emission
    N = replay.N
    truth = len(em.emitted)
    shed = []
    for i, name in enumerate(names):
        at = replay.index_of[i]
        cause = q.cause[at]
        shed.append({"name": name,
                     "queue_drop_new": int(np.count_nonzero(cause == DROPPED_NEW)),
                     "queue_replaced": int(np.count_nonzero(cause == REPLACED)),
                     "state_evicted": int(np.count_nonzero(cap.evicted[i])) if cap.evicted is not None else 0})
    totals = {k: sum(s[k] for s in shed) for k in ("queue_drop_new", "queue_replaced", "state_evicted")}
    span_ns = int(cap.arrival_ns[-1]) if N else 0
    service_total = int(q.service_ns.sum())
    plain_n = int(np.count_nonzero(cap.plain_emitted))
    emitted_n = int(np.count_nonzero(em.emitted))
    lost = cap.plain_emitted & ~em.emitted
    gained = em.emitted & ~cap.plain_emitted
    all_kept = np.ones(truth, bool)
    for k in range(replay.n if truth else 0):
        all_kept &= q.kept[em.a[k]]
    shed_lost = lost & ~all_kept     # results the infinite machine emitted, with a member the queue shed
    lost_shed = int(np.count_nonzero(shed_lost))
    lost_state = int(np.count_nonzero(lost & all_kept & cap.uncapped_emitted)) if cap.uncapped_emitted is not None else 0
    occ_total = cap.occupancy.sum(axis=0) if N else np.zeros(0, np.int64)
    section: dict[str, Any] = {
        "settings": cap.spec.to_dict(),
        "service_ns": {"total": service_total, "mean": service_total / N if N else None},
        # the operator's work over the replay span (> 1: arrivals outpace one operator)
        "offered_load": service_total / span_ns if span_ns > 0 else None,
        "processed": int(np.count_nonzero(q.kept)),
        "shed": {**totals, "per_stream": shed},
        "queueing_delay_us": metrics.latency_summary(queueing_delay_us(cap)),
        "occupancy_tuples": {"peak": int(occ_total.max()) if N else 0, "mean": float(occ_total.mean()) if N else 0.0,
                             "peak_per_stream": {name: int(cap.occupancy[i].max()) if N else 0
                                                 for i, name in enumerate(names)}},
        "emitted_without_capacity": plain_n,
        "recall_without_capacity": metrics.recall_of(plain_n, truth),
        "recall_lost_to_disorder": 1.0 - metrics.recall_of(plain_n, truth),
        "recall_lost_to_capacity": int(np.count_nonzero(lost)) / truth if truth else 0.0,
        "recall_gained_under_capacity": int(np.count_nonzero(gained)) / truth if truth else 0.0,
        "results_lost": {"shed_member": lost_shed, "state_eviction": lost_state,
                         "other": int(np.count_nonzero(lost)) - lost_shed - lost_state},
        "latency_without_capacity_us": metrics.latency_summary_of(cap.plain_latency_us, cap.plain_emitted),
        "state_budget": (_state_budget(cap, names, replay, period_us, target, shed_lost)
                         if cap.uncapped_emitted is not None else None),
    }
    assert plain_n - int(np.count_nonzero(lost)) + int(np.count_nonzero(gained)) == emitted_n
    return section


def missed_periods(capped: Sequence[dict], free: Sequence[dict], shed_lost: Sequence[dict],
                   target: float) -> dict[str, int]:
    """Who missed the recall target, per period (entries of :func:`.metrics.periods`
    for the same results, so the lists align): ``periods_limited_by_budget`` --
    recall under the state cap is below the target while the same survivors
    without the cap meet it; of the periods that miss it even without the cap,
    ``periods_missed_by_shedding`` -- the queue shed a member of a result the
    infinite machine emitted in the period (``shed_lost``'s ``emitted`` > 0),
    the capacity model's loss -- and ``periods_missed_by_controller`` -- the rest."""
    out = {"periods_limited_by_budget": 0, "periods_missed_by_shedding": 0, "periods_missed_by_controller": 0}
    for c, f, s in zip(capped, free, shed_lost, strict=True):
        if f["recall"] < target:
            out["periods_missed_by_shedding" if s["emitted"] else "periods_missed_by_controller"] += 1
        elif c["recall"] < target:
            out["periods_limited_by_budget"] += 1
    return out


def _state_budget(cap: CapacityOutcome, names: Sequence[str], replay: Replay, period_us: int,
                  target: float | None, shed_lost: np.ndarray) -> dict[str, Any]:
    """Issue 20 item 5: did the state cap, the queue's shedding or the controller limit recall?

    Per period (with a target): :func:`missed_periods`.  Per
    controller decision (recall-target policies): ``decisions_wanting_more_state``
    -- until the next decision the retention it chose held more than the cap
    in some stream's buffer (so the cap, not the decision, set the state).
    """
    em = cap.emission
    wanted = cap.uncapped_memory
    out: dict[str, Any] = {
        "cap_tuples": cap.spec.state,
        "wanted_state_peak": {name: int(wanted[i].max()) if wanted.shape[1] else 0 for i, name in enumerate(names)},
    }
    if target is not None and len(em.emitted):
        capped = metrics.periods(em.last, em.emitted, replay.arrival, period_us, target)
        free = metrics.periods(em.last, cap.uncapped_emitted, replay.arrival, period_us, target)
        shed = metrics.periods(em.last, shed_lost, replay.arrival, period_us, target)
        out.update(missed_periods(capped, free, shed, target))
    log = cap.decisions.policy_log
    if log:
        times = np.array([e["time_us"] for e in log], dtype=np.int64)
        arrival = cap.survivor_arrival
        starts = np.searchsorted(arrival, times, side="left")
        ends = np.append(starts[1:], len(arrival))
        over = 0
        for s, e in zip(starts.tolist(), ends.tolist()):
            if e > s and int(wanted[:, s:e].max()) > cap.spec.state:
                over += 1
        out["decisions"] = len(log)
        out["decisions_wanting_more_state"] = over
    return out


def occupancy_total(cap: CapacityOutcome) -> np.ndarray:
    """Queued tuples over all streams after each arrival index."""
    return cap.occupancy.sum(axis=0)
