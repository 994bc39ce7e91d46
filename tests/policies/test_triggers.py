"""Early re-decision settings (pipelines/policies/triggers.py; seed 003): each one
changes when a decision fires, and bad settings are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.policies.triggers import Triggers, fired, probe_ticks

PROBE = 100


def _fire(cfg, arrivals, bad=None, ticks=None):
    ticks = np.arange(1_000, 5_000, PROBE, dtype=np.int64) if ticks is None else ticks
    bad = bad or [np.empty(0, np.int64) for _ in arrivals]
    return fired(cfg, ticks, PROBE, 0, 1_000, [np.asarray(a, np.int64) for a in arrivals], bad)


def _steady(rate_per_probe, until=5_000, start=0):
    step = PROBE // rate_per_probe
    return np.arange(start, until, step, dtype=np.int64)


def test_rate_ratio():
    a = np.concatenate([_steady(20, 3_000), _steady(100, 5_000, 3_000)])   # x5 at 3000
    assert any(tr["kind"] == "rate" for trs in _fire(Triggers(), [a]).values() for tr in trs)
    assert not _fire(Triggers(rate_ratio=6.0), [a])


def test_rate_above_and_below_are_absolute():
    a = _steady(20)                                   # 20 per 100 us = 200,000 tuples/s
    assert not _fire(Triggers(), [a])
    assert _fire(Triggers(rate_above=150_000), [a])
    assert not _fire(Triggers(rate_above=250_000), [a])
    assert _fire(Triggers(rate_below=250_000), [a])
    assert not _fire(Triggers(rate_below=150_000), [a])


def test_rate_history_run_compares_with_the_whole_run():
    # slow for long, then 4x faster for good: the recent history (10 probes) takes the new
    # rate in within a few probes; the run's mean stays low, so "run" keeps firing longer
    a = np.concatenate([_steady(5, 20_000), _steady(20, 40_000, 20_000)])
    ticks = np.arange(1_000, 40_000, PROBE, dtype=np.int64)

    def rate_ticks(cfg):
        return {t for t, trs in _fire(cfg, [a], ticks=ticks).items() if any(tr["kind"] == "rate" for tr in trs)}

    recent, run = rate_ticks(Triggers()), rate_ticks(Triggers(rate_history="run"))
    assert recent and max(recent) < 20_500
    assert recent < run and max(run) > 22_000


def test_bad_rows_min_and_factor():
    a = _steady(20)
    bad = [np.full(6, 2_550, dtype=np.int64)]
    assert _fire(Triggers(), [a], bad)
    assert not _fire(Triggers(bad_rows_min=7), [a], bad)
    assert not _fire(Triggers(bad_rows_factor=10.0), [a], [np.concatenate([np.arange(0, 2_500, 50), bad[0]])])


def test_min_streams_needs_several_streams_at_once():
    burst = np.concatenate([_steady(20, 3_000), _steady(100, 5_000, 3_000)])
    calm = _steady(20)
    assert _fire(Triggers(), [burst, calm])
    assert not _fire(Triggers(min_streams=2), [burst, calm])
    assert _fire(Triggers(min_streams=2), [burst, burst.copy()])


def test_parse_and_errors():
    t = Triggers.parse({"rate_ratio": "5", "rate_above": "off", "bad_rows_reason": "null ts", "min_streams": 2})
    assert (t.rate_ratio, t.rate_above, t.bad_rows_reason, t.min_streams) == (5.0, None, "null ts", 2)
    for bad in ({"nope": 1}, {"rate_ratio": "0.5"}, {"rate_history": "week"}, {"min_streams": "1.5"},
                {"rate_min_count": "off"}):
        with pytest.raises(InputError):
            Triggers.parse(bad)


def test_probe_ticks_one_per_gap():
    arrival = np.array([5, 7, 1_000_005, 1_000_006], dtype=np.int64)
    ticks = probe_ticks(arrival, 0, 10, 0)
    assert list(ticks) == [1_000_000]          # the tick before 5/7 is tick 0 (not taken); one before the late pair


def test_toml_table_and_flags(tmp_path):
    from pathlib import Path

    from streamjoin.pipelines.config.settings import Flags, resolve

    root = Path(__file__).resolve().parents[2] / "samples" / "soccer"
    toml = tmp_path / "job.toml"
    text = (root / "soccer.toml").read_text()
    for f in ("ball", "players"):
        text = text.replace(f'path = "{f}.parquet"', f'path = "{root}/{f}.parquet"')
    text = text.replace('policy = "mpkslack"', 'policy = "qjoin"\nrecall = 0.9')
    text = text.replace('out = "out/soccer"', 'out = "out/soccer"\n\n[run.triggers]\nrate_ratio = 4\n'
                        'bad_rows_reason = "null ts"')
    toml.write_text(text)
    cfg = resolve(toml, Flags(out=str(tmp_path / "o")), check_out=False)
    trig = cfg.policy.target.triggers
    assert (trig.rate_ratio, trig.bad_rows_reason, trig.min_streams) == (4.0, "null ts", 1)
    cfg = resolve(toml, Flags(out=str(tmp_path / "o"), triggers=["rate_ratio=6", "min_streams=2"]), check_out=False)
    trig = cfg.policy.target.triggers
    assert (trig.rate_ratio, trig.bad_rows_reason, trig.min_streams) == (6.0, "null ts", 2)
    with pytest.raises(InputError, match="unknown trigger"):
        resolve(toml, Flags(out=str(tmp_path / "o"), triggers=["rate_ration=6"]), check_out=False)
    with pytest.raises(InputError, match="KEY=VALUE"):
        resolve(toml, Flags(out=str(tmp_path / "o"), triggers=["6"]), check_out=False)
