"""Nightly runs and backfills (issue 6), mostly through the real console command.

Two consecutive daily runs == one continuous replay over both days; reruns
are no-ops; changed inputs rerun; SIGKILL during the write keeps the old
partition; a concurrent run is refused (exit 4); every exit code; JSON logs;
plan and validate; partitions readable by polars and Spark with the
manifest's counts.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from streamjoin.pipelines.nightly import manifest as mf
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.nightly.daily import compute_days
from streamjoin.pipelines.tools.nightly_sample import generate_nightly
from streamjoin.pipelines.nightly.partitions import load_days
from helpers.faults import clean_env, signal_and_resume, wait_stopped

D1, D2, D3 = dt.date(2026, 11, 20), dt.date(2026, 11, 21), dt.date(2026, 11, 22)
LOOKBACK = "1h"
LOOKBACK_US = 3_600_000_000


def _command() -> list[str]:
    script = Path(sys.executable).with_name("streamjoin")
    return [str(script)] if script.exists() else [sys.executable, "-m", "streamjoin.cli.main"]


CMD = _command()


def cli(args, cwd, *, env=None, timeout=120) -> subprocess.CompletedProcess:
    e = clean_env(**(env or {}))
    proc = subprocess.run(CMD + [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nightly")
    generate_nightly(root / "data", days=3, sensors=4, seed=11)
    return root


def make_config(root: Path, policy: str = "kslack", extra: str = "") -> Path:
    """A config in ``root`` reading the shared sample (absolute paths)."""
    data = root / "data" if (root / "data").is_dir() else root.parent / "data"
    slack = {"kslack": 'k = "2min"', "static": 'retention = "1min"',
             "spark-ss": 'watermark = "30s"\ntrigger = "1min"',
             "flink": 'watermark = "30s"\nwatermark_interval = "0ms"'}.get(policy, "")
    text = f"""
[run]
policy = "{policy}"
{slack}
out = "out"
lookback = "{LOOKBACK}"
{extra}
"""
    for name in ("temperature", "humidity"):
        text += f"""
[[stream]]
name = "{name}"
path = "{data}/{name}/date={{date}}/"
ts = "ts"
arrival = "arrival"
window = "15s"
keys = ["sensor_id"]
"""
    cfg = root / "nightly.toml"
    cfg.write_text(text)
    return cfg


@pytest.fixture
def job(data, tmp_path) -> Path:
    """A working directory beside the shared data, with a kslack config."""
    work = data / f"w-{tmp_path.name}"
    work.mkdir()
    make_config(work, "kslack")
    return work


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc


def part(work: Path, day: dt.date) -> Path:
    return work / "out" / f"date={day.isoformat()}"


def manifest(work: Path, day: dt.date) -> dict:
    return json.loads((part(work, day) / "_manifest.json").read_text())


# ----------------------------------------------------------------------------
# midnight: two daily runs == one run over both days
# ----------------------------------------------------------------------------


def _daily_vs_continuous(work: Path, cfg_path: Path, policy: str) -> list[pl.DataFrame]:
    cfg = resolve(cfg_path, Flags(), check_out=False)
    continuous = compute_days(cfg, load_days(list(cfg.streams), [D2, D3], LOOKBACK_US))
    union = []
    for day in (D2, D3):
        published = pl.read_parquet(part(work, day) / "results.parquet")
        m = manifest(work, day)
        assert m["counts"]["results"] == published.height
        if policy == "mpkslack":  # K depends on older history: never claim what is not true
            if not published.equals(continuous[day].results):
                assert m["exactness"]["certified"] is False
        else:
            assert published.equals(continuous[day].results), f"{policy} {day}: daily partition != continuous replay"
            assert m["exactness"]["certified"] is True
        union.append(published)
    return union


def test_two_daily_runs_equal_one_run_over_both_days(data):
    """Through the console command, kslack (results emitted after midnight move to the next day)."""
    work = data / "mid-kslack"
    work.mkdir()
    cfg_path = make_config(work, "kslack")
    for day in (D2, D3):  # D2 reads D1's tail, D3 reads D2's tail
        ok(cli(["run", cfg_path, "--date", day], work))
    both = pl.concat(_daily_vs_continuous(work, cfg_path, "kslack"))
    ids = ["temperature_date", "temperature_row", "humidity_date", "humidity_row"]
    assert both.select(ids).n_unique() == both.height, "a combination published twice"
    # the midnight is really exercised: pairs whose members come from different days,
    # and pairs that arrived before midnight but were emitted after it
    assert both.filter(pl.col("temperature_date") != pl.col("humidity_date")).height > 0
    assert manifest(work, D3)["counts"]["carried_in"] > 0
    # and `run --from/--to` publishes the same partitions
    ok(cli(["run", cfg_path, "--from", D2, "--to", D3, "--out", "out2"], work))
    for day in (D2, D3):
        again = pl.read_parquet(work / "out2" / f"date={day}" / "results.parquet")
        assert again.equals(pl.read_parquet(part(work, day) / "results.parquet"))


@pytest.mark.parametrize("policy", ["static", "none", "mpkslack", "spark-ss"])
def test_daily_runs_per_policy(data, policy, monkeypatch, capsys):
    """The same, in-process (same code path as the command, without process start-up)."""
    from streamjoin.pipelines.nightly.backfill import cli_run, nightly_options

    work = data / f"mid-{policy}"
    work.mkdir()
    cfg_path = make_config(work, policy)
    monkeypatch.chdir(work)
    for day in (D2, D3):
        assert cli_run(cfg_path, Flags(), nightly_options(cfg_path, date=str(day)), "test") == 0
    _daily_vs_continuous(work, cfg_path, policy)


# ----------------------------------------------------------------------------
# idempotency and change detection
# ----------------------------------------------------------------------------


def test_rerun_is_a_noop_and_force_redoes(job):
    ok(cli(["run", "nightly.toml", "--date", D2], job))
    before = (part(job, D2) / "_manifest.json").stat().st_mtime_ns
    proc = ok(cli(["run", "nightly.toml", "--date", D2], job))
    assert "status=up-to-date" in proc.stdout and "nothing to do" in proc.stdout
    assert (part(job, D2) / "_manifest.json").stat().st_mtime_ns == before
    proc = ok(cli(["run", "nightly.toml", "--date", D2, "--force"], job))
    assert "status=published" in proc.stdout
    assert (part(job, D2) / "_manifest.json").stat().st_mtime_ns != before


def own_inputs(data: Path, job: Path) -> Path:
    """A private copy of the inputs the test may modify, and a config reading it."""
    own = job / "data"
    for name in ("temperature", "humidity"):
        for src in (data / "data" / name).rglob("*.parquet"):
            dst = own / name / src.parent.name / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    make_config(job, "kslack")
    return own


def test_changed_input_triggers_rerun(data, job):
    own = own_inputs(data, job)
    ok(cli(["run", "nightly.toml", "--date", D2], job))
    target = own / "humidity" / f"date={D2}" / "part-0.parquet"
    # touched only (same bytes, new mtime): still up to date
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert "status=up-to-date" in ok(cli(["run", "nightly.toml", "--date", D2], job)).stdout
    # changed content: plan says stale, the run redoes the partition
    pl.read_parquet(target).with_columns(pl.col("value") + 1.0).write_parquet(target)
    plan = ok(cli(["backfill", "nightly.toml", "--from", D2, "--to", D2, "--plan"], job)).stdout
    assert "status=stale" in plan and "input changed" in plan and "part-0.parquet" in plan
    proc = ok(cli(["run", "nightly.toml", "--date", D2], job))
    assert "status=published" in proc.stdout and "input changed" in proc.stdout
    published = pl.read_parquet(part(job, D2) / "results.parquet")
    assert published.height == manifest(job, D2)["counts"]["results"]
    # a changed lookback partition (yesterday's tail) also makes today stale
    late = own / "temperature" / f"date={D1}" / "part-0.parquet"
    pq.write_table(pq.read_table(late), late, compression="snappy")
    assert "status=stale" in ok(cli(["backfill", "nightly.toml", "--from", D2, "--to", D2, "--plan"], job)).stdout


@pytest.mark.parametrize("how", ["replaced", "rewritten"])
def test_input_changed_while_the_day_is_read_fails_the_day(data, job, how):
    """Issue 22 item 1: the manifest records what was read, or the day fails (exit 2)."""
    own = own_inputs(data, job)
    target = own / "humidity" / f"date={D2}" / "part-0.parquet"
    proc = subprocess.Popen(CMD + ["run", "nightly.toml", "--date", str(D2), "--log-format", "json"], cwd=job,
                            env=clean_env(STREAMJOIN_TEST_PAUSE_AT="loaded"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_stopped(proc), proc.communicate()
        smaller = pl.read_parquet(target).head(300)  # the day's file changes while the run holds the old rows
        if how == "replaced":  # a new file renamed over the old one (a new inode)
            smaller.write_parquet(target.with_name("new.tmp"))
            os.replace(target.with_name("new.tmp"), target)
        else:  # the same file rewritten in place
            smaller.write_parquet(target)
        signal_and_resume(proc, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2, stderr
    assert f"{target}: input file changed while the day was being read" in stderr
    assert len([line for line in stderr.splitlines() if line.startswith("error: ")]) == 1
    assert json.loads(stdout.splitlines()[-1])["exit_code"] == 2
    assert not part(job, D2).exists() and not list((job / "out").glob(".date=*"))
    # the next run reads the new file, and its manifest records exactly that file
    ok(cli(["run", "nightly.toml", "--date", D2], job))
    m = manifest(job, D2)
    entry = next(e for e in m["inputs"] if e["path"] == str(target))
    assert entry["sha256"] == mf.sha256_file(target) and entry["size"] == target.stat().st_size
    cfg = resolve(job / "nightly.toml", Flags(), check_out=False)
    expected = compute_days(cfg, load_days(list(cfg.streams), [D2], LOOKBACK_US))[D2].results
    assert m["counts"]["results"] == expected.height
    assert pl.read_parquet(part(job, D2) / "results.parquet").equals(expected)
    assert "status=up-to-date" in ok(cli(["run", "nightly.toml", "--date", D2], job)).stdout


# ----------------------------------------------------------------------------
# crashes and concurrency
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["staged", "exchanged"])
def test_sigkill_during_write_leaves_a_whole_partition(job, point):
    ok(cli(["run", "nightly.toml", "--date", D2], job))
    old = (part(job, D2) / "_manifest.json").read_text()
    env = clean_env(STREAMJOIN_TEST_PAUSE_AT=point)
    proc = subprocess.Popen(CMD + ["run", "nightly.toml", "--date", str(D2), "--force"], cwd=job, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_stopped(proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (part(job, D2) / "_SUCCESS").is_file()
    now = (part(job, D2) / "_manifest.json").read_text()
    if point == "staged":
        assert now == old, "the old partition must be untouched"
    else:
        assert now != old and json.loads(now)["date"] == str(D2), "the new partition must be whole"
    assert list((job / "out").glob(f".date={D2}.staging-*")), "the killed run left its staging directory"
    proc = ok(cli(["run", "nightly.toml", "--date", D2, "--force"], job))
    assert "left by an interrupted run" in proc.stderr
    assert not list((job / "out").glob(f".date={D2}.staging-*"))
    assert pl.read_parquet(part(job, D2) / "results.parquet").height == manifest(job, D2)["counts"]["results"]


def test_concurrent_run_is_refused_with_exit_4(job):
    env = clean_env(STREAMJOIN_TEST_PAUSE_AT="staged")
    holder = subprocess.Popen(CMD + ["run", "nightly.toml", "--date", str(D2)], cwd=job, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_stopped(holder)
        proc = cli(["run", "nightly.toml", "--date", D2], job)
        assert proc.returncode == 4, proc.stderr
        assert proc.stderr.count("\n") == 1 and "locked by another streamjoin run" in proc.stderr
        assert f"pid {holder.pid}" in proc.stderr
        # a range with one locked day: the other day still runs, exit 4
        proc = cli(["run", "nightly.toml", "--from", D2, "--to", D3], job)
        assert proc.returncode == 4
        assert (part(job, D3) / "_SUCCESS").is_file()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not part(job, D2).exists()
    ok(cli(["run", "nightly.toml", "--date", D2], job))  # the kernel dropped the dead run's lock


# ----------------------------------------------------------------------------
# exit codes, logs, plan, validate
# ----------------------------------------------------------------------------


def test_every_exit_code(job):
    assert cli(["run", "nightly.toml", "--date", D2], job).returncode == 0
    # 1: an internal failure while writing; nothing published, next run fine
    proc = cli(["run", "nightly.toml", "--date", D3], job, env={"STREAMJOIN_TEST_FAIL_AT": "staged"})
    assert proc.returncode == 1 and "internal failure" in proc.stderr
    assert not part(job, D3).exists() and not list((job / "out").glob(".date=*.staging-*"))
    # 2: usage and bad input
    for args in (["--date", "2026-13-01"], ["--date", "2026-11-25"]):
        proc = cli(["run", "nightly.toml", *args], job)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    # 3: recall target missed, but only with --fail-under-target (the partition is published)
    assert cli(["run", "nightly.toml", "--date", D3, "--recall", "0.99999"], job).returncode == 0
    proc = cli(["run", "nightly.toml", "--date", D3, "--recall", "0.99999", "--fail-under-target"], job)
    assert proc.returncode == 3 and "recall below target" in proc.stdout
    # 3 also for a plain (non-nightly) run
    proc = cli(["run", "nightly.toml", "--stream", f"temperature={job.parent}/data/temperature/date={D2}",
                "--stream", f"humidity={job.parent}/data/humidity/date={D2}", "--out", "plain", "--policy", "none",
                "--recall", "0.99999", "--fail-under-target"], job)
    assert proc.returncode == 3, proc.stderr
    # 4: see test_concurrent_run_is_refused_with_exit_4; documented in --help
    help_text = cli(["run", "--help"], job).stdout
    for code in ("0 ok", "1 failure", "2 usage", "3 recall target missed", "4 locked"):
        assert code in " ".join(help_text.split()), code


def test_json_logs_one_line_per_stage_and_a_summary(job):
    proc = ok(cli(["run", "nightly.toml", "--from", D2, "--to", D3, "--log-format", "json"], job))
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    stages = [(e["date"], e["stage"]) for e in events if e["event"] == "stage"]
    for day in (D2, D3):
        assert [s for d, s in stages if d == str(day)] == ["load", "join", "write", "publish"]
    assert events[-1]["event"] == "summary" and events[-1]["exit_code"] == 0 and events[-1]["published"] == 2
    proc = ok(cli(["run", "nightly.toml", "--date", D2, "--log-format", "json"], job))
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["status"] for e in events if e["event"] == "day"] == ["up-to-date"]
    # the TOML can say it too (config covers the command line)
    make_config(job, "kslack", extra='log_format = "json"\ndate = "2026-11-21"')
    events = [json.loads(line) for line in ok(cli(["run", "nightly.toml"], job)).stdout.splitlines()]
    assert events[-1]["event"] == "summary" and events[-1]["up_to_date"] == 1
    # a plain run with --log-format json: stage lines and a summary, all JSON
    proc = ok(cli(["run", "--stream", f"a={job.parent}/data/temperature/date={D2}", "--stream",
                   f"b={job.parent}/data/humidity/date={D2}", "--arrival", "arrival", "--key", "sensor_id",
                   "--window", "15s", "--out", "plain", "--log-format", "json"], job))
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[-1]["event"] == "summary" and any(e["event"] == "stage" for e in events)


def test_backfill_plan_lists_missing_stale_up_to_date(job):
    ok(cli(["run", "nightly.toml", "--date", D2], job))
    proc = ok(cli(["backfill", "nightly.toml", "--from", D1, "--to", "2026-11-23", "--plan"], job))
    lines = {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith("plan ")}
    assert "status=missing" in lines[f"date={D1}"] and "action=run" in lines[f"date={D1}"]
    assert "status=up-to-date" in lines[f"date={D2}"] and "action=skip" in lines[f"date={D2}"]
    assert "status=no-input" in lines["date=2026-11-23"]
    assert not part(job, D1).exists(), "--plan must not run anything"
    make_config(job, "kslack", extra='fail_under_target = false\nrecall = 0.9')  # a config change
    assert "status=stale" in ok(cli(["backfill", "nightly.toml", "--from", D2, "--to", D2, "--plan"], job)).stdout
    proc = ok(cli(["backfill", "nightly.toml", "--from", D1, "--to", D3], job))
    assert "published=3" in proc.stdout


def test_validate_checks_without_running(job, tmp_path):
    proc = ok(cli(["validate", "nightly.toml"], job))
    assert "status=ok" in proc.stdout and "days=3" in proc.stdout
    assert not (job / "out").exists()
    bad = job / "bad.toml"
    bad.write_text((job / "nightly.toml").read_text().replace('ts = "ts"', 'ts = "event_time"', 1))
    proc = cli(["validate", "bad.toml", "--date", D2], job)
    assert proc.returncode == 2 and "missing column 'event_time'" in proc.stderr
    typo = job / "typo.toml"
    typo.write_text((job / "nightly.toml").read_text().replace("lookback", "lookbak"))
    assert cli(["validate", "typo.toml"], job).returncode == 2


def test_partition_cut_by_event_time_is_refused(job):
    src = job.parent / "data" / "temperature" / f"date={D2}" / "part-0.parquet"
    own = job / "t" / f"date={D2}"
    own.mkdir(parents=True)
    table = pq.read_table(src)
    shifted = pl.from_arrow(table).with_columns(pl.col("arrival") + pl.duration(days=1))
    shifted.write_parquet(own / "part-0.parquet")
    make_config(job, "kslack")
    text = (job / "nightly.toml").read_text().replace(f"{job.parent}/data/temperature/date={{date}}/", f"{job}/t/date={{date}}/")
    (job / "nightly.toml").write_text(text)
    proc = cli(["run", "nightly.toml", "--date", D2], job)
    assert proc.returncode == 2 and "outside 2026-11-21 UTC" in proc.stderr and "cut by arrival time" in proc.stderr


def test_out_root_must_be_partitions_only(job):
    (job / "out").mkdir()
    (job / "out" / "notes.txt").write_text("mine")
    proc = cli(["run", "nightly.toml", "--date", D2], job)
    assert proc.returncode == 2 and "not a partitioned streamjoin output" in proc.stderr


# ----------------------------------------------------------------------------
# readers: polars and Spark; the manifest's counts
# ----------------------------------------------------------------------------


def test_partition_readable_by_polars_and_spark(job):
    ok(cli(["run", "nightly.toml", "--from", D2, "--to", D3], job))
    counts = {day: manifest(job, day)["counts"]["results"] for day in (D2, D3)}
    for day in (D2, D3):
        frame = pl.read_parquet(part(job, day) / "results.parquet")
        assert frame.height == counts[day] > 0
        files = manifest(job, day)["files"]["results.parquet"]
        assert files["rows"] == counts[day] and files["sha256"] == mf.sha256_file(part(job, day) / "results.parquet")
    hive = pl.scan_parquet(str(job / "out" / "date=*" / "results.parquet"), hive_partitioning=True).collect()
    assert hive.height == sum(counts.values())

    import pyspark.sql as pyspark  # a hard dependency: never skipped
    spark = (pyspark.SparkSession.builder.master("local[2]").appName("streamjoin-test")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", "-Dlog4j2.rootLogger.level=ERROR").getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        one = spark.read.parquet(str(part(job, D2)))  # the partition directory itself
        assert one.count() == counts[D2]
        assert set(one.columns) == set(pl.read_parquet_schema(part(job, D2) / "results.parquet"))
        root = spark.read.parquet(str(job / "out"))  # the whole output: `date` becomes a column
        by_day = {str(r["date"]): r["count"] for r in root.groupBy("date").count().collect()}
        assert by_day == {str(D2): counts[D2], str(D3): counts[D3]}
    finally:
        spark.stop()


# ----------------------------------------------------------------------------
# issue 16: summaries that tell the truth, no lock files left, optional streams
# ----------------------------------------------------------------------------


def _summary(stdout: str) -> dict[str, str]:
    last = stdout.splitlines()[-1]
    assert last.startswith("summary "), stdout
    return dict(field.split("=", 1) for field in last.split()[1:])


def test_days_under_target_are_counted_without_fail_under_target(job):
    proc = ok(cli(["run", "nightly.toml", "--from", D2, "--to", D3, "--recall", "0.99999"], job))
    under = sum("(recall below target)" in line for line in proc.stdout.splitlines() if line.startswith("day "))
    assert under >= 1
    summary = _summary(proc.stdout)
    assert summary["target_missed"] == str(under) and summary["exit_code"] == "0"
    # the same days, now up to date, still count
    summary = _summary(ok(cli(["run", "nightly.toml", "--from", D2, "--to", D3, "--recall", "0.99999"], job)).stdout)
    assert summary["up_to_date"] == "2" and summary["target_missed"] == str(under)


def test_sigint_during_a_day_ends_with_a_summary_saying_130(job):
    env = clean_env(STREAMJOIN_TEST_PAUSE_AT="staged")
    proc = subprocess.Popen(CMD + ["run", "nightly.toml", "--from", str(D2), "--to", str(D3)], cwd=job, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_stopped(proc)
        signal_and_resume(proc, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    summary = _summary(stdout)
    assert summary["exit_code"] == "130" and summary["interrupted"] == "1" and summary["published"] == "0"
    out = job / "out"
    assert not part(job, D2).exists() and not part(job, D3).exists()  # D3 was not started
    assert sorted(p.name for p in out.iterdir()) == []  # no staging, no lock file


def test_no_lock_files_are_left_and_stale_ones_are_removed(job):
    out = job / "out"
    ok(cli(["run", "nightly.toml", "--date", D2], job))
    assert sorted(p.name for p in out.iterdir()) == [f"date={D2}"]
    # a day that is not written: no input partition (exit 2), an internal failure (exit 1)
    assert cli(["run", "nightly.toml", "--date", "2026-11-25"], job).returncode == 2
    assert cli(["run", "nightly.toml", "--date", D3], job, env={"STREAMJOIN_TEST_FAIL_AT": "staged"}).returncode == 1
    assert sorted(p.name for p in out.iterdir()) == [f"date={D2}"]
    # a lock file of a run that died (no holder) is removed by the next run, whatever its day
    (out / ".date=2026-11-25.lock").write_text("999999\n")
    proc = ok(cli(["run", "nightly.toml", "--date", D3], job))
    assert "removed .date=2026-11-25.lock (left by a run that died)" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"date={D2}", f"date={D3}"]


def test_lock_held_by_a_live_process_is_not_removed(job, tmp_path):
    from streamjoin.pipelines.io.lock import LockedError, OutputLock, remove_stale

    path = tmp_path / ".date=2026-11-21.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from streamjoin.pipelines.io.lock import OutputLock\n"
        f"with OutputLock({str(path)!r}, 'x'):\n    print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert remove_stale(path) is False and path.exists()
        with pytest.raises(LockedError):
            OutputLock(path, "x").__enter__()
    finally:
        holder.kill()
        holder.wait()
    assert remove_stale(path) is True and not path.exists()


def test_manifest_records_the_engine_that_ran(job):
    ok(cli(["run", "nightly.toml", "--date", D2], job, env={"STREAMJOIN_ENGINE": "spark"}))
    assert manifest(job, D2)["config"]["engine"] == "local"


@pytest.fixture
def gappy(tmp_path) -> Path:
    """Own copy of the data where humidity has no partition for D3."""
    generate_nightly(tmp_path / "data", days=3, sensors=4, seed=11)
    for f in (tmp_path / "data" / "humidity" / f"date={D3}").iterdir():
        f.unlink()
    (tmp_path / "data" / "humidity" / f"date={D3}").rmdir()
    make_config(tmp_path, "kslack")
    return tmp_path


def test_a_missing_partition_says_how_to_declare_an_optional_stream(gappy):
    proc = cli(["run", "nightly.toml", "--date", D3], gappy)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert proc.stderr.count("\n") == 1 and "'humidity'" in line
    assert "optional = true" in line and "--optional-stream NAME" in line


@pytest.mark.parametrize("how", ["flag", "toml"])
def test_an_optional_stream_replays_empty_on_a_day_without_partition(gappy, how):
    if how == "toml":
        text = (gappy / "nightly.toml").read_text()
        (gappy / "nightly.toml").write_text(text.rstrip() + "\noptional = true\n")  # the last [[stream]]: humidity
        args = []
    else:
        args = ["--optional-stream", "humidity"]
    proc = ok(cli(["run", "nightly.toml", "--from", D2, "--to", D3, *args], gappy))
    assert _summary(proc.stdout)["published"] == "2"
    m = manifest(gappy, D3)
    assert m["counts"]["streams"]["humidity"]["rows"] == 0
    assert m["counts"]["streams"]["temperature"]["rows"] > 0
    assert m["counts"]["truth"] == 0 == pq.read_metadata(part(gappy, D3) / "results.parquet").num_rows
    assert manifest(gappy, D2)["counts"]["results"] > 0
