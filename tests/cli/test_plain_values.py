"""cli/common.PlainValues: the options it coerces itself come out exactly as typer's own coercion
makes them, and a ``run`` parses without importing pydantic."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st
from typer._click import Context
from typer._coercion import build_runtime_param

from streamjoin.cli.common import PlainValues
from streamjoin.cli.main import app


def _params():
    group = typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        for p in command.params:
            if hasattr(p, "type_descriptor"):
                yield name, command, p


PARAMS = list(_params())


def _both(command, p, value):
    """(PlainValues' result, typer's), or the exception each raised."""
    ctx = Context(command)
    out = []
    for coercion in (PlainValues(p), build_runtime_param(p.type_descriptor)):
        try:
            out.append(coercion.coerce(value, param=p, ctx=ctx))
        except Exception as exc:   # noqa: BLE001 - compared by type and message
            out.append((type(exc), str(exc)))
    return out


def test_every_kind_occurs():
    """The commands have options of each kind PlainValues keeps to itself (so the tests below test something)."""
    kinds = {PlainValues(p).kind for _, _, p in PARAMS}
    assert {"str", "strs", "path", None} <= kinds


@pytest.mark.parametrize("value_of", [
    lambda tmp: None, lambda tmp: "", lambda tmp: "50ms", lambda tmp: "left=a b", lambda tmp: "-",
    lambda tmp: str(tmp), lambda tmp: str(tmp / "missing.toml"), lambda tmp: str(tmp / "cfg.toml"),
    lambda tmp: (), lambda tmp: ("a",), lambda tmp: ("a", "b=c", ""), lambda tmp: "12", lambda tmp: "0.5",
])
def test_same_as_typer_for_every_option(tmp_path, value_of):
    (tmp_path / "cfg.toml").write_text("")
    value = value_of(tmp_path)
    for name, command, p in PARAMS:
        mine, typers = _both(command, p, value)
        assert mine == typers and type(mine) is type(typers), (name, p.name, value)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(), st.lists(st.text(), max_size=3).map(tuple)))
def test_same_as_typer_for_any_text(value):
    for name, command, p in PARAMS:
        if PlainValues(p).kind is not None:
            mine, typers = _both(command, p, value)
            assert mine == typers and type(mine) is type(typers), (name, p.name, value)


def test_an_unreadable_file_is_typers_error(tmp_path, monkeypatch):
    """The config argument: a file that exists but cannot be read gets typer's own message
    (``os.access`` says no -- as root every file is readable, so it is made to)."""
    f = tmp_path / "cfg.toml"
    f.write_text("")
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    command, p = next((c, p) for n, c, p in PARAMS if n == "run" and p.name == "config")
    mine, typers = _both(command, p, str(f))
    assert mine == typers and "not readable" in typers[1]
    missing = str(tmp_path / "missing.toml")   # no file: no readable check, either way
    assert _both(command, p, missing) == [tmp_path / "missing.toml"] * 2


def test_run_parses_without_pydantic(tmp_path):
    """Parsing the core command (config path, strings, repeatable strings, a flag) imports no
    pydantic: the process reports at exit (the config is missing, so the run stops after parsing)."""
    code = ("import atexit, sys\n"
            "import streamjoin.cli.main as m\n"
            "atexit.register(lambda: print('pydantic' in sys.modules, flush=True))\n"
            f"sys.argv = ['streamjoin', 'run', {str(tmp_path / 'none.toml')!r}, '--engine', 'local', '--router',"
            " 'none', '--policy', 'static', '--retention', '50ms', '--window', '1s', '--stream', 'a=x.parquet',"
            f" '--no-results', '--out', {str(tmp_path / 'out')!r}]\n"
            "m.main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "config file not found" in out.stderr and out.returncode == 2, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
