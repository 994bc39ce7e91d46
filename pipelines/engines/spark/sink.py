"""Results and metrics made on the executors (``spark.streamjoin.results=executors``).

On this path a ``none`` / ATR task does not send its combinations to the
driver.  After the kernel (:func:`~.kernels.join_streams`) it

* gives each combination its emission time and latency from its members'
  facts, as the driver's :func:`~.outcome.outcome_from` does (symmetric
  family: ``emit = arrival[last]``, latency 0; sorting: ``emit = max(member
  rel_us)``, latency ``emit - arrival[last]``);
* writes its emitted combinations as one Parquet part file,
  ``results.parquet/part-<task>.parquet`` in the run's staging directory
  (:func:`~streamjoin.pipelines.replay.results.results_frame`: the same
  columns, rows in results order within the file), to a temporary name
  renamed into place, so a task run twice leaves one file;
* returns a :class:`~streamjoin.pipelines.analysis.summary.ResultSummary`:
  counts, per-period counts, value counts of the latencies and of the
  required slacks (the tuning curve), duplicates among its own results.

The driver merges the summaries (:func:`~streamjoin.pipelines.analysis.summary.merge`)
and writes ``results.parquet/_SUCCESS`` when every task has written its
part; the run's atomic publish (SPEC §8) then publishes the directory with
the rest.  The part files go straight to ``--out``'s staging directory, so
the executors must see the driver's file system there (true of ``local*``
masters; on a cluster, ``--out`` on a file system every executor mounts;
a Hadoop URI ``--out`` is refused on this path, .hadoop_out).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ...analysis.summary import ResultSummary, summarise
from ...analysis.tuning import required_k_per_tuple, static_need
from ...io.output import RESULTS_COMPRESSION
from ...policies import INTERVAL_JOIN, MICROBATCH, SQL_INTERVAL_JOIN, SYMMETRIC
from ...replay.results import results_frame

#: the columns a task needs on this path besides the kernel's (per stream)
SINK_COLUMNS = ("a", "arrival", "rel_us", "T", "kneed", "payload")

SUCCESS = "_SUCCESS"


@dataclass(frozen=True)
class Sink:
    """What a task needs to summarise and write its results (pickled into the task)."""

    n: int
    family: str
    windows: tuple[int, ...]
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    upper: np.ndarray                 # occupied periods' bounds (analysis.metrics.occupied_periods)
    results_dir: str | None           # None: --no-results

    def finish(self, q: int, part: list[dict], out: dict) -> ResultSummary:
        """Summarise (and write) task ``q``'s combinations ``out`` (``r0..``,
        ``emitted``) of the partition's per-stream columns ``part``."""
        n = self.n
        rows = [np.asarray(out[f"r{k}"], dtype=np.int64) for k in range(n)]
        loc, last, emitted, emit_us, latency, need = combination_facts(self.family, self.windows, part, out)
        summary = summarise(rows, self.sizes, emitted, last, latency, need, self.upper)
        if self.results_dir is not None:
            sources = [SimpleNamespace(name=self.names[k], ts=part[k]["ts"], arrival=part[k]["arrival"],
                                       payload=part[k]["payload"]) for k in range(n)]
            numbers = [part[k]["row"] if "row" in part[k] else np.arange(len(part[k]["ts"])) for k in range(n)]
            frame = results_frame(sources, [x[emitted] for x in loc], emit_us[emitted], last[emitted],
                                  latency[emitted], row_numbers=numbers)
            if max(self.sizes, default=0) < 2**31:   # the driver path's row type (outcome_from)
                import polars as pl

                frame = frame.with_columns(pl.col(f"{name}_row").cast(pl.Int32) for name in self.names)
            write_part(Path(self.results_dir), q, frame)
        return summary


def combination_facts(family: str, windows, part: list[dict], out: dict):
    """Per combination of a task's kernel output ``out`` (``r0..``, ``emitted``) over the
    partition's per-stream columns ``part``: each member's position in ``part``
    (``loc``), the last member's arrival index, ``emitted``, the emission time,
    latency and required slack (symmetric: ``emit = arrival[last]``, latency 0,
    :func:`~streamjoin.pipelines.analysis.tuning.static_need`; sorting: ``emit = max(member
    rel_us)``, latency ``emit - arrival[last]``, the members' largest ``kneed``)."""
    n = len(part)
    rows = [np.asarray(out[f"r{k}"], dtype=np.int64) for k in range(n)]
    # the partition's rows of each stream ascend: a combination's member is found by its row
    loc = [np.searchsorted(part[k]["row"], rows[k]) if "row" in part[k] else rows[k] for k in range(n)]
    a = [np.asarray(part[k]["a"])[loc[k]].astype(np.int64) for k in range(n)]
    last = np.maximum.reduce(a) if n else np.empty(0, np.int64)
    arrival_last = np.maximum.reduce([part[k]["arrival"][loc[k]] for k in range(n)])
    emitted = np.asarray(out["emitted"], dtype=bool)
    ts = [part[k]["ts"][loc[k]] for k in range(n)]
    if family == SYMMETRIC:
        emit_us = arrival_last
        latency = np.zeros(len(last), np.int64)
        T_last = np.zeros(len(last), np.int64)
        for k in range(n):
            T_last = np.where(a[k] == last, part[k]["T"][loc[k]], T_last)
        need = static_need(ts, a, last, T_last, windows)
    else:
        emit_us = np.maximum.reduce([part[k]["rel_us"][loc[k]] for k in range(n)])
        latency = emit_us - arrival_last
        need = np.maximum.reduce([part[k]["kneed"][loc[k]] for k in range(n)])
    return loc, last, emitted, emit_us, latency, need


def write_part(directory: Path, q: int, frame) -> Path:
    """``frame`` as ``directory/part-<q>.parquet``: written to a temporary name,
    then renamed (a task attempt run again replaces its own part, whole)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"part-{q:05d}.parquet"
    tmp = directory / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        frame.write_parquet(tmp, compression=RESULTS_COMPRESSION)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def mark_complete(directory: Path) -> None:
    """``_SUCCESS`` in a results directory whose every part is written (Hadoop's marker)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SUCCESS).touch()


def unsupported(router: str, family: str, where) -> str | None:
    """Why this run's results cannot be made on the executors (None: they can)."""
    if router == "ctr":
        return "--router ctr (a CTR task's last hop lacks the other members' columns)"
    if family in (MICROBATCH, INTERVAL_JOIN, SQL_INTERVAL_JOIN):
        return "the spark-ss, flink and flink-sql emulations"
    if where is not None:
        return "--where (evaluated on the driver)"
    return None


def add_sink_columns(per: list[dict], arrival, payloads, replay, dec, f, family: str,
                     write: bool = True) -> list[dict]:
    """The per-stream columns :meth:`Sink.finish` reads, beside the kernel's
    (:func:`~.columns.kernel_inputs`): arrival index ``a``, ``arrival``, the
    payload (``write``: results are written), and per family the tuning facts (symmetric: the frontier ``T``
    at the tuple's arrival; sorting: its release time ``rel_us`` and required
    ``K``, :func:`~streamjoin.pipelines.analysis.tuning.required_k_per_tuple`)."""
    kneed = required_k_per_tuple(replay) if family != SYMMETRIC else None
    rel_us = np.asarray(f["rel_us"], dtype=np.int64) if family != SYMMETRIC else None
    for k, d in enumerate(per):
        pos = replay.index_of[k]
        d["a"] = pos
        d["arrival"] = np.asarray(arrival[k], dtype=np.int64)
        if family == SYMMETRIC:
            d["T"] = replay.T[pos]
        else:
            d["rel_us"], d["kneed"] = rel_us[pos], kneed[pos]
        if write:
            d["payload"] = payloads[k]
    return per
