"""Counting instead of materialising: a two-stream run's report numbers from
a compiled walk over the band join (issue 21, fifth pass; on two threads
since the sixth).

A run without results (``--no-results``) reads every valid combination only
to count it: truth and emitted per period (the period of the last member's
arrival), the emitted latencies, the required slack of every ``k``-th
combination (the report's tuning curve, at most ``sample`` of them) and the
duplicate check.  The materialising path builds the combinations' member
rows (:func:`~streamjoin.pipelines.replay.candidates.enumerate_truth`), their
last member (:func:`~streamjoin.pipelines.replay.emit.last_arrivals`) and the
emitted mask (:func:`~streamjoin.pipelines.replay.emit.emission`) -- several
arrays of 8.1M elements on the core data -- and the metrics then read them.
:func:`count_pairs` walks the same bands of the same plan
(:class:`~streamjoin.pipelines.replay.candidates.BandBounds`: the bands already
located, without the packed codes, where both streams' times ascend within each
key; else :class:`~streamjoin.pipelines.replay.candidates.BandPlan`), in the same
order, and applies the same closed forms per pair:

* **symmetric family** -- emitted iff ``last < min(b_q, b_s)`` with ``b =
  max(expiry, a + 1)`` per row (``emit._emission_symmetric``); latency 0;
  required common retention ``max(0, T(last) - (ts_x + W_x))`` of the member
  ``x`` that is not last (``tuning.static_need``);
* **sorting family** -- with ``v = release`` (``N + 1`` if dropped) per
  arrival index, emitted iff ``max(v_q, v_s) <= N``, latency
  ``arrival[min(max(v_q, v_s), N - 1)] - arrival[last]``
  (``emit._emission_sorting``), written in combination order for the
  emitted ones; required ``K`` = ``max(k(x_q), k(x_s))``
  (``tuning.required_kslack``).

Per pair it adds one to ``codes[2 * period(last) + emitted]`` (the layout of
``metrics.period_code_counts``) and, at every ``every``-th position (``every
= ceil(C / sample)`` once ``C`` exceeds ``sample``, as ``report/build.extras``
picks them), writes the required slack.  Duplicates: every pair is a query
row and one sorted position of the stored stream inside that query's band,
so the pairs are distinct iff no query row and no stored row occurs twice --
checked in the same calls (``None`` otherwise: the caller materialises and
counts them).

The walk runs over a range of queries (their bands from the plan, or from
:func:`~streamjoin.pipelines.base.kernels.bands`, computed once): from
:data:`SPLIT_QUERIES` queries :func:`count_pairs` splits them at about half
the work (:func:`split_point`) and walks the halves on two threads -- the
second walk's sampling countdown continues the first's (it starts at the
pairs before it, modulo ``every``), its required slacks and latencies follow
the first's, the codes add, and each half checks one side's rows for
repeats.  The same CPU, half the wall time where a second core is free.

Its inputs are prepared once, by :func:`walk_inputs` (a :class:`Walk`: int32
bands and rows, the facts in the kernel's types), for :func:`count_pairs` and
for the Spark engine, whose tasks walk router-owned pieces of the same plan
(``engines/spark/counted``; its lone ``--router none`` task walks the whole
plan as :func:`count_pairs` does, :func:`walk_counted`).

The kernel (:func:`~streamjoin.pipelines.base.kernels.count_walk`) is built
ahead of time like the join's others (:func:`~streamjoin.pipelines.base.jit.prebuilt`,
releasing the GIL; the set-up's ``kernels --build`` builds it too);
which runs count is one predicate, :func:`counts` (the job, the engine and
:func:`count_pairs` each call it with what they know): without the kernel
(no compiler, ``$STREAMJOIN_KERNELS=numpy``), below :data:`MIN_ROWS` input
rows, or from ``2**31`` rows, among others, the engine materialises.  ``tests/replay/test_counting.py``
compares every report number of both paths on random inputs.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..base import kernels
from ..base.kernels import MIN_ROWS as KERNEL_MIN_ROWS
from ..policies import SORTING, SYMMETRIC
from ..base.timeunits import NEG_INF
from .candidates import BandBounds, BandPlan, enumerate_sorted
from .probe_order import smaller_first

#: below this many input rows the engine materialises (the kernel's load costs more than it saves)
MIN_ROWS = KERNEL_MIN_ROWS
#: from this many queries (bands) the walk runs as two range walks on two threads
SPLIT_QUERIES = 1 << 15
#: the families whose emission rule the walk applies
COUNTED_FAMILIES = (SYMMETRIC, SORTING)


def kernel_built() -> bool:
    """Whether :func:`count_pairs` can count on this machine (the kernel is
    built, or is built now): where not, the engine materialises from the start."""
    return kernels.count_walk_built()


def counts(family: str, *, streams: int = 2, rows: int | None = None, reads_each: bool = False,
           filtered: bool = False, given_order: bool = False, count_windows: bool = False,
           bucket: bool = False) -> bool:
    """The one rule "count the combinations instead of materialising them"; each
    caller passes what it knows (the job its outputs, the engine its join, :func:`count_pairs`
    the replay; a fact left at its default is checked by another caller):

    * nothing reads the combinations one by one (``reads_each``: a results file,
      ``--capacity`` or ``--flow-control``, which replay or re-time each one, or
      ``hindsight``, which reads every required slack);
    * two streams, ``rows`` input rows together in ``[MIN_ROWS, 2**31)`` (below,
      the kernel's load costs more than it saves; above, int32 rows);
    * the symmetric or sorting family (:data:`COUNTED_FAMILIES`);
    * no distance predicate or ``--where`` (``filtered``), no given probe order,
      no count window, not the bucket join (which orders the combinations, and
      so the tuning sample, otherwise than the sorted plan);
    * the counting kernel built here (without it the band plan would be built
      only to be thrown away).

    The walk's own finding comes on top: a repeated row makes :func:`count_pairs`
    return ``None`` (the materialising path counts the duplicates)."""
    return (not (reads_each or filtered or given_order or count_windows or bucket)
            and streams == 2 and (rows is None or MIN_ROWS <= rows < 2**31)
            and family in COUNTED_FAMILIES and kernel_built())


@dataclass
class Counted:
    """What a two-stream run's report reads of its combinations, counted.

    ``truth`` / ``emitted``: counts; ``codes``: per occupied period ``u`` the
    combinations not emitted at ``2u`` and the emitted ones at ``2u + 1``
    (``metrics.period_code_counts``'s layout; ``period_ids``: the periods);
    ``latency``: the emitted combinations' latencies in combination order,
    ``None`` when every latency is 0 (symmetric family); ``need``: the
    required slack of every ``every``-th combination (``every = 1``: all).
    """

    truth: int
    emitted: int
    codes: np.ndarray
    period_ids: np.ndarray
    latency: np.ndarray | None
    need: np.ndarray
    every: int


def count_plan(ts, ids, windows) -> BandPlan | BandBounds | None:
    """The band plan a counted join walks: the sorted enumeration's, the smaller
    stream probing (its walk order; ``None`` where it does not pack).  ``ids``:
    :func:`~streamjoin.pipelines.replay.candidates.key_ids` of the keys, or ``None``;
    the local engine and the Spark driver (``engines/spark/counted.driver_plan``) build it here."""
    return enumerate_sorted([np.asarray(t, dtype=np.int64) for t in ts], ids, [int(w) for w in windows], None,
                            smaller_first([len(t) for t in ts]), plan=True, bounds=True)


@dataclass
class Walk:
    """What :func:`~streamjoin.pipelines.base.kernels.count_walk` reads of a band plan,
    prepared once (:func:`walk_inputs`): the bands ``start`` / ``end`` (int32 positions
    of the stored rows' sorted order -- never int64: the kernel is compiled for int32),
    ``facts`` (the kernel's arguments from ``stored_rows`` to ``neg_inf``, each in its
    type), ``total`` pairs, the sampling step ``every``, the family, the periods and
    which stream queries (``facts[6]``: its times) and which is stored (``facts[7]``)."""

    start: np.ndarray
    end: np.ndarray
    facts: tuple
    total: int
    every: int
    family: str
    period_ids: np.ndarray
    query_stream: int = 0
    stored_stream: int = 1

    def call(self, q0: int, q1: int, first: int, check: int, *, start=None, end=None, query_rows=None,
             firsts=None, emitted_of=None):
        """One :func:`~streamjoin.pipelines.base.kernels.count_walk` over queries ``q0..q1-1``; ``start`` /
        ``end`` / ``query_rows`` replace the plan's (pieces: runs of bands, ``firsts`` their
        sampling countdowns, ``emitted_of`` receiving their emitted pairs)."""
        facts = self.facts if query_rows is None else (self.facts[0], query_rows, *self.facts[2:])
        start, end = self.start if start is None else start, self.end if end is None else end
        # the compiled signature is int32 bands and rows: another width would be read as
        # int32 (a crash, not an error), so it is refused here
        if any(a.dtype != np.int32 for a in (start, end, facts[1])):
            raise TypeError("count_walk takes int32 bands and query rows")
        return kernels.count_walk(start, end, *facts, q0, q1, first, check,
                                  np.empty(0, np.int64) if firsts is None else firsts,
                                  np.empty(0, np.int64) if emitted_of is None else emitted_of)


def walk_inputs(plan: BandPlan | BandBounds, replay, windows, decisions, expiry_index, period_of: np.ndarray,
                period_ids: np.ndarray, sample: int) -> Walk | None:
    """The :class:`Walk` of ``plan`` (the one preparation of the kernel's inputs, for
    :func:`count_pairs` and for the Spark engine's tasks), or ``None`` where
    :func:`counts` says no or an index is not int32 / int64."""
    family = decisions.family
    if not counts(family, streams=replay.n, rows=replay.N):
        return None
    arrays = (plan.start, plan.end) if isinstance(plan, BandBounds) else (plan.sorted_values, plan.lo, plan.hi)
    if any(a.dtype != (np.int32 if isinstance(plan, BandBounds) else np.int64) for a in arrays) \
            or plan.stored_rows.dtype != np.int32 or plan.query_rows.dtype != np.int32:
        return None
    qs, ss = plan.query_stream, plan.stored_stream
    c = np.ascontiguousarray
    at = [c(replay.index_of[k], dtype=np.int32) for k in (qs, ss)]
    W = [int(w) for w in windows]
    empty32, empty64 = np.empty(0, np.int32), np.empty(0, np.int64)
    if family == SYMMETRIC:   # per row: the expiry index (emit._emission_symmetric's b = max(e, a + 1))
        ends = [c(expiry_index[k], dtype=np.int32) for k in (qs, ss)]
        dropped, release = np.empty(0, bool), empty64
    else:   # per arrival index: dropped, release (emit._emission_sorting's v)
        ends = [empty32, empty32]
        dropped, release = c(decisions.dropped, dtype=bool), c(decisions.release, dtype=np.int64)
    sizes = [len(replay.index_of[k]) for k in (qs, ss)]
    if isinstance(plan, BandBounds):
        start, end, total = c(plan.start), c(plan.end), plan.total
    else:
        got = kernels.bands(c(plan.sorted_values), c(plan.lo), c(plan.hi))
        if got is None:
            return None
        start, end, total = got[0].astype(np.int32), got[1].astype(np.int32), got[2]
    every = (total + sample - 1) // sample if total > sample else 1
    # the sorting family alone reads the replay's times and arrivals (symmetric: empty)
    sorting = family != SYMMETRIC
    facts = (c(plan.stored_rows), c(plan.query_rows), at[0], at[1], ends[0], ends[1],
             c(replay.ts_of[qs], dtype=np.int64), c(replay.ts_of[ss], dtype=np.int64), W[qs], W[ss],
             dropped, release, c(replay.T, dtype=np.int64), c(replay.ts, dtype=np.int64) if sorting else empty64,
             c(period_of, dtype=np.int32), c(replay.arrival, dtype=np.int64) if sorting else empty64,
             0 if family == SYMMETRIC else 1,
             replay.N, len(period_ids), every, sizes[0], sizes[1], NEG_INF)
    return Walk(start=start, end=end, facts=facts, total=int(total), every=int(every), family=family,
                period_ids=period_ids, query_stream=qs, stored_stream=ss)


def count_pairs(plan: BandPlan | BandBounds, replay, windows, decisions, expiry_index, period_of: np.ndarray,
                period_ids: np.ndarray, sample: int) -> Counted | None:
    """:class:`Counted` of the combinations of ``plan`` under ``decisions`` (the
    symmetric family's ``expiry_index`` from :func:`~streamjoin.pipelines.replay.progress.expiry`),
    or ``None`` where :func:`counts` says no, an index is not int32 / int64 or a row
    repeats: the caller then materialises.  ``period_of``: the occupied
    period of every arrival index (int32); ``period_ids``: those periods;
    ``sample``: at most this many required slacks (``report/build.TUNING_SAMPLE``)."""
    walk = walk_inputs(plan, replay, windows, decisions, expiry_index, period_of, period_ids, sample)
    return None if walk is None else walk_counted(walk)


def walk_counted(walk: Walk) -> Counted | None:
    """:class:`Counted` of a prepared :class:`Walk` (the whole plan: what :func:`count_pairs`
    returns for it), or ``None`` where the kernel does not load or a row repeats; from
    :data:`SPLIT_QUERIES` queries two range walks on two threads.  The Spark engine's
    lone ``--router none`` task calls it on the driver's walk."""
    start, end, every, period_ids = walk.start, walk.end, walk.every, walk.period_ids
    nq = len(start)
    if nq < max(SPLIT_QUERIES, 2):
        parts = [walk.call(0, nq, 1, 3)]
    else:   # two range walks, on two threads (the kernel releases the GIL)
        mid = split_point(start, end)
        before = int(end[:mid].sum(dtype=np.int64) - start[:mid].sum(dtype=np.int64))   # pairs of the first half
        with ThreadPoolExecutor(max_workers=1) as pool:
            second = pool.submit(walk.call, mid, nq, 1 + (-before) % every, 2)
            parts = [walk.call(0, mid, 1, 1), second.result()]
    if any(p is None for p in parts):
        return None
    if not all(p[0][3] for p in parts):   # a row twice: the materialising path counts the duplicates
        return None
    codes = parts[0][1] if len(parts) == 1 else parts[0][1] + parts[1][1]
    need = np.concatenate([p[2] for p in parts]) if len(parts) > 1 else parts[0][2]
    latency = np.concatenate([p[3] for p in parts]) if len(parts) > 1 else parts[0][3]
    emitted = sum(int(p[0][1]) for p in parts)
    return Counted(truth=walk.total, emitted=emitted, codes=codes, period_ids=period_ids,
                   latency=latency if walk.family != SYMMETRIC else None, need=need, every=every)


def split_point(start: np.ndarray, end: np.ndarray) -> int:
    """The query at which the second of two range walks starts: about half of the
    work on each side, counting a query's pairs plus two for its and its stored
    partner's gathered facts."""
    work = np.cumsum(end - start + 2, dtype=np.int64)
    return int(np.searchsorted(work, work[-1] // 2))
