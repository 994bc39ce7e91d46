"""Start-up of a counted local run (issue 21, eighth pass): what it does not import.

A counted ``run --engine local --no-results`` (two streams, >= 2**16 rows, static)
must not import what only other runs use: pydantic (typer's coercion, skipped for
values that need none: ``cli/main._plain_value``), the results writer's modules,
the duplicate check of materialised combinations, the watermark-tuning curve.
And ``_plain_value`` gives every parameter of every command the value typer's own
coercion gives.

Ninth pass: the cyclic garbage collector is off while a command's modules are
imported (``cli/common.pause_gc``) and on again, with the imported objects frozen,
once they are (``startup_done``): in ``run`` after its job's imports, in every other
command before it starts; when ``main()`` ends nothing of its own stays frozen
(``end_gc_pause``), and a caller's own frozen objects were left frozen throughout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: made lazy for a counted run (docs/performance.md, "eighth pass: start-up and metrics")
NOT_IMPORTED = (
    "pydantic",
    "streamjoin.pipelines.replay.results",
    "streamjoin.pipelines.io.results_file",
    "streamjoin.pipelines.io.chunks",
    "streamjoin.pipelines.replay.duplicates",
    "streamjoin.pipelines.analysis.watermark_tuning",
    "streamjoin.pipelines.analysis.flink_tuning",
    "streamjoin.pipelines.analysis.delay_summary",
)

DRIVER = """
import json, sys
from streamjoin.cli.main import main
sys.argv = ['streamjoin', *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
sys.stderr.flush()
"""


#: records, for every collection while ``main()`` runs, whether the start-up's objects were frozen yet
#: (and the most objects frozen), and the collector's state once main() returned; ``main()`` runs in a
#: process of its own (in pytest's it would install its signal handlers, ignore Ctrl-C and SIGTERM once
#: done, and make pytest's process exit with main()'s code: cli/main._exit_without_teardown)
GC_DRIVER = """
import gc, json, sys
seen = {"main": False, "unfrozen": 0, "frozen": 0, "most_frozen": 0}
def on_gc(phase, info):
    if phase == "start" and seen["main"]:
        seen["unfrozen" if gc.get_freeze_count() == 0 else "frozen"] += 1
        seen["most_frozen"] = max(seen["most_frozen"], gc.get_freeze_count())
gc.callbacks.append(on_gc)
from streamjoin.cli.main import main
sys.argv = ['streamjoin', *sys.argv[1:]]
CALLER = None   # the caller's own collector state, set up before main() (gc_seen's caller)
before = gc.get_freeze_count()
seen["main"] = True
try:
    main()
except SystemExit as exc:
    code = exc.code
seen["main"] = False
seen.update(code=code, enabled=gc.isenabled(), freeze_count=gc.get_freeze_count(), before=before)
print(json.dumps(seen), file=sys.stderr)
sys.stderr.flush()
"""


def gc_seen(*args: str, code: int = 0, caller: str = "None") -> dict:
    driver = GC_DRIVER.replace("CALLER = None", caller)
    done = subprocess.run([sys.executable, "-c", driver, *args], capture_output=True, text=True)
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    assert seen["code"] == code, done.stderr
    return seen


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    subprocess.run([sys.executable, "-m", "streamjoin.cli.main", "generate", "bench", "--out", str(out),
                    "--seed", "7", "--scale", "0.025"], check=True, capture_output=True)
    return out


def test_a_counted_local_run_does_not_import_what_it_does_not_use(data: Path, tmp_path: Path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", DRIVER % (NOT_IMPORTED,), "run", str(data / "bench.toml"),
                           "--engine", "local", "--policy", "static", "--retention", "50ms", "--no-results",
                           "--out", str(out)], capture_output=True, text=True)
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    assert seen["code"] == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert sum(s["rows"] for s in report["streams"]) >= 1 << 16
    assert "join.count" in report["timings_s"], "the run was not counted: the test checks nothing"
    assert seen["loaded"] == []


def test_the_results_writer_is_still_imported_when_results_are_written(data: Path, tmp_path: Path):
    # the other side of the lazy import: a run that writes results loads the writer and writes the file
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", DRIVER % (NOT_IMPORTED,), "run", str(data / "bench.toml"),
                           "--engine", "local", "--policy", "static", "--retention", "50ms", "--out", str(out)],
                          capture_output=True, text=True)
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    assert seen["code"] == 0, done.stderr
    assert "streamjoin.pipelines.replay.results" in seen["loaded"]
    assert (out / "results.parquet").stat().st_size > 0


def test_a_run_collects_no_garbage_until_its_modules_are_imported(data: Path, tmp_path: Path):
    seen = gc_seen("run", str(data / "bench.toml"), "--engine", "local", "--policy", "static", "--retention", "50ms",
                   "--no-results", "--out", str(tmp_path / "out"))
    assert seen["unfrozen"] == 0   # no collection while numpy, polars, pyarrow, streamjoin were imported
    assert seen["frozen"] > 0 and seen["most_frozen"] > 10_000   # on during the job, the modules' objects frozen
    assert seen["enabled"] and seen["freeze_count"] == 0   # main() leaves the collector as it found it


def test_every_other_command_runs_with_the_collector_on(data: Path):
    seen = gc_seen("inspect", str(data / "left.parquet"), "--unit", "us")
    assert seen["frozen"] > 0   # the command itself collected, after start-up
    assert seen["enabled"] and seen["freeze_count"] == 0


#: command-line values of the kinds a parameter receives: not given, words, repeated words, paths, numbers, flags
#: (and what the shell hands over unchanged: blanks, ``~``, ``..``, bytes that are not UTF-8)
VALUES = [None, "50ms", "x", ("a", "b=c"), ("one",), (), "samples", "no/such/file.toml", "", "12", "0.5", False, True,
          " 50ms ", ("a ", " b"), "~/x.toml", "../samples", b"caf\xe9".decode("utf-8", "surrogateescape")]


def test_plain_values_are_typers_values():
    import typer.main

    from streamjoin.cli.main import _TYPER, _plain_value, app

    group = typer.main.get_command(app)
    ctx = group.make_context("streamjoin", ["run"], resilient_parsing=True)
    checked = 0
    for name, command in group.commands.items():
        for param in command.params:
            typer_process = type(param).process_value   # typer's own, not the instance's plain one
            for value in VALUES:
                plain = _plain_value(param, value)
                if plain is _TYPER:
                    continue
                try:
                    want = typer_process(param, ctx, value)
                except Exception as exc:  # noqa: BLE001 - typer refused it: so must the plain path
                    pytest.fail(f"{name} {param.name}={value!r}: typer refuses it ({exc}), plain gives {plain!r}")
                if param.callback is not None:
                    plain = param.callback(ctx, param, plain)
                assert type(plain) is type(want) and plain == want, (name, param.name, value, plain, want)
                checked += 1
    if any(hasattr(p, "type_descriptor") for c in group.commands.values() for p in c.params):
        assert checked > 300   # every command's options: not given, words, paths
    else:   # a typer without pydantic coercion (click's types): nothing is bypassed
        assert checked == 0


def test_options_before_the_command_name_are_streamjoins_own():
    # `streamjoin --help run` is the help of streamjoin itself: every command, not only `run`
    done = subprocess.run([sys.executable, "-m", "streamjoin.cli.main", "--help", "run"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for command in ("run", "inspect", "tune-buffer", "backfill", "compare"):
        assert command in done.stdout, (command, done.stdout)


def test_the_collector_is_on_again_when_a_run_stops_before_its_job():
    # a usage error before run's imports (startup_done not reached): main() still turns the collector on
    seen = gc_seen("run", "--no-such-option", code=2)
    assert seen["enabled"] and seen["freeze_count"] == 0


def test_a_caller_that_froze_its_own_objects_finds_them_frozen_after_main(data: Path):
    # gc.freeze() before main() (e.g. a server that forks workers): main() leaves that to its caller
    seen = gc_seen("inspect", str(data / "left.parquet"), "--unit", "us", caller="gc.freeze()")
    assert seen["before"] > 10_000
    # still frozen (0 if main() unfroze them), nothing of main()'s added (fewer: frozen objects freed since)
    assert seen["enabled"] and seen["before"] // 2 < seen["freeze_count"] <= seen["before"]


def test_an_interrupt_while_the_collector_is_turned_on_leaves_it_on(monkeypatch):
    # Ctrl-C raises KeyboardInterrupt between any two bytecodes (pipelines/io/output.py's guard): one landing
    # inside startup_done, before gc.enable(), must still leave main()'s end_gc_pause something to undo
    import gc

    from streamjoin.cli import common

    freeze = gc.freeze

    def interrupted() -> None:
        monkeypatch.setattr(gc, "freeze", freeze)
        raise KeyboardInterrupt

    assert gc.isenabled() and gc.get_freeze_count() == 0
    monkeypatch.setattr(common, "_GC", {"paused": False, "frozen": False})
    try:
        common.pause_gc()
        monkeypatch.setattr(gc, "freeze", interrupted)
        with pytest.raises(KeyboardInterrupt):
            common.startup_done()
        common.end_gc_pause()
        assert gc.isenabled() and gc.get_freeze_count() == 0
    finally:   # whatever happened, pytest's own collector as it was
        gc.enable()
        gc.unfreeze()
