"""The recall-target policies (``qjoin``, ``qkslack``; SPEC §4.3) on the native Spark
path (issue 19): the controller's decisions on the driver, their effect on the executors.

:func:`decide` runs the online controller (:mod:`~streamjoin.pipelines.policies.controller`,
the local engine's own code) and returns its decision log, its resolved settings and the
decision table -- each decision's time and per-stream value, O(decisions x n) numbers.
The table goes back to the executors inside the progress scans
(:func:`~.native_progress.progress_frame`'s ``schedule``): each tuple's ``K_i(a)``
(qkslack) or ``d_i(a)`` (qjoin) is the value of the last decision made strictly before
its arrival, MP-K-slack's bound before the first
(:func:`~streamjoin.pipelines.replay.partitioned_progress.scheduled`), so releases,
drops, horizons, expiries, memory, the join and every metric follow on the executors
exactly as for a fixed policy.

What the controller reads is NOT a per-period summary, and cannot be one while its
decisions stay exactly the local engine's (docs/semantics.md, "``qjoin`` and ``qkslack``
on the native path"):
each decision at time ``t`` reads, per tuple of its history window (the latest period,
widened back to ``10 / (1 - Q)`` tuples), that tuple's partner density counted over the
partners arrived by ``t`` (so a tuple's weight changes from decision to decision), its
ramp breakpoints (qjoin) or delay (qkslack); the candidates are quantiles of those
per-tuple points (``method="higher"``), the estimates float sums in arrival order, and
the rest-of-period goal feeds back the effective horizons the earlier decisions put in
force.  So the driver holds, while deciding, the columns the controller reads: every
tuple's ``stream``, ``row``, ``ts``, ``arrival`` (and key columns, keyed joins) -- 28
bytes a tuple collected (36 with one key column) -- plus the controller's own arrays
(the replay's ``M``, ``T``, delays, counter ranges; ~340 bytes a tuple at their peak,
``benchmarks/native_adaptive_driver.py``): O(N), freed before the progress scans; only
the table, the log and the settings stay.  The smallest exact state would be a sliding
window -- the tuples one decision reads (1.7 % of 1M in the benchmark) and their partner
counters -- which the controller, written over whole replay arrays, does not offer yet.
The quarantined rows' arrival times (``bad_arrivals``, the bad-rows trigger) come from
the read on the executors (``read.SparkInput.bad_arrivals``, O(quarantined rows)).
"""

from __future__ import annotations

import numpy as np

from ...policies import adaptive_schedule
from ...policies.recall_target import decision_table
from ...replay.candidates import key_ids
from ...replay.progress import build_replay


def decide(df, *, n: int, sizes, W, policy, bad_arrivals, keycols) -> tuple[tuple, list, dict]:
    """The controller's ``(schedule, log, settings)`` for ``df`` (the native frame):
    ``schedule`` = (decision times, ``(n, D)`` values), what the progress scans apply;
    ``log`` / ``settings``: ``report.json``'s ``policy_decisions`` / ``policy_settings``."""
    t = df.select("stream", "row", "ts", "arrival", *keycols).toArrow()
    return decide_from_table(t, n=n, sizes=sizes, W=W, policy=policy, bad_arrivals=bad_arrivals, keycols=keycols)


def decide_from_table(t, *, n: int, sizes, W, policy, bad_arrivals, keycols) -> tuple[tuple, list, dict]:
    """:func:`decide` of the collected Arrow table ``t`` (``stream``, ``row``, ``ts``,
    ``arrival``, the key columns; any order): the driver's whole share of the work."""
    import polars as pl

    stream = t.column("stream").to_numpy()
    order = np.lexsort([t.column("row").to_numpy(), stream])   # each stream's rows in row order
    t = t.take(order)
    bounds = np.cumsum([0, *[int(s) for s in sizes]])
    ts_all, arr_all = t.column("ts").to_numpy(), t.column("arrival").to_numpy()
    ts = [ts_all[bounds[k]:bounds[k + 1]] for k in range(n)]
    arrival = [arr_all[bounds[k]:bounds[k + 1]] for k in range(n)]
    keys = None
    if keycols:
        frame = pl.from_arrow(t.select(keycols))
        keys = key_ids([frame.slice(int(bounds[k]), int(sizes[k])) for k in range(n)])
    del t, stream, order
    replay = build_replay(ts, arrival, keep_running_max=True)
    schedule = adaptive_schedule(replay, np.asarray(W, dtype=np.int64), policy, bad_arrivals, keys)
    return decision_table(schedule.log, n), schedule.log, schedule.settings
