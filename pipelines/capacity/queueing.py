"""The operator's processing queue: one server, FIFO in arrival order (issue 20).

Every tuple of the replay (arrival index ``a``, arrival time ``t_a`` in ns
from the first arrival) needs ``s_a`` ns of service
(:func:`service_times`).  One operator serves them in replay order:

* **unbounded queue** -- the Lindley recursion ``f_a = max(t_a, f_{a-1}) + s_a``
  in closed form: with ``S_a = s_0 + ... + s_a``,
  ``f_a = S_a + max_{b <= a} (t_b - S_{b-1})`` -- a cumulative sum and a
  running maximum (:func:`lindley`), no loop;
* **bounded queue** (``queue=N``, seed 000 Fig. 13: a queue ``Q_i`` per
  stream; full -> drop the new tuple or replace an old one) -- sequential:
  whether a tuple is admitted depends on the finish times of the tuples
  before it, and a replaced tuple moves every later start earlier.
  :func:`bounded_queue` runs it in one compiled pass (:mod:`.jit`: built
  ahead of time once, loaded only when a capacity model with a queue cap runs).

A stream's queue holds the tuples of that stream that arrived, were not
shed and have not finished service (the one in service included).  At the
instant ``t`` of an arrival, a tuple with ``f <= t`` has left and a tuple
whose service started at ``<= t`` can no longer be replaced.  Shed tuples
leave the replay entirely.  :mod:`.reference` is the readable per-arrival
check of all of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.errors import InputError
from ..base import jit
from .spec import CapacitySpec

#: ``cause`` codes per arrival index
PROCESSED, DROPPED_NEW, REPLACED = 0, 1, 2
#: the longest replay span (first to last arrival) the model handles: times in int64 ns
MAX_SPAN_US = 2**62 // 1000


@dataclass
class QueueOutcome:
    """Per arrival index: ``finish_ns`` (end of service, ns from the first
    arrival; ``-1`` if shed), ``service_ns``, ``cause`` (:data:`PROCESSED`,
    :data:`DROPPED_NEW`, :data:`REPLACED`) and ``leave`` (the first arrival
    index at which the tuple is no longer queued: after its finish, or the
    arrival that replaced it; its own index if it was never admitted)."""

    finish_ns: np.ndarray
    service_ns: np.ndarray
    cause: np.ndarray
    leave: np.ndarray

    @property
    def kept(self) -> np.ndarray:
        return self.cause == PROCESSED


def relative_ns(arrival_us: np.ndarray) -> np.ndarray:
    """Arrival times in ns from the first arrival (``arrival_us`` sorted)."""
    if not len(arrival_us):
        return np.empty(0, np.int64)
    span = int(arrival_us[-1]) - int(arrival_us[0])
    if span > MAX_SPAN_US:
        raise InputError(f"--capacity: the replay spans {span} us; the capacity model handles at most "
                         f"{MAX_SPAN_US} us (about 146 years) of arrivals")
    return (arrival_us - arrival_us[0]) * 1000


def service_times(spec: CapacitySpec, results: np.ndarray) -> np.ndarray:
    """``s_a = ceil((tuple + result * results[a]) / cpu)`` ns per arrival index
    (``results[a]``: results the processing of tuple ``a`` emits)."""
    work = spec.tuple_ns + spec.result_ns * np.asarray(results, dtype=np.int64)
    if float(work.sum(dtype=np.float64)) / spec.cpu > MAX_SPAN_US * 1000 / 2:   # finish times stay inside int64
        raise InputError(f"--capacity {spec.text()}: the replay's total service time exceeds what the model "
                         f"handles (about 73 years); use shorter service times or a larger cpu share")
    if spec.cpu == 1.0:
        return work.astype(np.int64, copy=False)
    return np.ceil(work / spec.cpu).astype(np.int64)


def lindley(arrival_ns: np.ndarray, service_ns: np.ndarray) -> np.ndarray:
    """Finish times of a FIFO single server with an unbounded queue, vectorised:
    ``f = S + running_max(t - (S - s))``."""
    S = np.cumsum(service_ns, dtype=np.int64)
    before = arrival_ns - (S - service_ns)
    np.maximum.accumulate(before, out=before)
    before += S
    return before


def departures(arrival_ns: np.ndarray, finish_ns: np.ndarray) -> np.ndarray:
    """First arrival index whose time is ``>= finish`` (a tuple that finished at
    ``t`` is gone for an arrival at ``t``), but after the tuple's own index: it
    is queued at the instant it arrives, even with no service time."""
    leave = np.searchsorted(arrival_ns, finish_ns, side="left")
    return np.maximum(leave, np.arange(1, len(arrival_ns) + 1))


def run_queue(spec: CapacitySpec, arrival_ns: np.ndarray, stream: np.ndarray, n: int,
              service_ns: np.ndarray) -> QueueOutcome:
    """The queue of :class:`CapacitySpec` over the replay (arrival times in ns, sorted)."""
    N = len(arrival_ns)
    if spec.queue is None:
        finish = lindley(arrival_ns, service_ns)
        return QueueOutcome(finish, service_ns, np.zeros(N, np.int8), departures(arrival_ns, finish))
    finish, cause, leave = bounded_queue(arrival_ns, stream.astype(np.int64), service_ns, n, spec.queue,
                                         spec.shed == "replace-oldest")
    done = cause == PROCESSED
    leave[done] = departures(arrival_ns, finish)[done]
    return QueueOutcome(finish, service_ns, cause, leave)


def occupancy(q: QueueOutcome, stream: np.ndarray, n: int) -> np.ndarray:
    """Tuples queued per stream after each arrival index (admission done),
    shape ``(n, N)``: tuple ``x`` counts at indexes ``a_x <= b < leave_x``."""
    N = len(q.cause)
    out = np.zeros((n, N), dtype=np.int64)
    start = np.arange(N)
    admitted = q.cause != DROPPED_NEW
    for i in range(n):
        mine = admitted & (stream == i)
        delta = np.bincount(start[mine], minlength=N + 1)[:N] - np.bincount(q.leave[mine], minlength=N + 1)[:N]
        np.cumsum(delta, out=out[i])
    return out


def bounded_queue(arrival_ns: np.ndarray, stream: np.ndarray, service_ns: np.ndarray, n: int, cap: int,
                  replace: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(finish_ns, cause, leave)`` of a per-stream bounded queue (compiled on first use)."""
    return compiled_kernel()(arrival_ns, stream, service_ns, n, cap, replace)


def compiled_kernel():
    """The bounded queue's kernel (machine code, built once per machine: :mod:`.jit`)."""
    return jit.compiled(_bounded_kernel, "Tuple((i8[:], i1[:], i8[:]))(i8[:], i8[:], i8[:], i8, i8, b1)")


def _bounded_kernel(arrival, stream, service, n, cap, replace):
    N = arrival.shape[0]
    finish = np.full(N, -1, np.int64)
    cause = np.zeros(N, np.int8)
    leave = np.arange(N)
    # one global FIFO of admitted tuples (processing order) with lazy removal,
    # and per stream its admitted tuples in order (for replace-oldest)
    fifo = np.empty(N, np.int64)
    head = 0
    tail = 0
    counts = np.zeros(n, np.int64)
    for a in range(N):
        counts[stream[a]] += 1
    off = np.zeros(n + 1, np.int64)
    for i in range(n):
        off[i + 1] = off[i] + counts[i]
    per = np.empty(N, np.int64)
    phead = off[:n].copy()
    ptail = off[:n].copy()
    removed = np.zeros(N, np.bool_)
    started = np.zeros(N, np.bool_)
    queued = np.zeros(n, np.int64)     # per stream: waiting + in service
    free_at = np.int64(-(2**62))
    busy = -1
    for a in range(N + 1):
        t = arrival[a] if a < N else np.int64(2**62)
        # serve until time t: whoever finishes by t leaves, the next one starts
        while True:
            if busy >= 0 and free_at <= t:
                queued[stream[busy]] -= 1
                busy = -1
            if busy >= 0:
                break
            while head < tail and removed[fifo[head]]:
                head += 1
            if head == tail:
                break
            x = fifo[head]
            head += 1
            start = free_at if free_at > arrival[x] else arrival[x]
            free_at = start + service[x]
            finish[x] = free_at
            started[x] = True
            busy = x
        if a == N:
            break
        s = stream[a]
        if queued[s] >= cap:
            victim = -1
            if replace:
                while phead[s] < ptail[s] and (started[per[phead[s]]] or removed[per[phead[s]]]):
                    phead[s] += 1
                if phead[s] < ptail[s]:
                    victim = per[phead[s]]
                    phead[s] += 1
            if victim < 0:
                cause[a] = 1
                continue
            removed[victim] = True
            cause[victim] = 2
            leave[victim] = a
            queued[s] -= 1
        fifo[tail] = a
        tail += 1
        per[ptail[s]] = a
        ptail[s] += 1
        queued[s] += 1
    return finish, cause, leave
