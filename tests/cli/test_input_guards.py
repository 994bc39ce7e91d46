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


# ----------------------------------------------------------------------------
# item 5: payload columns and the columns streamjoin writes
# ----------------------------------------------------------------------------

RESERVED = "row, ts_us, arrival_us"


@pytest.mark.parametrize("chunked", [False, True], ids=["in-memory", "chunked"])
@pytest.mark.parametrize("column,written", [("row", "b_row"), ("ts_us", "b_ts_us"), ("arrival_us", "b_arrival_us"),
                                            ("reason", "quarantine")])
def test_payload_column_named_like_a_written_column_is_refused_before_any_work(
        work: Path, column: str, written: str, chunked: bool) -> None:
    """Was: ``DuplicateError`` after the whole join (``row``, ``ts_us``,
    ``arrival_us``), or the column silently missing from the results
    (``reason``).  Now refused before anything is read but the schema: the
    same command with a missing ``--ts`` column in stream ``a`` fails on the
    collision in ``b``, not on ``a``'s data."""
    write_stream(work / "odd.parquet", offset_us=300, **{column: lambda n: np.arange(n) + 100})
    before = tree(work.parent)
    args = ["--stream", "a=a.parquet", "--stream", "b=odd.parquet", "--key", "k", *RUN]
    args += ["--chunk-rows", "5"] if chunked else []
    line = assert_refused(run_cli(["run", *args], cwd=work), "odd.parquet", "stream 'b'", f"column {column!r}",
                          written, RESERVED, "reason")
    assert_untouched(work.parent, before)
    assert "stage" not in line


def test_two_streams_writing_one_results_column_are_refused(work: Path) -> None:
    """Stream ``a``'s column ``b_x`` and stream ``a_b``'s column ``x`` would both be ``a_b_x``."""
    write_stream(work / "pa.parquet", b_x=lambda n: np.arange(n))
    write_stream(work / "pab.parquet", offset_us=300, x=lambda n: np.arange(n))
    before = tree(work.parent)
    proc = run_cli(["run", "--stream", "a=pa.parquet", "--stream", "a_b=pab.parquet", *RUN], cwd=work)
    assert_refused(proc, "'a_b_x'", "stream 'a'", "'b_x'", "stream 'a_b'", "'x'")
    assert_untouched(work.parent, before)


def test_a_stream_column_written_as_emit_us_is_refused(work: Path) -> None:
    write_stream(work / "us.parquet", us=lambda n: np.arange(n))
    before = tree(work.parent)
    proc = run_cli(["run", "--stream", "emit=us.parquet", "--stream", "b=b.parquet", *RUN], cwd=work)
    assert_refused(proc, "us.parquet", "stream 'emit'", "column 'us'", "'emit_us'")
    assert_untouched(work.parent, before)


# every engine and path refuses a results-column collision the same way, from the schemas,
# before any work (Spark: before the JVM starts; --router alone means Spark, config/choice.py)
ENGINE_PATHS = {
    "local": ["--engine", "local"],
    "chunked": ["--engine", "local", "--chunk-rows", "5"],
    "spark": ["--engine", "spark", "--master", "local[1]"],
    "spark-executors": ["--engine", "spark", "--master", "local[1]", "--spark-conf",
                        "spark.streamjoin.results=executors"],
    "spark-native": ["--engine", "spark", "--master", "local[1]", "--spark-conf", "spark.streamjoin.native=true"],
    "spark-atr": ["--router", "atr", "--partitions", "2", "--master", "local[1]"],
}
COLLISIONS = {
    # o + eu_x and o_eu + x are both o_eu_x
    "prefix": ({"o": {"eu_x": 1}, "o_eu": {"x": 2}}, ["'o_eu_x'", "stream 'o'", "'eu_x'", "stream 'o_eu'", "'x'"]),
    # a prefixed payload name equal to a fact column
    "fact": ({"latency": {"us": 1}, "b": {}}, ["stream 'latency'", "column 'us'", "'latency_us'"]),
    # equal ignoring case: Spark reads a_B_x and a_b_x as one column (the native path failed after the join)
    "case": ({"a": {"B_x": 1}, "a_b": {"x": 2}}, ["'a_B_x'", "'a_b_x'", "differ only in case"]),
}


@pytest.mark.parametrize("path", list(ENGINE_PATHS))
@pytest.mark.parametrize("case", list(COLLISIONS))
def test_results_column_collisions_are_refused_on_every_engine_path(work: Path, case: str, path: str) -> None:
    streams, needles = COLLISIONS[case]
    args = []
    for i, (name, extra) in enumerate(streams.items()):
        write_stream(work / f"{name}.parquet", offset_us=300 * i, **{c: (lambda n, j=j: np.arange(n) * j)
                                                                    for c, j in extra.items()})
        args += ["--stream", f"{name}={name}.parquet"]
    before = tree(work.parent)
    line = assert_refused(run_cli(["run", *args, "--key", "k", *ENGINE_PATHS[path], *RUN], cwd=work), *needles)
    assert "stage" not in line and "internal failure" not in line
    assert_untouched(work.parent, before)


def test_tune_buffer_refuses_a_results_column_collision_too(work: Path) -> None:
    """tune-buffer replays in memory (it ignores --chunk-rows): io.load.load_all's check."""
    write_stream(work / "o.parquet", eu_x=lambda n: np.arange(n))
    write_stream(work / "oeu.parquet", offset_us=300, x=lambda n: np.arange(n))
    before = tree(work.parent)
    proc = run_cli(["tune-buffer", "--recall", "0.9", "--stream", "o=o.parquet", "--stream", "o_eu=oeu.parquet", "--key", "k", *RUN], cwd=work)
    assert_refused(proc, "'o_eu_x'", "stream 'o'", "stream 'o_eu'")
    assert_untouched(work.parent, before)


INTERNAL = ("__ts", "__arrival", "__key0", "__key1", "__last")


@pytest.mark.parametrize("chunked", [False, True], ids=["in-memory", "chunked"])
def test_columns_named_like_internal_ones_are_carried_whole(work: Path, chunked: bool) -> None:
    """Was: ``__ts``, ``__arrival``, ``__key0`` silently dropped from the results
    and the quarantine file.  streamjoin's working columns no longer live in
    the user's namespace: every payload column reaches ``results.parquet`` as
    ``a_<column>`` with its own values, and the quarantine file keeps it."""
    n = 20
    extra = {c: (lambda n, j=j: np.arange(n, dtype=np.int64) * 10 + j) for j, c in enumerate(INTERNAL)}
    write_stream(work / "odd.parquet", n, nulls=True, **extra)
    args = ["--stream", "a=odd.parquet", "--stream", "b=b.parquet", "--key", "k", *RUN]
    args += ["--chunk-rows", "5"] if chunked else []
    proc = run_cli(["run", *args], cwd=work)
    assert proc.returncode == 0, proc.stderr
    res = pl.read_parquet(work / "out" / "results.parquet")
    assert res.height > 0
    kept = [i for i in range(n) if i != 3]  # row 3 has a null ts: quarantined
    for j, c in enumerate(INTERNAL):
        assert f"a_{c}" in res.columns, res.columns
        expected = [kept[r] * 10 + j for r in res["a_row"].to_list()]
        assert res[f"a_{c}"].to_list() == expected, c
    q = pl.read_parquet(work / "out" / "quarantine" / "a.parquet")
    assert q["v"].to_list() == [3]
    for j, c in enumerate(INTERNAL):
        assert q[c].to_list() == [3 * 10 + j], c
    assert q["reason"].to_list() == ["null ts"]


# nightly: a day's results carry <stream>_date, so a payload column `date` collides


D = "2026-11-21"
DAY_US = 1_795_219_200_000_000  # 2026-11-21 00:00 UTC in us


def _nightly_inputs(root: Path, date_column: bool) -> None:
    for name, off in (("a", 0), ("b", 300)):
        part = root / "data" / name / f"date={D}"
        part.mkdir(parents=True)
        n = 20
        ts = DAY_US + np.arange(n, dtype=np.int64) * 1_000 + off
        cols = {"ts": ts, "arrival": ts + 500, "k": np.arange(n, dtype=np.int64) % 3}
        if date_column and name == "a":
            cols["date"] = [D] * n
        pl.DataFrame(cols).write_parquet(part / "part-0.parquet")
    text = '[run]\npolicy = "none"\nout = "out"\n'
    for name in ("a", "b"):
        text += (f'\n[[stream]]\nname = "{name}"\npath = "data/{name}/date={{date}}/"\nts = "ts"\n'
                 f'arrival = "arrival"\nunit = "us"\nwindow = "2ms"\nkeys = ["k"]\n')
    (root / "nightly.toml").write_text(text)


@pytest.mark.parametrize("command", [["run", "nightly.toml", "--date", D], ["validate", "nightly.toml"]],
                         ids=["run", "validate"])
def test_nightly_date_column_is_refused_by_run_and_by_validate(tmp_path: Path, command: list[str]) -> None:
    """Was: ``validate`` passed and every nightly run crashed (``DuplicateError``
    on ``a_date``).  Both now refuse it, naming the file and the column."""
    _nightly_inputs(tmp_path, date_column=True)
    before = tree(tmp_path)
    proc = run_cli(command, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in (f"date={D}", "stream 'a'", "column 'date'", "a_date", "date, row, ts_us, arrival_us"):
        assert needle in lines[0], (needle, lines[0])
    assert tree(tmp_path) == before  # no file anywhere (the run may leave an empty out root, as for any refusal)


def test_nightly_without_a_date_column_still_runs(tmp_path: Path) -> None:
    _nightly_inputs(tmp_path, date_column=False)
    proc = run_cli(["run", "nightly.toml", "--date", D], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = pl.read_parquet(tmp_path / "out" / f"date={D}" / "results.parquet")
    assert res.height > 0 and "a_date" in res.columns


def test_nightly_quarantine_keeps_an_input_column_named_date(tmp_path: Path) -> None:
    """Was: the day of each quarantined row was kept in a column ``date`` added
    to the user's columns, so an arrival column named ``date`` was overwritten
    and then dropped from the quarantine file."""
    _nightly_inputs(tmp_path, date_column=False)
    part = tmp_path / "data" / "a" / f"date={D}" / "part-0.parquet"
    frame = pl.read_parquet(part).rename({"arrival": "date"})
    frame = frame.with_columns(pl.when(pl.int_range(pl.len()) == 4).then(None).otherwise(pl.col("ts")).alias("ts"))
    frame.write_parquet(part)
    config = tmp_path / "nightly.toml"
    config.write_text(config.read_text().replace('arrival = "arrival"', 'arrival = "date"', 1))
    proc = run_cli(["run", "nightly.toml", "--date", D], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    q = pl.read_parquet(tmp_path / "out" / f"date={D}" / "_quarantine" / "a.parquet")
    assert q.columns == ["ts", "date", "k", "reason"]
    assert q["date"].to_list() == [frame["date"][4]] and q["reason"].to_list() == ["null ts"]


# ----------------------------------------------------------------------------
# item 6: key types compared exactly, or refused
# ----------------------------------------------------------------------------


def _keyed(path: Path, keys: pl.Series) -> None:
    n = keys.len()
    pl.DataFrame({"ts": np.arange(n, dtype=np.int64), "k": keys}).write_parquet(path)


KEYED = ["--stream", "a=ka.parquet", "--stream", "b=kb.parquet", "--key", "k", "--unit", "us", "--window", "1h",
         "--out", "out"]


@pytest.mark.parametrize("a,b,needles", [
    # was: compared as floats, distinct keys above 2^53 matched (exit 0, wrong results)
    (pl.Series([2**53 + i for i in range(6)], dtype=pl.Int64), pl.Series([float(2**53)] * 3, dtype=pl.Float64),
     ["a.k (Int64)", "b.k (Float64)", "9007199254740992.0", "2^53"]),
    (pl.Series([1, 2, 3], dtype=pl.Int64), pl.Series([1.0, 2.5], dtype=pl.Float64),
     ["a.k (Int64)", "b.k (Float64)", "2.5", "whole number"]),
    # was: exit 1 with a multi-line polars error
    (pl.Series([2**63 + 1, 5], dtype=pl.UInt64), pl.Series([-1, 5], dtype=pl.Int64),
     ["a.k (UInt64)", "9223372036854775809", "b.k (Int64)", "-1", "no 64-bit integer type"]),
], ids=["int64-float64-above-2^53", "int64-float64-fraction", "uint64-int64-negative"])
def test_lossy_key_types_are_refused_naming_both_columns(work: Path, a: pl.Series, b: pl.Series,
                                                         needles: list[str]) -> None:
    _keyed(work / "ka.parquet", a)
    _keyed(work / "kb.parquet", b)
    before = tree(work.parent)
    assert_refused(run_cli(["run", *KEYED], cwd=work), "key columns #1", *needles)
    assert_untouched(work.parent, before)


@pytest.mark.parametrize("chunked", [False, True], ids=["in-memory", "chunked"])
def test_uint64_above_2_63_joins_int64_exactly(work: Path, chunked: bool) -> None:
    """Was: exit 1, ``strict_cast(Int64)`` failed.  Non-negative int64 keys and
    uint64 keys above 2^63 share UInt64: each key matches itself only."""
    a = [2**63 + 1, 2**64 - 1, 7, 2**63 + 1]
    b = [7, 2**63 - 1, 3, 7]
    _keyed(work / "ka.parquet", pl.Series(a, dtype=pl.UInt64))
    _keyed(work / "kb.parquet", pl.Series(b, dtype=pl.Int64))
    proc = run_cli(["run", *KEYED, *(["--chunk-rows", "2"] if chunked else [])], cwd=work)
    assert proc.returncode == 0, proc.stderr
    res = pl.read_parquet(work / "out" / "results.parquet")
    got = sorted(zip(res["a_row"].to_list(), res["b_row"].to_list()))
    assert got == sorted((i, j) for i, x in enumerate(a) for j, y in enumerate(b) if x == y) == [(2, 0), (2, 3)]
    assert res["a_k"].dtype == pl.UInt64 and res["a_k"].to_list() == [7, 7]  # payload keeps the input's type


def test_integral_float_keys_below_2_53_join_int64_exactly(work: Path) -> None:
    a = [2**53 - 1, 2**53 - 2, 5, -(2**53 - 1)]
    b = [float(2**53 - 1), 5.0, float(-(2**53 - 1)), 4.0]
    _keyed(work / "ka.parquet", pl.Series(a, dtype=pl.Int64))
    _keyed(work / "kb.parquet", pl.Series(b, dtype=pl.Float64))
    proc = run_cli(["run", *KEYED], cwd=work)
    assert proc.returncode == 0, proc.stderr
    res = pl.read_parquet(work / "out" / "results.parquet")
    assert sorted(zip(res["a_row"].to_list(), res["b_row"].to_list())) == [(0, 0), (2, 1), (3, 2)]


# ----------------------------------------------------------------------------
# item 7 (bad input): a 0-byte file, a huge duration, an --out that cannot be written
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["in-memory", "chunked"])
@pytest.mark.parametrize("bad,needles", [
    (b"", ["0 bytes"]),                    # was: exit 1, ArrowInvalid (row count before any check)
    ("truncated", ["not a readable parquet"]),
], ids=["zero-bytes", "truncated"])
def test_unreadable_file_inside_a_directory_is_refused_naming_it(work: Path, bad, needles, chunked: bool) -> None:
    folder = work / "adir"
    folder.mkdir()
    (folder / "p0.parquet").write_bytes((work / "a.parquet").read_bytes())
    good = (work / "b.parquet").read_bytes()
    (folder / "p1.parquet").write_bytes(good[: len(good) // 2] if bad == "truncated" else bad)
    before = tree(work.parent)
    args = ["--stream", "a=adir", "--stream", "b=b.parquet", *RUN, *(["--chunk-rows", "5"] if chunked else [])]
    assert_refused(run_cli(["run", *args], cwd=work), "adir/p1.parquet", "stream 'a'", *needles)
    assert_untouched(work.parent, before)


@pytest.mark.parametrize("option", [
    ["--window", "1000000000d"],                    # was: exit 1, OverflowError
    ["--window", "a=" + "9" * 400 + "w"],           # a float overflow on the way
    ["--window", "2ms", "--policy", "kslack", "--k", "40000000d"],
    ["--window", "2ms", "--period", "2000000w"],
], ids=["window-1e9d", "window-400-digits", "k", "period"])
def test_duration_too_large_to_compute_with_is_refused(work: Path, option: list[str]) -> None:
    before = tree(work.parent)
    proc = run_cli(["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "us", *option,
                    "--out", "out"], cwd=work)
    assert_refused(proc, "too large", "at most 2^60 us", "36,000 years")
    assert_untouched(work.parent, before)


def test_largest_duration_is_accepted(work: Path) -> None:
    proc = run_cli(["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "us",
                    "--window", "36000w", "--out", "out"], cwd=work)  # ~690 years < 2^60 us
    assert proc.returncode == 0, proc.stderr


def _make_read_only(folder: Path) -> list[str]:
    """Make ``folder`` unwritable for this process; returns how (to undo).
    ``chmod`` does not stop root: there the immutable attribute does."""
    folder.chmod(0o555)
    probe = folder / ".probe"
    try:
        probe.write_bytes(b"")
    except OSError:
        return ["chmod"]
    probe.unlink()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return ["chmod", "chattr"]
    folder.chmod(0o755)
    pytest.skip("cannot make a directory unwritable here (root without chattr)")


def _undo_read_only(folder: Path, how: list[str]) -> None:
    if "chattr" in how:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


@pytest.mark.parametrize("out", ["ro/out", "ro/new/deeper/out"], ids=["out-in-ro", "out-under-ro"])
def test_unwritable_out_is_refused_before_any_input_is_read(work: Path, out: str) -> None:
    """Was: found only when the output was staged, after load and join (exit 1).
    Now refused while the options are resolved: a broken input stream in the
    same command is not even opened (its error would come first otherwise)."""
    (work / "ro").mkdir()
    (work / "broken.parquet").write_text("not parquet\n")
    how = _make_read_only(work / "ro")
    try:
        before = tree(work.parent)
        for streams in (["--stream", "a=a.parquet", "--stream", "b=b.parquet"],
                        ["--stream", "a=broken.parquet", "--stream", "b=b.parquet"]):
            proc = run_cli(["run", *streams, "--unit", "us", "--window", "2ms", "--out", out], cwd=work)
            assert_refused(proc, out, "cannot write", "'ro'", "not writable")
            assert tree(work.parent) == before
    finally:
        _undo_read_only(work / "ro", how)
    assert sorted(p.name for p in (work / "ro").iterdir()) == []


def test_unwritable_nightly_out_root_is_refused_before_any_input_is_read(tmp_path: Path) -> None:
    _nightly_inputs(tmp_path, date_column=False)
    (tmp_path / "out").mkdir()
    how = _make_read_only(tmp_path / "out")
    try:
        before = tree(tmp_path)
        proc = run_cli(["run", "nightly.toml", "--date", D], cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and "'out'" in lines[0] and "not writable" in lines[0], proc.stderr
        assert "stage" not in proc.stderr
        assert tree(tmp_path) == before
    finally:
        _undo_read_only(tmp_path / "out", how)


def test_full_out_is_refused_before_any_input_is_read(work: Path) -> None:
    """A file system with no space left: a 64 KiB tmpfs, filled, mounted in a
    private mount namespace (needs root and ``unshare``; skipped elsewhere)."""
    full = work / "full"
    full.mkdir()
    mount = f"mount -t tmpfs -o size=64k tmpfs {full} && (head -c 65536 /dev/zero > {full}/fill || true)"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", mount], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private tmpfs mount here: {probe.stderr.strip()}")
    command = " ".join(CMD + ["run", "--stream", "a=a.parquet", "--stream", "b=b.parquet", "--unit", "us",
                              "--window", "2ms", "--out", "full/out"])
    proc = subprocess.run(["unshare", "-m", "sh", "-c", f"{mount} && exec {command}"], cwd=work,
                          capture_output=True, text=True, timeout=120, env=cli_env())
    assert_refused(proc, "full/out", "cannot write", "'full'", "no space left")
    assert sorted(p.name for p in full.iterdir()) == []  # the tmpfs went with its namespace
