"""What a person sees when `streamjoin run` uses the Spark engine (issue 16):
Spark's own output stays out of the terminal and of cron's stderr (it goes to
a log file, engines/spark/session.py), the progress bar names the running
stage, Ctrl-C prints one line, and the default engine says once that
``--engine local`` is faster for inputs that fit one machine.

Real Spark (local mode) in a real subprocess; the soccer sample (212k tuples)
keeps the JVM busy long enough for a Ctrl-C to land inside the Spark work.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.cli import CMD, cli_env, run_tty

from streamjoin.pipelines.engines.spark.session import SPARK_LOG_ENV, spark_log

ROOT = Path(__file__).resolve().parents[2]
SOCCER = str(ROOT / "samples" / "soccer" / "soccer.toml")
SENSORS = str(ROOT / "samples" / "sensors" / "sensors.toml")
#: what Spark and the JVM print when nothing catches it (seen on every run before the fix)
SPARK_NOISE = ("WARN", "log4j", "NativeCodeLoader", "incubator", "Setting default log level", "py4j", "Traceback",
               "SparkContext", "Stage ")


def _noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(n in line for n in SPARK_NOISE)]


def test_spark_output_goes_to_the_log_not_to_cron_stderr(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    env = {**cli_env(), SPARK_LOG_ENV: str(log)}
    proc = subprocess.run(CMD + ["run", SENSORS, "--engine", "spark", "--master", "local[2]", "--out",
                                 str(tmp_path / "out")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    # cron: the stage lines and nothing else on stderr
    assert proc.stderr.splitlines() == [line for line in proc.stderr.splitlines()
                                        if line.startswith("streamjoin: stage ")], proc.stderr
    assert [line.split()[2] for line in proc.stderr.splitlines()] == ["load", "join", "metrics", "write"]
    assert not _noise(proc.stdout), proc.stdout
    assert log.stat().st_size > 0  # the JVM did write: to the log


def test_ctrl_c_during_the_spark_join_prints_one_line(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    env = {**cli_env(), SPARK_LOG_ENV: str(log)}
    proc = subprocess.Popen(CMD + ["run", SOCCER, "--engine", "spark", "--master", "local[2]", "--out",
                                   str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 120
    while not (log.exists() and log.stat().st_size > 0):  # the JVM has started and written to its log
        assert proc.poll() is None and time.monotonic() < deadline, "Spark never started"
        time.sleep(0.2)
    time.sleep(2.0)  # inside the warm-up or the join: the soccer join takes several seconds on Spark
    assert proc.poll() is None, "the run ended before the interrupt; the test needs a longer input"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    lines = [line for line in err.splitlines() if not line.startswith("streamjoin: stage ")]
    assert lines == ["error: interrupted; nothing was published"], err
    assert not _noise(out)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark.log"]  # no staging left beside --out


def test_terminal_run_names_the_stage_and_shows_no_spark_output(tmp_path: Path) -> None:
    env = cli_env()
    env.pop("STREAMJOIN_ENGINE", None)  # the default engine: Spark
    code, screen = run_tty(["run", SENSORS, "--master", "local[2]", "--out", str(tmp_path / "out")], tmp_path,
                           columns=120, env=env, screen=False)
    assert code == 0, screen
    captions = [line.split("...")[0].strip() for line in screen.splitlines() if "..." in line]
    # the bar names the stage that is running, in order (it used to say "load done" through the join)
    # (a short stage may finish between two redraws of the bar: the order is checked, not that each showed)
    expected = ["load", "join on Spark (local[2])", "metrics", "write"]
    seen = list(dict.fromkeys(captions))
    assert "join on Spark (local[2])" in seen and seen == [c for c in expected if c in seen], captions
    assert not any(line.strip().startswith(("load done", "join done")) for line in screen.splitlines())
    assert not _noise(screen), _noise(screen)
    hints = [line for line in screen.splitlines() if "--engine local" in line]
    assert len(hints) == 1 and "same answer faster" in hints[0], screen


def test_no_hint_when_the_engine_was_chosen(tmp_path: Path) -> None:
    code, screen = run_tty(["run", SENSORS, "--engine", "spark", "--master", "local[2]", "--out",
                            str(tmp_path / "out")], tmp_path, columns=120, screen=False)
    assert code == 0, screen
    assert "--engine local" not in screen
    assert not _noise(screen), _noise(screen)


def test_spark_log_is_removed_after_a_clean_session_and_kept_and_named_after_a_failure(monkeypatch) -> None:
    monkeypatch.delenv(SPARK_LOG_ENV, raising=False)
    with spark_log() as path:
        assert path.exists()
    assert not path.exists()
    with pytest.raises(RuntimeError) as failed:
        with spark_log() as path:
            raise RuntimeError("boom")
    assert path.exists()
    assert f"Spark's log: {path}" in failed.value.__notes__
    os.unlink(path)
