"""Nightly runs and backfills: one output partition per day, safe to run from cron.

``streamjoin run CONFIG --date D`` / ``--from D1 --to D2`` and ``streamjoin
backfill CONFIG --from D1 --to D2 [--plan]`` come here.  Each day is an
independent unit of work:

1. take the partition's lock (:mod:`streamjoin.pipelines.io.lock`; held by another run -> exit 4);
2. clean what dead runs left (:func:`.publish.clean_leftovers`);
3. compare the published manifest with the inputs and config
   (:mod:`.manifest`): same -> a no-op that says so (``--force`` redoes it);
4. load the day plus the lookback (:mod:`.partitions`) -- its input files
   pinned before and checked after (a file changed meanwhile fails the day,
   exit 2; :mod:`.manifest`) -- replay, keep what was emitted during the day
   (:mod:`.daily`);
5. stage, validate, publish atomically (:mod:`.publish`).

Guarantees: a day is either published whole (``_SUCCESS``, manifest, results)
or left as it was; two runs of the same day never interleave; rerunning with
the same inputs and config changes nothing.  For a range every day is
attempted; the exit code is the most serious outcome, in the order
1 failure > 2 bad input > 4 locked > 3 recall target missed > 0.  Ctrl-C
(or SIGTERM) stops the range at the day in progress (nothing of it published) with exit
130, or -- landing once a day is published -- before the next day; the
summary line, always the last line, states the exit code the process ends
with.  Lock files of runs that died are removed first
(:func:`.publish.remove_stale_locks`).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from . import manifest as mf
from . import publish
from ..config.settings import RunConfig
from .daily import DayResult, compute_days
from .exactness import refusal as nightly_refusal
from ..base.errors import (EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_LOCKED, EXIT_OK, EXIT_TARGET_MISSED, EXIT_USAGE,
                           InputError, StreamjoinError)
from ..io.lock import OutputLock
from ..io.output import RESULTS_COMPRESSION, fault_point, interrupt_guard
from .partitions import available_days, inputs_of_days, load_days, missing_partition
from .runlog import RunLog
from .options import NightlyOptions, nightly_options  # noqa: F401  (nightly_options: re-exported)
from ..base.jit import build_seconds

#: smallest default lookback: covers frontier lag (stalls, slow streams) and
#: lets ``mpkslack`` learn K from an hour of delays
MIN_DEFAULT_LOOKBACK_US = 3_600_000_000

_SEVERITY = (EXIT_FAILURE, EXIT_USAGE, EXIT_LOCKED, EXIT_TARGET_MISSED)


def worst(codes: list[int]) -> int:
    for code in _SEVERITY:
        if code in codes:
            return code
    return max(codes, default=EXIT_OK)


def default_lookback(cfg: RunConfig) -> int:
    """``max(1h, 2 x (max window + max K, retention or watermark delay [+ trigger]))``
    (docs/semantics.md): spark-ss's state also lags by a micro-batch."""
    p = cfg.policy
    slack = [v for v in (p.k or ()) + (p.retention or ()) + (p.watermark or ()) if v is not None]
    need = 2 * (max(cfg.windows) + max(slack, default=0) + (p.trigger_us or 0))
    return max(MIN_DEFAULT_LOOKBACK_US, need)


def lookback_of(cfg: RunConfig, opts: NightlyOptions) -> int:
    return opts.lookback_us if opts.lookback_us is not None else default_lookback(cfg)


# ----------------------------------------------------------------------------
# plan
# ----------------------------------------------------------------------------


def day_status(cfg: RunConfig, day: dt.date, lookback_us: int, force: bool = False) -> tuple[str, str]:
    """``(status, reason)``: no-input | missing | stale | up-to-date | forced."""
    files, missing, _ = inputs_of_days(list(cfg.streams), [day], lookback_us)
    if missing:
        return "no-input", f"no input partition: {missing[0]}"
    h = mf.config_hash(cfg.to_dict(), lookback_us)
    status, reason = mf.compare(mf.read(publish.partition_dir(cfg.out, day)), files, h)
    if force and status == "up-to-date":
        return "forced", "--force"
    return status, reason


def plan(cfg: RunConfig, opts: NightlyOptions, log: RunLog) -> int:
    """``backfill --plan``: one line per day saying what a run would do (its
    :func:`day_status`), nothing run or written."""
    lookback = lookback_of(cfg, opts)
    counts: dict[str, int] = {}
    for day in opts.days:
        status, reason = day_status(cfg, day, lookback, opts.force)
        counts[status] = counts.get(status, 0) + 1
        would = "run" if status in ("missing", "stale", "forced") else ("skip" if status == "up-to-date" else "fail")
        log.record("plan", date=day.isoformat(), status=status, action=would, reason=reason)
    log.summary(EXIT_OK, command="plan", days=len(opts.days), **{k.replace("-", "_"): v for k, v in sorted(counts.items())})
    return EXIT_OK


# ----------------------------------------------------------------------------
# run
# ----------------------------------------------------------------------------


def _write_partition(cfg: RunConfig, day: dt.date, result: DayResult, staging: Path) -> dict[str, Any]:
    files: dict[str, Any] = {}
    if cfg.write_results:
        path = staging / "results.parquet"
        result.results.write_parquet(path, compression=RESULTS_COMPRESSION)
        files["results.parquet"] = {"rows": result.results.height, "bytes": path.stat().st_size,
                                    "sha256": mf.sha256_file(path)}
    for name, q in result.quarantine.items():
        qdir = staging / "_quarantine"
        qdir.mkdir(exist_ok=True)
        path = qdir / f"{name}.parquet"
        q.write_parquet(path)
        files[f"_quarantine/{name}.parquet"] = {"rows": q.height, "bytes": path.stat().st_size,
                                                "sha256": mf.sha256_file(path)}
    return files


def validate_staging(staging: Path, files: dict[str, Any], expected_results: int | None) -> None:
    """Re-read what was staged: every file readable, rows and hashes as recorded."""
    for rel, facts in files.items():
        path = staging / rel
        try:
            rows = pq.read_metadata(path).num_rows
        except Exception as exc:  # noqa: BLE001 - any reader failure means "do not publish"
            raise publish.PublishError(f"{path}: staged file is not readable Parquet ({exc}); nothing published") from None
        if rows != facts["rows"] or mf.sha256_file(path) != facts["sha256"]:
            raise publish.PublishError(f"{path}: staged file does not match what was written; nothing published")
    if expected_results is not None and files.get("results.parquet", {}).get("rows") != expected_results:
        raise publish.PublishError("staged results.parquet row count differs from the computed count; nothing published")


def _k_continuity(cfg: RunConfig, day: dt.date, result: DayResult) -> str | None:
    """mpkslack: does K at the day's start equal the previous day's final K?"""
    if cfg.policy.name != "mpkslack":
        return None
    prev = mf.read(publish.partition_dir(cfg.out, day - dt.timedelta(days=1)))
    if prev is None:
        return "unverified (no published previous day)"
    start = result.exactness.get("k_start_us", {})
    for name, state in prev.get("state_end", {}).items():
        if state.get("max_delay_us") != start.get(name):
            return f"differs for {name}: lookback learnt {start.get(name)} us, previous day ended with {state.get('max_delay_us')} us"
    return "ok"


def run_day(cfg: RunConfig, day: dt.date, opts: NightlyOptions, log: RunLog, command: str, tool_version: str) -> tuple[int, dict[str, Any]]:
    """One partition, start to finish; returns ``(exit code, facts for the summary)``."""
    lookback = lookback_of(cfg, opts)
    where = f"{cfg.out}/date={day.isoformat()}"
    iso = day.isoformat()
    with OutputLock(publish.lock_path(cfg.out, day), where):
        for note in publish.clean_leftovers(cfg.out, day):
            log.info(f"{iso}: {note} (left by an interrupted run)", date=iso)
        files, missing, _ = inputs_of_days(list(cfg.streams), [day], lookback)
        if missing:
            raise missing_partition(iso, missing[0])
        h = mf.config_hash(cfg.to_dict(), lookback)
        final = publish.partition_dir(cfg.out, day)
        old = mf.read(final)
        status, reason = mf.compare(old, files, h)
        if status == "up-to-date" and not opts.force:
            facts = {"date": iso, "status": "up-to-date", "reason": "same inputs and config; nothing to do (--force redoes it)",
                     "results": old["counts"]["results"], "recall": old["metrics"]["recall"]}
            return _target_code(cfg, opts, old["metrics"]["recall"]), facts
        t0 = time.perf_counter()
        pinned = mf.pin(files)  # what the manifest records must be what was read (manifest docstring)
        data = load_days(list(cfg.streams), [day], lookback, cfg.max_quarantine)
        fault_point("loaded")
        inputs = mf.describe_inputs(data.files, pinned, [p for s in data.streams for p in s.files])
        log.stage("load", time.perf_counter() - t0, date=iso, rows=sum(s.rows for s in data.streams))
        t0 = time.perf_counter()
        result = compute_days(cfg, data)[day]
        t1 = time.perf_counter()
        built = build_seconds(t0, t1)   # a first run's kernel build: apart, as report.json's timings_s.kernel_build
        log.stage("join", t1 - t0 - built, date=iso, results=result.counts["results"],
                  **({"kernel_build": round(built, 4)} if built else {}))
        result.metrics.update(period_us=cfg.period_us, period_source=cfg.period_source)
        exactness = dict(result.exactness)
        k_cont = _k_continuity(cfg, day, result)
        if k_cont is not None:
            exactness["k_continuity"] = k_cont
            exactness["certified"] = bool(exactness["certified"] and k_cont == "ok")
        if data.missing_lookback:
            exactness["missing_lookback"] = data.missing_lookback
        if not exactness["certified"]:
            log.warning(f"{iso}: results near midnight are not certified equal to a continuous run "
                        f"(see _manifest.json exactness; a longer --lookback may help)", date=iso)
        t0 = time.perf_counter()
        staging = publish.new_staging(cfg.out, day)
        try:
            written = _write_partition(cfg, day, result, staging)
            validate_staging(staging, written, result.counts["results"] if cfg.write_results else None)
            doc = mf.build(day=day, tool_version=tool_version, config=cfg.to_dict(), cfg_hash=h, lookback_us=lookback,
                           inputs=inputs, files=written, counts=result.counts,
                           metrics=result.metrics, state_end=result.state_end, exactness=exactness, command=command)
            mf.write(doc, staging / mf.NAME)
            log.stage("write", time.perf_counter() - t0, date=iso)
            t0 = time.perf_counter()
            publish.commit(staging, cfg.out, day)
        except BaseException:
            publish.abandon(staging)
            raise
        log.stage("publish", time.perf_counter() - t0, date=iso)
    facts = {"date": iso, "status": "published", "reason": reason if status != "up-to-date" else "--force",
             "results": result.counts["results"], "truth": result.counts["truth"],
             "pending": result.counts["pending"], "recall": result.metrics["recall"],
             "certified": exactness["certified"], "path": str(final)}
    return _target_code(cfg, opts, result.metrics["recall"]), facts


def _below_target(cfg: RunConfig, recall: float | None) -> bool:
    return cfg.recall_target is not None and recall is not None and recall < cfg.recall_target


def _target_code(cfg: RunConfig, opts: NightlyOptions, recall: float) -> int:
    if opts.fail_under_target and _below_target(cfg, recall):
        return EXIT_TARGET_MISSED
    return EXIT_OK


def run_days(cfg: RunConfig, opts: NightlyOptions, log: RunLog, command: str, tool_version: str) -> int:
    """Every day of ``opts.days``; the summary (last line) states the exit code returned.

    Ctrl-C or SIGTERM (:class:`~streamjoin.pipelines.io.output.InterruptGuard`): a day
    interrupted before its partition is published is reported ``interrupted``
    (nothing of it published) and the range stops there, exit 130; one
    that lands once a day is published (or decided) stops the range before
    the next day -- or, after the last day, changes nothing: published work is
    reported as published, with the exit code of its outcome.
    """
    publish.check_root(cfg.out)
    for name in publish.remove_stale_locks(cfg.out):
        log.info(f"removed {name} (left by a run that died)")
    codes: list[int] = []
    published = skipped = under = 0
    with interrupt_guard() as guard:
        for day in opts.days:
            try:
                guard.arm()  # an interrupt held since the previous day was published stops the range here
                code, facts = run_day(cfg, day, opts, log, command, tool_version)
                guard.hold()  # the day is decided: report it
            except KeyboardInterrupt:
                guard.hold()
                code = EXIT_INTERRUPTED
                log.error("interrupted; nothing was published for the day in progress", code, date=day.isoformat())
                facts = {"date": day.isoformat(), "status": "interrupted", "reason": "interrupted (SIGINT or SIGTERM)"}
            except StreamjoinError as exc:
                guard.hold()
                code = exc.exit_code
                log.error(str(exc), code, date=day.isoformat())
                facts = {"date": day.isoformat(), "status": "locked" if code == EXIT_LOCKED else "failed", "reason": str(exc)}
            except Exception as exc:  # a bug or an OS error: this day fails (exit 1), the others still run
                guard.hold()
                code = EXIT_FAILURE
                message = " ".join(f"internal failure: {type(exc).__name__}: {exc}".split())
                log.error(message, code, date=day.isoformat())
                facts = {"date": day.isoformat(), "status": "failed", "reason": message}
            if _below_target(cfg, facts.get("recall")):  # counted with or without --fail-under-target
                under += 1
                facts["status"] += " (recall below target)"
            codes.append(code)
            published += facts["status"].startswith("published")
            skipped += facts["status"].startswith("up-to-date")
            log.record("day", **facts)
            if code == EXIT_INTERRUPTED:
                break
        code = EXIT_INTERRUPTED if EXIT_INTERRUPTED in codes else worst(codes)
        log.summary(code, **range_counts(len(opts.days), codes, published, skipped, under))
    return code


def range_counts(days: int, codes: list[int], published: int = 0, up_to_date: int = 0,
                 target_missed: int = 0) -> dict[str, int]:
    """The counts of a range's summary -- the same keys whether it ran to the end, stopped at a day, or was
    interrupted before its first day (:func:`_entry`: then ``interrupted`` is 1, nothing published)."""
    return dict(days=days, published=published, up_to_date=up_to_date,
                failed=sum(c in (EXIT_FAILURE, EXIT_USAGE) for c in codes), locked=codes.count(EXIT_LOCKED),
                target_missed=target_missed, interrupted=codes.count(EXIT_INTERRUPTED))


# ----------------------------------------------------------------------------
# validate
# ----------------------------------------------------------------------------


def validate(cfg: RunConfig, opts: NightlyOptions, log: RunLog) -> int:
    """Check config and inputs without running: partitions load, columns and types fit."""
    streams = list(cfg.streams)
    partitioned = any("{date}" in s.path for s in streams) or all(available_days(s) for s in streams)
    if not partitioned:
        from ..io.load import load_all
        from ..config.options import check_target

        check_target(cfg.out)
        for s in load_all(streams, cfg.max_quarantine):
            log.record("stream", name=s.name, rows=s.rows, quarantined=s.quarantine.height, files=len(s.files))
        log.summary(EXIT_OK, status="ok", partitioned=False)
        return EXIT_OK
    publish.check_root(cfg.out)
    days = opts.days
    if not days:
        sets = [set(available_days(s)) for s in streams]
        days = sorted(set.union(*sets))
        if not days:
            raise InputError(f"no date partitions found for stream {streams[0].name!r} under {streams[0].path}")
    for day in days:
        data = load_days(streams, [day], 0, cfg.max_quarantine)
        for s in data.streams:
            log.record("stream", date=day.isoformat(), name=s.name, rows=s.rows, quarantined=s.quarantine.height,
                       files=len(s.files))
    log.summary(EXIT_OK, status="ok", partitioned=True, days=len(days), first=days[0].isoformat(), last=days[-1].isoformat())
    return EXIT_OK


# ----------------------------------------------------------------------------
# entry points for the CLI (kept here so cli/ stays thin)
# ----------------------------------------------------------------------------


def nightly_period(cfg: RunConfig) -> RunConfig:
    """The recall period of a nightly job: the user's ``--period``, or the default
    for one day's replay (10min: 144 periods a day), the same for every day so
    that days compare -- never chosen from one day's data.

    Also the engine: a nightly day always replays on the local engine
    (:func:`.daily.run_join`), and its manifest says so."""
    from ..config.settings import replace, with_period
    from .partitions import DAY_US

    return with_period(replace(cfg, engine="local"), DAY_US - 1, over="1d")  # a day's arrivals lie in [D, D + 1d)


def _entry(config_path: Path | None, flags, opts: NightlyOptions, body, interrupted: dict[str, int] | None = None) -> int:
    """Resolve the config and run ``body``; an error or interrupt not handled there ends with its summary
    (``interrupted``: the counts that summary states, e.g. :func:`range_counts` of a range stopped before
    its first day -- resolving the config, removing stale locks)."""
    from ..config.settings import resolve

    log = RunLog(opts.log_format)
    with interrupt_guard() as guard:
        try:
            cfg = nightly_period(resolve(config_path, flags, check_out=False))
            refused = nightly_refusal(cfg.policy)
            if refused:
                raise InputError(refused)
            if cfg.flow_control is not None:
                raise InputError("--flow-control: nightly runs do not carry the units' buffers across days yet; "
                                 "run the whole range without --date / --from")
            if cfg.capacity is not None:
                raise InputError("--capacity: nightly runs (--date / --from) do not model capacity yet; "
                                 "run the whole range without --date / --from")
            return body(cfg, log)
        except StreamjoinError as exc:
            guard.hold()
            log.error(str(exc), exc.exit_code)
            log.summary(exc.exit_code, status="failed")
            return exc.exit_code
        except KeyboardInterrupt:
            guard.hold()
            log.error("interrupted; nothing was published for the day in progress", EXIT_INTERRUPTED)
            log.summary(EXIT_INTERRUPTED, status="interrupted", **(interrupted or {}))
            return EXIT_INTERRUPTED


def cli_run(config_path: Path | None, flags, opts: NightlyOptions, command: str, *, plan_only: bool = False) -> int:
    """``run --date/--from/--to`` and ``backfill``: exit code."""
    from ..base.version import tool_version

    if not opts.days:
        raise InputError("give --date D or --from D1 --to D2")
    if plan_only:
        return _entry(config_path, flags, opts, lambda cfg, log: plan(cfg, opts, log))
    return _entry(config_path, flags, opts, lambda cfg, log: run_days(cfg, opts, log, command, tool_version()),
                  interrupted=range_counts(len(opts.days), [EXIT_INTERRUPTED]))


def cli_validate(config_path: Path | None, flags, opts: NightlyOptions) -> int:
    return _entry(config_path, flags, opts, lambda cfg, log: validate(cfg, opts, log))
