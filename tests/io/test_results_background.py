"""The results written on a thread of their own (``io/results_file.BackgroundWrite``) while
``run`` computes its metrics and report (``jobs/run.py``): the same file as the writer on the
caller's thread, and a failure or an interrupt anywhere leaves no partial output -- the
writer is stopped and waited for before the staging directory is removed."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.cli import CMD
from helpers.faults import clean_env
from streamjoin.pipelines.io import output
from streamjoin.pipelines.io.results_file import BackgroundWrite, Stopped, write_row_groups

SENSORS = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"


@pytest.fixture(autouse=True)
def python_default_sigint():
    """SIGINT as a Python program's default: an earlier test (a SparkContext) may have left another handler."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _frames(n: int = 4, seed: int = 3) -> list[pl.DataFrame]:
    rng = np.random.default_rng(seed)
    return [pl.DataFrame({"a_row": rng.integers(0, 100, 7 + i), "emit_us": np.sort(rng.integers(0, 10**6, 7 + i)),
                          "s": [f"x{j % 3}" for j in range(7 + i)]}) for i in range(n)]


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("results-writer") and t.is_alive()]


def test_background_write_is_the_callers_writer_byte_for_byte(tmp_path):
    frames = _frames()
    with BackgroundWrite(tmp_path / "bg.parquet", lambda: iter(frames)) as bg:
        rows = bg.result()
    assert rows == write_row_groups(tmp_path / "fg.parquet", iter(frames)) == sum(f.height for f in frames)
    assert (tmp_path / "bg.parquet").read_bytes() == (tmp_path / "fg.parquet").read_bytes()
    assert bg.seconds is not None and bg.seconds > 0 and not _writer_threads()


def test_an_interrupt_in_the_block_stops_the_writer_after_its_frame_and_waits_for_it(tmp_path):
    frames, taken, release = _frames(5), [], threading.Event()

    def slow():   # the writer holds its second frame until released
        for i, f in enumerate(frames):
            taken.append(i)
            if i == 1:
                release.wait(10)
            yield f

    with pytest.raises(KeyboardInterrupt):
        with BackgroundWrite(tmp_path / "r.parquet", slow) as bg:
            while len(taken) < 2:
                time.sleep(0.001)
            threading.Timer(0.2, release.set).start()
            raise KeyboardInterrupt
    # waited for (the frame in hand was finished) and stopped there: no frame taken after it
    assert bg.future.done() and isinstance(bg.future.exception(), Stopped)
    assert taken == [0, 1] and not _writer_threads()


def _sensors_cfg(out: Path):
    from streamjoin.pipelines.config.settings import Flags, resolve

    return resolve(SENSORS, Flags(engine="local", out=str(out)))


def _assert_interrupted_run_left_nothing(tmp_path, monkeypatch, patches) -> None:
    """``run_job`` with ``patches`` ((module, name, value) each) is interrupted: no results writer was
    still running when its staging directory was removed, and nothing is left."""
    from streamjoin.pipelines.jobs import run as job

    real_abandon, at_abandon = output.abandon, []

    def abandon(staging):
        at_abandon.append([t.name for t in _writer_threads()])
        real_abandon(staging)

    for module, name, value in [*patches, (output, "abandon", abandon)]:
        monkeypatch.setattr(module, name, value)
    with pytest.raises(KeyboardInterrupt):
        job.run_job(_sensors_cfg(tmp_path / "o"))
    assert at_abandon == [[]], f"the staging directory was removed while the writer ran: {at_abandon}"
    assert not (tmp_path / "o").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]   # no staging, no lock left


def test_an_interrupt_during_the_metrics_while_the_writer_runs_publishes_nothing(tmp_path, monkeypatch):
    """Ctrl-C in the metrics stage while the results are being written: the run is interrupted,
    the writer is stopped and finished before the staging directory is removed, nothing is left."""
    from streamjoin.pipelines.jobs import run as job
    from streamjoin.pipelines.replay import results as results_mod

    real_groups = results_mod.emitted_row_groups
    started, release, taken = threading.Event(), threading.Event(), []

    def groups(*args, **kwargs):   # the run's real frames, in three slices, the writer held at the second
        for frame in real_groups(*args, **kwargs):
            step = -(-frame.height // 3)
            for c0 in range(0, frame.height, step):
                taken.append(c0)
                if len(taken) == 2:
                    started.set()
                    release.wait(10)
                yield frame.slice(c0, step)

    def interrupted_metrics(*args, **kwargs):
        assert started.wait(10), "the writer did not start before the metrics"
        threading.Timer(0.2, release.set).start()
        raise KeyboardInterrupt

    _assert_interrupted_run_left_nothing(tmp_path, monkeypatch, [(results_mod, "emitted_row_groups", groups),
                                                                 (job, "build_report", interrupted_metrics)])
    assert len(taken) == 2   # stopped after the frame in hand


def _plain_inputs(work: Path) -> list[str]:
    for name, shift in (("a", 0), ("b", 3)):
        pl.DataFrame({"ts": list(range(shift, 2000 + shift, 10)), "k": [i % 3 for i in range(200)]}) \
            .write_parquet(work / f"{name}.parquet")
    return ["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "ms", "--key", "k",
            "--out", "out", "--engine", "local"]


@pytest.mark.parametrize("previous", [False, True])
def test_a_failure_in_the_writer_thread_fails_the_run_with_its_own_error(tmp_path, previous):
    args = _plain_inputs(tmp_path)
    if previous:   # a complete earlier output stays as it was
        subprocess.run(CMD + args + ["--window", "15ms"], cwd=tmp_path, env=clean_env(), check=True,
                       capture_output=True, timeout=120)
    before = (tmp_path / "out" / "report.json").read_text() if previous else None
    proc = subprocess.run(CMD + args + ["--window", "16ms"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=clean_env(**{output.FAIL_ENV: "results"}))
    assert proc.returncode == 1, proc.stderr
    assert "injected failure at results" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if previous:
        assert (tmp_path / "out" / "report.json").read_text() == before
    else:
        assert not (tmp_path / "out").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")], "staging or lock left"


def test_a_stop_set_while_a_frame_is_written_takes_no_further_frame(tmp_path, monkeypatch):
    """``write_row_groups(..., stop=)``: a stop set while a row group is written ends the file
    before the next frame is built (a frame's gathers would only lengthen the wait, interrupts held)."""
    from streamjoin.pipelines.io.results_file import ResultsFile

    frames, taken, stop = _frames(3), [], threading.Event()
    real_write = ResultsFile.write

    def write(self, frame):   # the stop comes while this frame is written
        real_write(self, frame)
        stop.set()

    def lazy():
        for i, f in enumerate(frames):
            taken.append(i)
            yield f

    monkeypatch.setattr(ResultsFile, "write", write)
    with pytest.raises(Stopped):
        write_row_groups(tmp_path / "r.parquet", lazy(), stop=stop)
    assert taken == [0]


def test_an_interrupt_as_the_writer_starts_still_stops_it_before_the_staging_is_removed(tmp_path, monkeypatch):
    """A signal between the writer's start and its registration on the run's exit stack (the
    Python handler runs right after the thread started): the writer must still be stopped and
    waited for before the staging directory is removed."""
    import os

    from streamjoin.pipelines.io import results_file
    from streamjoin.pipelines.replay import results as results_mod

    real_groups, release = results_mod.emitted_row_groups, threading.Event()

    def groups(*args, **kwargs):   # the writer holds its first frame a moment
        release.wait(10)
        yield from real_groups(*args, **kwargs)

    class Interrupted(results_file.BackgroundWrite):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            threading.Timer(0.2, release.set).start()
            os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C: the thread runs, its __exit__ is not registered yet

    _assert_interrupted_run_left_nothing(tmp_path, monkeypatch, [(results_mod, "emitted_row_groups", groups),
                                                                 (results_file, "BackgroundWrite", Interrupted)])
