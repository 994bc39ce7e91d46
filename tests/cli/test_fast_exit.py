"""The process ends without the interpreter's teardown once ``main()`` finished (issue 21).

A driver process holds an object whose ``__del__`` writes ``teardown`` to
stderr: the interpreter's teardown calls it, ``os._exit`` does not.  The exit
code and everything printed (``--json``: the whole report, flushed) must be
the same either way; ``atexit`` handlers registered after the CLI was imported
still run; and with coverage.py or PySpark loaded the usual teardown stays.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLIGHTS = ROOT / "samples" / "flights" / "flights.toml"

DRIVER = """
import atexit, sys, types
for name in sys.argv[2].split(","):
    if name:
        sys.modules[name] = types.ModuleType(name)   # looks loaded to the CLI's check
class Witness:
    def __del__(self):
        sys.stderr.write("teardown\\n")
witness = Witness()
import streamjoin.cli.main as m
atexit.register(lambda: sys.stderr.write("late handler ran\\n"))
args = sys.argv[3:]
sys.argv = ["streamjoin", *args]
m.main()
"""


def drive(tmp_path: Path, fake_modules: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DRIVER, "x", fake_modules, *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


def test_a_finished_run_exits_without_teardown_with_its_output_and_code(tmp_path: Path) -> None:
    proc = drive(tmp_path, "", "run", str(FLIGHTS), "--engine", "local", "--no-results", "--json", "--out", "out")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)   # all of it, flushed before the exit
    assert report["truth_results"] == json.loads((tmp_path / "out" / "report.json").read_text())["truth_results"]
    assert "late handler ran" in proc.stderr
    assert "teardown" not in proc.stderr


def test_bad_input_keeps_its_exit_code(tmp_path: Path) -> None:
    proc = drive(tmp_path, "", "run", str(FLIGHTS), "--engine", "local", "--policy", "bogus", "--out", "out")
    assert proc.returncode == 2
    assert "error: --policy bogus" in proc.stderr
    assert "teardown" not in proc.stderr


@pytest.mark.parametrize("loaded", ["coverage", "pyspark"])
def test_the_usual_teardown_under_coverage_or_pyspark(tmp_path: Path, loaded: str) -> None:
    proc = drive(tmp_path, loaded, "run", str(FLIGHTS), "--engine", "local", "--no-results", "--out", "out")
    assert proc.returncode == 0, proc.stderr
    assert "teardown" in proc.stderr


def test_an_error_after_main_keeps_its_exit_code(tmp_path: Path) -> None:
    """A caller that runs ``main()``, catches its exit and then fails (an uncaught
    exception: a test's assertion) exits 1 as Python does, not with ``main()``'s 0:
    the fast exit must not hide that failure."""
    code = ("import sys; from streamjoin.cli.main import main; sys.argv = ['streamjoin', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nassert False, 'checked after main'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "AssertionError: checked after main" in proc.stderr
    assert proc.returncode == 1
