"""Fault injection: kills and interrupts at random moments of ``run`` and ``backfill`` (issue 22).

Each trial starts the real console command on tiny inputs (local engine) over
a previous complete output, and sends SIGKILL, SIGTERM or SIGINT either at a
random moment of the run or -- deterministically -- while the process is
stopped at a named step of the publish protocol (``STREAMJOIN_TEST_PAUSE_AT``,
``pipelines/io/output.py``: after loading, in the results writer's thread
(``run``: the results are written while the metrics are computed), staged, after the exchange,
between the two renames of the fallback, after publishing).  After each trial:

* ``--out`` (each nightly partition) holds the previous complete output or
  the new complete one -- never nothing when something was there before (the
  one exception, the documented two-rename fallback killed between its
  renames, leaves the previous version in a trash directory that the next
  run must put back);
* the exit code agrees with the outcome and with the summary: exit 0 means
  the new output is published and the JSON summary says ``exit_code: 0``;
  130 means interrupted, and only what the summary counts as published is
  new (SIGTERM is an interrupt like SIGINT); a SIGKILL that lands after the
  summary line sets the exit status itself, but what the summary reports is
  on disk;
* at a pause step the outcome is the one the protocol promises (an interrupt
  before publishing: previous output, 130; after: new output, 0 -- or for a
  range, the next day not started);
* the next run exits 0, publishes, and leaves nothing beside the output
  (staging, trash, lock).

Trials run in parallel worker directories; :func:`plan` deals the moments
and signals so every pair is covered; ``STREAMJOIN_FAULT_SEED`` replays a
seed (printed with the trial on every failure).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from helpers.cli import CMD
from helpers import faults
from helpers.faults import clean_env, signal_and_resume, wait_stopped
from streamjoin.pipelines.io import output

TRIALS = int(os.environ.get("STREAMJOIN_FAULT_TRIALS", 50))  # per command
WORKERS = 2  # per command: four processes at a time in all
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
PUBLISH_STEPS = ("staged", "exchanged", "trashed", "published")
RUN_STEPS = ("results", *PUBLISH_STEPS)   # results: the writer's thread, while the metrics run (jobs/run.py)
NIGHTLY_STEPS = ("loaded", *PUBLISH_STEPS)
BEFORE_PUBLISHING = ("loaded", "results", "staged")
D1, D2, D3 = dt.date(2026, 11, 20), dt.date(2026, 11, 21), dt.date(2026, 11, 22)
DAY_US = 86_400_000_000
SEED = int(os.environ.get("STREAMJOIN_FAULT_SEED", time.time_ns() % 10**6))


# ----------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------


def _plain_inputs(work: Path) -> None:
    for name, shift in (("a", 0), ("b", 3)):
        pl.DataFrame({"ts": list(range(shift, 2000 + shift, 10)), "k": [i % 3 for i in range(200)]}) \
            .write_parquet(work / f"{name}.parquet")


def _nightly_inputs(root: Path) -> None:
    """Three days of two tiny streams partitioned by arrival day (200 rows a day each)."""
    epoch = dt.date(1970, 1, 1)
    for s, name in enumerate(("a", "b")):
        for day in (D1, D2, D3):
            start = (day - epoch).days * DAY_US
            ts = [start + i * 431_000_000 + s * 7_000_000 for i in range(200)]
            frame = pl.DataFrame({"ts": ts, "arrival": [t + 2_000_000 for t in ts], "k": [i % 3 for i in range(200)]})
            path = root / name / f"date={day}" / "part-0.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.with_columns(pl.col("ts", "arrival").cast(pl.Datetime("us"))).write_parquet(path)


def _nightly_config(work: Path, data: Path) -> None:
    text = '[run]\npolicy = "kslack"\nk = "1min"\nout = "out"\n'
    for name in ("a", "b"):
        text += (f'\n[[stream]]\nname = "{name}"\npath = "{data}/{name}/date={{date}}/"\nts = "ts"\n'
                 f'arrival = "arrival"\nwindow = "2min"\nkeys = ["k"]\n')
    (work / "nightly.toml").write_text(text)


# ----------------------------------------------------------------------------
# what is on disk
# ----------------------------------------------------------------------------


def run_output(work: Path) -> str | None:
    """report.json of ``work/out`` after checking the output is complete; None if there is none."""
    out = work / "out"
    if not out.exists():
        return None
    text = (out / "report.json").read_text()
    report = json.loads(text)
    assert pl.read_parquet(out / "results.parquet").height == report["emitted_results"]
    assert (out / "report.html").stat().st_size > 0
    return text


def nightly_output(work: Path) -> dict[dt.date, int | None]:
    """Per day: the lookback (us) of the run that published the partition, after checking it is complete."""
    state = {}
    for day in (D2, D3):
        part = work / "out" / f"date={day}"
        if not part.exists():
            state[day] = None
            continue
        assert (part / "_SUCCESS").is_file()
        m = json.loads((part / "_manifest.json").read_text())
        assert pl.read_parquet(part / "results.parquet").height == m["counts"]["results"]
        state[day] = m["lookback_us"]
    return state


def beside_run(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name.startswith(".out"))


def beside_nightly(work: Path) -> list[str]:
    out = work / "out"
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".")) if out.is_dir() else []


def summary_of(stdout: str) -> dict | None:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return next((e for e in reversed(events) if e["event"] == "summary"), None)


# ----------------------------------------------------------------------------
# one trial
# ----------------------------------------------------------------------------


@dataclass
class Trial:
    kind: str
    n: int
    sig: int
    step: str | None  # None: a random moment
    no_exchange: bool
    delay: float = 0.0
    code: int | None = None
    leftovers: int = 0
    recovered: bool = False

    def __str__(self) -> str:
        where = f"at step {self.step}" if self.step else f"after {self.delay:.3f}s"
        name = signal.Signals(self.sig).name if self.sig else "no signal"
        return (f"seed {SEED} {self.kind} trial {self.n}: {name} {where}"
                f"{' (two-rename fallback)' if self.no_exchange else ''} -> exit {self.code}")


def _args(kind: str, n: int) -> list[str]:
    if kind == "run":
        return ["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "ms", "--key", "k",
                "--window", f"{15 + n % 5}ms", "--out", "out", "--engine", "local", "--log-format", "json"]
    return ["backfill", "nightly.toml", "--from", str(D2), "--to", str(D3), "--lookback", f"{60 + n}min",
            "--log-format", "json"]


def _start(work: Path, args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(CMD + args, cwd=work, env=clean_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, what) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{what}: the process hung") from None


def _next_run(work: Path, kind: str, n: int, t: Trial) -> float:
    """The run after a trial: exit 0, recovers, leaves nothing beside the output; returns its duration."""
    t0 = time.monotonic()
    proc = _start(work, _args(kind, n))
    stdout, stderr = _finish(proc, t)
    took = time.monotonic() - t0
    summary = summary_of(stdout)
    assert summary is not None and summary["exit_code"] == 0, \
        f"{t}: the next run failed (exit {proc.returncode}, summary {summary}): {stderr[-800:]}"
    t.recovered = "left by an interrupted run" in stdout + stderr  # nightly: an info event of the JSON log
    if kind == "run":
        assert beside_run(work) == [], f"{t}: left beside --out after the next run: {beside_run(work)}"
        assert run_output(work) is not None
    else:
        assert beside_nightly(work) == [], f"{t}: left in --out after the next run: {beside_nightly(work)}"
        assert set(nightly_output(work).values()) == {(60 + n) * 60_000_000}
    return took


def _check_killed(t: Trial, summary: dict | None, stderr: str, unchanged: bool) -> None:
    """An exit status set by a signal: SIGKILL at any moment, SIGINT / SIGTERM only during Python's start-up."""
    if t.code == -signal.SIGINT:  # before streamjoin's handler is installed: Python's own traceback
        assert t.sig == signal.SIGINT and t.step is None and summary is None and unchanged, str(t)
        return
    if t.code == 1 and "Fatal Python error: init_import_site" in stderr:
        # SIGINT while the interpreter still runs site.py (the venv's .pth files): CPython
        # itself reports the KeyboardInterrupt as a fatal start-up error and exits 1,
        # before any streamjoin code exists to catch it; nothing may have changed
        assert t.sig == signal.SIGINT and t.step is None and summary is None and unchanged, str(t)
        return
    assert t.code == -t.sig and t.sig in (signal.SIGKILL, signal.SIGTERM), f"{t}; stderr: {stderr[-800:]}"
    assert t.sig == signal.SIGKILL or (summary is None and t.step is None), f"{t}; stderr: {stderr[-800:]}"
    assert "Traceback" not in stderr, f"{t}: {stderr}"


def _check_run(t: Trial, work: Path, before: str, stdout: str, stderr: str) -> None:
    after = run_output(work)
    summary = summary_of(stdout)
    code = t.code
    if after is None:  # only the fallback killed between its two renames may leave no --out ...
        assert t.no_exchange and t.step == "trashed" and code == -signal.SIGKILL, f"{t}: --out is gone"
        trash = [p for p in beside_run(work) if p.startswith(".out.trash-")]
        assert len(trash) == 1 and (work / trash[0] / "report.json").read_text() == before, f"{t}: {trash}"
    if summary is not None and code != -signal.SIGKILL:  # a SIGKILL after the summary sets the status itself
        assert summary["exit_code"] == code, f"{t}: summary says {summary['exit_code']}"
    if summary is not None and summary.get("status") == "published":
        assert after not in (None, before), f"{t}: the summary says published but the new output is not"
    if code == 0:
        assert after not in (None, before), f"{t}: exit 0 but the new output is not published"
        assert summary["status"] == "published" and "Traceback" not in stderr, f"{t}: {stderr}"
    elif code == 130:
        assert after == before and "Traceback" not in stderr, f"{t}: exit 130 but --out changed: {stderr}"
        assert "error: interrupted; nothing was published" in stderr, f"{t}: {stderr}"
        assert summary is None or summary["status"] == "interrupted", str(t)  # None: before the command started
    else:
        _check_killed(t, summary, stderr, after == before)
    if t.step is not None and t.sig != signal.SIGKILL:  # an interrupt at a known step: a known outcome
        assert code == (130 if t.step in BEFORE_PUBLISHING else 0), str(t)


def _check_nightly(t: Trial, work: Path, before: dict, stdout: str, stderr: str, new: int) -> None:
    after = nightly_output(work)
    summary = summary_of(stdout)
    code = t.code
    for day in (D2, D3):
        if after[day] is None and before[day] is not None:
            assert t.no_exchange and t.step == "trashed" and code == -signal.SIGKILL, f"{t}: date={day} is gone"
            trash = [p for p in beside_nightly(work) if p.startswith(f".date={day}.trash-")]
            assert len(trash) == 1, f"{t}: {beside_nightly(work)}"
        else:
            assert after[day] in (before[day], new), f"{t}: date={day} holds neither version"
    fresh = sum(after[day] == new for day in (D2, D3))
    if summary is not None:
        if code != -signal.SIGKILL:  # a SIGKILL after the summary sets the status itself
            assert summary["exit_code"] == code, f"{t}: summary says {summary['exit_code']}"
        assert summary["published"] == fresh, f"{t}: summary says {summary['published']} published, {fresh} are new"
    if code == 0:
        assert fresh == 2 and "Traceback" not in stderr, f"{t}: exit 0 but not every day is new: {stderr}"
    elif code == 130:
        assert "error: interrupted" in stderr and "Traceback" not in stderr and fresh < 2, f"{t}: {stderr}"
        assert summary is None or summary["interrupted"] == 1, str(t)  # None: before the command started
    else:
        _check_killed(t, summary, stderr, after == before)
    if t.step is not None and t.sig != signal.SIGKILL:  # the first day stops at the step; the range stops
        assert code == 130 and fresh == (0 if t.step in BEFORE_PUBLISHING else 1), str(t)


def plan(kind: str, rng: random.Random) -> list[tuple[str | None, int]]:
    """(step or None for a random moment, signal) of each trial, in trial order.

    Every (moment, signal) pair comes once before any comes twice, each
    round shuffled: the coverage checked by :func:`_coverage` is then a
    certainty for ``TRIALS >= 18`` rather than a likely draw (with one
    moment in six drawn at random, fewer than ``TRIALS // 10`` random
    moments happened in about one run in twelve).
    """
    pairs = [(step, sig) for step in (None, *(RUN_STEPS if kind == "run" else NIGHTLY_STEPS)) for sig in SIGNALS]
    out: list[tuple[str | None, int]] = []
    while len(out) < TRIALS:
        out += rng.sample(pairs, len(pairs))
    return out[:TRIALS]


def _worker(kind: str, work: Path, numbers: list[int], moments: list[tuple[str | None, int]],
            rng: random.Random) -> list[Trial]:
    duration = _next_run(work, kind, numbers[0] - 1, Trial(kind, -1, 0, None, False))
    trials = []
    for n, (step, sig) in zip(numbers, moments):
        t = Trial(kind, n, sig, step, no_exchange=step == "trashed")
        before = run_output(work) if kind == "run" else nightly_output(work)
        hooks = {"STREAMJOIN_TEST_PAUSE_AT": step} if step else {}
        if t.no_exchange:
            hooks["STREAMJOIN_TEST_NO_EXCHANGE"] = "1"
        proc = _start(work, _args(kind, n), **hooks)
        if step is not None:
            assert wait_stopped(proc), f"{t}: never reached its step: {_finish(proc, t)}"
            signal_and_resume(proc, t.sig)
        else:
            t.delay = rng.uniform(0, duration)
            time.sleep(t.delay)
            if proc.poll() is None:
                proc.send_signal(t.sig)
        stdout, stderr = _finish(proc, t)
        t.code = proc.returncode
        if kind == "run":
            _check_run(t, work, before, stdout, stderr)
            t.leftovers = len(beside_run(work))
        else:
            _check_nightly(t, work, before, stdout, stderr, (60 + n) * 60_000_000)
            t.leftovers = len(beside_nightly(work))
        duration = _next_run(work, kind, n + 10_000, t)
        if t.no_exchange and t.code == -signal.SIGKILL:
            assert t.recovered, f"{t}: the next run did not say it restored the stranded version"
        trials.append(t)
    return trials


def _trials(kind: str, root: Path) -> list[Trial]:
    rng = random.Random(f"{SEED}-{kind}")
    moments = plan(kind, rng)
    per = -(-TRIALS // WORKERS)
    jobs = []
    for w in range(WORKERS):
        work = root / f"{kind}-{w}"
        work.mkdir()
        if kind == "run":
            _plain_inputs(work)
        else:
            _nightly_config(work, root / "data")
        numbers = list(range(w * per + 1, min(TRIALS, (w + 1) * per) + 1))
        jobs.append((work, numbers, [moments[n - 1] for n in numbers], random.Random(rng.random())))
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        done = [pool.submit(_worker, kind, *job) for job in jobs]
        return [t for f in done for t in f.result()]


@pytest.fixture(autouse=True)
def python_default_sigint():
    """SIGINT handled as a Python program's default (``KeyboardInterrupt``) in every test here: an earlier
    test in the same pytest process may have left another handler -- a ``SparkContext`` installs its own,
    which cancels its jobs -- and the in-process tests below act on SIGINT through the process's handler."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    _nightly_inputs(root / "data")
    return root


def _coverage(trials: list[Trial]) -> None:
    """The trials hit every signal, every step and random moments, and some left something to clean."""
    assert len(trials) >= TRIALS
    assert {t.sig for t in trials} == set(SIGNALS)
    assert sum(t.step is None for t in trials) >= TRIALS // 10
    assert sum(t.leftovers > 0 for t in trials) >= 3, f"seed {SEED}: fewer than 3 trials left anything to clean"
    assert any(t.code == 130 for t in trials) and any(t.code == -signal.SIGKILL for t in trials)


def _table(trials: list[Trial]) -> str:
    """Trials by signal and moment, with the exit codes seen (shown by ``pytest -rP``)."""
    rows: dict[tuple[str, str], dict[int, int]] = {}
    for t in trials:
        codes = rows.setdefault((signal.Signals(t.sig).name, t.step or "random"), {})
        codes[t.code] = codes.get(t.code, 0) + 1
    lines = [f"seed {SEED}: {len(trials)} {trials[0].kind} trials, {sum(t.leftovers > 0 for t in trials)} left "
             f"something the next run cleaned, {sum(t.recovered for t in trials)} next runs said so"]
    lines += [f"  {sig:8} {step:10} " + ", ".join(f"exit {c}: {n}" for c, n in sorted(codes.items()))
              for (sig, step), codes in sorted(rows.items())]
    return "\n".join(lines)


@pytest.mark.parametrize("kind", ["run", "backfill"])
def test_random_kills_and_interrupts_never_lose_the_output(root, kind):
    trials = _trials(kind, root)
    print(_table(trials))
    _coverage(trials)
    steps = RUN_STEPS if kind == "run" else NIGHTLY_STEPS
    assert {t.step for t in trials if t.step} == set(steps), f"seed {SEED}: not every step was hit"


# ----------------------------------------------------------------------------
# the hooks themselves: the signal lands at the step
# ----------------------------------------------------------------------------


_STOPPED_CHILD = """
import json, os, signal, sys, threading, time
got = []
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a worker thread: SIGTERM unblocked
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the main thread keeps a SIGTERM it is given
os.kill(os.getpid(), signal.SIGSTOP)
end = time.monotonic() + 3
while not got and time.monotonic() < end:  # a SIGTERM the worker took runs the handler meanwhile
    time.sleep(0.01)
print(json.dumps({"handled": got, "main_pending": signal.SIGTERM in signal.sigpending()}))
"""


@pytest.mark.skipif(not faults.MAIN_THREAD_SIGNALS, reason="libc has no tgkill (macOS, glibc < 2.30): kill(2) fallback")
def test_a_signal_sent_at_a_pause_step_goes_to_the_main_thread():
    """Root cause of a flaky trial (SIGTERM at ``staged`` published a day): sent to the stopped
    process, the signal went to whichever thread ran first after SIGCONT, a worker, whose C handler
    ran after the main thread had gone on into publishing (helpers/faults.py).  Here the main thread
    blocks SIGTERM and a worker does not: a signal given to the process would be the worker's (and
    handled), one given to the main thread stays pending there."""
    proc = subprocess.Popen([sys.executable, "-c", _STOPPED_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert wait_stopped(proc), proc.communicate()
    signal_and_resume(proc, signal.SIGTERM)
    stdout, stderr = _finish(proc, "stopped child")
    assert proc.returncode == 0, stderr
    assert json.loads(stdout) == {"handled": [], "main_pending": True}


def _late_signal(monkeypatch, on_call: int, act) -> None:
    """``signal.signal`` whose ``on_call``-th call first does ``act(sig)``: what its check of pending
    signals does when a signal's C-level handler ran (in any thread) but its Python handler has not."""
    real, calls = signal.signal, []

    def signal_(sig, handler):
        calls.append(sig)
        if len(calls) == on_call:
            act(sig)
        return real(sig, handler)
    monkeypatch.setattr(signal, "signal", signal_)


def test_interrupts_held_puts_every_handler_back_when_an_interrupt_comes_while_installing(monkeypatch):
    """A KeyboardInterrupt between installing SIGINT's and SIGTERM's recorders left SIGINT's recorder in
    place for good (a later Ctrl-C recorded in a list nobody reads): now both are installed, the
    interrupt raised, and both put back."""
    before = {sig: signal.getsignal(sig) for sig in output.INTERRUPTS}

    def interrupt(sig):
        raise KeyboardInterrupt
    _late_signal(monkeypatch, 2, interrupt)
    with pytest.raises(KeyboardInterrupt):
        with output.interrupts_held():
            pass
    monkeypatch.undo()
    assert {sig: signal.getsignal(sig) for sig in output.INTERRUPTS} == before


def test_publishing_keeps_an_interrupt_recorded_while_the_handlers_are_put_back(monkeypatch):
    """A SIGTERM whose Python handler ran as ``interrupts_held`` put SIGTERM's handler back (its 4th
    ``signal.signal``) was recorded after publishing had taken the list: lost, the range went on."""
    monkeypatch.setattr(output, "_guard", None)
    with output.interrupt_guard() as guard:
        _late_signal(monkeypatch, 4, lambda sig: signal.getsignal(sig)(sig, None))
        with output.publishing():
            pass
        monkeypatch.undo()
        assert guard.holding and guard.pending == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            guard.arm()  # a range's next day stops


def test_a_range_interrupted_before_its_first_day_reports_the_range_counts(root, tmp_path, monkeypatch, capsys):
    """An interrupt while the config is resolved (before the day loop) ended with a summary without the
    range's counts (seen as ``KeyError: 'published'`` in a random-moment trial): now the same keys, with
    nothing published and the range interrupted."""
    from streamjoin.pipelines.config.settings import Flags
    from streamjoin.pipelines.nightly import backfill
    from streamjoin.pipelines.nightly.options import nightly_options

    def interrupt(cfg):
        raise KeyboardInterrupt
    _nightly_config(tmp_path, root / "data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(backfill, "nightly_period", interrupt)
    opts = nightly_options(tmp_path / "nightly.toml", from_=str(D2), to=str(D3), log_format="json")
    assert backfill.cli_run(tmp_path / "nightly.toml", Flags(), opts, "test") == 130
    summary = summary_of(capsys.readouterr().out)
    assert summary is not None
    assert {k: summary[k] for k in ("days", "published", "interrupted", "exit_code")} == \
        {"days": 2, "published": 0, "interrupted": 1, "exit_code": 130}
    assert not (tmp_path / "out").exists()


def test_without_a_guard_an_interrupt_held_while_publishing_is_acted_on_once_published(monkeypatch, tmp_path):
    """A library caller (no InterruptGuard): a Ctrl-C during the publishing rename was recorded and
    dropped; now it is held until the version is in place, then raised."""
    monkeypatch.setattr(output, "_guard", None)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    target = tmp_path / "f.txt"
    with pytest.raises(KeyboardInterrupt):
        with output.publishing():
            signal.raise_signal(signal.SIGINT)
            target.write_text("published")
    assert target.read_text() == "published"


def _signal_while_removing(monkeypatch, *sigs) -> None:
    """``output._remove`` that first raises ``sigs`` (in order): signals landing while a staging is cleaned up."""
    real = output._remove

    def remove(path):
        for sig in sigs:
            signal.raise_signal(sig)
        real(path)
    monkeypatch.setattr(output, "_remove", remove)


def test_an_interrupt_while_a_failed_day_cleans_up_stops_the_range(monkeypatch, tmp_path):
    """A Ctrl-C while ``abandon`` removed a failed day's staging was recorded and dropped: the day was
    reported failed and the next ``arm()`` let the range go on.  Now the armed guard acts on it once the
    staging is gone: the day is interrupted (nothing published), the range stops."""
    monkeypatch.setattr(output, "_guard", None)
    staging = tmp_path / ".date=x.staging-1-a"
    staging.mkdir()
    (staging / "part.parquet").write_text("x")
    with output.interrupt_guard():
        _signal_while_removing(monkeypatch, signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            try:
                raise ValueError("the day failed")
            except ValueError:
                output.abandon(staging)
                raise
        monkeypatch.undo()
    assert not staging.exists()


def test_without_a_guard_every_signal_held_during_clean_up_or_publishing_is_acted_on_once(monkeypatch, tmp_path):
    """A library caller (no guard): SIGINT then SIGTERM while publishing -- only the first was acted on, the
    SIGTERM (its own handler here) dropped; one during ``abandon``, or while a publish failed, was dropped.
    Now each distinct signal is acted on once, the KeyboardInterrupt raised after the SIGTERM handler ran."""
    monkeypatch.setattr(output, "_guard", None)
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        target = tmp_path / "f.txt"
        with pytest.raises(KeyboardInterrupt):
            with output.publishing():
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
                    signal.raise_signal(sig)
                target.write_text("published")
        assert target.read_text() == "published" and got == [signal.SIGTERM]

        got.clear()
        with pytest.raises(OSError):
            with output.publishing():
                signal.raise_signal(signal.SIGTERM)
                raise OSError("rename failed")
        assert got == [signal.SIGTERM]

        got.clear()
        staging = tmp_path / ".f.txt.staging-1-a"
        staging.write_text("x")
        _signal_while_removing(monkeypatch, signal.SIGTERM)
        output.abandon(staging)
        assert got == [signal.SIGTERM] and not staging.exists()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_guard_installed_for_a_block_acts_on_what_it_still_holds_at_its_end(monkeypatch):
    """A library caller of a nightly range (``interrupt_guard`` installed for the call): a Ctrl-C after the
    last day was published was held by the guard and dropped with it.  Now, the caller's handlers put
    back, it is acted on -- a KeyboardInterrupt after the published work, as without a guard."""
    monkeypatch.setattr(output, "_guard", None)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        with output.interrupt_guard() as guard:
            guard.hold()  # the last day is published
            signal.raise_signal(signal.SIGINT)
            assert guard.pending == [signal.SIGINT]
    assert output._guard is None and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_tgkill_a_signal_at_a_pause_step_still_reaches_the_process(monkeypatch):
    """macOS (or glibc < 2.30) has no ``tgkill``: ``signal_and_resume`` raised AttributeError there and
    every fault-injection trial crashed.  Now it falls back to ``kill(2)``; the stopped child gets it."""
    monkeypatch.setattr(faults, "_libc", object())
    proc = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)\n"
                             "import time; time.sleep(30)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_stopped(proc), proc.communicate()
    signal_and_resume(proc, signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM


def test_an_interrupt_while_a_hadoop_staging_is_removed_is_acted_on(monkeypatch):
    """``HadoopOutput`` (``--out URI``) removed its staging under ``interrupts_held`` and dropped a signal
    that came meanwhile, as ``abandon`` did; now it is acted on once the staging is deleted.  (A fake
    file system: no Spark needed for the clean-up path.)"""
    from contextlib import ExitStack

    from streamjoin.pipelines.engines.spark.hadoop_out import HadoopOutput

    deleted = []

    class FakeFS:
        def delete(self, uri):
            signal.raise_signal(signal.SIGINT)
            deleted.append(uri)
    out = HadoopOutput.__new__(HadoopOutput)
    out.fs, out.staging, out._stack = FakeFS(), "hdfs://nn/x/.out.staging-1-a", ExitStack()
    out._stack.callback(out._drop_staging)
    monkeypatch.setattr(output, "_guard", None)
    with output.interrupt_guard():
        with pytest.raises(KeyboardInterrupt):
            out.__exit__(ValueError, ValueError("the run failed"), None)
    assert deleted == ["hdfs://nn/x/.out.staging-1-a"]
