"""Disorder policies (SPEC §4): what each one decides, as a small config.

Families:

* **symmetric** (``static``, ``qjoin``): every stream keeps a buffer, a
  tuple joins the moment it arrives; the retention ``d_i`` sets how far behind
  the frontier a stream's state horizon trails.
* **sorting** (``none``, ``kslack``, ``mpkslack``, ``qkslack``): tuples
  pass a K-slack sort buffer, a synchronising merge, then an in-order window
  join; ``K_i`` sets how long the sort buffer waits.
* **micro-batch** (``spark-ss``): an engine emulation (SPEC §4.4) -- Spark
  Structured Streaming's stream-stream join (inner or ``--join left|right|full``
  outer), arrivals cut into micro-batches by ``--trigger`` (or input files by
  ``--trigger-files``), a global watermark from ``--watermark`` per stream
  (:mod:`.spark_ss` states the rules and their sources).
* **interval join** (``flink``): an engine emulation (SPEC §4.4) -- Flink's
  DataStream interval join, per-input bounded-out-of-orderness watermarks
  (``--watermark``, emitted per record or every ``--watermark-interval``),
  late records dropped, buffers cleaned by the watermark (:mod:`.flink`).
* **SQL interval join** (``flink-sql``): an engine emulation -- Flink SQL's
  row-time interval join (``RowTimeIntervalJoin``), the same watermarks as
  ``flink`` but no late drop: per-key caches with shared expiration times and
  cleanup timers, inner or ``--join left|right|full`` outer (:mod:`.flink_sql`).

:class:`PolicySpec` is pure configuration -- the arrays a policy implies
(``K_i(a)``, ``d_i(a)``) are built by the policy modules beside this file and
consumed by :mod:`streamjoin.pipelines.replay.progress`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import InputError
from .recall_target import RecallTarget
from .triggers import Triggers

SORTING = "sorting"
SYMMETRIC = "symmetric"
MICROBATCH = "micro-batch"
INTERVAL_JOIN = "interval-join"
SQL_INTERVAL_JOIN = "sql-interval-join"

FAMILY = {
    "none": SORTING,
    "kslack": SORTING,
    "mpkslack": SORTING,
    "static": SYMMETRIC,
    "qjoin": SYMMETRIC,
    "qkslack": SORTING,
    "spark-ss": MICROBATCH,
    "flink": INTERVAL_JOIN,
    "flink-sql": SQL_INTERVAL_JOIN,
}

#: policies whose values are decided online for a recall target (SPEC §4.3)
ADAPTIVE = ("qjoin", "qkslack")

POLICY_NAMES = tuple(FAMILY)

#: ``--join`` values: inner, or the outer side(s) of a left / right / full outer join
JOIN_TYPES = ("inner", "left", "right", "full")
#: policies that emulate outer joins, left, right and full (null-padded rows emitted on state eviction)
OUTER_JOIN = ("spark-ss", "flink-sql")


@dataclass(frozen=True)
class PolicySpec:
    """A resolved disorder policy.

    Args:
        name: one of :data:`POLICY_NAMES`.
        k: per-stream K in microseconds (``kslack`` only), one per stream.
        retention: per-stream retention ``d_i`` in microseconds (``static``
            only), one per stream.
        target: the recall target and controller settings (``qjoin`` and
            ``qkslack`` only; see :mod:`.controller`).
        watermark: per-stream ``withWatermark`` delay (``spark-ss``) or
            ``forBoundedOutOfOrderness`` delay (``flink``, ``flink-sql``) in microseconds,
            whole milliseconds, one per stream.
        trigger_us: the micro-batch interval of arrival time (``spark-ss`` only).
        watermark_policy: ``min`` or ``max``, Spark's
            ``spark.sql.streaming.multipleWatermarkPolicy`` (``spark-ss`` only).
        watermark_interval_us: how often the watermarks are emitted, of
            arrival time; 0 = after every record (``flink``, ``flink-sql``; Flink's
            ``pipeline.auto-watermark-interval``).
        trigger_files: ``spark-ss`` with micro-batches cut by input files:
            this many files per stream per batch (``maxFilesPerTrigger``),
            instead of ``trigger_us``.
        batch_times_us: with ``trigger_files``, when each batch runs, the
            no-data batch after the last included
            (:func:`.spark_ss.file_batch_times`; set once the files are listed).
        join: ``inner``, or ``left`` / ``right`` / ``full`` for an outer join whose
            unmatched rows of that side (both: ``full``) are emitted null-padded
            (:data:`OUTER_JOIN` policies only: ``spark-ss``, ``flink-sql``).
        idleness_us: ``WatermarkStrategy.withIdleness`` timeout, of arrival
            time; None = no idleness detection (``flink`` only).
        min_cleanup_us: ``table.exec.interval-join.min-cleanup-interval``, the
            ``minCleanUpInterval`` of Flink SQL's interval join, whole ms; 0 = Flink's
            default (``flink-sql`` only).
    """

    name: str
    k: tuple[int, ...] | None = None
    retention: tuple[int, ...] | None = None
    target: RecallTarget | None = None
    watermark: tuple[int, ...] | None = None
    trigger_us: int | None = None
    watermark_policy: str | None = None
    watermark_interval_us: int | None = None
    join: str = "inner"
    trigger_files: int | None = None
    batch_times_us: tuple[int, ...] | None = None
    idleness_us: int | None = None
    min_cleanup_us: int = 0

    def __post_init__(self) -> None:
        if self.name not in FAMILY:
            raise InputError(f"unknown policy {self.name!r}: expected one of {', '.join(POLICY_NAMES)}")
        if self.join not in JOIN_TYPES:
            raise InputError(f"--join {self.join}: expected one of {', '.join(JOIN_TYPES)}")
        if self.join != "inner" and self.name not in OUTER_JOIN:
            raise InputError(f"--join {self.join}: outer joins are emulated for --policy "
                             f"{', '.join(OUTER_JOIN)} only, not {self.name}")
        if self.min_cleanup_us and self.name != "flink-sql":
            raise InputError(f"--min-cleanup-interval: a setting of --policy flink-sql, not of {self.name}")
        if self.name == "kslack" and self.k is None:
            raise InputError("policy kslack needs --k DURATION")
        if self.name == "static" and self.retention is None:
            raise InputError("policy static needs --retention DURATION")
        if self.name in ADAPTIVE and self.target is None:
            raise InputError(f"policy {self.name} needs --recall Q (a recall target in (0, 1])")
        if self.name == "spark-ss":
            from .spark_ss import check_settings

            check_settings(self)
        if self.name == "flink":
            from .flink import check_settings as check_flink

            check_flink(self)
        if self.name == "flink-sql":
            from .flink_sql import check_settings as check_flink_sql

            check_flink_sql(self)
        for label, values in (("k", self.k), ("retention", self.retention), ("watermark", self.watermark)):
            if values is not None and any(v < 0 for v in values):
                raise InputError(f"--{label} must be >= 0")

    @property
    def family(self) -> str:
        return FAMILY[self.name]

    @property
    def padded_sides(self) -> tuple[int, ...]:
        """The streams whose unmatched rows the join emits null-padded: ``()`` for an
        inner join, both for a full outer join."""
        return {"inner": (), "left": (0,), "right": (1,), "full": (0, 1)}[self.join]

    @property
    def adaptive(self) -> bool:
        return self.name in ADAPTIVE

    @property
    def in_memory_only(self) -> str | None:
        """The setting the bounded-memory engine (``--chunk-rows``) does not emulate yet
        (as the user gives it: ``--trigger-files``, ``--idleness``), or ``None``.  The Spark
        engine runs every emulation setting (its facts come from the driver's replay)."""
        if self.name == "spark-ss" and self.trigger_files is not None:
            return "--trigger-files"
        if self.name == "flink" and self.idleness_us:
            return "--idleness"
        return None


def slack_matrix(replay, policy: PolicySpec):
    """``K_i(a)`` for a sorting-family policy: shape ``(n, N)`` or ``(n, 1)``."""
    from . import kslack, mpkslack, none

    return {"none": none, "kslack": kslack, "mpkslack": mpkslack}[policy.name].slack(replay, policy)


class Rows:
    """``n`` rows of an ``(n, N)`` matrix, each computed when read (never all at once)."""

    def __init__(self, n: int, row):
        self.n, self.row = n, row

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.row(i)


def slack_rows(replay, policy: PolicySpec):
    """:func:`slack_matrix` for reading one stream at a time: ``mpkslack``'s
    ``(n, N)`` slack as :class:`Rows` (one row alive at a time), the others'
    ``(n, 1)`` matrix itself."""
    from . import mpkslack

    if policy.name == "mpkslack":
        return Rows(replay.n, lambda i: mpkslack.slack_row(replay, i))
    return slack_matrix(replay, policy)


def retention_matrix(replay, policy: PolicySpec):
    """``d_i(a)`` for a symmetric-family policy: shape ``(n, N)`` or ``(n, 1)``."""
    from . import static

    return {"static": static}[policy.name].retention(replay, policy)


def adaptive_schedule(replay, windows, policy: PolicySpec, bad_arrivals=None, keys=None):
    """``d_i(a)`` (``qjoin``) or ``K_i(a)`` (``qkslack``) decided online: a
    :class:`~.controller.Schedule` with the ``(n, N)`` values and the decision log."""
    from . import qjoin, qkslack

    return {"qjoin": qjoin, "qkslack": qkslack}[policy.name].schedule(replay, windows, policy, bad_arrivals, keys)
