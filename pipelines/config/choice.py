"""Whether the user chose Spark: the one rule the default engine's give-way follows.

:func:`engine_of` picks the engine a run starts from: ``--engine`` / ``[run]
engine``; else Spark when a router or a Spark setting (below) chose it; else
``$STREAMJOIN_ENGINE``; else the built-in default, Spark.  So the environment
variable is a default like the built-in one: ``STREAMJOIN_ENGINE=local`` with
``--master spark://...`` runs on Spark, as it would without the variable (it
used to run locally, ignoring the master without a word).

The default engine (Spark, or ``$STREAMJOIN_ENGINE``) gives way to the local engine
for what runs only, or by default, in memory on one machine: ``--flow-control``,
``--capacity``, ``--chunk-rows``, count windows and the spark-ss / flink emulations.
It does so only when the user did not choose Spark.  The user chose it with
``--engine`` / ``[run] engine``, a router other than ``none``, or a Spark setting:
``--master``, ``--partitions``, ``--spark-conf`` (and their ``[run]`` keys) -- a
Spark setting the run then ignored would leave ``"engine": "local"`` next to
``"master": "spark://..."`` in report.json.  Where Spark was chosen and a feature
cannot run there, the feature's one-line refusal names the choice.

``--engine local`` (or ``[run] engine = "local"``) beside Spark settings runs
locally, as asked; :func:`ignored_spark_settings` names the settings it then
ignores, and :func:`note_ignored_spark_settings` (from :func:`engine_of`) says so in
one ``note:`` line on stderr (not an error: a TOML written for Spark stays usable
with ``--engine local``).
"""

from __future__ import annotations

from typing import Any

from ..base.errors import warn_once

# (flag attribute of settings.Flags, [run] key, how a refusal names it)
SPARK_SETTINGS = (("engine", "engine", "--engine"), ("master", "master", "--master"),
                  ("partitions", "partitions", "--partitions"), ("spark_conf", "spark_conf", "--spark-conf"))


def spark_choice(flags: Any, run: dict[str, Any], router: str) -> str | None:
    """What chose the engine -- e.g. ``"--master spark://host:7077"``, ``"[run] partitions"``,
    ``"--router atr"`` -- or ``None`` when nothing did (the default engine then gives way).
    ``--engine local`` counts too: the engine was chosen, so nothing gives way to anything."""
    for attr, key, flag in SPARK_SETTINGS:
        value = getattr(flags, attr, None)
        if value not in (None, [], ()):
            shown = " ".join(value) if isinstance(value, list) else value
            return f"{flag} {shown}"
        if run.get(key) is not None:
            return f"[run] {key}"
    return f"--router {router}" if router != "none" else None


def ignored_spark_settings(flags: Any, run: dict[str, Any]) -> list[str]:
    """The Spark settings a run on the local engine ignores -- ``--master spark://h:7077``,
    ``[run] spark_conf`` -- in :data:`SPARK_SETTINGS` order (a flag shown with its value)."""
    out = []
    for attr, key, flag in SPARK_SETTINGS[1:]:   # not --engine itself
        value = getattr(flags, attr, None)
        if value not in (None, [], ()):
            out.append(f"{flag} {' '.join(value) if isinstance(value, list) else value}")
        elif run.get(key) not in (None, {}, []):
            out.append(f"[run] {key}")
    return out


def note_ignored_spark_settings(flags: Any, run: dict[str, Any], engine: str) -> None:
    """On the local engine, one ``note:`` line on stderr naming the Spark settings it ignores
    (once per process: ``base.errors.warn_once``)."""
    ignored = ignored_spark_settings(flags, run) if engine == "local" else []
    if ignored:
        warn_once(f"--engine local: ignoring the Spark settings {', '.join(ignored)}", prefix="note")


def engine_of(flags: Any, run: dict[str, Any], router: str, environment: str | None, default: str) -> str:
    """The engine a run starts from (before the give-way rules): ``--engine`` / ``[run] engine``;
    else ``"spark"`` when a router or a Spark setting chose it (:func:`spark_choice`); else
    ``environment`` (``$STREAMJOIN_ENGINE``, unset: ``None``); else ``default``.  An explicit
    ``local`` beside Spark settings says so (:func:`note_ignored_spark_settings`)."""
    explicit = getattr(flags, "engine", None) or run.get("engine")
    if explicit:
        note_ignored_spark_settings(flags, run, explicit)
        return explicit
    if spark_choice(flags, run, router) is not None:
        return "spark"
    return environment or default


def spark_chosen(flags: Any, run: dict[str, Any], router: str) -> bool:
    """True when the user chose the engine (see :func:`spark_choice`)."""
    return spark_choice(flags, run, router) is not None
