"""The one publish protocol of ``pipelines/io/output.py`` (issue 22 items 2-3, issue 17).

In-process: publishing an existing directory is one exchange (or the
documented two-rename fallback) and leaves nothing beside it; every state a
kill can leave (staging, staging holding the previous version, trash without
the output, an old ``.old-*`` of earlier versions) is recovered by
:func:`recover`; the lock is re-entrant within a process and refuses another
process; a file is replaced through the same protocol.  Through the console
command: two plain runs on one ``--out`` -- the second exits 4 and does
nothing.  Interrupts (SIGINT, SIGTERM) before publishing exit 130 and say
nothing was published; after it, exit 0 and the summary says published; a
failing run with ``--log-format json`` ends with the summary event.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import weakref
from pathlib import Path

import polars as pl
import pytest

from streamjoin.pipelines.io import output
from streamjoin.pipelines.io.lock import LockedError, OutputLock, lock_of
from helpers.cli import CMD
from helpers.faults import clean_env, signal_and_resume, wait_stopped


def _version(path: Path, tag: str, marker: str = "report.json") -> Path:
    path.mkdir(parents=True)
    (path / marker).write_text(tag)
    (path / "data.txt").write_text(tag * 100)
    return path


def _tag(path: Path) -> str:
    return (path / "report.json").read_text()


def _beside(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name != target.name)


@pytest.mark.parametrize("no_exchange", [False, True], ids=["exchange", "two-renames"])
def test_commit_replaces_a_directory_in_place_and_leaves_nothing(tmp_path, monkeypatch, no_exchange):
    if no_exchange:
        monkeypatch.setenv(output.NO_EXCHANGE_ENV, "1")
    out = _version(tmp_path / "out", "old")
    staging = output.new_staging(out)
    (staging / "report.json").write_text("new")
    output.commit(staging, out)
    assert _tag(out) == "new" and not (out / "data.txt").exists()
    assert _beside(out) == []


def test_exchange_swaps_two_directories(tmp_path):
    a, b = _version(tmp_path / "a", "A"), _version(tmp_path / "b", "B")
    if not output.exchange(a, b):
        pytest.skip("this file system has no renameat2 exchange; the fallback is tested above")
    assert _tag(a) == "B" and _tag(b) == "A"


def test_first_publish_is_a_plain_rename(tmp_path):
    out = tmp_path / "sub" / "out"
    staging = output.new_staging(out)
    (staging / "report.json").write_text("new")
    output.commit(staging, out)
    assert _tag(out) == "new" and _beside(out) == []


def test_recover_removes_staging_and_keeps_the_output(tmp_path):
    out = _version(tmp_path / "out", "old")
    _version(tmp_path / ".out.staging-123-abcd", "half")  # killed before publishing
    _version(tmp_path / ".out.staging-456-abcd", "older")  # killed after the exchange: the previous version
    notes = output.recover(out, "report.json")
    assert _tag(out) == "old" and _beside(out) == []
    assert notes == ["removed .out.staging-123-abcd", "removed .out.staging-456-abcd"]


@pytest.mark.parametrize("left", [".out.trash-0001", ".out.old-0001"])
def test_recover_puts_back_a_version_stranded_between_two_renames(tmp_path, left):
    out = tmp_path / "out"
    _version(tmp_path / left, "old")  # killed between out -> trash and staging -> out
    _version(tmp_path / ".out.staging-1-x", "new")
    notes = output.recover(out, "report.json")
    assert _tag(out) == "old" and _beside(out) == []
    assert notes[0] == f"restored out from {left}"


def test_recover_does_not_restore_an_incomplete_version(tmp_path):
    out = tmp_path / "out"
    (tmp_path / ".out.trash-0001").mkdir()  # no marker: not a complete output
    assert output.recover(out, "report.json") == ["removed .out.trash-0001"]
    assert not out.exists() and _beside(out) == []


def test_recover_leaves_other_outputs_alone(tmp_path):
    out = _version(tmp_path / "out", "x")
    _version(tmp_path / ".out2.staging-1-x", "other")
    (tmp_path / ".out.lock").write_text("1\n")
    assert output.recover(out) == []
    assert _beside(out) == [".out.lock", ".out2.staging-1-x"]


def test_a_file_is_replaced_through_the_same_protocol(tmp_path):
    page = tmp_path / "report.html"
    page.write_text("old")
    (tmp_path / ".report.html.staging-9-dead").write_text("half")
    output.recover(page)
    output.write_file_atomic(page, "new")
    assert page.read_text() == "new" and _beside(page) == []


def test_the_lock_is_reentrant_in_a_process_and_refuses_another(tmp_path):
    out = tmp_path / "out"
    path = lock_of(out)
    assert path == tmp_path / ".out.lock"
    with OutputLock(path, "out"):
        with OutputLock(path, "out"):  # nested: the same process
            pass
        assert path.exists(), "the inner holder must not release the outer one's lock"
        probe = subprocess.run([sys.executable, "-c", (
            "from streamjoin.pipelines.io.lock import OutputLock, LockedError\n"
            f"try:\n    OutputLock({str(path)!r}, 'out').__enter__()\nexcept LockedError as e:\n    print(e)")],
            capture_output=True, text=True)
        assert "out is locked by another streamjoin run" in probe.stdout
    assert not path.exists()
    with OutputLock(path, "out"):
        pass


def test_atomic_output_publishes_or_leaves_the_previous_output(tmp_path):
    out = _version(tmp_path / "out", "old")
    with pytest.raises(RuntimeError):
        with output.AtomicOutput(out) as staging:
            (staging / "report.json").write_text("new")
            raise RuntimeError("the job failed")
    assert _tag(out) == "old" and _beside(out) == []
    with output.AtomicOutput(out) as staging:
        (staging / "report.json").write_text("new")
    assert _tag(out) == "new" and _beside(out) == []


def _python_code() -> None:
    """Any Python function: entering it lets Python run a pending signal handler."""


def test_an_interrupt_python_swallowed_is_raised_before_publishing(tmp_path, capsys):
    """An interrupt raised inside a weakref callback is dropped by Python; the commit still honours it."""
    out = _version(tmp_path / "out", "old")

    class Thing:
        pass

    with output.interrupt_guard():
        thing = Thing()
        ref = weakref.ref(thing, lambda _: (os.kill(os.getpid(), signal.SIGTERM), _python_code()))
        del thing  # the callback runs: the guard raises KeyboardInterrupt inside it, and Python drops it
        assert ref() is None
        staging = output.new_staging(out)
        (staging / "report.json").write_text("new")
        with pytest.raises(KeyboardInterrupt):
            output.commit(staging, out)
        output.abandon(staging)
    assert _tag(out) == "old" and _beside(out) == []
    assert "Exception ignored" not in capsys.readouterr().err


# ----------------------------------------------------------------------------
# two plain runs on one --out (issue 22 item 3)
# ----------------------------------------------------------------------------


def _inputs(root: Path) -> list[str]:
    for name in ("a", "b"):
        pl.DataFrame({"ts": list(range(0, 2000, 10)), "k": [i % 3 for i in range(200)]}).write_parquet(root / f"{name}.parquet")
    return ["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "ms", "--key", "k",
            "--window", "15ms", "--out", "out", "--engine", "local"]


def test_concurrent_plain_runs_one_exits_4_and_does_nothing(tmp_path):
    args = _inputs(tmp_path)
    first = subprocess.Popen(CMD + args + ["--log-format", "json"], cwd=tmp_path,
                             env=clean_env(STREAMJOIN_TEST_PAUSE_AT="staged"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_stopped(first), first.communicate()
        second = subprocess.run(CMD + args, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
        assert second.returncode == 4, second.stderr
        assert second.stderr.count("\n") == 1
        assert second.stderr.startswith("error: out is locked by another streamjoin run") and f"pid {first.pid}" in second.stderr
        # the refused run did nothing: only the first run's staging directory and lock
        names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out."))
        assert names[0] == ".out.lock" and len(names) == 2 and names[1].startswith(f".out.staging-{first.pid}-")
        signal_and_resume(first, signal.SIGCONT)
        stdout, stderr = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, stderr
    assert json.loads(stdout.splitlines()[-1])["exit_code"] == 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["emitted_results"] > 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))) == ["out"]


# ----------------------------------------------------------------------------
# interrupts and the summary (issue 22 item 7)
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("step, code", [("staged", 130), ("exchanged", 0), ("published", 0)])
def test_an_interrupt_before_publishing_exits_130_after_it_exits_0_and_says_so(tmp_path, step, code, sig):
    args = _inputs(tmp_path)
    assert subprocess.run(CMD + args, cwd=tmp_path, env=clean_env(), capture_output=True).returncode == 0
    before = (tmp_path / "out" / "report.json").read_text()
    proc = subprocess.Popen(CMD + args, cwd=tmp_path, env=clean_env(STREAMJOIN_TEST_PAUSE_AT=step),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_stopped(proc), proc.communicate()
        signal_and_resume(proc, sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, stderr
    after = (tmp_path / "out" / "report.json").read_text()
    if code == 130:  # the signal wins: nothing published, and the last line says so
        assert after == before and stderr.splitlines()[-1] == "error: interrupted; nothing was published"
        assert "published:" not in stdout
    else:  # published means done: exit 0, and the summary's last line says so
        assert after != before and stdout.splitlines()[-1] == "published: out (exit 0)"
        assert "error" not in stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


def test_json_log_of_a_failing_plain_run_ends_with_a_summary_event(tmp_path):
    args = _inputs(tmp_path)
    args[args.index("k")] = "nope"  # a key column the inputs do not have
    proc = subprocess.run(CMD + args + ["--log-format", "json"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["event"] for e in events][-2:] == ["error", "summary"]
    assert events[-1]["exit_code"] == 2 and events[-1]["status"] == "failed" and "nope" in events[-2]["message"]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert not (tmp_path / "out").exists()
