"""Option values parsed and checked where the configuration is resolved, so a
bad value fails before any work is done: ``--distance``, ``--load-weights``,
``--partition-capacity``, ``--min-cleanup-interval`` (:func:`min_cleanup_setting`),
a duration from a flag or the TOML (:func:`check_duration`, every config module's),
the Spark engine's ``spark.streamjoin.handoff`` and ``spark.streamjoin.results``
confs (:func:`results_mode`) and ``--out`` (what it
holds, :func:`check_target`, and whether it can be written at all,
:func:`check_writable`).
"""

from __future__ import annotations

import errno
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InputError
from ..base.timeunits import parse_duration

_DISTANCE = re.compile(r"^\s*([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*<=\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*$")


@dataclass(frozen=True)
class DistanceSpec:
    """Vector columns and the largest allowed Euclidean distance."""

    columns: tuple[str, ...]
    threshold: float


def parse_distance(text: str) -> DistanceSpec:
    """``"x,y<=5000"`` -> ``DistanceSpec(("x", "y"), 5000.0)``."""
    m = _DISTANCE.match(str(text))
    if not m:
        raise InputError(f"--distance {text!r}: expected COLS<=THRESHOLD, e.g. x,y<=5000")
    cols = tuple(c.strip() for c in m.group(1).split(","))
    if len(set(cols)) != len(cols):
        raise InputError(f"--distance {text!r}: a column is named twice")
    return DistanceSpec(columns=cols, threshold=float(m.group(2)))


def parse_weights(text: str | Sequence[float] | None) -> tuple[float, float, float]:
    if text is None:
        return (1.0, 1.0, 1.0)
    parts = text.split(",") if isinstance(text, str) else list(text)
    try:
        w = tuple(float(x) for x in parts)
    except ValueError:
        raise InputError(f"--load-weights {text!r}: expected three numbers cpu,mem,net e.g. 1,1,1") from None
    if len(w) != 3 or any(x < 0 for x in w) or sum(w) == 0:
        raise InputError(f"--load-weights {text!r}: expected three numbers >= 0 (cpu,mem,net), not all 0")
    return w


#: the resources of ``--partition-capacity`` (cpu work units/s, tuples held, tuples received/s)
CAPACITY_RESOURCES = ("cpu", "mem", "net")


def parse_partition_capacity(text: str | dict | None) -> tuple[float | None, float | None, float | None]:
    """``"cpu=2000,mem=500"`` -> ``(2000.0, 500.0, None)``; a resource not given is ``None``
    (the fair share of the use, total / partitions).  A TOML table works too."""
    if text is None:
        return (None, None, None)
    what = "--partition-capacity"
    example = "expected cpu=X,mem=Y,net=Z (numbers > 0, any subset), e.g. cpu=5000,mem=200"
    items = list(text.items()) if isinstance(text, dict) else [x.partition("=")[::2] for x in str(text).split(",")]
    got: dict[str, float] = {}
    for key, value in items:
        key = str(key).strip()
        if key not in CAPACITY_RESOURCES:
            raise InputError(f"{what} {text!r}: unknown resource {key!r}; {example}")
        if key in got:
            raise InputError(f"{what} {text!r}: {key} given twice; {example}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise InputError(f"{what} {text!r}: {key}={value!r} is not a number; {example}") from None
        if not v > 0 or v == float("inf"):
            raise InputError(f"{what} {text!r}: {key} must be a finite number > 0; {example}")
        got[key] = v
    if not got:
        raise InputError(f"{what} {text!r}: {example}")
    return tuple(got.get(r) for r in CAPACITY_RESOURCES)


#: the Spark conf that chooses the record hand-off (engines/spark/handoff.py) and its values
#: the TOML keys of each engine emulation's own settings (a tuning of another policy drops them)
ENGINE_KEYS = {"flink": ("watermark_interval", "idleness"), "flink-sql": ("watermark_interval", "min_cleanup_interval"),
               "spark-ss": ("trigger", "trigger_files", "watermark_policy")}


def check_duration(value, what: str, example: str = '"250ms", "2s"') -> int:
    """A duration from a flag or the TOML in µs: a string with a unit (``0`` alone is fine);
    anything else is refused in one line naming ``what`` (with an ``example``)."""
    if isinstance(value, str) or (type(value) is int and value == 0):
        return parse_duration(value, what=what)
    raise InputError(f"bad {what} {value!r}: expected a string with a unit, e.g. {example}")


def min_cleanup_setting(flag: str | None, toml, policy_name: str) -> int:
    """``--min-cleanup-interval`` (or ``[run] min_cleanup_interval``, the flag first) in µs:
    Flink SQL's ``table.exec.interval-join.min-cleanup-interval``, default 0; a setting
    of ``flink-sql`` only (one line for another policy)."""
    value = flag if flag is not None else toml
    if value is None:
        return 0
    if policy_name != "flink-sql":
        raise InputError(f"--min-cleanup-interval: a setting of --policy flink-sql, not of {policy_name}")
    return check_duration(value, "min_cleanup_interval")


HANDOFF_CONF_KEY = "spark.streamjoin.handoff"
HANDOFF_MODES = ("auto", "files", "inline")
#: the Spark conf that chooses where results and metrics are made (engines/spark/sink.py) and its values
RESULTS_CONF_KEY = "spark.streamjoin.results"
RESULTS_MODES = ("auto", "driver", "executors")
#: the Spark conf that chooses the native path (engines/spark/native.py): auto | true | false
NATIVE_CONF_KEY = "spark.streamjoin.native"
#: the Spark conf that ships the package to the executors (engines/spark/ship.py): auto | true | false
SHIP_CONF_KEY = "spark.streamjoin.ship"
SHIP_MODES = ("auto", "true", "false")


#: a Hadoop URI: ``scheme:/...`` (``hdfs://nn/p``, ``file:/p`` as Spark prints it, ``hdfs:/p`` on
#: fs.defaultFS's name node); a scheme of two characters or more, so ``C:/x`` stays a local path
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


class OutURI(str):
    """An ``--out`` given as a Hadoop file system URI (``hdfs://nn/p``, ``s3a://b/p``,
    ``abfs://...``, ``file:///p``): written by ``run --engine spark`` through Hadoop's
    FileSystem API (pipelines/engines/spark/hadoop_out.py).  Joins names with ``/``
    and has a ``name`` and a ``parent``, as the outputs' paths do."""

    def __truediv__(self, name) -> OutURI:
        return OutURI(self.rstrip("/") + "/" + str(name))

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> OutURI:
        return OutURI(self.rstrip("/").rsplit("/", 1)[0])


def is_uri(out) -> bool:
    """Whether ``out`` is a URI (``scheme:/...``, ``scheme://...``), not a local path."""
    return isinstance(out, OutURI) or bool(_URI.match(str(out)))


def out_target(text: str) -> Path | OutURI:
    """``--out`` as given: an :class:`OutURI` for ``scheme:/...``, else a local path."""
    return OutURI(text) if _URI.match(text) else Path(text)


def check_uri_out(out, engine: str, command: str) -> None:
    """A URI ``--out`` is written by ``run --engine spark`` only (one line otherwise)."""
    if is_uri(out) and (engine != "spark" or command != "run"):
        raise InputError(f"--out {out}: a Hadoop file system URI is written by `run --engine spark` only "
                         f"(this is {command} on the {engine} engine); give a local directory")


def ship_mode(conf: Sequence[tuple[str, str]]) -> str:
    """``spark.streamjoin.ship`` in ``conf`` (engines/spark/ship.py), checked: auto, true or false."""
    mode = dict(conf).get(SHIP_CONF_KEY, "auto")
    if mode not in SHIP_MODES:
        raise InputError(f"--spark-conf {SHIP_CONF_KEY}={mode}: expected auto, true or false")
    return mode


def same_host(master: str) -> bool:
    """Whether every executor of ``master`` runs on the driver's machine
    (``local``, ``local[n]``, ``local-cluster[...]``)."""
    return master.startswith("local")


def results_mode(master: str, conf: Sequence[tuple[str, str]]) -> str:
    """``"driver"`` or ``"executors"``: where a Spark run's results are written
    and its metrics counted (docs/semantics.md, "Results on the executors").
    ``spark.streamjoin.results`` in ``conf`` decides; ``auto`` (the default)
    is ``executors`` when the executors are on other hosts, else ``driver``."""
    mode = dict(conf).get(RESULTS_CONF_KEY, "auto")
    if mode not in RESULTS_MODES:
        raise InputError(f"--spark-conf {RESULTS_CONF_KEY}={mode}: expected auto, driver or executors")
    if mode == "auto":
        return "driver" if same_host(master) else "executors"
    return mode


#: per kind of output (the command that writes it), the file that marks such a
#: directory, written last; its presence makes the directory safe to replace
#: by the same command -- and only by it
MARKERS = {"run": "report.json", "tune-buffer": "tune.json", "compare": "compare.json",
           "calibrate": "calibrate.json"}


def check_target(out: Path, kind: str = "run") -> None:
    """Refuse an ``--out`` that must not be replaced by command ``kind`` (see
    :class:`AtomicOutput`): a file, a foreign non-empty directory, or the
    output of another command (``run --out`` onto a ``tune-buffer`` output).

    Called when the configuration is resolved, so a bad ``--out`` fails before
    any work is done, and again just before staging.
    """
    out = Path(out)
    check_listing(out, kind, is_file=out.exists() and not out.is_dir(),
                  names=[p.name for p in out.iterdir()] if out.is_dir() else None)


def check_listing(out, kind: str, *, is_file: bool, names: list[str] | None) -> None:
    """:func:`check_target`'s rule over what a file system says of ``out``: a file
    (``is_file``), or the names the directory holds (``None``: absent)."""
    if is_file:
        raise InputError(f"{out}: output path exists and is not a directory")
    if not names or MARKERS[kind] in names:
        return
    for other, marker in MARKERS.items():
        if marker in names:
            raise InputError(f"{out}: holds a {other} output ({marker}), which {kind} would replace; "
                             f"choose another --out")
    raise InputError(f"{out}: output directory is not empty and is not a streamjoin output; choose another --out")


#: bytes the writability probe writes and syncs (a full file system fails it)
PROBE_BYTES = 4096


def check_writable(out: Path, *, into: bool = False) -> None:
    """Refuse an ``--out`` that cannot be written, before any input is read.

    The output is staged in ``out``'s parent and renamed into place (a
    nightly root, ``into=True``: staged and published inside ``out``), so
    that directory -- or, where it does not exist yet, the nearest existing
    one above it, where it would be created -- must take a new file.  The
    probe is an unnamed file (``O_TMPFILE``) where the file system supports
    one, else a dot-file removed at once; it writes and syncs
    :data:`PROBE_BYTES`, so a full file system fails too (as far as a small
    write can tell: one that fills up during the run still fails then).
    """
    out = Path(out)
    place = out if into else out.parent
    place = place if str(place) else Path(".")
    while not place.exists() and place != place.parent:
        place = place.parent
    if not place.is_dir():
        raise InputError(f"{out}: cannot write the output: {str(place)!r} is not a directory")
    try:
        _probe(place)
    except OSError as exc:
        raise InputError(f"{out}: cannot write the output: {str(place)!r} is not writable "
                         f"({exc.strerror or exc}); choose another --out") from None


def _probe(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600)
        named = None
    except (AttributeError, OSError) as exc:  # no O_TMPFILE here (other OS, some file systems)
        if isinstance(exc, OSError) and exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        named = directory / f".streamjoin-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(named, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, b"\0" * PROBE_BYTES)
        os.fsync(fd)
    finally:
        os.close(fd)
        if named is not None:
            named.unlink(missing_ok=True)
