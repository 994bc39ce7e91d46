"""Input the reliability gauntlet (issue 22) found unguarded, through the real command.

Each case runs ``streamjoin`` in a subprocess and checks the bad-input
contract (tests/cli/test_bad_input.py): exit 2, one ``error:`` line on stderr
naming the stream / file / column and what was expected, nothing on stdout,
no ``--out`` and no staging directory afterwards -- and nothing written
anywhere else in the working directory.

* stream names (item 4): path characters, duplicates, case-only twins;
* payload columns that collide with the columns streamjoin writes (item 5);
* a 0-byte file in a directory, a duration too large to compute with, and an
  ``--out`` that cannot be written (item 7).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import CMD, cli_env


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(CMD + args, cwd=cwd, capture_output=True, text=True, timeout=120, env=cli_env())


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, one ``error:`` line holding every needle, nothing on stdout."""
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line: {proc.stderr!r}"
    line = lines[0]
    assert line.startswith("error: ") and "internal failure" not in line, line
    for needle in needles:
        assert needle.lower() in line.lower(), f"{needle!r} not in {line!r}"
    assert proc.stdout == ""
    return line


def write_stream(path: Path, n: int = 20, *, offset_us: int = 0, nulls: bool = False, **extra) -> None:
    """Integer-microsecond ``ts`` (a null at row 3 when ``nulls``), key ``k``, payload ``v`` and ``extra``."""
    ts = [int(i * 1_000 + offset_us) for i in range(n)]
    if nulls:
        ts[3] = None
    cols = {"ts": pl.Series(ts, dtype=pl.Int64), "k": np.arange(n, dtype=np.int64) % 3, "v": np.arange(n)}
    cols.update({name: values(n) if callable(values) else values for name, values in extra.items()})
    pl.DataFrame(cols).write_parquet(path)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """``tmp_path/work/`` (the working directory) with streams ``a``, ``b``, ``c``
    and ``nulls`` (one row quarantined: a run writes a quarantine file)."""
    work = tmp_path / "work"
    work.mkdir()
    write_stream(work / "a.parquet")
    write_stream(work / "b.parquet", offset_us=300)
    write_stream(work / "c.parquet", offset_us=600)
    write_stream(work / "nulls.parquet", nulls=True)
    return work


def assert_untouched(tmp_path: Path, before: dict[str, bytes]) -> None:
    """No output, no staging directory, nothing new anywhere under ``tmp_path``."""
    assert tree(tmp_path) == before
    assert not (tmp_path / "work" / "out").exists()


RUN = ["--unit", "us", "--window", "2ms", "--out", "out"]


# ----------------------------------------------------------------------------
# item 4: stream names
# ----------------------------------------------------------------------------

NAME_RULE = "a letter, then letters, digits or _"

STREAM_NAME_CASES = [
    # a quarantine file named after the stream would be written two levels up, outside --out
    ("path-escape", ["--stream", "../../ESC=nulls.parquet", "--stream", "b=b.parquet"], ["'../../ESC'", NAME_RULE]),
    # would crash writing quarantine/site/a.parquet
    ("slash", ["--stream", "site/a=nulls.parquet", "--stream", "b=b.parquet"], ["'site/a'", NAME_RULE]),
    ("dot", ["--stream", "a.b=nulls.parquet", "--stream", "b=b.parquet"], ["'a.b'", NAME_RULE]),
    ("space", ["--stream", "my stream=a.parquet", "--stream", "b=b.parquet"], ["'my stream'", NAME_RULE]),
    ("leading-digit", ["--stream", "1a=a.parquet", "--stream", "b=b.parquet"], ["'1a'", NAME_RULE]),
    ("leading-underscore", ["--stream", "_a=a.parquet", "--stream", "b=b.parquet"], ["'_a'", NAME_RULE]),
    ("too-long", ["--stream", "a" * 65 + "=a.parquet", "--stream", "b=b.parquet"], ["at most 64"]),
    # was: the first s silently dropped, a 2-way join of s=b.parquet and t
    ("duplicate", ["--stream", "s=a.parquet", "--stream", "s=b.parquet", "--stream", "t=c.parquet"],
     ["--stream s=b.parquet", "'s'", "twice"]),
    # quarantine/A.parquet and quarantine/a.parquet are one file on a case-insensitive file system
    ("case-twins", ["--stream", "a=nulls.parquet", "--stream", "A=b.parquet"], ["'A'", "'a'", "case"]),
]


@pytest.mark.parametrize("args,needles", [pytest.param(a, n, id=i) for i, a, n in STREAM_NAME_CASES])
def test_bad_stream_name_is_refused_and_nothing_is_written(work: Path, args: list[str], needles: list[str]) -> None:
    before = tree(work.parent)
    proc = run_cli(["run", *args, *RUN], cwd=work)
    assert_refused(proc, "stream name", *needles)
    assert_untouched(work.parent, before)


def test_duplicate_stream_name_in_toml_is_refused(work: Path) -> None:
    (work / "dup.toml").write_text(
        '[[stream]]\nname = "s"\npath = "a.parquet"\n\n'
        '[[stream]]\nname = "s"\npath = "b.parquet"\n\n'
        '[[stream]]\nname = "t"\npath = "c.parquet"\n')
    before = tree(work.parent)
    proc = run_cli(["run", "dup.toml", *RUN], cwd=work)
    assert_refused(proc, "dup.toml", "stream #2", "'s'", "twice")
    assert_untouched(work.parent, before)


def test_stream_flag_may_still_override_a_toml_stream_path(work: Path) -> None:
    """A ``--stream NAME=PATH`` naming a TOML stream replaces its path (flags win):
    not a duplicate."""
    (work / "ab.toml").write_text(
        '[[stream]]\nname = "a"\npath = "nosuch.parquet"\n\n[[stream]]\nname = "b"\npath = "b.parquet"\n')
    proc = run_cli(["run", "ab.toml", "--stream", "a=a.parquet", *RUN], cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / "out" / "report.json").is_file()
