"""Bad input through the real console command (SPEC §8).

Every case runs ``streamjoin`` in a subprocess on small Parquet files made in
``tmp_path`` and checks the contract a cron job relies on:

* a non-zero exit (2 for bad input);
* stderr is exactly one line, ``error: ...``, naming the file / column /
  option at fault and what was expected -- no traceback;
* no partial output: ``--out`` does not exist afterwards and no staging
  directory (``.<name>.staging-*``) is left beside it.

Also: quarantine of rows with null ``ts`` / ``arrival`` / key, atomic
replacement of a previous output, and a run interrupted with SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import CMD, cli_env  # one way to start the real command, shared

# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def run_cli(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(CMD + args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=cli_env())


def leftovers(parent: Path, name: str = "out") -> list[Path]:
    """Staging / trash directories or a lock file a run may leave beside ``--out``."""
    return sorted(parent.glob(f".{name}.*"))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (a byte-for-byte picture)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    err = proc.stderr
    assert proc.returncode == code, f"exit {proc.returncode}, stderr: {err!r}"
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}: {err!r}"
    line = lines[0]
    assert line.startswith("error: "), line
    assert "internal failure" not in line, line
    for needle in needles:
        assert needle.lower() in line.lower(), f"{needle!r} not in {line!r}"
    assert proc.stdout == "", f"nothing should go to stdout on bad input: {proc.stdout!r}"
    return line


def write_stream(path: Path, n: int = 20, *, offset_us: int = 0, seed: int = 0) -> None:
    """Integer-microsecond ``ts`` and ``arrival`` (a little disorder), key ``k``, payload ``v``."""
    rng = np.random.default_rng(seed)
    ts = np.arange(n, dtype=np.int64) * 1_000 + offset_us
    arrival = ts + rng.integers(0, 3_000, n)
    pl.DataFrame({"ts": ts, "arrival": arrival, "k": np.arange(n, dtype=np.int64) % 3, "v": np.arange(n)}).write_parquet(path)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A working directory with good and bad inputs; runs use relative paths."""
    write_stream(tmp_path / "a.parquet", seed=1)
    write_stream(tmp_path / "b.parquet", offset_us=300, seed=2)
    n = 10
    pl.DataFrame({"ts": [str(i) for i in range(n)], "k": np.arange(n) % 3}).write_parquet(tmp_path / "str_ts.parquet")
    pl.DataFrame({"ts": np.arange(n) * 1.5, "k": np.arange(n) % 3}).write_parquet(tmp_path / "float_ts.parquet")
    pl.DataFrame({"ts": np.arange(n, dtype=np.int64) * 1000, "k": [f"s{i % 3}" for i in range(n)]}).write_parquet(
        tmp_path / "str_key.parquet")
    (tmp_path / "text.parquet").write_text("this is not parquet\n")
    good = (tmp_path / "a.parquet").read_bytes()
    (tmp_path / "trunc.parquet").write_bytes(good[: len(good) // 2])
    (tmp_path / "syntax.toml").write_text('[run\npolicy = "static"\n')
    (tmp_path / "typo.toml").write_text(
        '[run]\npolcy = "static"\n\n'
        '[[stream]]\nname = "a"\npath = "a.parquet"\nunit = "us"\nwindow = "1ms"\n\n'
        '[[stream]]\nname = "b"\npath = "b.parquet"\nunit = "us"\nwindow = "1ms"\n'
    )
    (tmp_path / "intwindow.toml").write_text(
        '[[stream]]\nname = "a"\npath = "a.parquet"\nunit = "us"\nwindow = 5\n\n'
        '[[stream]]\nname = "b"\npath = "b.parquet"\nunit = "us"\nwindow = "1ms"\n'
    )
    (tmp_path / "nopath.toml").write_text(
        '[[stream]]\nname = "a"\npath = "a.parquet"\n\n[[stream]]\nname = "b"\n'
    )
    (tmp_path / "notarray.toml").write_text('[stream]\nname = "a"\npath = "a.parquet"\n')
    (tmp_path / "badrecall.toml").write_text(
        '[run]\nrecall = "most"\n\n'
        '[[stream]]\nname = "a"\npath = "a.parquet"\nunit = "us"\nwindow = "1ms"\n\n'
        '[[stream]]\nname = "b"\npath = "b.parquet"\nunit = "us"\nwindow = "1ms"\n'
    )
    return tmp_path


AB = ["--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "us"]
OK_WINDOW = ["--window", "2ms"]

# (id, arguments before --out, substrings the one error line must contain)
CASES = [
    # missing file
    ("missing-file", ["--stream", "a=nofile.parquet", "--stream", "b=b.parquet", "--unit", "us", *OK_WINDOW],
     ["nofile.parquet", "no such file", "'a'"]),
    ("missing-glob", ["--stream", "a=nothing/*.parquet", "--stream", "b=b.parquet", "--unit", "us", *OK_WINDOW],
     ["nothing/*.parquet", "no files match"]),
    ("missing-config", ["nosuch.toml", *AB, *OK_WINDOW], ["nosuch.toml", "not found"]),
    # missing column
    ("missing-ts", [*AB, *OK_WINDOW, "--ts", "zz"], ["a.parquet", "missing column 'zz'", "has: ts"]),
    ("missing-arrival", [*AB, *OK_WINDOW, "--arrival", "b=late"], ["b.parquet", "missing column 'late'"]),
    ("missing-key", [*AB, *OK_WINDOW, "--key", "a=k", "--key", "b=nokey"], ["b.parquet", "missing column 'nokey'"]),
    # wrong type
    ("ts-string", ["--stream", "a=str_ts.parquet", "--stream", "b=b.parquet", "--unit", "us", *OK_WINDOW],
     ["str_ts.parquet", "'ts'", "string", "expected a timestamp or an integer"]),
    ("ts-float", ["--stream", "a=float_ts.parquet", "--stream", "b=b.parquet", "--unit", "us", *OK_WINDOW],
     ["float_ts.parquet", "'ts'", "double", "expected a timestamp or an integer"]),
    ("int-ts-without-unit", ["--stream", "a=a.parquet", "--stream", "b=b.parquet", *OK_WINDOW],
     ["a.parquet", "'ts'", "integer", "--unit"]),
    ("bad-unit", [*AB, "--unit", "a=parsecs", *OK_WINDOW], ["'a'", "parsecs", "s, ms, us, ns, ps"]),
    ("key-types-incompatible", ["--stream", "a=a.parquet", "--stream", "b=str_key.parquet", "--unit", "us",
                                *OK_WINDOW, "--key", "k"], ["key columns", "a.k", "b.k", "incompatible"]),
    # unreadable Parquet
    ("text-file", ["--stream", "a=text.parquet", "--stream", "b=b.parquet", "--unit", "us", *OK_WINDOW],
     ["text.parquet", "not a readable parquet"]),
    ("truncated", ["--stream", "a=a.parquet", "--stream", "b=trunc.parquet", "--unit", "us", *OK_WINDOW],
     ["trunc.parquet", "not a readable parquet", "'b'"]),
    # bad duration
    ("window-no-unit", [*AB, "--window", "5"], ["window", "'5'", "with a unit"]),
    ("window-no-unit-space", [*AB, "--window", "5 "], ["window", "'5 '", "with a unit"]),
    ("window-bad-unit", [*AB, "--window", "5xs"], ["window", "'5xs'", "e.g. 250ms"]),
    ("retention-abc", [*AB, *OK_WINDOW, "--policy", "static", "--retention", "abc"], ["retention", "'abc'", "e.g. 250ms"]),
    ("k-negative", [*AB, *OK_WINDOW, "--policy", "kslack", "--k=-1s"], ["k of stream", "'-1s'", ">= 0"]),
    ("period-zero", [*AB, *OK_WINDOW, "--period", "0s"], ["--period", "> 0"]),
    # unknown stream name
    ("window-unknown-stream", [*AB, *OK_WINDOW, "--window", "nosuch=5ms"], ["--window", "nosuch", "unknown stream", "a, b"]),
    ("ts-unknown-stream", [*AB, *OK_WINDOW, "--ts", "nosuch=ts"], ["--ts", "nosuch", "unknown stream"]),
    # window < 0
    ("window-negative", [*AB, "--window=-5ms"], ["window", "'-5ms'", ">= 0"]),
    ("window-missing", [*AB], ["no window", "--window"]),
    # recall outside (0, 1]
    ("recall-zero", [*AB, *OK_WINDOW, "--recall", "0"], ["--recall", "(0, 1]"]),
    ("recall-above-one", [*AB, *OK_WINDOW, "--recall", "1.5"], ["--recall", "1.5", "(0, 1]"]),
    ("recall-negative", [*AB, *OK_WINDOW, "--recall", "-0.1"], ["--recall", "-0.1", "(0, 1]"]),
    ("recall-not-a-number", [*AB, *OK_WINDOW, "--recall", "abc"], ["--recall", "number"]),
    ("recall-toml-not-a-number", ["badrecall.toml"], ["recall", "'most'", "(0, 1]"]),
    # options
    ("unknown-policy", [*AB, *OK_WINDOW, "--policy", "fastest"], ["--policy", "fastest", "expected one of", "kslack"]),
    ("kslack-without-k", [*AB, *OK_WINDOW, "--policy", "kslack"], ["kslack", "--k"]),
    ("unknown-option", [*AB, *OK_WINDOW, "--windw", "5ms"], ["--windw"]),
    ("partition-capacity-negative", [*AB, *OK_WINDOW, "--partition-capacity", "cpu=-1"],
     ["--partition-capacity", "cpu must be a finite number > 0", "cpu=X,mem=Y,net=Z"]),
    ("partition-capacity-unknown", [*AB, *OK_WINDOW, "--partition-capacity", "disk=5"],
     ["--partition-capacity", "unknown resource 'disk'"]),
    ("partition-capacity-not-a-number", [*AB, *OK_WINDOW, "--partition-capacity", "mem=lots"],
     ["--partition-capacity", "mem='lots' is not a number"]),
    ("stream-without-path", ["--stream", "a", "--stream", "b=b.parquet", "--unit", "us", *OK_WINDOW],
     ["--stream a", "NAME=PATH"]),
    # fewer than two streams
    ("one-stream", ["--stream", "a=a.parquet", "--unit", "us", *OK_WINDOW], ["at least two streams"]),
    ("no-stream", [*OK_WINDOW], ["at least two streams"]),
    # invalid config TOML
    ("toml-syntax", ["syntax.toml", *AB, *OK_WINDOW], ["syntax.toml", "not valid TOML", "line 1"]),
    ("toml-unknown-key", ["typo.toml"], ["typo.toml", "[run]", "unknown key 'polcy'", "policy"]),
    ("toml-integer-window", ["intwindow.toml"], ["window of stream 'a'", "5", "string with a unit"]),
    ("toml-stream-without-path", ["nopath.toml", *OK_WINDOW], ["nopath.toml", "stream #2", "path"]),
    ("toml-stream-not-array", ["notarray.toml", *OK_WINDOW], ["notarray.toml", "[[stream]]"]),
]


@pytest.mark.parametrize("args,needles", [pytest.param(a, n, id=i) for i, a, n in CASES])
def test_bad_input_is_one_line_exit_2_and_no_output(data: Path, args: list[str], needles: list[str]) -> None:
    proc = run_cli(["run", *args, "--out", "out"], cwd=data)
    assert_one_line_error(proc, *needles)
    assert not (data / "out").exists()
    assert leftovers(data) == []


def test_unknown_sort_setting_is_one_line_exit_2_and_no_output(data: Path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMJOIN_SORT", "quick")  # run_cli's environment copies ours
    proc = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert_one_line_error(proc, "$STREAMJOIN_SORT quick", "expected one of auto, numpy, polars")
    assert not (data / "out").exists()
    assert leftovers(data) == []


def test_unknown_kernels_setting_is_one_line_exit_2_and_no_output(data: Path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMJOIN_KERNELS", "nunpy")  # a typo must not silently run the kernels
    proc = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert_one_line_error(proc, "$STREAMJOIN_KERNELS nunpy", "expected one of auto, numpy, load")
    assert not (data / "out").exists()
    assert leftovers(data) == []


# ----------------------------------------------------------------------------
# --out: refuse foreign directories, replace previous outputs atomically
# ----------------------------------------------------------------------------


def test_foreign_non_empty_out_is_refused_and_untouched(data: Path) -> None:
    foreign = data / "out"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "notes.txt").write_text("precious\n")
    (foreign / "sub" / "data.bin").write_bytes(b"\x00\x01\x02")
    before = snapshot(foreign)
    proc = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert_one_line_error(proc, "out", "not empty", "not a streamjoin output")
    assert snapshot(foreign) == before
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt", "sub"]
    assert leftovers(data) == []


def test_out_that_is_a_file_is_refused_and_untouched(data: Path) -> None:
    (data / "out").write_text("a file\n")
    proc = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert_one_line_error(proc, "out", "not a directory")
    assert (data / "out").read_text() == "a file\n"
    assert leftovers(data) == []


def test_empty_existing_out_is_used(data: Path) -> None:
    (data / "out").mkdir()
    proc = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert proc.returncode == 0, proc.stderr
    assert (data / "out" / "report.json").is_file()
    assert leftovers(data) == []


def _write_nulls(path: Path) -> None:
    pl.DataFrame(
        {"ts": [0, 1000, None, 3000], "arrival": [0, 1000, 2000, 3000], "k": [0, 0, 0, 0], "v": [0, 1, 2, 3]},
        schema={"ts": pl.Int64, "arrival": pl.Int64, "k": pl.Int64, "v": pl.Int64},
    ).write_parquet(path)


def test_previous_output_is_replaced_whole_and_failed_runs_leave_it_untouched(data: Path) -> None:
    _write_nulls(data / "nulls.parquet")
    out = data / "out"
    first = run_cli(["run", "--stream", "a=nulls.parquet", "--stream", "b=b.parquet", "--unit", "us",
                     "--arrival", "arrival", "--key", "k", *OK_WINDOW, "--out", "out"], cwd=data)
    assert first.returncode == 0, first.stderr
    assert (out / "results.parquet").is_file()
    assert (out / "quarantine" / "a.parquet").is_file()

    # a new successful run replaces the whole directory: nothing of the old one survives
    (out / "stale-extra-file.txt").write_text("left by someone\n")
    second = run_cli(["run", *AB, *OK_WINDOW, "--no-results", "--out", "out"], cwd=data)
    assert second.returncode == 0, second.stderr
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json"]
    report = json.loads((out / "report.json").read_text())
    assert [s["quarantined"] for s in report["streams"]] == [0, 0]
    assert "results" not in report["outputs"]
    assert leftovers(data) == []

    third = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert third.returncode == 0, third.stderr
    before = snapshot(out)
    assert set(before) == {"report.html", "report.json", "results.parquet"}

    # failing runs -- at option resolution and while loading -- leave it byte for byte
    for bad in (["--window", "5xs"], [*OK_WINDOW, "--ts", "zz"], [*OK_WINDOW, "--recall", "2"]):
        proc = run_cli(["run", *AB, *bad, "--out", "out"], cwd=data)
        assert_one_line_error(proc)
        assert snapshot(out) == before
        assert leftovers(data) == []


# ----------------------------------------------------------------------------
# quarantine
# ----------------------------------------------------------------------------


def test_null_ts_arrival_key_rows_are_quarantined_not_dropped(tmp_path: Path) -> None:
    # stream a: integer microseconds, nulls in ts (v=2), arrival (v=5), key (v=7)
    ts_a = [0, 1000, None, 3000, 4000, 5000, 6000, 7000, 8000, 9000]
    arr_a = [0, 1000, 2000, 3000, 4000, None, 6000, 7000, 8000, 9000]
    key_a = [1, 1, 1, 1, 1, 1, 1, None, 1, 1]
    pl.DataFrame(
        {"ts": ts_a, "arrival": arr_a, "k": key_a, "v": list(range(10))},
        schema={"ts": pl.Int64, "arrival": pl.Int64, "k": pl.Int64, "v": pl.Int64},
    ).write_parquet(tmp_path / "a.parquet")
    # stream b: a Parquet timestamp column with one null ts (w=3) and one null key (w=6)
    ts_b = [100 + 1000 * i for i in range(8)]
    ts_b[3] = None
    key_b = [1] * 8
    key_b[6] = None
    pl.DataFrame(
        {"t": ts_b, "key": key_b, "w": list(range(8))},
        schema={"t": pl.Int64, "key": pl.Int64, "w": pl.Int64},
    ).with_columns(pl.col("t").cast(pl.Datetime("us"))).write_parquet(tmp_path / "b.parquet")

    proc = run_cli(["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "a=us",
                    "--arrival", "a=arrival", "--ts", "b=t", "--key", "a=k", "--key", "b=key",
                    "--window", "1h", "--out", "out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    sa, sb = report["streams"]
    assert (sa["name"], sa["rows"], sa["quarantined"]) == ("a", 10 - 3, 3)
    assert (sb["name"], sb["rows"], sb["quarantined"]) == ("b", 8 - 2, 2)

    qa = pl.read_parquet(out / "quarantine" / "a.parquet")
    qb = pl.read_parquet(out / "quarantine" / "b.parquet")
    assert "reason" in qa.columns and "reason" in qb.columns
    assert qa["v"].to_list() == [2, 5, 7]
    assert qb["w"].to_list() == [3, 6]
    reasons_a = qa["reason"].to_list()
    assert "ts" in reasons_a[0] and "arrival" in reasons_a[1] and "k" in reasons_a[2]
    assert all("null" in r for r in reasons_a)
    reasons_b = qb["reason"].to_list()
    assert "t" in reasons_b[0] and "key" in reasons_b[1]
    # the quarantined rows are kept whole: their original columns are there
    assert {"ts", "arrival", "k", "v"} <= set(qa.columns)
    assert report["outputs"]["quarantine_a"].endswith("quarantine/a.parquet")

    # remaining rows are numbered 0..rows-1 in file order, skipping nothing;
    # with one key and a 1 h window every kept row joins with every other
    res = pl.read_parquet(out / "results.parquet")
    kept_v = [v for v in range(10) if v not in (2, 5, 7)]
    kept_w = [w for w in range(8) if w not in (3, 6)]
    assert res.height == len(kept_v) * len(kept_w) == report["emitted_results"]
    rows_a = res.select("a_row", "a_v").unique().sort("a_row")
    assert rows_a["a_row"].to_list() == list(range(len(kept_v)))
    assert rows_a["a_v"].to_list() == kept_v
    rows_b = res.select("b_row", "b_w").unique().sort("b_row")
    assert rows_b["b_row"].to_list() == list(range(len(kept_w)))
    assert rows_b["b_w"].to_list() == kept_w


def test_no_quarantine_directory_without_bad_rows(data: Path) -> None:
    proc = run_cli(["run", *AB, *OK_WINDOW, "--out", "out"], cwd=data)
    assert proc.returncode == 0, proc.stderr
    assert not (data / "out" / "quarantine").exists()


# ----------------------------------------------------------------------------
# interrupted runs
# ----------------------------------------------------------------------------

BIG_ROWS = 300_000


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(42)
    for name in ("a", "b"):
        ts = np.arange(BIG_ROWS, dtype=np.int64) * 1_000
        arrival = ts + rng.exponential(5_000, BIG_ROWS).astype(np.int64)
        pl.DataFrame({"ts": ts, "arrival": arrival, "k": rng.integers(0, 100, BIG_ROWS), "p": rng.random(BIG_ROWS)}
                     ).write_parquet(d / f"{name}.parquet")
    return d


BIG_ARGS = ["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "us", "--arrival", "arrival",
            "--key", "k", "--window", "50ms", "--policy", "mpkslack"]


def _reading_input(pid: int) -> bool:
    """True once the process holds one of the input Parquet files open (Linux /proc)."""
    try:
        links = [os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return False
    return any(link.endswith(".parquet") for link in links)


def _interrupt_after(cwd: Path, out: str, marker: str, timeout: float = 60,
                     when_reading: bool = False) -> tuple[int, list[str]]:
    """Start a big run, wait until it is working, send SIGINT.

    "Working" = ``marker`` seen on stderr (a stage log line), or -- with
    ``when_reading`` -- the process has opened an input file.
    """
    proc = subprocess.Popen(CMD + BIG_ARGS + ["--out", out], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env())
    lines: list[str] = []
    seen = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if marker in line:
                seen.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not seen.is_set() and proc.poll() is None and time.monotonic() < deadline:
        if when_reading and _reading_input(proc.pid):
            break
        seen.wait(0.005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)
    assert proc.stdout is not None
    proc.stdout.close()
    return proc.returncode, lines


def test_sigint_during_run_leaves_no_output(big_inputs: Path) -> None:
    code, lines = _interrupt_after(big_inputs, "out_join", "stage load done", when_reading=True)
    assert code != 0, f"the run finished before SIGINT; make BIG_ROWS bigger ({lines})"
    assert code == 130, lines
    assert "Traceback" not in "\n".join(lines)
    assert lines[-1].startswith("error: "), lines
    assert not (big_inputs / "out_join").exists()
    assert leftovers(big_inputs, "out_join") == []


def test_sigint_late_in_a_run_publishes_all_or_nothing(big_inputs: Path) -> None:
    """Interrupted near the write stage: the previous output or a complete new one, never a mix."""
    small = big_inputs / "small"
    small.mkdir(exist_ok=True)
    write_stream(small / "a.parquet", seed=3)
    write_stream(small / "b.parquet", seed=4)
    prev = run_cli(["run", "--stream", f"a={small / 'a.parquet'}", "--stream", f"b={small / 'b.parquet'}",
                    "--unit", "us", "--window", "1ms", "--out", "out_late"], cwd=big_inputs)
    assert prev.returncode == 0, prev.stderr
    before = snapshot(big_inputs / "out_late")

    code, lines = _interrupt_after(big_inputs, "out_late", "stage metrics done")
    assert "Traceback" not in "\n".join(lines)
    out = big_inputs / "out_late"
    assert out.is_dir(), "the previous output must never disappear"
    if snapshot(out) == before:  # interrupted before publishing
        assert code == 130, lines
        assert lines[-1] == "error: interrupted; nothing was published", lines
    else:  # the signal landed after publishing (or in the teardown): a complete new output, and exit 0
        assert code == 0, lines  # published means done (docs/semantics.md, "Publishing outputs")
        report = json.loads((out / "report.json").read_text())
        assert [s["rows"] for s in report["streams"]] == [BIG_ROWS, BIG_ROWS]
        n = pl.scan_parquet(out / "results.parquet").select(pl.len()).collect().item()
        assert n == report["emitted_results"]
    assert leftovers(big_inputs, "out_late") == []
