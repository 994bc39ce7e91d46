"""``tune-buffer --policy flink``: the smallest ``forBoundedOutOfOrderness`` delay meeting a recall target.

The interval-join rules are those of :mod:`streamjoin.pipelines.policies.flink`
(docs/semantics.md "flink"); here one delay ``D`` (whole milliseconds) serves
both inputs and the watermark interval is fixed.  The search itself (grid,
candidates, ``tune.json``) is :func:`~.watermark_tuning.tune_watermark`'s;
this module gives the required delay per pair and the words and snippets.

**The operator watermark in ``D``.**  Which records the generators had seen
when record ``a`` is processed (``c(a)``: ``a - 1`` per record, or the records
before the latest tick) depends on the arrivals and the interval alone; so do
the idle flags of ``--idleness`` (activity, the idleness timer, and "the
watermark rose", which compares ``M_i`` values).  With ``F(a) = min_i
M_i(c(a))`` over the inputs not idle (the largest event time of each up to
``c(a)``; ``-inf`` until they all have one; the running maximum of these
minima with idleness), the operator watermark is::

    G(a) = F(a) - D - 1 ms            (-inf while F(a) = -inf)

so every ``G(a)`` falls by the same amount as ``D`` grows.

**Required delay per pair** (earlier member ``e`` of stream ``s``, later
member ``y``; all values whole ms, so ``X > Y - 1 ms`` iff ``X >= Y``):

* member ``x`` not late (rule 4: ``ts_x >= G(x)``): ``D >= F(x) - ts_x - 1 ms``;
* ``e`` still buffered when ``y`` probes (rule 6: ``G(y) < max(ts_e + W_s,
  G(e) + 1)``): either ``G(y) = G(e)`` -- ``F(y) = F(e)``, the watermark did
  not move in between, whatever ``D`` -- or ``G(y) < ts_e + W_s``, i.e. ``D >=
  F(y) - ts_e - W_s``.

The pair's required delay is the largest of these, floored at 0 (a term with
``F = -inf`` asks for nothing).  **Recall is monotone in ``D``**: each
condition is "a fixed value ``<=`` D" or does not involve ``D``, so a pair
emitted at ``D`` is emitted at every larger delay, at the same arrival
(latency 0 at every delay).  Every pair is reachable (a large enough delay
keeps every watermark below every record).  ``tests/analysis/test_flink_tuning.py``
checks monotonicity and the required delay (emitted there, not 1 ms below)
on the per-event reference ``replay_interval_join``, which shares no code
with this derivation.

Worked example (W = 2 s both sides, a watermark after every record, both
inputs at ``t0 + 10 s``): a left record at ``t0 + 8 s`` arriving next is late
iff ``t0 + 8 s < t0 + 10 s - D - 1 ms``: it needs ``D >= 2 s - 1 ms``.

Per-stream delays do not separate (``G`` is the minimum over both inputs'
``M_i - D_i``), so one delay serves both, as ``spark-ss``'s one delay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.timeunits import NEG_INF, format_duration
from ..policies import PolicySpec
from ..policies.flink import MS
from ..replay.candidates import Combos
from ..replay.interval_join import frontier
from ..replay.progress import Replay
from .delay_summary import recommendation_lines
from .tuning import member_indexes, toml_duration


def required_flink(replay: Replay, combos: Combos, windows: Sequence[int], policy: PolicySpec,
                   members: tuple[list[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Least common ``forBoundedOutOfOrderness`` delay (µs, whole ms) at which each pair
    is emitted under ``policy``'s watermark interval and idleness (its delays are
    not read); see the module doc."""
    if len(combos) == 0:
        return np.empty(0, np.int64)
    a, _ = members if members is not None else member_indexes(replay, combos)
    F = frontier(replay, policy)
    known = F > NEG_INF

    def term(at: np.ndarray, bound: np.ndarray) -> np.ndarray:
        """``max(0, F(at) - bound)``, 0 where ``F(at) = -inf``."""
        return np.where(known[at], np.maximum(F[at] - bound, 0), 0)

    need = np.maximum(term(a[0], replay.ts[a[0]] + MS), term(a[1], replay.ts[a[1]] + MS))
    W = np.asarray(windows, dtype=np.int64)
    e, y = np.minimum(a[0], a[1]), np.maximum(a[0], a[1])
    kept = term(y, replay.ts[e] + W[replay.stream[e]])
    return np.maximum(need, np.where(F[y] == F[e], 0, kept))


# ---------------------------------------------------------------------------
# words and snippets
# ---------------------------------------------------------------------------


def toml_snippet(t: dict[str, Any]) -> str:
    rec = t["recommendation"]
    return ("[run]\npolicy = \"flink\"\n"
            f"watermark = \"{toml_duration(rec['setting_us'])}\"   # every stream: recall >= {t['recall_target']}\n"
            f"watermark_interval = \"{toml_duration(t['watermark_interval_us'])}\"\n"
            + (f"idleness = \"{toml_duration(t['idleness_us'])}\"\n" if t.get("idleness_us") else ""))


def _key_selector(keys: Sequence[str]) -> str:
    if not keys:
        return "r -> 0"          # no keys: every record has the same key
    if len(keys) == 1:
        return f"r -> r.{keys[0]}"
    return f"r -> Tuple{len(keys)}.of(" + ", ".join(f"r.{k}" for k in keys) + ")"


def flink_snippet(t: dict[str, Any], streams: Sequence[Any], windows: Sequence[int], extra_condition: bool) -> str:
    """Java (Flink 1.x/2.x DataStream API): both inputs' watermark strategy, the interval join."""
    rec = t["recommendation"]
    d = rec["setting_us"] // MS
    left, right = streams
    interval = t["watermark_interval_us"]
    lines = [
        f"// streamjoin tune-buffer: recall >= {t['recall_target']} needs an out-of-orderness of {d} ms "
        f"(exact minimum {rec['exact_us'] // MS} ms)",
        "// L, R: your record types; leftStream, rightStream: your DataStreams (left = the first stream)",
    ]
    if interval:
        idleness = t.get("idleness_us")
        idle = ("" if not idleness else f"\n        .withIdleness(Duration.ofMillis({idleness // MS}))"
                if idleness % MS == 0 else f"\n        .withIdleness(Duration.ofNanos({idleness * 1000}))")
        lines += [
            f"env.getConfig().setAutoWatermarkInterval({interval // MS}L);   // pipeline.auto-watermark-interval",
            f"WatermarkStrategy<L> leftWm = WatermarkStrategy.<L>forBoundedOutOfOrderness(Duration.ofMillis({d}))",
            f"        .withTimestampAssigner((r, previous) -> r.{left.ts}){idle};",
            f"WatermarkStrategy<R> rightWm = WatermarkStrategy.<R>forBoundedOutOfOrderness(Duration.ofMillis({d}))",
            f"        .withTimestampAssigner((r, previous) -> r.{right.ts}){idle};",
        ]
    else:   # a watermark after every record: the same generator, asked to emit on each event
        lines += [
            "// --watermark-interval 0: a watermark after every record (Flink's periodic emission cannot do that)",
            f"WatermarkStrategy<L> leftWm = WatermarkStrategy.<L>forGenerator(ctx -> new WatermarkGenerator<L>() {{",
            f"            final BoundedOutOfOrdernessWatermarks<L> g = new BoundedOutOfOrdernessWatermarks<>(Duration.ofMillis({d}));",
            "            public void onEvent(L r, long ts, WatermarkOutput out) { g.onEvent(r, ts, out); g.onPeriodicEmit(out); }",
            "            public void onPeriodicEmit(WatermarkOutput out) {}",
            f"        }}).withTimestampAssigner((r, previous) -> r.{left.ts});",
            "// rightWm: the same with R and r." + right.ts,
        ]
    lines += [
        f"leftStream.assignTimestampsAndWatermarks(leftWm).keyBy({_key_selector(left.keys)})",
        f"    .intervalJoin(rightStream.assignTimestampsAndWatermarks(rightWm).keyBy({_key_selector(right.keys)}))",
        f"    .between(Duration.ofMillis({-int(windows[1]) // MS}), Duration.ofMillis({int(windows[0]) // MS}))"
        "   // Flink 1.x: Time.milliseconds(...)",
        "    .process(new ProcessJoinFunction<L, R, OUT>() { /* emit the pair */ });"
        + ("   // plus your --where / --distance condition" if extra_condition else ""),
    ]
    return "\n".join(lines) + "\n"


def frameworks_text(t: dict[str, Any]) -> list[str]:
    rec = t["recommendation"]
    interval = t["watermark_interval_us"]
    when = (f"watermarks emitted every {format_duration(interval)} of arrival time" if interval
            else "a watermark after every record")
    return [
        f"Flink's DataStream interval join, as streamjoin emulates it (--policy flink, docs/semantics.md): "
        f"forBoundedOutOfOrderness({format_duration(rec['setting_us'])}) on both inputs, {when}. A larger delay "
        f"drops fewer records as late and keeps them buffered longer (more memory); it never delays a result, "
        f"which comes out the moment its later record arrives.",
    ]


def summary_text(t: dict[str, Any]) -> list[str]:
    """What tune-buffer found for flink, in sentences (terminal, cron output and tune.html)."""
    rec = t["recommendation"]
    interval = t["watermark_interval_us"]
    when = f"watermark interval {format_duration(interval)}" if interval else "a watermark after every record"
    if t.get("idleness_us"):
        when += f", idleness {format_duration(t['idleness_us'])}"
    lines, setting = recommendation_lines(t, f"forBoundedOutOfOrderness delay of flink ({when})")
    lines.append(f"Recall only grows with the delay (fewer late drops, later cleanup), so this is the least delay; "
                 f"the exact curve changes at {t['distinct_required_us']:,} delays.")
    lines.append(f"Memory at {setting}: at most {rec['memory_tuples']['peak']:,} records buffered, "
                 f"{rec['memory_tuples']['mean']:,.1f} on average. Results come out on arrival (latency 0) at every "
                 "delay. One delay serves both inputs: the operator watermark is their minimum.")
    return lines
