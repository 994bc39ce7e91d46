"""Set-up: the README's two fresh-machine commands, ``.ci/run`` and ``.ci/bootstrap``.

CI must run what the README tells a user to run, so ``.ci/run`` is pinned to
the README's test command verbatim, and the README's fresh-machine section
holds exactly two commands, both starting with the set-up script.  The
script's refusal path is checked with stand-ins for ``java`` and ``id`` (a
non-root user with an old Java): one line naming what to install, non-zero
exit, no ``.venv`` made.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Fresh machine: two commands"
RUN_CMD = "bash .ci/bootstrap && .venv/bin/streamjoin run samples/soccer/soccer.toml --out out/soccer"
TEST_CMD = "bash .ci/bootstrap --test && .venv/bin/python -m pytest -q"


def _fresh_machine_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(SECTION) == 1, f"README.md: expected one '{SECTION}' heading"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def _readme_commands() -> list[str]:
    """Every line of every fenced code block in the fresh-machine section."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", _fresh_machine_section(), flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _ci_run_commands() -> list[str]:
    """``.ci/run`` without its shebang, comments and blank lines."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_readme_fresh_machine_section_has_exactly_the_two_commands():
    assert _readme_commands() == [RUN_CMD, TEST_CMD]


def test_ci_run_runs_exactly_the_readme_test_command():
    readme_test = _readme_commands()[-1]
    assert _ci_run_commands() == ['set -euo pipefail', 'cd "$(dirname "$0")/.."', readme_test]


def test_readme_requirements_list_python_java_and_chromium():
    section = _fresh_machine_section()
    requirements = section.split("Requirements:", 1)[1]
    for needed in ("Python 3.11+", "Java 17+", "openjdk-17-jre-headless", "`chromium`", "/usr/bin/chromium",
                   "`javac`", "openjdk-17-jdk-headless"):
        assert needed in requirements, f"README Requirements: {needed!r} missing"


def _stand_in(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)


@pytest.mark.parametrize(("version_line", "found"), [
    ('openjdk version "11.0.2" 2019-01-15', "Java 11 found"),
    ('java version "1.8.0_292"', "Java 8 found"),
])
@pytest.mark.parametrize("mode", [[], ["--test"]])
def test_bootstrap_refuses_old_java_when_it_cannot_install(tmp_path, version_line, found, mode):
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "bootstrap", repo / ".ci" / "bootstrap")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stand_in(bindir, "java", f"echo '{version_line}' >&2")
    _stand_in(bindir, "id", "echo 1000")  # not root: nothing may be installed
    (bindir / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    proc = subprocess.run(["bash", str(repo / ".ci" / "bootstrap"), *mode],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: Java 17+ is required ({found}): install a JDK/JRE 17+, "
        "e.g. apt-get install openjdk-17-jre-headless"]
    assert not (repo / ".venv").exists()


def test_bootstrap_rejects_an_unknown_mode():
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "bootstrap"), "--tests"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "usage: bash .ci/bootstrap [--test]\n"
