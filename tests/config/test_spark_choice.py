"""config/choice.py: one rule for "the user chose Spark", used by the five features
the default engine gives way for (flow control, capacity, bounded-memory chunks,
count windows, the spark-ss / flink emulations).

Found by review: ``--master spark://...`` (or --partitions, --spark-conf) without
--engine ran locally and reported ``"engine": "local"`` next to the master; and
``--policy flink --router atr`` failed "--router atr needs --engine spark" though
Spark is the default engine.
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


@pytest.mark.parametrize("env", [None, "spark", "local"])
@pytest.mark.parametrize("choice", list(CHOICES))
def test_the_five_features_agree_on_who_chose_spark(tmp_path, monkeypatch, env, choice):
    if env is None:
        monkeypatch.delenv("STREAMJOIN_ENGINE", raising=False)
    else:
        monkeypatch.setenv("STREAMJOIN_ENGINE", env)
    flags, run = CHOICES[choice]
    engine_chosen = choice in ("--engine spark", "[run] engine")
    router = "router" in choice
    # the env var is a default, not a choice: a router or a Spark setting over env=local is refused
    # (router) or runs where the env var put it; --engine / [run] engine always wins
    spark = engine_chosen or (choice != "nothing" and env != "local")
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
        if router and env == "local" and not engine_chosen:
            assert "needs --engine spark" in got or "count windows run with" in got, (name, got)
        elif spark and name in ON_SPARK:
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
