"""``streamjoin run`` in bounded memory: survey -> chunks -> results streamed to Parquet.

The same outputs as :func:`streamjoin.pipelines.jobs.run.run_job` (report.json,
report.html, results.parquet, quarantine/), produced chunk by chunk by
:class:`~streamjoin.pipelines.engines.bounded.BoundedReplay`.  Everything is
written inside the staging directory of :class:`~streamjoin.pipelines.io.output.AtomicOutput`,
so an interrupted run still publishes nothing.

When it is used (``--chunk-rows``, TOML ``chunk_rows``):

* ``0`` -- never: the whole input in memory (fastest for inputs that fit);
* ``N > 0`` -- always, about ``N`` tuples per chunk;
* not given -- automatically for the local engine and the non-adaptive
  policies once the input holds more than :data:`AUTO_ROWS` rows (from the
  Parquet footers, before anything is read); the choice is
  :func:`.chunking.chunk_rows_for`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow.parquet as pq

from ..analysis import metrics
from ..io.chunks import Chunk, Survey, empty_stream, read_chunks, survey
from ..io.load import payload_needed
from ..config.settings import RunConfig, with_period
from ..engines.bounded import BoundedReplay
from ..engines.bounded_emulation import bounded_replay
from .chunking import AUTO_ROWS, DEFAULT_CHUNK_ROWS, chunk_rows_for  # noqa: F401  (re-exported)
from ..io.output import AtomicOutput
from ..io.results_file import ResultsFile
from ..replay.predicates import where_of
from ..replay.results import result_order
from ..report import json as report_json
from ..report.build import LATENCY_BINS, finish, report_body

def _prefetched(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """Read chunk ``j + 1`` on a second thread while chunk ``j`` is replayed
    (Parquet decoding releases the GIL)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(next, chunks, None)
        while True:
            chunk = future.result()
            if chunk is None:
                return
            future = pool.submit(next, chunks, None)
            yield chunk


def run_chunked_job(cfg: RunConfig, chunk_rows: int, *, command: str, stages, started: float,
                    on_chunk=None) -> dict[str, Any]:
    """The bounded-memory run (see the module docstring); returns the report."""
    from ..report import html as report_html

    with stages("load"):
        sv = survey(list(cfg.streams), chunk_rows, cfg.max_quarantine)
        if cfg.where:  # a bad --where fails before any work
            where_of(cfg, [empty_stream(s) for s in sv.streams])
        first, last = sv.arrival_span()
        cfg = with_period(cfg, 0 if first is None else last - first)  # the user's, or from the span
    row_bytes = [s.row_bytes for s in sv.streams]
    names = [s.config.name for s in sv.streams]
    with AtomicOutput(cfg.out) as staging:
        outputs: dict[str, str] = {}
        writer = (ResultsFile(staging / "results.parquet", lambda frame: result_order(frame, names))
                  if cfg.write_results else None)
        quarantine: dict[int, pq.ParquetWriter] = {}
        # spark-ss: a first pass over the time columns gives every micro-batch's watermark
        engine = bounded_replay(cfg, sv, writer.write if writer else None, row_bytes)
        try:
            report = _replay_all(cfg, command, sv, engine, stages, staging, quarantine, names, on_chunk)
        except BaseException:
            if writer is not None:
                writer.abort()
            for w in quarantine.values():
                w.close()
            raise
        with stages("write"):
            if writer is not None:
                writer.close(engine.empty_frame())
                outputs["results"] = str(cfg.out / "results.parquet")
            for i, w in quarantine.items():
                w.close()
                outputs[f"quarantine_{names[i]}"] = str(cfg.out / "quarantine" / f"{names[i]}.parquet")
            (staging / "report.html").write_text(report_html.render_report(report), encoding="utf-8")
            outputs["report_html"] = str(cfg.out / "report.html")
        finish(report, cfg.out, outputs, stages.timings, engine.timings, started, sv.rows)
        report_json.write(report, staging / "report.json")
    return report


def _replay_all(cfg, command, sv, engine, stages, staging, quarantine, names, on_chunk) -> dict[str, Any]:
    with stages("join"):
        for chunk in _prefetched(read_chunks(sv, payload=payload_needed(cfg))):
            for i, q in enumerate(chunk.quarantine):
                if q is not None and q.height:
                    table = q.to_arrow()
                    if i not in quarantine:
                        (staging / "quarantine").mkdir(exist_ok=True)
                        quarantine[i] = pq.ParquetWriter(staging / "quarantine" / f"{names[i]}.parquet", table.schema)
                    quarantine[i].write_table(table.cast(quarantine[i].schema))
            t0 = time.perf_counter()
            engine.on_chunk(chunk)
            if on_chunk is not None:
                on_chunk(chunk.index + 1, sv.chunks, time.perf_counter() - t0)
        engine.on_eof()
    with stages("metrics"):
        return chunked_report(cfg, command, sv, engine)


def chunked_report(cfg: RunConfig, command: str, sv: Survey, engine: BoundedReplay) -> dict[str, Any]:
    """The report of :func:`streamjoin.pipelines.jobs.run.build_report`, from the engine's sums."""

    acc = engine.acc
    N = sv.rows
    names = [s.config.name for s in sv.streams]
    streams = []
    for i, s in enumerate(sv.streams):
        span_s = (s.ts_max - s.ts_min) / 1e6 if s.rows else 0.0
        streams.append({
            "name": names[i],
            "rows": s.rows,
            "quarantined": s.quarantined,
            "rate_per_s": (s.rows / span_s) if span_s > 0 else None,
            "delay_us": acc.delays[i].quantiles([("p50", 0.5), ("p95", 0.95), ("max", 1.0)]),
            "dropped_late": acc.dropped[i],
            "expired_on_arrival": acc.expired[i],
        })
    outer = engine.outer_join() if hasattr(engine, "outer_join") else None
    if outer is not None:   # an outer join's null-padded rows, as the in-memory report counts them
        for entry, rows in zip(streams, outer[1]):
            entry["outer_rows"] = rows
    latency = {"mean": acc.latency.mean()}
    latency.update(acc.latency.quantiles([("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)]))
    if N:
        mem_t = {"peak": acc.mem_peak, "mean": acc.mem_sum / N}
        mem_b = {"peak": int(round(acc.bytes_peak)), "mean": acc.bytes_sum / N}
    else:
        mem_t, mem_b = {"peak": 0, "mean": 0.0}, {"peak": 0, "mean": 0.0}
    if cfg.period_us is None:  # a caller that did not resolve it: the engine did (from the survey)
        cfg = engine.cfg
    return report_body(
        cfg, command, streams=streams, truth=acc.truth, emitted=acc.emitted, duplicates=acc.duplicates,
        latency=latency, memory_tuples=mem_t, memory_bytes=mem_b, periods=_periods(engine, cfg),
        first=engine.first_arrival, last=engine.last_arrival,
        # the recall-target policies run in memory; the emulations report their settings
        policy={"policy_decisions": None, **({"policy_settings": engine.policy_settings()}
                                             if hasattr(engine, "policy_settings") else {})},
        probe_order=engine.probe_order.to_dict(names) if engine.probe_order else None,
        sections={
            "bounded": {
                "chunk_rows": sv.chunk_rows,
                "chunks": sv.chunks,
                "state_peak_tuples": acc.state_peak,
                "open_row_groups_peak": acc.open_pieces_peak,
                "row_groups": sum(len(s.pieces) for s in sv.streams),
                "chunk_seconds_max": max(acc.chunk_seconds, default=0.0),
            },
            "memory_series": engine.series(),
            "latency_histogram": acc.latency.histogram(LATENCY_BINS),
            # the tuning curve needs every result's required slack: `streamjoin tune-buffer` computes it
            "tuning": None,
            **({"outer_join": outer[0]} if outer is not None else {}),
        },
    )


def _periods(engine: BoundedReplay, cfg: RunConfig) -> list[dict[str, Any]]:
    """As :func:`streamjoin.pipelines.analysis.metrics.periods`: the periods that have truth."""
    if engine.first_arrival is None:
        return []
    acc = engine.acc
    return metrics.period_entries(engine.first_arrival, cfg.period_us, acc.period_ids, acc.period_truth,
                                  acc.period_emitted, cfg.recall_target)


__all__ = ["AUTO_ROWS", "DEFAULT_CHUNK_ROWS", "chunk_rows_for", "run_chunked_job"]
