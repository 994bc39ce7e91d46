"""The policies ``streamjoin compare`` puts side by side, from ``--policy TEXT`` or ``[[compare]]``.

A variant is a policy with its settings, written as on ``run``'s command line
after ``--policy``::

    --policy "spark-ss --watermark 10min --trigger 1min"
    --policy "static --retention left=2s --retention right=5s"
    --policy "flink --watermark 10s --watermark-interval 0" --policy tuned

or as a TOML table (a string sets every stream, a table ``{NAME = DUR}`` one
stream each; ``label`` names the row)::

    [[compare]]
    label = "prod"
    policy = "spark-ss"
    watermark = "10min"
    trigger = "1min"

Three words stand for the default set (what a compare with no variants shows):
``job`` -- the job's own policy (the config's / run flags' ``--policy``);
``ideal`` -- the SPEC's ideal operator with the job's delay, ``static
--retention D`` with ``D`` the job's watermark (``spark-ss``, ``flink``) or
``K`` (``kslack``); ``tuned`` -- the job's policy family at the least setting
meeting the recall target (:mod:`~streamjoin.pipelines.jobs.compare`).

A setting a variant does not give is the job's: its streams' ``watermark`` /
``retention`` / ``k`` (TOML or flags), and the trigger, watermark policy, join
type (``spark-ss``), watermark interval and idleness (``flink``) of the job's
policy when the variant is of the same engine;
``--recall`` of ``qjoin`` / ``qkslack`` defaults to the job's recall target.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import InputError
from ..policies import ADAPTIVE, POLICY_NAMES, PolicySpec, RecallTarget
from .options import check_duration

#: the words standing for the default set, in their default order
DEFAULT_ROLES = ("job", "ideal", "tuned")
#: option of a variant -> (setting key, per stream?)
OPTIONS = {"--watermark": ("watermark", True), "--retention": ("retention", True), "--k": ("k", True),
           "--trigger": ("trigger", False), "--watermark-policy": ("watermark_policy", False),
           "--watermark-interval": ("watermark_interval", False), "--recall": ("recall", False),
           "--label": ("label", False)}
#: keys of a ``[[compare]]`` table
TABLE_KEYS = ("label", "policy", "watermark", "retention", "k", "trigger", "watermark_policy",
              "watermark_interval", "recall")


@dataclass(frozen=True)
class Variant:
    """One requested policy: a default role (``job`` / ``ideal`` / ``tuned``), or a
    policy name with its settings (per-stream ones as ``[(NAME or None, DUR)]``)."""

    text: str
    role: str | None = None
    name: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    label: str | None = None


def parse_policy_text(text: str) -> Variant:
    """``--policy TEXT`` of ``compare`` -> a :class:`Variant` (one-line errors)."""
    try:
        words = shlex.split(str(text))
    except ValueError as exc:
        raise InputError(f"--policy {text!r}: {exc}") from None
    if not words:
        raise InputError("--policy '': expected a policy, e.g. \"static --retention 10s\", or job / ideal / tuned")
    head, rest = words[0], words[1:]
    if head in DEFAULT_ROLES:
        if rest:
            raise InputError(f"--policy {text!r}: {head} takes no settings (it is the job's own choice)")
        return Variant(text=text, role=head)
    if head not in POLICY_NAMES:
        raise InputError(f"--policy {text!r}: unknown policy {head!r}: expected one of "
                         f"{', '.join(POLICY_NAMES + DEFAULT_ROLES)}")
    settings: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        option, eq, value = rest[i].partition("=") if rest[i].startswith("--") else (rest[i], "", "")
        if option not in OPTIONS:
            raise InputError(f"--policy {text!r}: unknown setting {rest[i]!r} (expected "
                             f"{', '.join(OPTIONS)})")
        if not eq:
            if i + 1 >= len(rest):
                raise InputError(f"--policy {text!r}: {option} needs a value")
            value = rest[i + 1]
            i += 1
        i += 1
        key, per_stream = OPTIONS[option]
        if per_stream:
            stream, sep, dur = value.partition("=")
            settings.setdefault(key, []).append((stream, dur) if sep else (None, value))
        else:
            settings[key] = value
    label = settings.pop("label", None)
    return Variant(text=text, name=head, settings=settings, label=label)


def parse_table(table: Any, where: str) -> Variant:
    """One ``[[compare]]`` table -> a :class:`Variant`."""
    if not isinstance(table, dict):
        raise InputError(f"{where} must be a table")
    unknown = [k for k in table if k not in TABLE_KEYS]
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (expected one of {', '.join(TABLE_KEYS)})")
    name = table.get("policy")
    if not isinstance(name, str):
        raise InputError(f"{where}: needs policy = \"NAME\" (one of {', '.join(POLICY_NAMES + DEFAULT_ROLES)})")
    if name in DEFAULT_ROLES:
        extra = [k for k in table if k not in ("policy", "label")]
        if extra:
            raise InputError(f"{where}: policy {name!r} takes no settings (got {extra[0]!r})")
        return Variant(text=name, role=name, label=table.get("label"))
    if name not in POLICY_NAMES:
        raise InputError(f"{where}: unknown policy {name!r}: expected one of {', '.join(POLICY_NAMES + DEFAULT_ROLES)}")
    settings: dict[str, Any] = {}
    for key, value in table.items():
        if key in ("policy", "label"):
            continue
        if key in ("watermark", "retention", "k"):
            items = value.items() if isinstance(value, dict) else [(None, value)]
            settings[key] = [(s, str(v)) for s, v in items]
        else:
            settings[key] = value
    words = [name] + [f"{k}={v}" for k, v in table.items() if k not in ("policy", "label")]
    label = table.get("label")
    return Variant(text=" ".join(words), name=name, settings=settings,
                   label=None if label is None else str(label))


def compare_tables(doc: dict[str, Any], path) -> list[Variant]:
    """The ``[[compare]]`` tables of a config (``[]`` if none)."""
    tables = doc.get("compare", [])
    if not isinstance(tables, list):
        raise InputError(f"{path}: [[compare]] must be an array of tables")
    return [parse_table(t, f"{path}: compare #{i + 1}") for i, t in enumerate(tables)]


def _duration(value: Any, what: str) -> int:
    return check_duration(value, what, example='"10s"')


def _per_stream(variant: Variant, key: str, names: list[str], inherited: list[int | None]) -> tuple[int, ...] | None:
    """Per-stream durations of ``key``: the variant's (``NAME=DUR`` for one), else the job's."""
    values = list(inherited)
    for stream, raw in variant.settings.get(key, []):
        if stream is not None and stream not in names:
            raise InputError(f"--policy {variant.text!r}: unknown stream name {stream!r} in --{key} "
                             f"(streams: {', '.join(names)})")
        value = _duration(raw, key)
        for i, name in enumerate(names):
            if stream is None or stream == name:
                values[i] = value
    if any(v is None for v in values):
        missing = names[values.index(None)]
        raise InputError(f"--policy {variant.text!r}: policy {variant.name} needs --{key} DURATION "
                         f"(stream {missing!r} has none, here or in the job)")
    return tuple(int(v) for v in values)


def variant_policy(variant: Variant, job: PolicySpec, streams, recall_target: float | None,
                   period_us: int) -> PolicySpec:
    """The :class:`PolicySpec` of an explicit variant (not a role), settings inherited from
    the job (module doc).  ``streams``: the job's stream configs.  (``flink-sql`` never gets
    here: :func:`~streamjoin.pipelines.jobs.compare.check_variants` refuses it first.)"""
    name, s = variant.name, variant.settings
    names = [st.name for st in streams]
    allowed = {"spark-ss": {"watermark", "trigger", "watermark_policy"}, "flink": {"watermark", "watermark_interval"},
               "static": {"retention"}, "kslack": {"k"}, "qjoin": {"recall"}, "qkslack": {"recall"}}.get(name, set())
    stray = [k for k in s if k not in allowed]
    if stray:
        raise InputError(f"--policy {variant.text!r}: {stray[0].replace('_', '-')} is not a setting of {name}")
    if name == "static":
        return PolicySpec("static", retention=_per_stream(variant, "retention", names, [st.retention_us for st in streams]))
    if name == "kslack":
        return PolicySpec("kslack", k=_per_stream(variant, "k", names, [st.k_us for st in streams]))
    if name in ADAPTIVE:
        from .settings import check_recall

        q = check_recall(s["recall"]) if "recall" in s else recall_target
        if q is None:
            raise InputError(f"--policy {variant.text!r}: policy {name} needs --recall Q (the job has no recall target)")
        return PolicySpec(name, target=RecallTarget(recall=q, period_us=period_us))
    if name in ("spark-ss", "flink"):
        inherited = [job.watermark[i] if job.watermark is not None and job.name in ("spark-ss", "flink")
                     else st.watermark_us for i, st in enumerate(streams)]
        watermark = _per_stream(variant, "watermark", names, inherited)
        if name == "spark-ss":
            from ..policies.spark_ss import DEFAULT_WATERMARK_POLICY

            same = job.name == "spark-ss"
            trigger = _duration(s["trigger"], "trigger") if "trigger" in s else (job.trigger_us if same else None)
            if trigger is None:
                raise InputError(f"--policy {variant.text!r}: policy spark-ss needs --trigger DURATION "
                                 "(the job is not a spark-ss job)")
            wm_policy = s.get("watermark_policy") or (job.watermark_policy if same else DEFAULT_WATERMARK_POLICY)
            return PolicySpec("spark-ss", watermark=watermark, trigger_us=trigger, watermark_policy=str(wm_policy),
                              join=job.join if same else "inner")
        from ..policies.flink import DEFAULT_WATERMARK_INTERVAL_US, check_windows

        check_windows([st.window_us for st in streams])
        interval = (_duration(s["watermark_interval"], "watermark_interval") if "watermark_interval" in s
                    else job.watermark_interval_us if job.name == "flink" else DEFAULT_WATERMARK_INTERVAL_US)
        return PolicySpec("flink", watermark=watermark, watermark_interval_us=interval,
                          idleness_us=job.idleness_us if job.name == "flink" else None)
    return PolicySpec(name)   # none, mpkslack: no settings
