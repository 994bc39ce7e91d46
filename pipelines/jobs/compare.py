"""``streamjoin compare``: the same input under several policies side by side.

Load once, enumerate the truth once (it does not depend on the policy), then
replay every policy on the local engine's columns (decisions, emission,
memory) and say, per policy, what it emitted, what it lost and why
(:mod:`~streamjoin.pipelines.analysis.losses`).  Publishes ``compare.json``
(:mod:`~streamjoin.pipelines.report.compare`) and ``compare.html`` atomically.

The default set (no ``--policy`` and no ``[[compare]]``): the job's own
policy, the ideal operator with the same delay and the job's policy family
tuned for the recall target (:mod:`~streamjoin.pipelines.config.variants`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from ..analysis import metrics
from ..analysis.losses import CAUSES, FAMILY_CAUSES, loss_causes, loss_counts
from ..analysis.tuning import exact_quantile, member_indexes, needed_count, required_kslack, required_static_common
from ..analysis.watermark_tuning import UNREACHABLE, required_delays
from ..base.errors import InputError
from ..base.version import tool_version
from ..config.variants import DEFAULT_ROLES, Variant, variant_policy
from ..engines.local import join
from ..io.load import bad_arrivals_of, load_all
from ..io.output import locks_out
from ..policies import SYMMETRIC, PolicySpec
from ..replay.candidates import key_ids
from ..replay.emit import emission
from ..replay.predicates import space_of, where_of
from ..replay.progress import decide, memory_per_stream
from ..report import compare as contract
from ..report import html as report_html
from ..report.json import calendar_origin
from .run import arrival_span, publish_json_and_html, resolve_period

#: why a flink-sql job or variant is refused
FLINK_SQL_REFUSED = ("does not take flink-sql yet (its lost results are not classified into causes); "
                     "run it with streamjoin run")
#: recall target of the tuned policy and of "periods meeting the target" when the job has none
DEFAULT_RECALL = 0.99
#: the definitions compare.json carries (docs/semantics.md "Why results are lost")
CAUSE_DEFINITIONS = {
    "late": "a member was dropped as late by the policy's late filter (sorting family, spark-ss, flink)",
    "evicted": "no member was late, but a member had left the join state before the last one arrived and "
               "probed it (symmetric horizon, Spark's state watermark at an earlier batch end, Flink's cleanup timer)",
    "batch": "spark-ss only: no member was late, but the member Spark processes first (earlier batch; the left "
             "one in the same batch) left the state at the end of its own batch (its batch's state watermark "
             "already reached it) before its partner's batch",
}


def exact_text(us: int) -> str:
    """A duration that reads back exactly: ``10min``, ``1h``, ``2.5s`` -> ``2500ms``."""
    us = int(us)
    if us == 0:
        return "0"
    for unit, size in (("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000), ("ms", 1_000)):
        if us and us % size == 0:
            return f"{us // size}{unit}"
    return f"{us}us"


def policy_text(policy: PolicySpec, names: list[str]) -> str:
    """The ``--policy`` text of a spec: ``spark-ss --watermark 10s --trigger 1min``."""
    def per_stream(option: str, values) -> list[str]:
        if len(set(values)) == 1:
            return [option, exact_text(values[0])]
        return [w for name, v in zip(names, values) for w in (option, f"{name}={exact_text(v)}")]

    words = [policy.name]
    if policy.retention is not None:
        words += per_stream("--retention", policy.retention)
    if policy.k is not None:
        words += per_stream("--k", policy.k)
    if policy.watermark is not None:
        words += per_stream("--watermark", policy.watermark)
    if policy.trigger_us is not None:
        words += ["--trigger", exact_text(policy.trigger_us)]
    if policy.name == "spark-ss" and policy.watermark_policy != "min":
        words += ["--watermark-policy", policy.watermark_policy]
    if policy.watermark_interval_us is not None:
        words += ["--watermark-interval", exact_text(policy.watermark_interval_us)]
    if policy.idleness_us:
        words += ["--idleness", exact_text(policy.idleness_us)]
    if policy.join != "inner":
        words += ["--join", policy.join]
    if policy.target is not None:
        words += ["--recall", f"{policy.target.recall:g}"]
    return " ".join(words)


def ideal_policy(job: PolicySpec) -> tuple[PolicySpec | None, str | None]:
    """The SPEC's ideal operator (a symmetric join, ``static``) with the job's delay, or why there is none."""
    if job.name in ("spark-ss", "flink"):
        return PolicySpec("static", retention=job.watermark), None
    if job.name == "kslack":
        return PolicySpec("static", retention=job.k), None
    if job.name == "static":
        return None, "ideal: the job's policy is the ideal operator (static) already"
    return None, f"ideal: policy {job.name} has no fixed delay to give the ideal operator"


def tuned_policy(job: PolicySpec, replay, combos, windows, members, q: float) -> tuple[PolicySpec | None, str | None]:
    """The job's policy family at the least setting meeting recall ``q`` overall (SPEC §7, exact),
    or why there is none."""
    C = len(combos)
    if job.name in ("spark-ss", "flink"):   # the delay, the engine's other settings kept
        values = required_delays(replay, combos, windows, job, members)
        reachable = np.sort(values[values != UNREACHABLE])
        m = needed_count(C, q)
        if m > len(reachable):
            return None, (f"tuned: recall {q:g} is out of reach under {job.name} ({C - len(reachable):,} results have "
                          "a member at or before the epoch, which Spark drops whatever the watermark)")
        delay = int(reachable[m - 1]) if m else 0
        return replace(job, watermark=(delay,) * replay.n), None
    if job.family == SYMMETRIC:
        d = exact_quantile(required_static_common(replay, combos, windows, members), q) if C else 0
        return PolicySpec("static", retention=(d,) * replay.n), None
    d = exact_quantile(required_kslack(replay, combos, members), q) if C else 0
    return PolicySpec("kslack", k=(d,) * replay.n), None


def evaluate(replay, combos, windows, policy: PolicySpec, members, names, *, q: float, period_us: int,
             bad_arrivals=None, keys=None) -> dict[str, Any]:
    """One policy's row of compare.json (without label and role) and its per-period emitted counts."""
    W = np.asarray(windows, dtype=np.int64)
    decisions = decide(replay, W, policy, bad_arrivals=bad_arrivals if policy.adaptive else None,
                       keys=keys if policy.adaptive else None)
    memory = memory_per_stream(replay, W, decisions)
    em = emission(combos, replay, W, decisions)
    codes = loss_causes(members[0], em.emitted, decisions)
    emitted = int(np.count_nonzero(em.emitted))
    periods = metrics.periods(members[1], em.emitted, replay.arrival, period_us, q)
    mem, _ = metrics.memory_summary(memory, [0.0] * replay.n)
    lat = em.latency_us[em.emitted] if emitted else np.empty(0, np.int64)
    latency = metrics.distribution(np.asarray(lat, dtype=np.int64), [("p50", 0.5), ("p99", 0.99)])
    latency["mean"] = float(np.mean(lat)) if emitted else None
    dropped = {name: int(np.count_nonzero(decisions.dropped[replay.index_of[i]])) if decisions.dropped is not None
               else 0 for i, name in enumerate(names)}
    lost = loss_counts(codes)
    return {
        "policy": {k: v for k, v in vars(policy).items() if v is not None and k != "target"}
        | ({"recall_target": policy.target.recall} if policy.target is not None else {}),
        "text": policy_text(policy, names),
        "emitted_results": emitted,
        "recall": metrics.recall_of(emitted, len(combos)),
        "lost": lost,
        "lost_total": len(combos) - emitted,
        "causes_possible": list(FAMILY_CAUSES[policy.family]),
        "dropped_late": dropped,
        "periods_meeting_target": sum(1 for p in periods if p["recall"] >= q),
        "periods_with_results": len(periods),
        "period_emitted": [p["emitted"] for p in periods],
        "memory_tuples": mem,
        "latency_us": latency,
    }


@locks_out("compare")  # the whole job holds the lock of --out (a second run exits 4)
def run_compare(cfg, variants: list[Variant], *, command: str = "compare") -> dict[str, Any]:
    """``streamjoin compare``: load, truth once, every policy, publish compare.json + compare.html.

    ``cfg``: the job's resolved :class:`~streamjoin.pipelines.config.settings.RunConfig`
    (its policy is the ``job`` role); ``variants``: what to compare (empty: the default set).
    A policy compare does not take is refused before the inputs are read (:func:`check_variants`).
    """
    if cfg.policy.name == "flink-sql":
        raise InputError(f"compare {FLINK_SQL_REFUSED}")
    check_variants(variants)
    if cfg.policy.trigger_files is not None:
        # its rows arrive when their file's batch runs: every other policy would replay other arrivals
        raise InputError("compare: a spark-ss job with --trigger-files is not compared yet "
                         "(its rows arrive with their micro-batch); give the job --trigger DUR")
    started = time.perf_counter()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    streams = load_all(list(cfg.streams), cfg.max_quarantine)
    where_fn = where_of(cfg, streams)
    cfg = resolve_period(cfg, streams)
    names = [s.name for s in streams]
    timings["load"] = time.perf_counter() - t0
    q, q_source = (cfg.recall_target, "the job's --recall") if cfg.recall_target is not None else \
        (DEFAULT_RECALL, "default: the job has no --recall")
    t0 = time.perf_counter()
    keys = [s.keys if s.keys.width else None for s in streams]
    base = join([s.ts for s in streams], [s.arrival for s in streams], keys, cfg.windows, PolicySpec("none"),
                space=space_of(cfg, streams), where=where_fn)
    replay, combos = base.replay, base.combos
    members = member_indexes(replay, combos)
    timings["truth"] = time.perf_counter() - t0
    chosen = variants or [Variant(text=role, role=role) for role in DEFAULT_ROLES]
    notes: list[str] = []
    specs: list[tuple[Variant, PolicySpec]] = []
    for v in chosen:
        if v.role == "job":
            spec, why = cfg.policy, None
        elif v.role == "ideal":
            spec, why = ideal_policy(cfg.policy)
        elif v.role == "tuned":
            spec, why = tuned_policy(cfg.policy, replay, combos, cfg.windows, members, q)
        else:
            spec, why = variant_policy(v, cfg.policy, cfg.streams, cfg.recall_target, cfg.period_us), None
        if spec is None:
            notes.append(why)
        elif any(spec == s for _, s in specs) and not variants:
            notes.append(f"{v.role}: the same policy as another row ({policy_text(spec, names)})")
        else:
            specs.append((v, spec))
    adaptive = [s for _, s in specs if s.adaptive]
    bad = bad_arrivals_of(streams, adaptive[0].target.triggers.bad_rows_reason) if adaptive else None
    key_id = key_ids(list(keys)) if adaptive else None
    # the periods with results (the same for every policy: truth does not depend on it)
    periods = metrics.periods(members[1], np.zeros(len(combos), bool), replay.arrival, cfg.period_us, q)
    t0 = time.perf_counter()
    rows = []
    for v, spec in specs:
        row = evaluate(replay, combos, cfg.windows, spec, members, names, q=q, period_us=cfg.period_us,
                                bad_arrivals=bad, keys=key_id)
        text = row["text"]
        label = v.label or ({"job": f"job: {text}", "ideal": f"ideal: {text}",
                             "tuned": f"tuned for {q:g}: {text}"}.get(v.role, text))
        rows.append({"label": label, "role": v.role, **row})
    timings["policies"] = time.perf_counter() - t0
    first, last = arrival_span(streams)
    period_counts = metrics.period_counts(first, last, cfg.period_us, len(periods))
    result: dict[str, Any] = {
        "schema_version": contract.SCHEMA_VERSION, "kind": "compare", "tool_version": tool_version(),
        "command": command, "config": cfg.to_dict(), "streams": names, "truth_results": len(combos),
        "recall_target": q, "recall_target_source": q_source,
        "period_us": int(cfg.period_us), "period_source": cfg.period_source,
        "periods_total": period_counts["periods_total"], "time_origin": calendar_origin(first, last),
        "periods": {"start_us": [p["start_us"] for p in periods], "truth": [p["truth"] for p in periods]},
        "causes": {k: CAUSE_DEFINITIONS[k] for k in CAUSES},
        "notes": notes, "policies": rows,
    }
    publish_json_and_html(cfg.out, "compare", "compare", result, report_html.render_compare, started=started,
                          timings=timings, validate=contract.validate)
    return result


def check_variants(variants: list[Variant]) -> None:
    """Refuse, in one line and before any input is read, a ``flink-sql`` variant and a list
    that names a role twice."""
    for v in variants:
        if v.name == "flink-sql":
            raise InputError(f"--policy {v.text!r}: compare {FLINK_SQL_REFUSED}")
    roles = [v.role for v in variants if v.role]
    for role in roles:
        if roles.count(role) > 1:
            raise InputError(f"--policy {role} is given twice")


