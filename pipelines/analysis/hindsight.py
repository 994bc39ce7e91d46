"""The adaptive policies against the best fixed setting chosen in hindsight (issue 15 item 4).

A ``qjoin`` / ``qkslack`` run with a recall target ``Q`` promises recall
``>= Q`` overall and in at least :data:`PERIOD_SHARE` of the periods that have
results.  The honest baseline is the **hindsight-best fixed setting**: the
least fixed setting of the same family (``static`` retention for ``qjoin``,
``kslack`` ``K`` for ``qkslack``; one value for every stream) that meets the
same per-period criterion on the same data.  It is exact, from every
combination's required slack (SPEC §7, :mod:`.tuning`, what ``tune-buffer
--per-period`` computes): a period meets ``Q`` at setting ``s`` iff ``s`` is at
least the period's need (the exact least setting meeting ``Q`` in it,
:func:`~.quantiles.group_needs`), so the fixed setting is the ``m``-th smallest
need with ``m`` the least count of periods whose share is ``>= PERIOD_SHARE``.
**fixed+** is the least fixed setting meeting the whole promise, ``Q``
overall as well: the larger of that and the exact overall quantile.

Both are replayed with the engine (:func:`~.tuning.evaluate`: memory, and
for ``kslack`` the emission and latency); the share of periods meeting ``Q``
is counted from the required slacks (exact: a result is emitted at ``s`` iff
its required slack is ``<= s``).  The adaptive run's own numbers stand beside
them, with the ratio of its mean memory (``qjoin``) or mean latency
(``qkslack``) to the fixed settings'.

**Stationarity** (docs/semantics.md, "Better than the best fixed setting"):
``headroom`` = the mean over the periods with results of
``max(0, 1 - need / fixed setting)`` -- the share of the fixed setting that a
policy knowing each period's need in advance could give up, on average over
the periods; ``headroom_by_chance`` is its mean over :data:`PERMUTATIONS`
shuffles of the results across the run in blocks of ``P / BLOCKS``
(:func:`block_shuffles`, seeds 0, 1, 2): what sampling alone produces when
the delay distribution does not change (moving single results would break
their clustering -- one late tuple completes several -- and understate it).  ``adaptable = headroom - headroom_by_chance``;
the need **changed** over the run iff ``adaptable >= CHANGE_THRESHOLD``.

Cost: one sort of the required slacks, then per grouping (the actual periods and
:data:`PERMUTATIONS` shuffles) a stable sort of small period numbers;
one or two replays of a fixed setting; nothing per period in Python but one
``needed_count`` per distinct period size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.timeunits import format_duration
from ..replay.candidates import Combos
from ..replay.progress import Replay
from .metrics import fmt_recall
from ..base.sorting import stable_order
from .quantiles import exact_quantile, group_needs, needed_count, period_groups
from .tuning import FIXED_POLICY_OF, evaluate, period_index, policy_for, required_slacks

#: share of the periods with results in which the adaptive policies promise ``Q`` (issue 15 item 3)
PERIOD_SHARE = 0.95
#: ``adaptable`` at or above this: the per-period need changed over the run (beyond chance)
CHANGE_THRESHOLD = 0.1
#: shuffles of the results across the run whose mean headroom is ``headroom_by_chance``
PERMUTATIONS = 3
#: blocks per period that the shuffles move whole
BLOCKS = 100
#: the adaptive policy's cost measure, per policy
MEASURE = {"qjoin": "memory_tuples_mean", "qkslack": "latency_us_mean"}
SETTING_NAME = {"static": "retention", "kslack": "K"}


def period_needs(values: np.ndarray, pidx: np.ndarray, q: float, by_value: np.ndarray | None = None) -> np.ndarray:
    """Per period with results: the exact least setting meeting ``q`` in it (period order;
    ``by_value``: as :func:`~.quantiles.period_groups`)."""
    if not len(values):
        return np.empty(0, np.int64)
    pv, heads, sizes, _ = period_groups(pidx, values, by_value)
    return group_needs(pv, heads, sizes, q)


def fixed_for_share(needs: np.ndarray, share: float = PERIOD_SHARE) -> int:
    """The least setting at or above the need of a ``share`` of the periods (0 without periods)."""
    return exact_quantile(needs, share)


def hindsight_fixed(required: np.ndarray, period: np.ndarray, q: float, share: float = PERIOD_SHARE) -> int:
    """Least fixed setting meeting ``q`` in at least ``share`` of the periods with results
    (``required``: each combination's required slack; ``period``: its period)."""
    return fixed_for_share(period_needs(np.asarray(required, np.int64), np.asarray(period, np.int64), q), share)


def periods_meeting(groups: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], setting: int, q: float) -> int:
    """Periods with results whose recall at ``setting`` is ``>= q``, from the required slacks
    grouped by period (:func:`~.quantiles.period_groups`)."""
    pv, heads, sizes, _ = groups
    if not len(pv):
        return 0
    met = np.add.reduceat((pv <= setting).astype(np.int64), heads)
    return int(np.count_nonzero(met / sizes >= q))


def headroom(needs: np.ndarray, fixed: int) -> float:
    """Mean over the periods of ``max(0, 1 - need / fixed)`` (0 when ``fixed`` is 0)."""
    if fixed <= 0 or not len(needs):
        return 0.0
    return float(np.maximum(0.0, 1.0 - needs / fixed).mean())


def block_shuffles(arrival: np.ndarray, last: np.ndarray, period_us: int, count: int = PERMUTATIONS
                   ) -> list[np.ndarray]:
    """``count`` periods per combination with the results moved across the run in blocks:
    a block holds the results whose last member arrived in the same ``1 / BLOCKS`` of a
    period (``arrival``: the replay's sorted arrivals; ``last``: each combination's last
    member's index); the blocks holding results trade places (a permutation, seeds
    ``0 .. count - 1``), so the periods with results stay those, and dependence shorter than
    a block stays.  O(N + C) per shuffle: no sort, nothing sized by the span."""
    first = int(arrival[0])
    block = max(1, period_us // BLOCKS)
    sub = (np.asarray(arrival, np.int64) - first) // block           # sorted, per arrival index
    change = np.concatenate([[False], sub[1:] != sub[:-1]])
    dense = np.cumsum(change)                                         # block number per arrival index
    starts = np.flatnonzero(np.concatenate([[True], change[1:]]))
    of_combo = dense[last]
    used = np.zeros(len(starts), dtype=bool)
    used[of_combo] = True
    rank = (np.cumsum(used) - 1)[of_combo]                             # among the blocks with results
    block_ids = sub[starts[used]]
    per_period = period_us // block if period_us % block == 0 else None
    out = []
    for seed in range(count):
        moved = block_ids[np.random.default_rng(seed).permutation(len(block_ids))][rank]
        out.append(moved // per_period if per_period else (moved * block) // period_us)
    return out


def stationarity(values: np.ndarray, q: float, needs: np.ndarray, fixed: int, shuffled: list[np.ndarray],
                 by_value: np.ndarray | None = None) -> dict[str, Any]:
    """The stationarity statistic of the module docstring (``shuffled``: :func:`block_shuffles`)."""
    h = headroom(needs, fixed)
    h0 = 0.0
    for p in shuffled:
        needs0 = period_needs(values, p, q, by_value)
        h0 += headroom(needs0, fixed_for_share(needs0)) / len(shuffled)
    adaptable = h - h0
    return {"headroom": h, "headroom_by_chance": h0, "adaptable": adaptable, "threshold": CHANGE_THRESHOLD,
            "changed": bool(adaptable >= CHANGE_THRESHOLD)}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else None
    return a / b


def hindsight(replay: Replay, combos: Combos, windows: Sequence[int], members: tuple[list[np.ndarray], np.ndarray], *,
              policy: str, q: float, period_us: int, adaptive: dict[str, Any],
              row_bytes: Sequence[float] | None = None, required: np.ndarray | None = None) -> dict[str, Any]:
    """``report.json``'s ``hindsight`` of a ``policy`` (qjoin / qkslack) run at target ``q``.

    ``members``: ``(a, last)``, every combination's members' arrival indexes
    (the engine's emission has them); ``adaptive``: the run's own
    ``recall``, ``periods_meeting_target``, ``periods_with_results``,
    ``memory_tuples_mean``, ``latency_us_mean``; ``required``: every combination's
    required slack for the fixed policy (:func:`~.tuning.required_slacks`) when the
    caller has it already (the run report's exact tuning curve), else computed here.
    """
    fixed_policy = FIXED_POLICY_OF[policy]
    values = required_slacks(replay, combos, windows, fixed_policy, members) if required is None else required
    if len(values) != len(combos):
        raise ValueError(f"hindsight: {len(values)} required slacks for {len(combos)} combinations")
    pidx = period_index(replay, members[1], period_us)
    by_value = stable_order(values)[0]   # one sort of the values serves every grouping
    groups = period_groups(pidx, values, by_value)
    needs = group_needs(*groups[:3], q) if len(values) else np.empty(0, np.int64)
    setting = fixed_for_share(needs)
    m = needed_count(len(values), q)
    overall = int(values[by_value[m - 1]]) if m else 0   # exact_quantile, from the sort at hand
    plus = max(setting, overall)
    C = len(combos)

    def replayed(s: int) -> dict[str, Any]:
        emitted = int(np.count_nonzero(values <= s))
        ev = evaluate(replay, combos, windows, policy_for(fixed_policy, replay.n, s), row_bytes, emitted=emitted)
        met = periods_meeting(groups, s, q)
        return {"setting_us": int(s), "recall": ev["recall"], "periods_meeting_target": met,
                "periods_share": met / len(needs) if len(needs) else 1.0,
                "memory_tuples_mean": ev["memory_tuples"]["mean"], "latency_us_mean": ev["latency_us"]["mean"]}

    fixed = replayed(setting)
    fixed_plus = fixed if plus == setting else replayed(plus)
    measure = MEASURE[policy]
    out = {
        "computed": True,
        "policy": policy,
        "fixed_policy": fixed_policy,
        "measure": measure,
        "recall_target": q,
        "period_share": PERIOD_SHARE,
        "period_us": period_us,
        "truth_results": C,
        "periods_with_results": int(len(needs)),
        "overall_need_us": int(overall),
        "per_period_need_us": ({"p50": exact_quantile(needs, 0.5), "p95": int(setting), "max": int(needs.max())}
                               if len(needs) else {"p50": 0, "p95": 0, "max": 0}),
        "fixed": fixed,
        "fixed_plus": {**fixed_plus, "setting_us": int(plus)},
        "adaptive": dict(adaptive),
        "ratio": _ratio(adaptive.get(measure), fixed[measure]),
        "ratio_plus": _ratio(adaptive.get(measure), fixed_plus[measure]),
        "stationarity": stationarity(values, q, needs, setting, block_shuffles(replay.arrival, members[1], period_us),
                                     by_value) if len(values) else
        {"headroom": 0.0, "headroom_by_chance": 0.0, "adaptable": 0.0, "threshold": CHANGE_THRESHOLD, "changed": False},
    }
    out.update(verdict(out))
    return out


def not_computed(policy: str, q: float, why: str) -> dict[str, Any]:
    """``hindsight`` of a run where it is not computed, and why."""
    return {"computed": False, "policy": policy, "fixed_policy": FIXED_POLICY_OF[policy], "recall_target": q,
            "reason": "not_computed", "text": f"Not computed: {why}."}


def _measure_text(measure: str, v: float | None) -> str:
    if v is None:
        return "-"
    return format_duration(v) if measure == "latency_us_mean" else f"{v:,.1f} tuples"


def verdict(h: dict[str, Any]) -> dict[str, str]:
    """``verdict`` (``cheaper`` / ``costlier`` / ``not comparable``), ``reason`` (a key) and ``text``
    (one sentence), from the numbers of a computed ``hindsight`` alone.

    Reasons, first that applies: ``no_results`` (no period has results: nothing to
    compare); ``target_missed`` (the run did not keep its own
    promise: a cost comparison would flatter it); cheaper: ``need_changed`` /
    ``cheaper_stationary``; costlier: ``nothing_to_save`` (the fixed setting is 0),
    ``overall_promise`` (the per-period fixed setting misses ``Q`` overall, and
    fixed+, which keeps the whole promise, costs more than the run),
    ``stationary`` (the need did not change beyond chance), ``margin`` (it changed,
    but following it online cost more than it saved)."""
    policy, q, measure = h["policy"], h["recall_target"], h["measure"]
    name = SETTING_NAME[h["fixed_policy"]]
    a, f, fp, st = h["adaptive"], h["fixed"], h["fixed_plus"], h["stationarity"]
    what = "memory" if measure == "memory_tuples_mean" else "latency"
    ratio, ratio_plus = h["ratio"], h["ratio_plus"]
    setting, plus = format_duration(f["setting_us"]), format_duration(fp["setting_us"])
    base = (f"the best fixed {name} chosen in hindsight, {setting} (recall {fmt_recall(f['recall'])}, Q in "
            f"{f['periods_meeting_target']} of {h['periods_with_results']} periods)")
    change = (f"per-period need: headroom {st['headroom']:.2f} of the fixed {name}, {st['headroom_by_chance']:.2f} "
              f"by chance alone")
    times = "-" if ratio is None else f"{ratio:.2f}x"
    if not h["periods_with_results"]:
        return {"verdict": "not comparable", "reason": "no_results",
                "text": f"{policy} has nothing to compare: the input joins to no results, so every setting does as well."}
    share = a.get("periods_meeting_target", 0) / h["periods_with_results"]
    if a["recall"] < q or share < h["period_share"]:
        return {"verdict": "not comparable", "reason": "target_missed",
                "text": f"{policy} missed its own target (recall {fmt_recall(a['recall'])}, Q in "
                        f"{a.get('periods_meeting_target', 0)} of {h['periods_with_results']} periods), so its "
                        f"{what} ({times} that of {base}) is not a fair comparison."}
    if ratio is not None and ratio < 1:
        why = (f"the delay distribution changed over the run ({change}) and the controller followed it"
               if st["changed"] else
               f"although the need did not change beyond chance ({change}): the fixed {name} pays for the rare "
               "periods that need most")
        return {"verdict": "cheaper", "reason": "need_changed" if st["changed"] else "cheaper_stationary",
                "text": f"{policy} held {times} the {what} of {base}: {why}."}
    head = f"{policy} held {times} the {what} of {base}"
    if f["setting_us"] == 0:
        return {"verdict": "costlier", "reason": "nothing_to_save",
                "text": f"{head}: {name} 0 already meets Q in {h['period_share']:.0%} of periods, so there is "
                        "nothing to save by adapting."}
    if fp["setting_us"] > f["setting_us"] and ratio_plus is not None and ratio_plus < 1:
        return {"verdict": "costlier", "reason": "overall_promise",
                "text": f"{head}, which misses Q overall; the whole promise, Q overall as well, takes {name} "
                        f"{plus} ({_measure_text(measure, fp[measure])}), against which {policy} held "
                        f"{ratio_plus:.2f}x."}
    if not st["changed"]:
        return {"verdict": "costlier", "reason": "stationary",
                "text": f"{head}: the delay distribution did not change beyond chance ({change}), so there is "
                        "nothing to adapt to and the controller's safety margin is pure cost."}
    return {"verdict": "costlier", "reason": "margin",
            "text": f"{head}: the need changed over the run ({change}), but learning each change online, with a "
                    "safety margin, cost more than following it saved."}
