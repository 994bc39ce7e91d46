"""Is a day's partition provably what one continuous replay would have published?

A daily run replays ``lookback + day`` (rows whose *arrival* lies in
``[S - lookback, S + 1d)``, ``S`` the day's first microsecond) instead of the
whole history.  Everything the operator holds at ``S`` -- its clock, its
watermarks, its buffers -- was built from rows the daily run may not have
read.  The facts below are computed from the daily replay alone and say
whether it provably did not matter (docs/semantics.md, "Nightly runs").

Common to every policy:

* ``arrival_ge_ts``: no row read has ``ts > arrival``; then every row that
  arrived before the lookback has ``ts`` before it too;
* ``warm_us``: the first arrival at which every stream has seen a ``ts`` at
  or after the lookback start.  From there on each stream's running maximum
  ``M_i`` -- the frontier, K-slack's ``R``, every watermark -- equals the
  continuous replay's: the rows not read all have smaller ``ts``.

The SPEC's policies (:func:`spec_policy`) add ``member_bound_us``: every
member of a combination emitted on the day has ``ts`` at or after it
(``H_i - W_i`` resp. ``R - max W`` at the day's first arrival);
``certified`` = ``warm_us <= member_bound_us``.

The engine emulations add what their state depends on.  Their late
filters read watermarks, and a watermark built only from the rows read is a
*lower* bound of the continuous replay's; with every row not read below the
lookback start, the same watermark built from maxima raised to the lookback
start is an *upper* bound.  A row whose ``ts`` lies between the two may have
been dropped as late by the continuous replay but was kept here:
``uncertain_rows_held`` counts those still held when the day's first result
can be emitted, and must be 0.

* ``spark-ss`` (:func:`micro_batch`, inner joins, ``--trigger DUR``: batches
  are cut on the epoch-aligned trigger grid, so the daily and the continuous
  replay cut the same batches).  A batch's watermark is built from the
  batches before it and its late filter from the one before that, so from
  two batches after ``warm_us``'s both equal the continuous replay's
  (``batches_after_warm >= 2`` at ``first_batch``, the first batch whose end
  is at or after ``S``: the first that emits on the day).  The rows in state
  when ``first_batch`` starts are those above the state watermark of the
  last eviction before it; ``state_bound_us`` (the smallest over the sides,
  ``ts`` at or above it) must reach the lookback start.
* ``flink`` (:func:`interval_join`, per-record watermarks).  The watermark a
  record sees is built from the records before it, so it equals the
  continuous replay's for every record after ``warm_us``'s; the day's first
  record must come after it.  A record still buffered when a record of the
  day probes has ``ts > G - max W`` (``G`` the watermark that first record
  sees): ``state_bound_us`` must reach the lookback start.  Periodic
  watermarks (``--watermark-interval > 0``) tick from the job's first
  arrival, which a daily run does not see: refused (:func:`refusal`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.timeunits import NEG_INF
from ..policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC, PolicySpec
from ..policies.spark_ss import MS
from ..replay import interval_join as ij
from ..replay import microbatch
from ..replay.microbatch import state_watermark_us


def refusal(policy: PolicySpec) -> str | None:
    """Why a nightly run cannot replay ``policy`` exactly (None: it can)."""
    name = policy.name
    if policy.family == SQL_INTERVAL_JOIN:
        return (f"--policy {name}: nightly runs do not carry its caches, timers and shared expiration times "
                "across days yet; run the whole range without --date / --from")
    if policy.family == MICROBATCH:
        if policy.trigger_files is not None:
            return (f"--policy {name} --trigger-files: nightly runs cut micro-batches on the --trigger grid; "
                    "batches of files depend on the files of earlier days")
        if policy.join != "inner":
            return (f"--policy {name} --join {policy.join}: nightly runs support the inner join (an outer row is "
                    "emitted when evicted, possibly days later); run the whole range without --date / --from")
    if policy.family == INTERVAL_JOIN:
        if policy.idleness_us:
            return (f"--policy {name} --idleness: nightly runs do not carry idle-input state across days; "
                    "run the whole range without --date / --from")
        if policy.watermark_interval_us:
            return (f"--policy {name}: nightly runs need per-record watermarks (--watermark-interval 0): periodic "
                    "watermarks tick from the job's first arrival, which a daily run does not see")
    return None


def common(replay, lookback_start_us: int) -> dict[str, Any]:
    """``arrival_ge_ts``, ``warm_us`` and ``warm_index`` (arrival index of ``warm_us``, or None)."""
    N = replay.N
    facts: dict[str, Any] = {"lookback_start_us": lookback_start_us}
    facts["arrival_ge_ts"] = bool(np.all(replay.arrival >= replay.ts)) if N else True
    hit = np.flatnonzero((replay.M >= lookback_start_us).all(axis=0)) if N else np.empty(0, np.int64)
    facts["warm_index"] = int(hit[0]) if len(hit) else None
    facts["warm_us"] = int(replay.arrival[hit[0]]) if len(hit) else None
    return facts


def spec_policy(facts: dict[str, Any], replay, dec, windows, first: int) -> dict[str, Any]:
    """The SPEC's policies: ``member_bound_us`` and ``certified`` (module doc)."""
    W = np.asarray(windows, dtype=np.int64)
    bound = None
    if replay.N and first < replay.N:
        if dec.family == SYMMETRIC:
            h = dec.H[:, first]
            bound = None if (h == NEG_INF).any() else int((h - W).min())
        elif first > 0:
            r = int(dec.R[first - 1])
            bound = None if r == NEG_INF else r - int(W.max())
    facts["member_bound_us"] = bound
    warm = facts["warm_us"]
    facts["certified"] = bool(facts["arrival_ge_ts"] and warm is not None and bound is not None and warm <= bound)
    return facts


def micro_batch(facts: dict[str, Any], replay, dec, policy, windows, day_start_us: int) -> dict[str, Any]:
    """``spark-ss``: ``first_batch``, ``batches_after_warm``, ``state_bound_us``,
    ``uncertain_rows_held`` and ``certified`` (module doc)."""
    mb = dec.batches
    W = np.asarray(windows, dtype=np.int64)
    lb = facts["lookback_start_us"]
    T = int(mb.trigger_us)
    # first batch whose end (origin + (j + 1) T) is >= the day start
    jE = -(-(day_start_us - mb.origin_us) // T) - 1
    facts["first_batch_start_us"] = int(mb.origin_us + jE * T)
    ok = bool(facts["arrival_ge_ts"]) and facts["warm_index"] is not None and mb.origin_us + jE * T >= lb
    after_warm = None
    bound = None
    held = None
    if facts["warm_index"] is not None:
        wb = int(mb.batch[facts["warm_index"]])
        after_warm = int(jE - wb)
        # the last eviction before jE: at an occupied batch k <= jE - 1 with wm[k], or at the empty
        # batch k + 1 <= jE - 1 after it with the watermark k produced (wm of the next occupied batch)
        k = int(np.searchsorted(mb.occupied, jE, side="left")) - 1
        if k >= 0:
            occ = int(mb.occupied[k])
            if occ + 1 <= jE - 1 and k + 1 < len(mb.occupied):       # the empty batch after k evicted too
                wm, equal = int(mb.watermark_ms[k + 1]), occ >= wb
            elif occ + 1 <= jE - 1:                                   # after the last batch: no later wm known
                wm, equal = None, False
            else:
                wm, equal = int(mb.watermark_ms[k]), occ > wb
            if wm is not None and equal:
                bound = int(min(state_watermark_us(np.array([wm]), int(w))[0] for w in W)) + 1
        held = int((_uncertain_micro_batch(replay, mb, dec, policy, lb) & (mb.removal >= jE)).sum())
        ok = ok and after_warm >= 2 and bound is not None and bound >= lb and held == 0
    facts["batches_after_warm"] = after_warm
    facts["state_bound_us"] = bound
    facts["uncertain_rows_held"] = held
    facts["certified"] = bool(ok)
    return facts


def _uncertain_micro_batch(replay, mb, dec, policy, lb: int) -> np.ndarray:
    """Rows kept here that the continuous replay may have dropped as late: ``ts`` at or
    below the late filter's upper bound (per-batch maxima raised to the lookback start)."""
    occupied, mx = microbatch.batch_maxima(replay.stream, replay.ts, mb.batch, replay.n)
    high = microbatch.batch_table(occupied, np.maximum(mx, (lb - 1) // MS), policy)
    k_of = np.searchsorted(high.occupied, mb.batch)
    return ~dec.dropped & (replay.ts <= high.before[k_of] * MS)


def _uncertain_interval_join(replay, dec, policy, lb_start: int) -> np.ndarray:
    """Records kept here that the continuous replay may have dropped as late: ``ts``
    below the watermark's upper bound (running maxima raised to the lookback start)."""
    N = replay.N
    floor = np.full((replay.n, 1), lb_start - 1, dtype=np.int64)
    M_before = np.concatenate([floor, np.maximum(replay.M[:, :max(N - 1, 0)], lb_start - 1)], axis=1)
    high = ij.watermark_of_maxima(M_before, policy.watermark)
    return ~dec.dropped & (replay.ts < high)


def interval_join(facts: dict[str, Any], replay, dec, policy, windows, first: int) -> dict[str, Any]:
    """``flink`` with per-record watermarks: ``state_bound_us``, ``uncertain_rows_held``
    and ``certified`` (module doc)."""
    wm = dec.watermarks
    W = np.asarray(windows, dtype=np.int64)
    warm = facts["warm_index"]
    ok = bool(facts["arrival_ge_ts"]) and warm is not None and first < replay.N and warm < first
    bound = None
    held = None
    if ok:
        g = int(wm.before[first])
        bound = None if g <= NEG_INF else g - int(W.max()) + 1
        held = int((_uncertain_interval_join(replay, dec, policy, facts["lookback_start_us"])
                    & (wm.held_until >= first)).sum())
        ok = bound is not None and bound >= facts["lookback_start_us"] and held == 0
    facts["state_bound_us"] = bound
    facts["uncertain_rows_held"] = held
    facts["certified"] = bool(ok)
    return facts


def exactness(cfg, replay, dec, first: int, lookback_start_us: int, day_start_us: int,
              names: list[str]) -> dict[str, Any]:
    """The facts of the policy's family, with ``certified`` (module doc).

    Also ``k_start_us`` per stream (``names``): the largest delay read before
    the day -- ``mpkslack``'s K at the day's start, which also depends on
    older history; the backfill compares it with the previous day's manifest
    (``k_continuity``)."""
    facts = common(replay, lookback_start_us)
    if dec.family == MICROBATCH:
        micro_batch(facts, replay, dec, cfg.policy, cfg.windows, day_start_us)
    elif dec.family == INTERVAL_JOIN:
        interval_join(facts, replay, dec, cfg.policy, cfg.windows, first)
    else:
        spec_policy(facts, replay, dec, cfg.windows, first)
    facts["k_start_us"] = {}
    for k, name in enumerate(names):
        sel = replay.stream[:first] == k
        facts["k_start_us"][name] = int(replay.delay[:first][sel].max()) if sel.any() else None
    return facts
