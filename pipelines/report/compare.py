"""``compare.json``: the contract of ``streamjoin compare`` (``schema_version`` 1), and the
side-by-side table the terminal and ``compare.html`` show.

Top level: ``schema_version``, ``kind`` (``"compare"``), ``tool_version``,
``command``, ``config``, ``streams`` (names), ``truth_results`` (the same for
every policy), ``recall_target`` and ``recall_target_source``, ``period_us``,
``period_source``, ``periods_total``, ``time_origin``, ``periods`` (the
periods with results: ``start_us`` and ``truth``, parallel lists), ``causes``
(each loss cause and its definition), ``notes`` (default policies left out, and
why) and ``policies``, one entry per policy in the order asked:

``label``, ``role`` (``job`` / ``ideal`` / ``tuned`` / ``null`` for one given),
``policy`` (name and settings, as ``report.json``'s ``config.policy``),
``text`` (the settings as ``--policy`` text), ``emitted_results``, ``recall``,
``lost`` (per cause, :mod:`~streamjoin.pipelines.analysis.losses`; they add up
to ``truth_results - emitted_results``), ``dropped_late`` (rows per stream),
``periods_meeting_target`` and ``periods_with_results`` (the share meeting the
target is their ratio), ``period_emitted`` (parallel to ``periods``),
``memory_tuples`` (``peak``, ``mean``), ``latency_us`` (``p50``, ``p99``,
``mean``; ``null`` without results).
"""

from __future__ import annotations

from typing import Any

from ..analysis.losses import CAUSES
from ..analysis.metrics import fmt_recall
from ..base.timeunits import format_duration

SCHEMA_VERSION = 1
REQUIRED = {"schema_version": int, "kind": str, "tool_version": str, "command": str, "config": dict, "streams": list,
            "truth_results": int, "period_us": int, "periods": dict, "causes": dict, "notes": list,
            "policies": list, "outputs": dict}
POLICY_KEYS = {"label": str, "policy": dict, "text": str, "emitted_results": int, "recall": float, "lost": dict,
               "dropped_late": dict, "periods_meeting_target": int, "periods_with_results": int,
               "period_emitted": list, "memory_tuples": dict, "latency_us": dict}
#: column headers of the side-by-side table
HEADERS = ["policy", "recall", "periods >= target", "results", "memory peak", "memory mean", "latency p50",
           "latency p99", "lost: late", "lost: evicted", "lost: batch"]


def validate(c: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first key that breaks the contract."""
    def check(d: dict, spec: dict, where: str) -> None:
        for key, typ in spec.items():
            if key not in d:
                raise ValueError(f"{where}: missing key {key!r}")
            value = float(d[key]) if typ is float and isinstance(d[key], int) else d[key]
            if not isinstance(value, typ):
                raise ValueError(f"{where}: {key!r} should be {typ.__name__}, got {type(value).__name__}")

    check(c, REQUIRED, "compare.json")
    if c["schema_version"] != SCHEMA_VERSION or c["kind"] != "compare":
        raise ValueError("compare.json: schema_version must be 1 and kind 'compare'")
    periods = len(c["periods"]["start_us"])
    for i, p in enumerate(c["policies"]):
        check(p, POLICY_KEYS, f"compare.json: policies[{i}]")
        if set(p["lost"]) != set(CAUSES):
            raise ValueError(f"compare.json: policies[{i}].lost must have exactly {', '.join(CAUSES)}")
        if sum(p["lost"].values()) != c["truth_results"] - p["emitted_results"]:
            raise ValueError(f"compare.json: policies[{i}]: the lost causes do not add up to truth - emitted")
        if len(p["period_emitted"]) != periods:
            raise ValueError(f"compare.json: policies[{i}].period_emitted is not parallel to periods")


def share_text(p: dict[str, Any]) -> str:
    """``"97% (34 of 35)"``: periods meeting the target."""
    n, m = p["periods_with_results"], p["periods_meeting_target"]
    return "-" if not n else f"{100 * m / n:.0f}% ({m:,} of {n:,})"


def _lost(p: dict[str, Any], cause: str, applies: bool) -> str:
    if not applies:
        return "n/a"
    v = p["lost"][cause]
    return f"{v:,}" if not v or p["lost_total"] == 0 else f"{v:,} ({100 * v / p['lost_total']:.0f}%)"


def table_rows(c: dict[str, Any]) -> list[list[str]]:
    """One row per policy under :data:`HEADERS`, as the terminal and compare.html print it."""
    rows = []
    for p in c["policies"]:
        lat, mem = p["latency_us"], p["memory_tuples"]
        rows.append([p["label"], fmt_recall(p["recall"]), share_text(p), f"{p['emitted_results']:,}",
                     f"{mem['peak']:,}", f"{mem['mean']:,.1f}", format_duration(lat["p50"]),
                     format_duration(lat["p99"]),
                     *[_lost(p, cause, cause in p["causes_possible"]) for cause in CAUSES]])
    return rows


def summary_lines(c: dict[str, Any]) -> list[str]:
    """A sentence per policy: what it loses and why, the biggest cause first."""
    truth = c["truth_results"]
    out = [f"truth: {truth:,} results; recall target {c['recall_target']:g} ({c['recall_target_source']}), "
           f"per {format_duration(c['period_us'])} period ({c['period_source']})"]
    for p in c["policies"]:
        lost = p["lost_total"]
        if not lost:
            out.append(f"{p['label']}: loses nothing")
            continue
        parts = [f"{v:,} {CAUSE_WORDS[k]}" for k, v in sorted(p["lost"].items(), key=lambda kv: -kv[1]) if v]
        out.append(f"{p['label']}: loses {lost:,} of {truth:,} ({100 * lost / truth:.2f}%): {'; '.join(parts)}")
    out.extend(f"note: {n}" for n in c["notes"])
    return out


#: what each cause means, in a few words (docs/semantics.md "Why results are lost" has the rules)
CAUSE_WORDS = {"late": "with a member dropped as late",
               "evicted": "whose earlier member had left the state before its partner came",
               "batch": "whose first member left the state at the end of its own micro-batch"}
