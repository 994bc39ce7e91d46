"""Running the real ``streamjoin`` console command from a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
