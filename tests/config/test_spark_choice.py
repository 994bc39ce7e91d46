"""config/choice.py: one rule for "the user chose Spark", used by the five features
the default engine gives way for (flow control, capacity, bounded-memory chunks,
count windows, the spark-ss / flink emulations).

Found by review: ``--master spark://...`` (or --partitions, --spark-conf) without
--engine ran locally and reported ``"engine": "local"`` next to the master; and
``--policy flink --router atr`` failed "--router atr needs --engine spark" though
Spark is the default engine.  Later: with ``STREAMJOIN_ENGINE=local`` a Spark
setting was ignored without a word and a router refused; the environment default
now gives way to them as the built-in default does (choice.engine_of).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve

# feature -> (policy, window of stream a, extra flags); the emulations and count windows
# set their own policy
FEATURES = {
    "flow": ("none", "1s", {"flow_control": "buffer=2,rate=5"}),
    "capacity": ("none", "1s", {"capacity": "tuple=5us"}),
    "chunk_rows": ("none", "1s", {"chunk_rows": 100}),
    "count_window": ("static", "5tuples", {"retention": ["b=1s"]}),
    "emulation": ("flink", "1s", {"watermark": ["10ms"]}),
}
# what may run on Spark; the others are refused there with their one-line error
ON_SPARK = {"flow", "capacity", "emulation"}
REFUSAL = {"chunk_rows": "bounded memory runs on --engine local", "count_window": "count windows run with"}

# how the user chose (flags, [run] lines); None: nothing chosen
CHOICES = {
    "nothing": ({}, ""),
    "--engine spark": ({"engine": "spark"}, ""),
    "[run] engine": ({}, 'engine = "spark"'),
    "--router atr": ({"router": "atr"}, ""),
    "[run] router": ({}, 'router = "atr"'),
    "--master": ({"master": "spark://nowhere:7077"}, ""),
    "[run] master": ({}, 'master = "spark://nowhere:7077"'),
    "--partitions": ({"partitions": 64}, ""),
    "[run] partitions": ({}, "partitions = 64"),
    "--spark-conf": ({"spark_conf": ["spark.sql.shuffle.partitions=8"]}, ""),
    "[run] spark_conf": ({}, '[run.spark_conf]\n"spark.sql.shuffle.partitions" = "8"'),
}


def _toml(tmp_path: Path, policy: str, window: str, run: str) -> Path:
    path = tmp_path / "job.toml"
    # [run.spark_conf] is a sub-table: it goes after the [run] keys
    head, _, table = run.partition("[run.spark_conf]")
    path.write_text(f'[run]\nout = "o"\npolicy = "{policy}"\n{head}\n'
                    + (f"[run.spark_conf]{table}\n" if table else "")
                    + f'[[stream]]\nname = "a"\npath = "a.parquet"\nwindow = "{window}"\n'
                    '[[stream]]\nname = "b"\npath = "b.parquet"\nwindow = "1s"\n')
    return path


def _set_env(monkeypatch, env: str | None) -> None:
    """``$STREAMJOIN_ENGINE`` set to ``env``, or unset (the built-in default, Spark)."""
    if env is None:
        monkeypatch.delenv("STREAMJOIN_ENGINE", raising=False)
    else:
        monkeypatch.setenv("STREAMJOIN_ENGINE", env)


@pytest.mark.parametrize("env", [None, "spark", "local"])
@pytest.mark.parametrize("choice", list(CHOICES))
def test_the_five_features_agree_on_who_chose_spark(tmp_path, monkeypatch, env, choice):
    _set_env(monkeypatch, env)
    flags, run = CHOICES[choice]
    # the env var is a default, not a choice: a router or a Spark setting chooses Spark over
    # env=local exactly as over the built-in default (it used to run locally, the setting ignored)
    spark = choice != "nothing"
    outcomes = {}
    for name, (policy, window, extra) in FEATURES.items():
        toml = _toml(tmp_path, policy, window, run)
        try:
            cfg = resolve(toml, Flags(out=str(tmp_path / f"o-{name}"), **flags, **extra))
            outcomes[name] = cfg.engine
        except InputError as err:
            assert "\n" not in str(err)
            outcomes[name] = str(err)
    for name, got in outcomes.items():
        if spark and name in ON_SPARK:
            assert got == "spark", (name, got)
        elif spark:
            assert REFUSAL[name] in got, (name, got)
        else:
            assert got == "local", (name, got)


def test_a_refusal_names_the_spark_setting_that_chose_spark(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMJOIN_ENGINE", raising=False)
    toml = _toml(tmp_path, "none", "1s", "")
    with pytest.raises(InputError, match=r"--chunk-rows 100: .*--master spark://nowhere:7077"):
        resolve(toml, Flags(out=str(tmp_path / "o"), chunk_rows=100, master="spark://nowhere:7077"))
    toml = _toml(tmp_path, "static", "5tuples", "partitions = 64")
    with pytest.raises(InputError, match=r"count windows run with .* not \[run\] partitions"):
        resolve(toml, Flags(out=str(tmp_path / "o2"), retention=["b=1s"]))


# a plain run (no feature that gives way): which engine, and the Spark settings it keeps
PLAIN = {k: v for k, v in CHOICES.items() if k not in ("--router atr", "[run] router")}


@pytest.mark.parametrize("env", [None, "spark", "local"])
@pytest.mark.parametrize("choice", list(PLAIN))
def test_a_spark_setting_means_spark_whatever_the_environment_default(tmp_path, monkeypatch, env, choice):
    _set_env(monkeypatch, env)
    flags, run = PLAIN[choice]
    cfg = resolve(_toml(tmp_path, "none", "1s", run), Flags(out=str(tmp_path / "o"), **flags))
    expected = "local" if choice == "nothing" and env == "local" else "spark"
    assert cfg.engine == expected
    if "master" in choice:
        assert cfg.master == "spark://nowhere:7077"
    if "partitions" in choice:
        assert cfg.partitions == 64
    if "spark" in choice and "conf" in choice:
        assert ("spark.sql.shuffle.partitions", "8") in cfg.spark_conf


@pytest.mark.parametrize("router", ["atr", "ctr", "auto"])
def test_a_router_over_the_local_environment_default_runs_on_spark(tmp_path, monkeypatch, router):
    """Was: ``--router atr needs --engine spark`` with ``STREAMJOIN_ENGINE=local``
    (the built-in default ran it on Spark)."""
    monkeypatch.setenv("STREAMJOIN_ENGINE", "local")
    cfg = resolve(_toml(tmp_path, "none", "1s", ""), Flags(out=str(tmp_path / "o"), router=router))
    assert (cfg.engine, cfg.router) == ("spark", router)


@pytest.mark.parametrize("env", [None, "spark", "local"])
@pytest.mark.parametrize("how", ["flag", "config"])
def test_an_explicit_engine_beats_the_environment_and_the_default(tmp_path, monkeypatch, env, how):
    _set_env(monkeypatch, env)
    for engine in ("local", "spark"):
        flags, run = ({"engine": engine}, "") if how == "flag" else ({}, f'engine = "{engine}"')
        cfg = resolve(_toml(tmp_path, "none", "1s", run), Flags(out=str(tmp_path / f"o-{engine}"), **flags))
        assert cfg.engine == engine


def test_a_router_with_the_local_engine_chosen_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMJOIN_ENGINE", "spark")
    with pytest.raises(InputError, match="--router atr needs --engine spark"):
        resolve(_toml(tmp_path, "none", "1s", ""), Flags(out=str(tmp_path / "o"), engine="local", router="atr"))


def test_local_engine_beside_spark_settings_notes_them_on_stderr(tmp_path):
    """Through the CLI: ``--engine local`` with ``--master`` / ``--spark-conf`` / ``[run] master``
    runs locally and says in one ``note:`` line (not an error, exit 0) which Spark settings it
    ignores; without Spark settings nothing is said."""
    import json
    import subprocess

    from helpers.cli import CMD, cli_env
    from helpers.spark_runs import write_inputs

    cfg = write_inputs(tmp_path, 2, seed=3)
    spark_toml = tmp_path / "spark.toml"
    spark_toml.write_text(cfg.read_text().replace("[run]\n", '[run]\nmaster = "spark://nowhere:7077"\n', 1))
    cases = [
        (cfg, ["--master", "local[2]", "--spark-conf", "spark.sql.shuffle.partitions=8"],
         "note: --engine local: ignoring the Spark settings --master local[2], "
         "--spark-conf spark.sql.shuffle.partitions=8"),
        (spark_toml, [], "note: --engine local: ignoring the Spark settings [run] master"),
        (cfg, [], None),
    ]
    for i, (toml, extra, note) in enumerate(cases):
        out = tmp_path / f"o{i}"
        proc = subprocess.run(CMD + ["run", str(toml), "--engine", "local", "--policy", "kslack", "--k", "10ms",
                                     "--no-results", "--out", str(out), *extra],
                              capture_output=True, text=True, timeout=300, env=cli_env())
        assert proc.returncode == 0, proc.stderr
        notes = [ln for ln in proc.stderr.splitlines() if ln.startswith(("note:", "warning:", "error:"))]
        assert notes == ([note] if note else []), proc.stderr
        assert json.loads((out / "report.json").read_text())["config"]["engine"] == "local"
