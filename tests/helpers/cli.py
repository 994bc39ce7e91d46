"""Running the real ``streamjoin`` console command from a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def command() -> list[str]:
    script = Path(sys.executable).with_name("streamjoin")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "streamjoin.cli.main"]


CMD = command()


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("FORCE_COLOR", "CLICOLOR_FORCE", "PY_COLORS"):
        env.pop(var, None)
    env["TERM"] = "xterm-256color"  # a colour terminal type -- but stdout/stderr are pipes
    return env


def run_cli(args: list[str], cwd: Path, *, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(CMD + args, cwd=cwd, capture_output=True, text=True, timeout=120, env=cli_env())
    if ok:
        assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_tty(args: list[str], cwd: Path, columns: int = 80, env: dict[str, str] | None = None,
            screen: bool = True) -> tuple[int, str]:
    """Run the console command on a pseudo-terminal of ``columns`` columns: (exit code, text without escapes).

    ``env``: the environment (default :func:`cli_env`).  ``screen``: only what
    stays on the screen (a progress bar's frames are overwritten); else every
    frame, one per line."""
    import pty
    import re
    import select

    master, slave = pty.openpty()
    env = dict(env if env is not None else cli_env())
    env.update(COLUMNS=str(columns), LINES="60")
    proc = subprocess.Popen(CMD + args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError("no output for 120 s")
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout=120)
    os.close(master)
    text = re.sub(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-B])", "",
                  b"".join(chunks).decode(errors="replace"))
    if not screen:
        return code, "\n".join(part for part in re.split(r"[\r\n]", text) if part.strip())
    # what stays on the screen: a carriage return starts the line over (the progress bar redraws so)
    return code, "\n".join(line.rstrip("\r").split("\r")[-1] for line in text.split("\n"))


def assert_chunked_run_equals_in_memory(args: list[str], tmp_path: Path, late: bool = True) -> None:
    """``run ARGS --chunk-rows 50`` (the bounded engine) publishes the same results.parquet
    and report numbers (drops, memory, latency, periods, policy_settings, an outer join's
    padded rows) as ``--chunk-rows 0``; the input spans several chunks and (``late``) has
    late rows."""
    import json

    import polars as pl

    runs = {}
    for label, rows in (("memory", "0"), ("chunked", "50")):
        out = tmp_path / label
        run_cli(args + ["--chunk-rows", rows, "--out", str(out)], tmp_path)
        runs[label] = (json.loads((out / "report.json").read_text()), pl.read_parquet(out / "results.parquet"))
    (want, want_rows), (got, got_rows) = runs["memory"], runs["chunked"]
    assert got["bounded"]["chunks"] > 5 and "bounded" not in want
    assert got_rows.equals(want_rows) and got_rows.schema == want_rows.schema and got_rows.height > 0
    for key in ("truth_results", "emitted_results", "streams", "periods", "memory_tuples", "policy_settings"):
        assert got[key] == want[key], key
    assert ("outer_join" in got) == ("outer_join" in want)
    if "outer_join" in want:   # an outer join's padded rows: the mean latency summed in another order
        g, w = (dict(r["outer_join"], latency_us=dict(r["outer_join"]["latency_us"])) for r in (got, want))
        assert g["latency_us"].pop("mean") == pytest.approx(w["latency_us"].pop("mean"), rel=1e-12)
        assert g == w and g["rows"] > 0
    assert {k: v for k, v in got["latency_us"].items() if k != "mean"} == \
        {k: v for k, v in want["latency_us"].items() if k != "mean"}
    assert (sum(s["dropped_late"] for s in got["streams"]) > 0) == late


def pair_job_toml(data: Path, run: str, right_extra: str = "") -> str:
    """A job's TOML: the ``[run]`` table's lines ``run``, and two keyed streams
    ``left`` / ``right`` read from ``data / "<name>.parquet"`` (arrival column
    ``arrival``, key ``key``, window 2s); ``right_extra``: more lines of the right one."""
    tables = "".join(f"""
[[stream]]
name = "{name}"
path = "{data / (name + '.parquet')}"
arrival = "arrival"
keys = ["key"]
window = "2s"
""" for name in ("left", "right"))
    return f"[run]\n{run.strip()}\n{tables}{right_extra.strip()}\n"
