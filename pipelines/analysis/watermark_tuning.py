"""``tune-buffer --policy spark-ss``: the smallest ``withWatermark`` delay meeting a recall target.

The search (grid, candidates, ``tune.json``: :func:`tune_watermark`) also serves
``--policy flink``, whose required delay per pair and words are in
:mod:`.flink_tuning`.

The micro-batch rules are those of :mod:`streamjoin.pipelines.policies.spark_ss`
(docs/semantics.md "spark-ss"); here one delay ``D`` (whole milliseconds)
serves both streams, the trigger and the watermark policy are fixed.

**Recall is monotone in the delay.**  The batches depend on the trigger
alone.  With ``M_i(j)`` the largest event time (ms, floor) of stream ``i``
in batches ``<= j`` (every row counting, late ones too), the global
watermark after batch ``j`` is::

    G(j) = max(0, F(j) - D),   F(j) = min_i M_i(j)  (policy min; -inf until both streams have rows)
                               F(j) = max_i M_i(j)  (policy max)

(``min_i M_i`` never decreases, so the running maximum of rule 3 is the
value itself; a stream without rows "counts as 0", which the ``max(0, .)``
covers.)  ``G`` is non-increasing in ``D``, the late filter (``ts <= 1000
G``) and the state watermark (non-decreasing in ``G``) are monotone in
``G``, and a pair's emission needs only "neither member late" and "the
earlier member above its state watermark up to the later one's probe".  So
a pair emitted at ``D`` is emitted at every ``D' >= D``; its emission batch
(hence its latency) does not depend on ``D``.  The property test
``tests/analysis/test_watermark_tuning.py`` checks monotonicity on the
per-batch reference replay, which shares no code with this derivation.

**Required delay per pair** ``(l, r)`` in batches ``b_l, b_r``: each condition
is ``G(j) <= g*`` for some batch ``j`` and largest admissible watermark ``g*``
(ms), i.e. ``D >= F(j) - g*`` (0 if ``F(j) = -inf``; never if ``g* < 0``):

* member ``x`` not late (rule 4; batch ``b_x`` filters with
  ``wm[b_x - 1] = G(b_x - 2)``): ``1000 G < ts_x`` iff ``G <= c_x - 1``,
  ``c_x = ceil(ts_x / 1000)`` -- never for ``ts_x <= 0`` (Spark drops rows at
  or before the epoch whatever the delay);
* members of different batches: the earlier member ``e`` (side ``s``) in
  state when the later one probes (rules 5, 6): above side ``s``'s state
  watermark of batch ``J = b_other - 1``, which runs with ``G(J - 1)``
  (members of one batch always meet: every left row is stored before the
  right rows probe):
  ``ts_e > 1000 (trunc((1000 G - W_s) / 1000) - 1)``.  With ``v = 1000 G -
  W_s`` that is ``trunc(v / 1000) <= c_e``; for ``c_e >= 1`` (a member at or
  before the epoch is late anyway) it is ``v <= 1000 c_e + 999`` (for
  ``v < 0`` ``trunc`` gives at most 0), so ``g* = floor((1000 c_e + 999 + W_s)
  / 1000)``.

The pair's required delay is the largest of the three, and recall at ``D``
is ``#{required <= D} / |truth|`` exactly: the curve over every delay, with
no replay per candidate.  Worked example (W = 2 s both sides, 1 s
batches): batch 0 sees both streams up to ``t0 + 20 s``, so ``F(0) = t0 +
20 s``; a left row at ``t0 + 18 s - 1 ms`` and its right partner 10 µs later,
both in batch 1, need no delay (batch 1 filters with the watermark before
batch 0, 0).  With the partner in batch 2 instead, the left row must survive
batch 1's eviction, ``G(0) <= t0 + 20 s - 1 ms`` (``D >= 1 ms``), and the
partner batch 2's late filter, ``G(0) <= ceil(ts_r / 1 ms) - 1 = t0 + 18 s - 1
ms`` (``D >= 2001 ms``): it needs 2001 ms.

Per-stream delays do not separate (``G`` takes the minimum or maximum over
both streams' ``M_i - D_i``), so one delay serves both streams, as
``kslack``'s one ``K``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..base.errors import InputError
from ..base.timeunits import GRID_STEPS_PER_RANGE, default_granularity, format_duration
from ..policies import PolicySpec
from ..policies.spark_ss import MS
from ..replay.candidates import Combos
from ..replay.microbatch import batch_of
from ..replay.progress import Replay
from . import flink_tuning
from .metrics import fmt_recall
from .delay_summary import recommendation_lines
from .tuning import (Curve, candidate_steps, curve_summary, evaluate, member_indexes, recommendation,
                     toml_duration)

#: the engine emulations whose watermark delay tune-buffer tunes
WATERMARK_POLICIES = ("spark-ss", "flink")
#: required delay of a combination that no delay emits (a member at or before the epoch)
UNREACHABLE = np.iinfo(np.int64).max
_LOW = np.iinfo(np.int64).min


def _ceil_div(x: np.ndarray, d: int) -> np.ndarray:
    return -(-x // d)


def frontier_ms(replay: Replay, trigger_us: int | None, watermark_policy: str,
                batch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per arrival index its batch (``batch`` if given: ``--trigger-files``); the
    occupied batches; ``F`` after each of them (ms, ``_LOW`` = -inf)."""
    if batch is None:
        batch = replay.arrival // trigger_us - int(replay.arrival[0]) // trigger_us
    starts = np.flatnonzero(np.diff(batch, prepend=-1))
    ts_ms = replay.ts // MS
    per_stream = []
    for i in range(replay.n):
        mx = np.maximum.reduceat(np.where(replay.stream == i, ts_ms, _LOW), starts)
        per_stream.append(np.maximum.accumulate(mx))
    F = np.minimum.reduce(per_stream) if watermark_policy == "min" else np.maximum.reduce(per_stream)
    return batch, batch[starts], F


def _need(F: np.ndarray, gstar: np.ndarray) -> np.ndarray:
    """Least delay (ms) with ``max(0, F - D) <= g*``."""
    known = F != _LOW
    need = np.where(known, np.maximum(np.where(known, F, 0) - gstar, 0), 0)
    return np.where(gstar < 0, UNREACHABLE, need)


def required_watermark(replay: Replay, combos: Combos, windows: Sequence[int], trigger_us: int | None,
                       watermark_policy: str, members: tuple[list[np.ndarray], np.ndarray] | None = None,
                       batch: np.ndarray | None = None) -> np.ndarray:
    """Least common ``withWatermark`` delay (µs, whole ms) at which each pair is emitted
    (:data:`UNREACHABLE` if none); see the module doc.  ``batch``: each arrival
    index's micro-batch when not cut by ``trigger_us`` (``--trigger-files``)."""
    C = len(combos)
    if C == 0:
        return np.empty(0, np.int64)
    a, _ = members if members is not None else member_indexes(replay, combos)
    batch, occupied, F_occ = frontier_ms(replay, trigger_us, watermark_policy, batch)

    def F_at(j: np.ndarray) -> np.ndarray:
        k = np.searchsorted(occupied, j, side="right") - 1
        return np.where(k >= 0, F_occ[np.maximum(k, 0)], _LOW)

    b = [batch[a[0]], batch[a[1]]]
    ts = [replay.ts[a[0]], replay.ts[a[1]]]
    c = [_ceil_div(t, MS) for t in ts]
    need = np.maximum(_need(F_at(b[0] - 2), c[0] - 1), _need(F_at(b[1] - 2), c[1] - 1))
    left_first = b[0] < b[1]
    J = np.maximum(b[0], b[1]) - 1
    c_e = np.where(left_first, c[0], c[1])
    W_e = np.where(left_first, int(windows[0]), int(windows[1]))
    held = _need(F_at(J - 1), (MS * c_e + MS - 1 + W_e) // MS)    # c_e <= 0: late anyway
    need = np.maximum(need, np.where(b[0] == b[1], 0, held))
    return np.where(need == UNREACHABLE, UNREACHABLE, need * MS)


# ---------------------------------------------------------------------------
# the recommendation
# ---------------------------------------------------------------------------


def watermark_curve(values: np.ndarray, g: int) -> Curve:
    """Recall over the delay on the grid ``g``: the reachable required delays, counted
    against every combination (:data:`UNREACHABLE` ones are never emitted)."""
    return Curve(values[values != UNREACHABLE], g, total=len(values))


def required_delays(replay: Replay, combos: Combos, windows: Sequence[int], policy: PolicySpec,
                    members: tuple[list[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Required common delay per pair under ``policy``'s engine (``spark-ss``: its
    trigger and watermark policy; ``flink``: its watermark interval)."""
    if policy.name == "flink":
        return flink_tuning.required_flink(replay, combos, windows, policy, members)
    batch = batch_of(replay.arrival, policy)[0] if policy.trigger_files is not None else None
    return required_watermark(replay, combos, windows, policy.trigger_us, policy.watermark_policy, members, batch)


def engine_settings(policy: PolicySpec) -> dict[str, Any]:
    """The engine settings that stay fixed while the delay is tuned (``tune.json`` / ``report.json``)."""
    if policy.name == "flink":
        return {"watermark_interval_us": policy.watermark_interval_us, "idleness_us": policy.idleness_us}
    return {"trigger_us": policy.trigger_us, "watermark_policy": policy.watermark_policy,
            **({"trigger_files": policy.trigger_files} if policy.trigger_files is not None else {})}


def watermark_curve_only(replay: Replay, combos: Combos, windows: Sequence[int], policy: PolicySpec, g: int,
                         q: float | None, targets: Sequence[float] = (),
                         members: tuple[list[np.ndarray], np.ndarray] | None = None) -> dict[str, Any]:
    """A ``spark-ss`` / ``flink`` run's tuning curve (no replays; ``report.json`` ``tuning``):
    recall over one common delay at the run's other engine settings, as
    :func:`~streamjoin.pipelines.analysis.tuning.curve_only` gives it for the other
    policies; targets no delay reaches map to None."""
    values = required_delays(replay, combos, windows, policy, members)
    out = curve_summary(watermark_curve(values, g), policy.name, q, targets)
    out.update(engine_settings(policy), unreachable_results=int(np.count_nonzero(values == UNREACHABLE)))
    return out


def at_delay(policy: PolicySpec, delay_us: int, n: int) -> PolicySpec:
    """``policy`` with one delay ``delay_us`` for every stream."""
    return replace(policy, watermark=(int(delay_us),) * n)


#: what each engine calls its delay, in the one-line errors
_DELAY_NAME = {"spark-ss": "Spark watermark delays", "flink": "Flink's out-of-orderness delays"}


def tune_watermark(replay: Replay, combos: Combos, windows: Sequence[int], streams: Sequence[Any], *, q: float,
                   g: int | None, policy: PolicySpec, period_us: int | None,
                   row_bytes: Sequence[float] | None = None, extra_condition: bool = False) -> dict[str, Any]:
    """Everything ``tune-buffer --policy spark-ss`` / ``--policy flink`` reports (the body of ``tune.json``).

    ``policy``: the engine's policy with its fixed settings (its delay is what
    is tuned).  ``streams``: the streams' configs (name, ts column, keys: the
    engine snippet).  ``g`` None: the grid step follows the data, at least 1 ms
    (both engines keep delays in whole ms).  ``extra_condition``: the run has
    ``--where`` / ``--distance`` (the snippet says to add it).
    """
    names = [s.name for s in streams]
    n, C = replay.n, len(combos)
    values = required_delays(replay, combos, windows, policy)
    reachable = values[values != UNREACHABLE]
    granularity_source = "user"
    if g is None:
        largest = int(reachable.max()) if len(reachable) else 0
        g = max(MS, default_granularity(largest))
        granularity_source = (f"default: the largest 1-2-5 step <= largest required delay "
                              f"{format_duration(largest)} / {GRID_STEPS_PER_RANGE}, at least 1ms")
    elif g % MS:
        raise InputError(f"--granularity {format_duration(g)}: {_DELAY_NAME[policy.name]} are whole milliseconds; "
                         "give a multiple of 1ms")
    curve = watermark_curve(values, g)
    if not curve.reaches(q):   # spark-ss only: every flink pair is reachable
        raise InputError(f"recall {q:g} is out of reach under spark-ss: {C - len(reachable):,} of {C:,} results have "
                         f"a member at or before the epoch (ts <= 0), which Spark drops as late whatever the "
                         f"watermark; the most any delay gives is {fmt_recall(len(reachable) / C, 6)}")
    step, rec = recommendation(curve, q, names, "one delay for every stream")
    candidates = []
    for s in candidate_steps(curve, [step]):
        ev = evaluate(replay, combos, windows, at_delay(policy, s * g, n), row_bytes)
        ev["setting_us"] = int(s * g)
        candidates.append(ev)
    at_rec = next(c for c in candidates if c["setting_us"] == rec["setting_us"])
    rec["memory_tuples"] = at_rec["memory_tuples"]
    rec["latency_us"] = at_rec["latency_us"]
    s_list, r_list = curve.sampled([step, max(step - 1, 0)])
    out: dict[str, Any] = {
        "policy": policy.name,
        "recall_target": q,
        "granularity_us": g,
        "granularity_source": granularity_source,
        "period_us": period_us,
        "truth_results": C,
        "streams": names,
        **engine_settings(policy),
        "unreachable_results": int(C - len(reachable)),
        "distinct_required_us": int(len(np.unique(reachable))),
        "recommendation": rec,
        "curve": {"setting_us": s_list, "recall": r_list},
        "candidates": candidates,
        "periods": None,
        "every_period": None,
    }
    if policy.name == "flink":
        out["toml"] = flink_tuning.toml_snippet(out)
        out["snippet"] = {"language": "java",
                          "text": flink_tuning.flink_snippet(out, streams, windows, extra_condition)}
        out["frameworks"] = flink_tuning.frameworks_text(out)
        out["summary"] = flink_tuning.summary_text(out)
        return out
    out["toml"] = toml_snippet(out)
    out["snippet"] = {"language": "python", "text": spark_snippet(out, streams, windows, extra_condition)}
    out["frameworks"] = frameworks_text(out)
    out["summary"] = summary_text(out)
    return out


# ---------------------------------------------------------------------------
# words and snippets
# ---------------------------------------------------------------------------


def spark_interval(us: int) -> str:
    """A Spark interval string for a duration: ``"2 seconds"``, ``"1500 milliseconds"``, ``"250 microseconds"``."""
    us = int(us)
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000} seconds"
    if us % MS == 0:
        return f"{us // MS} milliseconds"
    return f"{us} microseconds"


def toml_snippet(t: dict[str, Any]) -> str:
    rec = t["recommendation"]
    return ("[run]\npolicy = \"spark-ss\"\n"
            f"watermark = \"{toml_duration(rec['setting_us'])}\"   # every stream: recall >= {t['recall_target']}\n"
            f"trigger = \"{toml_duration(t['trigger_us'])}\"\n"
            f"watermark_policy = \"{t['watermark_policy']}\"\n")


def spark_snippet(t: dict[str, Any], streams: Sequence[Any], windows: Sequence[int], extra_condition: bool) -> str:
    """PySpark: the two inputs with ``withWatermark``, the join and the trigger."""
    rec = t["recommendation"]
    delay = f"{rec['setting_us'] // MS} milliseconds"
    left, right = streams
    lname, rname = (s.name if s.name.isidentifier() else side for s, side in ((left, "left"), (right, "right")))
    keys = [f"l.{a} = r.{b}" for a, b in zip(left.keys, right.keys)]
    band = (f"r.{right.ts} BETWEEN l.{left.ts} - INTERVAL {spark_interval(windows[1])} "
            f"AND l.{left.ts} + INTERVAL {spark_interval(windows[0])}")
    trigger = t["trigger_us"]
    lines = [
        f"# streamjoin tune-buffer: recall >= {t['recall_target']} needs a delay of {delay} "
        f"(exact minimum {rec['exact_us'] // MS} ms)",
        "from pyspark.sql import functions as F",
        f"spark.conf.set(\"spark.sql.streaming.multipleWatermarkPolicy\", \"{t['watermark_policy']}\")",
        f"# {lname}_stream, {rname}_stream: your spark.readStream DataFrames ({lname} is the left side)",
        f"{lname} = {lname}_stream.withWatermark(\"{left.ts}\", \"{delay}\")",
        f"{rname} = {rname}_stream.withWatermark(\"{right.ts}\", \"{delay}\")",
        f"joined = {lname}.alias(\"l\").join({rname}.alias(\"r\"), F.expr(",
        *[f"    \"{'' if i == 0 else ' AND '}{c}\"" for i, c in enumerate(keys + [band])],
        "))" + ("   # plus your --where / --distance condition" if extra_condition else ""),
        f"query = joined.writeStream.trigger(processingTime=\"{spark_interval(trigger)}\").start()",
    ]
    if trigger % MS:
        lines.append("# Spark's trigger interval is whole milliseconds: this trigger cannot be set exactly")
    return "\n".join(lines) + "\n"


def frameworks_text(t: dict[str, Any]) -> list[str]:
    rec = t["recommendation"]
    return [
        f"Spark Structured Streaming, as streamjoin emulates it (--policy spark-ss, docs/semantics.md): "
        f"withWatermark delay {format_duration(rec['setting_us'])} on both inputs, micro-batches of "
        f"{format_duration(t['trigger_us'])} of arrival time, multipleWatermarkPolicy {t['watermark_policy']}. "
        f"A larger delay drops fewer rows as late and keeps join state longer (more memory); it never delays a "
        f"result, which appears at the end of the micro-batch its later row arrived in -- a shorter trigger "
        f"lowers latency.",
    ]


def summary_text(t: dict[str, Any]) -> list[str]:
    """What tune-buffer found for spark-ss, in sentences (terminal, cron output and tune.html)."""
    rec = t["recommendation"]
    lines, setting = recommendation_lines(t, f"withWatermark delay of spark-ss (trigger "
                                             f"{format_duration(t['trigger_us'])}, watermark policy "
                                             f"{t['watermark_policy']})")
    lines.append(f"Recall only grows with the delay (fewer late drops, later eviction, the same batches), so this "
                 f"is the least delay; the exact curve changes at {t['distinct_required_us']:,} delays.")
    lines.append(f"Memory at {setting}: at most {rec['memory_tuples']['peak']:,} rows held (join state plus the "
                 f"micro-batch's arrivals), {rec['memory_tuples']['mean']:,.1f} on average.")
    lat = rec["latency_us"]
    lines.append(f"At {setting} results wait {format_duration(lat['mean'])} on average, 95% of them at most "
                 f"{format_duration(lat['p95'])}: until the end of their micro-batch, whatever the delay. "
                 "One delay serves both streams: the global watermark mixes them.")
    if t["unreachable_results"]:
        top = (t["truth_results"] - t["unreachable_results"]) / t["truth_results"]
        lines.append(f"{t['unreachable_results']:,} results have a member at or before the epoch (ts <= 0), which "
                     f"Spark drops as late whatever the delay: recall stops at {fmt_recall(top, 6)}.")
    return lines
