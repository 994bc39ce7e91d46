"""config/machine.py and its use by settings.resolve: what --capacity and --flow-control run with.

Found by review: the default engine refused --capacity naming an --engine the
user never gave; tune-buffer and compare accepted [run] capacity and ignored
it; --flow-control with --trigger-files crashed mid-run.  Also the settings
that changed shape this wave and must not change a nightly config hash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve

STREAMS = ('[[stream]]\nname = "a"\npath = "a.parquet"\nwindow = "1s"\n'
           '[[stream]]\nname = "b"\npath = "b.parquet"\nwindow = "1s"\n')


def _toml(tmp_path: Path, run: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(f'[run]\nout = "o"\n{run}\n{STREAMS}')
    return path


def test_capacity_runs_on_the_local_engine_when_no_engine_was_chosen(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMJOIN_ENGINE", raising=False)
    cfg = resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o1"), capacity="tuple=5us"))
    assert cfg.engine == "local" and cfg.capacity == "tuple=5us"
    # an engine the user chose runs it (on Spark: on the driver, tests/capacity/test_capacity_spark.py)
    cfg = resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o2"), capacity="tuple=5us",
                                                            engine="spark"))
    assert cfg.engine == "spark" and cfg.capacity == "tuple=5us"
    with pytest.raises(InputError, match=r"bounded-memory engine \(--chunk-rows N\) does not model it"):
        resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o3"), capacity="tuple=5us",
                                                          engine="local", chunk_rows=100))


def test_flow_control_runs_on_the_engine_chosen_and_the_default_gives_way(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMJOIN_ENGINE", "spark")
    fc = "buffer=2,rate=5"
    cfg = resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o1"), flow_control=fc))
    assert cfg.engine == "local" and cfg.flow_control.buffer == 2   # the default engine, not the user's choice
    # an engine or a router the user chose runs it (tests/capacity/test_flow_spark.py)
    for flags in ({"engine": "spark"}, {"router": "atr"}, {"engine": "spark", "router": "ctr"}):
        cfg = resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o2"), flow_control=fc, **flags))
        assert cfg.engine == "spark" and cfg.flow_control.buffer == 2, flags


@pytest.mark.parametrize("kind", ["tune-buffer", "compare"])
def test_tune_buffer_and_compare_refuse_a_capacity_they_would_ignore(tmp_path, kind):
    toml = _toml(tmp_path, 'policy = "static"\nretention = "1s"\ncapacity = "tuple=60s,queue=1"')
    with pytest.raises(InputError, match=f"capacity: {kind} replays an infinite machine") as err:
        resolve(toml, Flags(out=str(tmp_path / "o")), output_kind=kind)
    assert "\n" not in str(err.value)


def test_flow_control_with_trigger_files_is_refused_before_any_work(tmp_path):
    toml = _toml(tmp_path, 'policy = "spark-ss"\nwatermark = "50s"\ntrigger_files = 1')
    with pytest.raises(InputError, match="--flow-control with --trigger-files"):
        resolve(toml, Flags(out=str(tmp_path / "o"), flow_control="buffer=2,rate=5"))


def test_tune_buffer_for_flink_keeps_the_jobs_watermark_interval(tmp_path):
    """The engine keys of the *other* emulations are dropped when tuning; flink's own
    watermark_interval is not, although flink-sql lists the same key."""
    toml = _toml(tmp_path, 'policy = "flink"\nwatermark = "50s"\nwatermark_interval = "0ms"')
    cfg = resolve(toml, Flags(out=str(tmp_path / "o"), policy="flink"), output_kind="tune-buffer")
    assert cfg.policy.watermark_interval_us == 0
    cfg = resolve(toml, Flags(out=str(tmp_path / "o2"), policy="static", retention=["1s"]), output_kind="tune-buffer")
    assert cfg.policy.name == "static"   # another family: the flink keys are dropped, not refused


def test_new_settings_left_at_their_defaults_stay_out_of_the_config(tmp_path):
    """report.json's config -- and a nightly partition's config hash -- of a job that uses
    none of this wave's settings is what it was (else every published day turns stale)."""
    d = resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o"))).to_dict()
    for key in ("partition_capacity", "capacity", "flow_control"):
        assert key not in d, key
    assert "join" not in d["policy"]
    d = resolve(_toml(tmp_path, 'policy = "none"'), Flags(out=str(tmp_path / "o2"),
                                                          partition_capacity="mem=2")).to_dict()
    assert d["partition_capacity"][1] == 2.0
