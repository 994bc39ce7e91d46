"""One resolved run configuration, from a TOML file plus command-line flags.

Precedence: command line > TOML ``[run]`` / ``[[stream]]`` > defaults.
Flags that name a column or duration take either a plain value (applies to
every stream) or ``NAME=VALUE`` (that stream only), e.g. ``--window 5ms``
and ``--window ball=1ms``; a count window is ``1000tuples`` (config/windows.py).

TOML layout (paths are relative to the TOML file)::

    [run]
    policy = "static"
    retention = "50ms"
    out = "out/sensors"

    [[stream]]
    name = "temperature"
    path = "temperature.parquet"
    ts = "ts"
    arrival = "arrival"
    keys = ["sensor_id"]
    window = "250ms"
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..base.errors import InputError
from ..policies import ADAPTIVE, JOIN_TYPES, OUTER_JOIN, POLICY_NAMES, PolicySpec, RecallTarget, Triggers
from .flow_control import FlowControl
from .choice import engine_of, spark_choice
from .machine import capacity_setting, check_flow_control, flow_control_setting
from .windows import count_windows_engine, static_retention, window_fields
from .options import (ENGINE_KEYS, HANDOFF_CONF_KEY, HANDOFF_MODES, check_uri_out, is_uri, out_target, results_mode, same_host, ship_mode, DistanceSpec, check_duration,
                      check_target, check_writable, min_cleanup_setting, parse_distance, parse_partition_capacity, parse_weights)
from ..base.jit import KERNEL_MODES, KERNELS_ENV
from ..base.sorting import SORT_ENV, SORTS
from ..base.timeunits import TS_UNITS, default_period, format_duration

ROUTERS = ("none", "atr", "ctr", "auto")
ENGINES = ("spark", "local")
#: the Flink emulations: forBoundedOutOfOrderness watermarks, --watermark-interval
FLINK = ("flink", "flink-sql")
#: default engine of `streamjoin run`: $STREAMJOIN_ENGINE if set (the test suite sets "local"), else spark
ENGINE_ENV = "STREAMJOIN_ENGINE"
#: the engine when neither a flag, the config nor $STREAMJOIN_ENGINE chooses one
DEFAULT_ENGINE = "spark"

#: keys a config TOML may hold; anything else is a typo and is refused
#: (a misspelt ``polcy = "static"`` must not silently run policy ``none``).
#: Extend these sets when a new setting is read from the TOML.
TOML_TABLES = ("run", "stream", "compare")   # [[compare]]: streamjoin compare (config/variants.py)
RUN_KEYS = ("policy", "router", "engine", "out", "no_results", "recall", "period", "k", "retention", "window",
            # nightly runs (pipelines/nightly/backfill.py)
            "date", "from", "to", "lookback", "force", "fail_under_target", "log_format", "json",
            # predicates beyond keys (pipelines/replay/predicates.py)
            "distance", "where",
            # recall-target policies qjoin / qkslack (pipelines/policies/controller.py)
            "interval", "granularity", "basic_window", "triggers",
            # Spark engine and routing (pipelines/engines/spark/, pipelines/route/)
            "master", "partitions", "spark_conf", "segment", "load_weights", "adapt_segment", "partition_capacity",
            # bounded-memory local engine (pipelines/jobs/chunked.py)
            "chunk_rows",
            # bad input (pipelines/io/load.py)
            "max_quarantine",
            # spark-ss: Spark Structured Streaming emulation (pipelines/policies/spark_ss.py)
            "watermark", "trigger", "trigger_files", "watermark_policy", "join",
            # flink, flink-sql: Flink interval join emulations (pipelines/policies/flink.py, flink_sql.py)
            "watermark_interval", "idleness", "min_cleanup_interval",
            # seed 001 flow control (pipelines/capacity/flow.py)
            "flow_control",
            # the capacity model (pipelines/capacity/, issue 20)
            "capacity")
#: default ``--max-quarantine``: the largest share of a stream's rows that may be
#: quarantined before the run is refused (pipelines/io/load.py, check_quarantine)
MAX_QUARANTINE = 0.5

#: a stream name: it names files (``quarantine/<name>.parquet``) and prefixes
#: result columns (``<name>_row``, and SQL identifiers in ``--where``)
STREAM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
STREAM_NAME_MAX = 64
STREAM_NAME_RULE = "a letter, then letters, digits or _"

STREAM_KEYS = ("name", "path", "ts", "arrival", "unit", "window", "keys", "k", "retention", "watermark",
               # nightly: the stream may have no partition on some days (pipelines/nightly/partitions.py)
               "optional")


@dataclass(frozen=True)
class StreamConfig:
    """One input stream.  Times in microseconds."""

    name: str
    path: str
    ts: str = "ts"
    arrival: str | None = None
    unit: str | None = None
    window_us: int = 0
    window_count: int | None = None   # a count window: the last N arrivals (window_us is then 0)
    keys: tuple[str, ...] = ()
    k_us: int | None = None
    retention_us: int | None = None
    watermark_us: int | None = None   # spark-ss: the stream's withWatermark delay
    vectors: tuple[str, ...] = ()   # columns of the distance predicate, if any
    optional: bool = False          # nightly: a day without a partition replays it empty


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, resolved and validated."""

    streams: tuple[StreamConfig, ...]
    policy: PolicySpec
    out: Path                       # or an options.OutURI: a Hadoop URI (run --engine spark)
    router: str = "none"
    engine: str = "local"
    write_results: bool = True
    recall_target: float | None = None
    # recall period P: None until resolved from the replay span (with_period);
    # period_source says where it came from ("user" | "default: N periods over SPAN")
    period_us: int | None = None
    period_source: str | None = None
    distance: DistanceSpec | None = None   # --distance COLS<=THRESHOLD
    where: str | None = None               # --where SQL over prefixed columns
    # Spark engine and routing (SPEC §6)
    master: str = "local[*]"
    partitions: int | None = None          # None: Spark native: from the input's size (engines/spark/sizing.py), else the master's default parallelism
    spark_conf: tuple[tuple[str, str], ...] = ()
    segment_us: int | None = None          # ATR / CTR segment length T (None: chosen from the data)
    load_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    # LLF capacity per partition of cpu, mem, net (None: the fair share), --partition-capacity
    partition_capacity: tuple[float | None, float | None, float | None] = (None, None, None)
    adapt_segment: bool = False
    # local engine: tuples per arrival-time chunk (0: all in memory; None: automatic, pipelines/jobs/chunked.py)
    chunk_rows: int | None = None
    # largest share of a stream's rows that may be quarantined (pipelines/io/load.py, check_quarantine)
    max_quarantine: float = MAX_QUARANTINE
    # --flow-control: seed 001's back-pressure delays arrivals (pipelines/capacity/flow.py); None: off
    flow_control: FlowControl | None = None
    # --capacity KEY=VALUE,... as given (parsed by pipelines/capacity/spec.py; None: no capacity model)
    capacity: str | None = None

    @property
    def windows(self) -> tuple[int, ...]:
        return tuple(s.window_us for s in self.streams)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for ``report.json``'s ``config``."""
        d = asdict(self)
        d["out"] = str(self.out)
        d.pop("period_source")  # reported beside the periods, not a setting
        if d["capacity"] is None:   # left out, so a run without it reports (and hashes) what it did
            d.pop("capacity")
        if self.partition_capacity == (None, None, None):   # the fair share: left out, as above
            d.pop("partition_capacity")
        d["policy"] = asdict(self.policy)
        # only recall-target policies have a target, only spark-ss the others
        d["policy"].pop("batch_times_us", None)   # one per micro-batch: policy_settings has the count
        for key in ("target", "watermark", "trigger_us", "watermark_policy", "watermark_interval_us",
                    "trigger_files", "idleness_us"):
            if d["policy"].get(key) is None:
                d["policy"].pop(key, None)
        for key, default in (("join", "inner"), ("min_cleanup_us", 0)):   # left out at the default, so a
            if d["policy"].get(key) == default:                              # nightly config hash stays what it was
                d["policy"].pop(key)
        if self.flow_control is None:   # off: left out, so the report is what it was
            d.pop("flow_control")
        else:
            d["flow_control"] = self.flow_control.to_dict()
        d["streams"] = [{k: v for k, v in s.items() if v is not None or k not in ("watermark_us", "window_count")}
                        for s in d["streams"]]   # unset: left out, so a nightly config hash stays what it was
        return d


@dataclass
class Flags:
    """Raw command-line values (``None`` / empty = not given)."""

    streams: list[str] = field(default_factory=list)        # NAME=PATH
    ts: list[str] = field(default_factory=list)             # COL or NAME=COL
    arrival: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    unit: list[str] = field(default_factory=list)
    window: list[str] = field(default_factory=list)
    k: list[str] = field(default_factory=list)
    retention: list[str] = field(default_factory=list)
    policy: str | None = None
    router: str | None = None
    engine: str | None = None
    out: str | None = None
    no_results: bool = False
    recall: float | None = None
    period: str | None = None
    interval: str | None = None       # qjoin / qkslack: re-decide every L
    granularity: str | None = None    # delay granularity g
    basic_window: str | None = None   # basic window b
    # KEY=VALUE early re-decision thresholds (qjoin / qkslack); a plain DURATION is
    # spark-ss's micro-batch interval
    triggers: list[str] = field(default_factory=list)
    watermark: list[str] = field(default_factory=list)   # spark-ss: DUR or NAME=DUR
    watermark_policy: str | None = None                  # spark-ss: min | max
    join: str | None = None                              # spark-ss: inner | left | right
    trigger_files: int | None = None                     # spark-ss: N input files per micro-batch
    watermark_interval: str | None = None                # flink: DUR, 0 = per record
    idleness: str | None = None                          # flink: withIdleness timeout DUR
    min_cleanup_interval: str | None = None              # flink-sql: minCleanUpInterval DUR
    distance: str | None = None
    where: str | None = None
    master: str | None = None
    partitions: int | None = None
    spark_conf: list[str] = field(default_factory=list)   # KEY=VALUE
    segment: str | None = None
    load_weights: str | None = None
    partition_capacity: str | None = None
    adapt_segment: bool = False
    chunk_rows: int | None = None
    max_quarantine: float | None = None
    capacity: str | None = None                           # KEY=VALUE,... (pipelines/capacity/spec.py)
    optional_streams: list[str] = field(default_factory=list)   # NAME: may have no partition on a day
    flow_control: str | None = None   # KEY=VALUE,... (pipelines/config/flow_control.py)


def _split_override(value: str, names: list[str], option: str) -> tuple[str | None, str]:
    """``NAME=VALUE`` -> (NAME, VALUE); plain ``VALUE`` -> (None, VALUE)."""
    if "=" in value:
        name, _, rest = value.partition("=")
        if name not in names:
            raise InputError(f"{option} {value}: unknown stream name {name!r} (streams: {', '.join(names) or 'none'})")
        return name, rest
    return None, value


def check_stream_name(name: Any, where: str) -> str:
    """A stream name as a file name and a column prefix can hold it (see
    :data:`STREAM_NAME`); ``where`` says where it was given."""
    text = str(name)
    if not STREAM_NAME.fullmatch(text):
        raise InputError(f"{where}: stream name {text!r} is not allowed: expected {STREAM_NAME_RULE} "
                         f"(at most {STREAM_NAME_MAX} characters), e.g. ball, sensor_2")
    if len(text) > STREAM_NAME_MAX:
        raise InputError(f"{where}: stream name {text[:20]!r}... has {len(text)} characters: at most {STREAM_NAME_MAX}")
    return text


def _check_distinct(names: list[str]) -> None:
    """Refuse stream names that differ only in case: ``quarantine/A.parquet`` and
    ``quarantine/a.parquet`` are one file on a case-insensitive file system."""
    seen: dict[str, str] = {}
    for name in names:
        twin = seen.setdefault(name.lower(), name)
        if twin != name:
            raise InputError(f"stream names {twin!r} and {name!r} differ only in case; stream names must be "
                             f"distinct ignoring case (they name files)")


def read_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError(f"{path}: config file not found")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None


def _check_keys(table: Any, allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(table, dict):
        raise InputError(f"{where} must be a table")
    unknown = [k for k in table if k not in allowed]
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (expected one of {', '.join(allowed)})")


def check_recall(value: float | None) -> float | None:
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        value = float(value)
    except (TypeError, ValueError):
        raise InputError(f"--recall {value!r}: expected a number in (0, 1]") from None
    if not (0.0 < value <= 1.0):
        raise InputError(f"--recall {value}: recall target must be in (0, 1]")
    return float(value)


def check_max_quarantine(value: Any) -> float:
    """``--max-quarantine`` / ``[run] max_quarantine``: a share in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise InputError(f"--max-quarantine {value!r}: expected a share of rows in [0, 1], e.g. 0.9")
    return float(value)


def _triggers(flags: Flags, run: dict[str, Any]) -> Triggers:
    """``[run.triggers]`` merged with ``--trigger KEY=VALUE`` (flags win): seed 003's thresholds."""
    table = run.get("triggers", {})
    if not isinstance(table, dict):
        raise InputError("[run.triggers] must be a table of KEY = VALUE")
    items = dict(table)
    for raw in flags.triggers:
        key, eq, value = str(raw).partition("=")
        if not eq or not key.strip():
            raise InputError(f"--trigger {raw!r}: expected KEY=VALUE, e.g. rate_ratio=5")
        items[key.strip()] = value.strip()
    return Triggers.parse(items)


def _recall_policy(name: str, recall: float | None, period: int | None, flags: Flags, run: dict[str, Any]) -> PolicySpec:
    """``qjoin`` / ``qkslack``: the recall target and its controller settings (SPEC §4.3).

    ``period``: the user's ``--period``; without one the target's period is
    set by :func:`with_period` once the replay span is known.
    """
    if recall is None:
        raise InputError(f"policy {name} needs --recall Q (a recall target in (0, 1])")
    settings = {}
    for flag_value, key, option in ((flags.interval, "interval", "--interval"),
                                    (flags.granularity, "granularity", "--granularity"),
                                    (flags.basic_window, "basic_window", "--basic-window")):
        raw = flag_value if flag_value is not None else run.get(key)
        if raw is not None:
            value = check_duration(raw, option.lstrip("-"))
            if value <= 0:
                raise InputError(f"{option} must be > 0")
            settings[f"{key}_us"] = value
    settings["triggers"] = _triggers(flags, run)
    if period is not None:
        settings["period_us"] = period
    return PolicySpec(name=name, target=RecallTarget(recall=recall, **settings))


def _spark_ss_policy(streams: list[StreamConfig], batch_triggers: list[str], flags: Flags,
                     run: dict[str, Any], join: str) -> PolicySpec:
    """``spark-ss``: watermark per stream, the micro-batches (``--trigger DUR`` /
    ``[run] trigger``, or ``--trigger-files N`` / ``[run] trigger_files``), the
    multiple-watermark policy and the join type."""
    from ..policies.spark_ss import DEFAULT_WATERMARK_POLICY

    if len(batch_triggers) > 1:
        raise InputError(f"--trigger {batch_triggers[-1]}: one micro-batch interval, given {len(batch_triggers)}")
    raw = batch_triggers[0] if batch_triggers else run.get("trigger")
    trigger = check_duration(raw, "trigger") if raw is not None else None
    files = flags.trigger_files if flags.trigger_files is not None else run.get("trigger_files")
    policy = PolicySpec(name="spark-ss", watermark=tuple(s.watermark_us for s in streams), trigger_us=trigger,
                        trigger_files=files, join=join,
                        watermark_policy=flags.watermark_policy or run.get("watermark_policy",
                                                                           DEFAULT_WATERMARK_POLICY))
    given = [s.name for s in streams if s.arrival]
    if files is not None and given:
        raise InputError(f"--trigger-files: a row arrives when the micro-batch reading its file runs (files' "
                         f"modification times); drop the arrival column of {', '.join(given)}")
    return policy


def _flink_policy(streams: list[StreamConfig], flags: Flags, run: dict[str, Any], name: str = "flink",
                  join: str = "inner", cleanup: int = 0) -> PolicySpec:
    """``flink`` / ``flink-sql``: out-of-orderness per stream and the watermark interval
    (``--watermark-interval`` or ``[run] watermark_interval``, default 200ms)."""
    from ..policies.flink import DEFAULT_WATERMARK_INTERVAL_US, check_windows

    check_windows([s.window_us for s in streams])
    raw = flags.watermark_interval if flags.watermark_interval is not None else run.get("watermark_interval")
    interval = check_duration(raw, "watermark_interval") if raw is not None else DEFAULT_WATERMARK_INTERVAL_US
    raw = flags.idleness if flags.idleness is not None else run.get("idleness")
    idleness = check_duration(raw, "idleness") if raw is not None else None
    return PolicySpec(name=name, watermark=tuple(s.watermark_us for s in streams), watermark_interval_us=interval,
                      idleness_us=idleness, join=join, min_cleanup_us=cleanup)


def engine_source(config_path: Path | None, flags: Flags) -> str:
    """Who chose the engine of a run: ``"flag"``, ``"config"`` (``[run] engine``),
    ``"environment"`` (``$STREAMJOIN_ENGINE``) or ``"default"`` (Spark)."""
    import os

    if flags.engine:
        return "flag"
    if config_path and read_toml(config_path).get("run", {}).get("engine"):
        return "config"
    return "environment" if os.environ.get(ENGINE_ENV) else "default"


def resolve(config_path: Path | None, flags: Flags, *, check_out: bool = True, output_kind: str = "run") -> RunConfig:
    """Merge TOML and flags into a validated :class:`RunConfig`.

    ``check_out=False``: the caller checks what ``out`` holds itself (a
    partitioned output root, pipelines/nightly/publish.py).  ``output_kind``:
    the command whose output ``out`` will hold (pipelines/config/options.py,
    ``check_target``).  Either way ``out`` must be writable (``check_writable``:
    its parent, or a nightly root itself).
    """
    doc: dict[str, Any] = read_toml(config_path) if config_path else {}
    base = config_path.parent if config_path else Path(".")
    _check_keys(doc, TOML_TABLES, f"{config_path}")
    run = doc.get("run", {})
    _check_keys(run, RUN_KEYS, f"{config_path}: [run]")
    raw_streams = doc.get("stream", [])
    if not isinstance(raw_streams, list):
        raise InputError(f"{config_path}: [[stream]] must be an array of tables")

    streams: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(raw_streams):
        _check_keys(s, STREAM_KEYS, f"{config_path}: stream #{i + 1}")
        if "name" not in s or "path" not in s:
            raise InputError(f"{config_path}: stream #{i + 1} needs a name and a path")
        name = check_stream_name(s["name"], f"{config_path}: stream #{i + 1}")
        if name in streams:
            raise InputError(f"{config_path}: stream #{i + 1}: stream name {name!r} is given twice; "
                             f"every [[stream]] needs its own name")
        entry = dict(s, name=name)
        p = Path(str(s["path"]))
        entry["path"] = str(p if p.is_absolute() else base / p)
        streams[name] = entry
    from_flags: set[str] = set()
    for spec in flags.streams:
        if "=" not in spec:
            raise InputError(f"--stream {spec}: expected NAME=PATH")
        name, _, path = spec.partition("=")
        if not name:
            raise InputError(f"--stream {spec}: empty stream name")
        check_stream_name(name, f"--stream {spec}")
        if name in from_flags:
            raise InputError(f"--stream {spec}: stream name {name!r} is given twice; every stream needs its own name")
        from_flags.add(name)
        # a --stream naming a [[stream]] of the config replaces its path (flags win)
        streams.setdefault(name, {"name": name})["path"] = path
    names = list(streams)
    _check_distinct(names)
    if len(names) < 2:
        raise InputError("a join needs at least two streams: give --stream NAME=PATH twice or [[stream]] tables in the config")

    def apply(option: str, values: list[str], field_name: str, convert=lambda v: v, multi: bool = False):
        cleared: set[str] = set()
        for raw in values:
            name, value = _split_override(raw, names, option)
            targets = [name] if name else names
            for t in targets:
                if multi:
                    # the first flag for a stream replaces the TOML list
                    if t not in cleared:
                        streams[t][field_name] = []
                        cleared.add(t)
                    streams[t][field_name].append(convert(value))
                else:
                    streams[t][field_name] = convert(value)

    apply("--ts", flags.ts, "ts")
    apply("--arrival", flags.arrival, "arrival")
    apply("--key", flags.keys, "keys", multi=True)
    apply("--unit", flags.unit, "unit")
    apply("--window", flags.window, "window")
    apply("--k", flags.k, "k")
    apply("--retention", flags.retention, "retention")
    apply("--watermark", flags.watermark, "watermark")
    for name in flags.optional_streams:
        if name not in streams:
            raise InputError(f"--optional-stream {name}: unknown stream name (streams: {', '.join(names)})")
        streams[name]["optional"] = True

    # run-level defaults from TOML, then flags
    for key in ("k", "retention", "window", "watermark"):
        if key in run:
            for s in streams.values():
                s.setdefault(key, run[key])

    resolved = []
    for name, s in streams.items():
        if "path" not in s:
            raise InputError(f"stream {name!r} has no path")
        unit = s.get("unit")
        if unit is not None and unit not in TS_UNITS:
            raise InputError(f"stream {name!r}: unit {unit!r} is not one of {', '.join(TS_UNITS)}")
        if "window" not in s:
            raise InputError(f"stream {name!r} has no window: give --window DURATION (or a count, 1000tuples)")
        optional = s.get("optional", False)
        if not isinstance(optional, bool):
            raise InputError(f"stream {name!r}: optional = {optional!r}: expected true or false")
        keys = s.get("keys", [])
        if isinstance(keys, str):
            keys = [keys]
        if not isinstance(keys, list):
            raise InputError(f"stream {name!r}: keys {keys!r}: expected a list of column names")
        resolved.append(StreamConfig(
            name=name,
            path=str(s["path"]),
            ts=str(s.get("ts", "ts")),
            arrival=s.get("arrival"),
            unit=unit,
            **window_fields(s["window"], f"window of stream {name!r}", check_duration),
            keys=tuple(str(k) for k in keys),
            k_us=check_duration(s["k"], f"k of stream {name!r}") if s.get("k") is not None else None,
            retention_us=check_duration(s["retention"], f"retention of stream {name!r}") if s.get("retention") is not None else None,
            watermark_us=check_duration(s["watermark"], f"watermark of stream {name!r}") if s.get("watermark") is not None else None,
            optional=optional,
        ))
    key_counts = {len(s.keys) for s in resolved}
    if len(key_counts) > 1:
        raise InputError("every stream needs the same number of key columns (keys are matched by position)")

    policy_name = flags.policy or run.get("policy", "none")
    if policy_name not in POLICY_NAMES:
        raise InputError(f"--policy {policy_name}: expected one of {', '.join(POLICY_NAMES)}")
    k = tuple(s.k_us for s in resolved) if policy_name == "kslack" else None
    retention = static_retention(resolved) if policy_name == "static" else None
    if k is not None and any(v is None for v in k):
        raise InputError("policy kslack needs --k DURATION (for every stream)")
    if retention is not None and any(v is None for v in retention):
        raise InputError("policy static needs --retention DURATION (for every stream)")
    # spark-ss's micro-batch interval shares --trigger with the controllers' KEY=VALUE thresholds
    batch_triggers = [t for t in flags.triggers if "=" not in t]
    flags = replace(flags, triggers=[t for t in flags.triggers if "=" in t])
    if output_kind == "tune-buffer":
        # an emulation job's engine keys change nothing a tuning of another policy replays
        run = {key: v for key, v in run.items()
               if key in ENGINE_KEYS.get(policy_name, ())
               or not any(key in keys and name != policy_name for name, keys in ENGINE_KEYS.items())}
    if policy_name != "spark-ss" and flags.trigger_files is not None:
        raise InputError(f"--trigger-files: a setting of --policy spark-ss, not of {policy_name}")
    if policy_name not in FLINK and (flags.watermark_interval is not None or "watermark_interval" in run):
        raise InputError(f"--watermark-interval: a setting of --policy flink or flink-sql, not of {policy_name}")
    # --join / [run] join: outer joins are emulated by spark-ss and flink-sql (OUTER_JOIN); tune-buffer counts inner pairs,
    # which the join type does not change, so it tunes the inner join
    join = flags.join or run.get("join", "inner")
    if join not in JOIN_TYPES:
        raise InputError(f"--join {join}: expected one of {', '.join(JOIN_TYPES)}")
    if output_kind == "tune-buffer":
        join = "inner"
    if join != "inner" and policy_name not in OUTER_JOIN:
        raise InputError(f"--join {join}: outer joins are emulated for --policy {', '.join(OUTER_JOIN)} only, "
                         f"not {policy_name}")
    if policy_name not in FLINK and (flags.idleness is not None or "idleness" in run):
        raise InputError(f"--idleness: a setting of --policy flink, not of {policy_name}")
    cleanup = min_cleanup_setting(flags.min_cleanup_interval, run.get("min_cleanup_interval"), policy_name)
    if policy_name == "spark-ss":
        policy = _spark_ss_policy(resolved, batch_triggers, flags, run, join)
    elif policy_name in FLINK and not (flags.watermark_policy or batch_triggers):
        policy = _flink_policy(resolved, flags, run, policy_name, join, cleanup)
    else:
        given = (["--watermark"] if flags.watermark and policy_name not in FLINK else []) \
            + (["--watermark-policy"] if flags.watermark_policy else []) + [f"--trigger {t}" for t in batch_triggers]
        if given:
            raise InputError(f"{', '.join(given)}: settings of --policy spark-ss, not of {policy_name} "
                             "(qjoin / qkslack triggers are KEY=VALUE)")
        # recall-target policies are built once --recall and --period are known
        policy = PolicySpec(name=policy_name, k=k, retention=retention) if policy_name not in ADAPTIVE else None

    router = flags.router or run.get("router", "none")
    if router not in ROUTERS:
        raise InputError(f"--router {router}: expected one of {', '.join(ROUTERS)}")
    engine = engine_of(flags, run, router, os.environ.get(ENGINE_ENV), DEFAULT_ENGINE)   # config/choice.py
    if engine not in ENGINES:
        raise InputError(f"--engine {engine}: expected one of {', '.join(ENGINES)}")
    chosen = spark_choice(flags, run, router)   # None: the default engine gives way (config/choice.py)
    if policy_name in ("spark-ss", *FLINK) and engine == "spark" and chosen is None:
        engine = "local"   # the default engine for the emulations, not the user's choice (Spark runs them)
    flow, engine = flow_control_setting(flags.flow_control if flags.flow_control is not None
                                        else run.get("flow_control"), output_kind, engine,
                                        spark_chosen=chosen is not None)
    sort = os.environ.get(SORT_ENV) or "auto"
    if sort not in SORTS:  # checked here so a typo fails before any work, not mid-join
        raise InputError(f"${SORT_ENV} {sort}: expected one of {', '.join(SORTS)}")
    kernels = os.environ.get(KERNELS_ENV) or "auto"
    if kernels not in KERNEL_MODES:  # a typo must not silently run the other path
        raise InputError(f"${KERNELS_ENV} {kernels}: expected one of {', '.join(KERNEL_MODES)}")
    out_raw = flags.out or run.get("out")
    if not out_raw:
        raise InputError("no output directory: give --out DIR")
    # `out` is relative to the working directory (where cron's job runs),
    # unlike input paths, which belong with the config that names them.
    out = out_target(str(out_raw))
    if not is_uri(out):   # a Hadoop URI is checked through Hadoop when the Spark run opens it
        if check_out:
            check_target(out, output_kind)  # refuse a foreign non-empty --out before any work is done
        check_writable(out, into=not check_out)  # and one that could not be written (a nightly root: inside)
    period_raw = flags.period or run.get("period")
    period = check_duration(period_raw, "period") if period_raw is not None else None  # None: from the span
    if period is not None and period <= 0:
        raise InputError("--period must be > 0")
    recall = check_recall(flags.recall if flags.recall is not None else run.get("recall"))
    if policy is None:
        policy = _recall_policy(policy_name, recall, period, flags, run)
    distance_raw = flags.distance or run.get("distance")
    distance = parse_distance(distance_raw) if distance_raw else None
    if distance is not None:
        resolved = [replace(s, vectors=distance.columns) for s in resolved]
    where = flags.where or run.get("where")
    if where is not None and not str(where).strip():
        raise InputError("--where: empty expression")
    spark_settings = _spark_settings(flags, run)
    if router != "none" and engine != "spark":
        raise InputError(f"--router {router} needs --engine spark")
    if router == "ctr" and policy_name in ("spark-ss", *FLINK):
        raise InputError(f"--router ctr: policy {policy_name} runs with --router none, atr or auto (= atr)")
    chunk_rows = flags.chunk_rows if flags.chunk_rows is not None else run.get("chunk_rows")
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 0):
        raise InputError(f"--chunk-rows {chunk_rows!r}: expected an integer >= 0 (0 = the whole input in memory)")
    if chunk_rows and engine == "spark":
        # the bounded-memory engine is the local one: --chunk-rows picks it when no engine was
        # chosen, and is refused with Spark the user chose (never ignored)
        if chosen is not None:
            raise InputError(f"--chunk-rows {chunk_rows}: bounded memory runs on --engine local; Spark (chosen by "
                             f"{chosen}) holds its input in memory (use --engine local, or --chunk-rows 0)")
        engine = "local"
    max_q = flags.max_quarantine if flags.max_quarantine is not None else run.get("max_quarantine")
    check_flow_control(flow, chunk_rows, policy.trigger_files)
    capacity, engine = capacity_setting(flags.capacity if flags.capacity is not None else run.get("capacity"),
                                        policy_name, engine, chunk_rows, output_kind=output_kind,
                                        spark_chosen=chosen is not None)
    engine = count_windows_engine(resolved, policy_name, engine, flags, run, output_kind, check_out, chunk_rows, capacity, flow,
                                  router)
    check_uri_out(out, engine, output_kind if check_out else "a nightly run")
    return RunConfig(
        flow_control=flow,
        capacity=capacity,
        chunk_rows=chunk_rows,
        max_quarantine=check_max_quarantine(max_q) if max_q is not None else MAX_QUARANTINE,
        **spark_settings,
        streams=tuple(resolved), policy=policy, out=out, router=router, engine=engine,
        write_results=not (flags.no_results or run.get("no_results", False)),
        recall_target=recall, period_us=period, period_source="user" if period is not None else None,
        distance=distance, where=where,
    )


def with_period(cfg: RunConfig, span_us: int, *, over: str | None = None) -> RunConfig:
    """``cfg`` with its recall period set, for a replay spanning ``span_us``
    (first to last arrival of the input).

    A user's ``--period`` (flag or ``[run] period``) is kept exactly.  Without
    one, the period is :func:`~streamjoin.pipelines.base.timeunits.default_period`
    of the span -- the smallest of 1s, 10s, 1min, 10min, 1h, 1d, 1w giving at
    most 1,000 periods -- and ``period_source`` says so, e.g. ``"default: 365
    periods over 365d"``.  A recall-target policy's controller gets the same
    period (its ``RecallTarget.period_us``), so it always sees an int.
    ``over`` names the span in ``period_source`` (default: its duration).
    """
    if cfg.period_us is not None:
        period, source = int(cfg.period_us), cfg.period_source or "user"
    else:
        span = max(int(span_us), 0)
        period = default_period(span)
        count = span // period + 1
        source = f"default: {count} period{'s' if count != 1 else ''} over {over or format_duration(span)}"
    policy = cfg.policy
    if policy.target is not None and policy.target.period_us != period:
        policy = replace(policy, target=replace(policy.target, period_us=period))
    return replace(cfg, period_us=period, period_source=source, policy=policy)


def _spark_settings(flags: Flags, run: dict[str, Any]) -> dict[str, Any]:
    """``--master``, ``--partitions``, ``--spark-conf``, ``--segment``, ``--load-weights``,
    ``--partition-capacity``, ``--adapt-segment``."""
    out: dict[str, Any] = {}
    master = flags.master or run.get("master")
    if master is not None:
        out["master"] = str(master)
    parts = flags.partitions if flags.partitions is not None else run.get("partitions")
    if parts is not None:
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise InputError(f"--partitions {parts!r}: expected an integer >= 1")
        out["partitions"] = int(parts)
    conf = list(run.get("spark_conf", {}).items()) if isinstance(run.get("spark_conf"), dict) else []
    for raw in flags.spark_conf:
        key, eq, value = raw.partition("=")
        if not eq or not key:
            raise InputError(f"--spark-conf {raw}: expected KEY=VALUE")
        conf.append((key, value))
    out["spark_conf"] = tuple((str(k), str(v)) for k, v in conf)

    for key, value in out["spark_conf"]:
        if key == HANDOFF_CONF_KEY and value not in HANDOFF_MODES:
            raise InputError(f"--spark-conf {key}={value}: expected {', '.join(HANDOFF_MODES[:-1])} or "
                             f"{HANDOFF_MODES[-1]}")
        # files live on the driver's host: executors elsewhere could not open them
        if key == HANDOFF_CONF_KEY and value == "files" and not same_host(out.get("master", "local[*]")):
            raise InputError(f"--spark-conf {key}=files needs a local master (executors on the driver's host), "
                             f"not --master {out['master']}; use auto or inline")
    results_mode(out.get("master", "local[*]"), out["spark_conf"])  # a bad spark.streamjoin.results fails here
    ship_mode(out["spark_conf"])   # a bad spark.streamjoin.ship too
    seg = flags.segment or run.get("segment")
    if seg is not None:
        out["segment_us"] = check_duration(seg, "segment")
        if out["segment_us"] <= 0:
            raise InputError("--segment must be > 0")
    weights = flags.load_weights or run.get("load_weights")
    if weights is not None:
        out["load_weights"] = parse_weights(weights if isinstance(weights, str) else [float(x) for x in weights])
    capacity = flags.partition_capacity or run.get("partition_capacity")
    if capacity is not None:
        out["partition_capacity"] = parse_partition_capacity(capacity)
    out["adapt_segment"] = bool(flags.adapt_segment or run.get("adapt_segment", False))
    return out


__all__ = ["Flags", "RunConfig", "StreamConfig", "resolve", "check_recall", "replace", "with_period"]
