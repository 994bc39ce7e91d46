"""Nightly runs of the engine emulations (``spark-ss``, ``flink``): a certified day is exact.

A day replayed from its lookback is compared with the same day cut out of
one continuous replay of every row (lookback 0 from the first day): when the
day's manifest facts say ``certified``, its partition must equal the
continuous replay's, row for row.  Random disordered streams over three days
(delays from milliseconds to hours), random lookbacks, watermark delays and
triggers; the run also checks that both outcomes happen (a test that is
always certified, or never, would prove nothing).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.nightly.daily import compute_days
from streamjoin.pipelines.nightly.exactness import refusal
from streamjoin.pipelines.nightly.partitions import DAY_US, day_start_us, load_days

D1, D2, D3 = dt.date(2026, 11, 20), dt.date(2026, 11, 21), dt.date(2026, 11, 22)
MIN_US = 60_000_000


def _write(root: Path, seed: int, rows: int, late_share: float) -> None:
    """Two keyed streams over D1..D3 in whole ms, partitioned by arrival date."""
    rng = np.random.default_rng(seed)
    t0, t1 = day_start_us(D1), day_start_us(D3) + DAY_US - 4 * 3600 * 1_000_000
    for s, name in enumerate(("a", "b")):
        ts = np.sort(rng.integers(t0, t1, rows)) // 1000 * 1000
        small = rng.integers(0, 2 * MIN_US, rows)
        large = rng.integers(0, 180 * MIN_US, rows)
        delay = np.where(rng.random(rows) < late_share, large, small) // 1000 * 1000
        arrival = ts + delay
        order = np.argsort(arrival, kind="stable")
        frame = pl.DataFrame({"ts": ts[order], "arrival": arrival[order], "k": rng.integers(0, 2, rows)[order]})
        frame = frame.with_columns(pl.col("ts", "arrival").cast(pl.Datetime("us")))
        day = frame["arrival"].dt.date()
        for d in (D1, D2, D3):
            part = root / name / f"date={d}"
            part.mkdir(parents=True, exist_ok=True)
            frame.filter(day == d).write_parquet(part / "part-0.parquet")


def _config(root: Path, policy_lines: str, window_min: int) -> Path:
    text = f'[run]\n{policy_lines}\nout = "out"\n'
    for name in ("a", "b"):
        text += (f'\n[[stream]]\nname = "{name}"\npath = "{root}/{name}/date={{date}}/"\nts = "ts"\n'
                 f'arrival = "arrival"\nwindow = "{window_min}min"\nkeys = ["k"]\n')
    path = root / "job.toml"
    path.write_text(text)
    return path


POLICIES = st.one_of(
    st.builds(lambda wm, trig, pol: f'policy = "spark-ss"\nwatermark = "{wm}min"\ntrigger = "{trig}min"\n'
                                    f'watermark_policy = "{pol}"',
              st.sampled_from([5, 20, 90]), st.sampled_from([1, 7, 30, 60]), st.sampled_from(["min", "max"])),
    st.builds(lambda wm: f'policy = "flink"\nwatermark = "{wm}min"\nwatermark_interval = "0ms"',
              st.sampled_from([5, 20, 90])),
)


@pytest.mark.parametrize("family", ["spark-ss", "flink"])
def test_certified_days_equal_the_continuous_replay(tmp_path_factory, family):
    outcomes = {True: 0, False: 0}
    differ = []   # uncertified days that really differ: the facts are not vacuous

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 10**6), policy=POLICIES.filter(lambda p: family in p),
           window=st.sampled_from([2, 15, 45]), lookback_min=st.sampled_from([15, 30, 60, 120, 480]),
           late=st.sampled_from([0.0, 0.05, 0.3]))
    def check(seed, policy, window, lookback_min, late):
        root = tmp_path_factory.mktemp("engine-nightly")
        _write(root, seed, 1500, late)
        cfg = resolve(_config(root, policy, window), Flags(), check_out=False)
        continuous = compute_days(cfg, load_days(list(cfg.streams), [D1, D2, D3], 0))
        for day in (D2, D3):
            daily = compute_days(cfg, load_days(list(cfg.streams), [day], lookback_min * MIN_US))[day]
            certified = daily.exactness["certified"]
            outcomes[certified] += 1
            if certified:
                assert daily.results.equals(continuous[day].results), (
                    f"{policy!r} window {window}min lookback {lookback_min}min: {day} certified but "
                    f"{daily.results.height} rows vs {continuous[day].results.height} continuous")
                assert daily.counts["results"] == continuous[day].counts["results"]
            elif not daily.results.equals(continuous[day].results):
                differ.append((policy, window, lookback_min, str(day)))

    check()
    print(family, outcomes, len(differ))
    assert outcomes[True] >= 10, f"too few certified days to test anything: {outcomes}"
    assert differ, f"no uncertified day differed from the continuous replay: the facts may be vacuous: {outcomes}"


@pytest.mark.parametrize("lines, words", [
    ('policy = "spark-ss"\nwatermark = "5min"\ntrigger = "1min"\njoin = "left"', "inner join"),
    ('policy = "flink"\nwatermark = "5min"', "per-record watermarks"),
    ('policy = "flink"\nwatermark = "5min"\nwatermark_interval = "1s"\nidleness = "10min"', "idle"),
])
def test_nightly_refuses_what_it_cannot_replay_exactly(tmp_path, lines, words):
    """Outer joins, periodic Flink watermarks (the default) and idleness: one line saying why."""
    cfg = resolve(_config(tmp_path, lines, 5), Flags(), check_out=False)
    reason = refusal(cfg.policy)
    assert reason is not None and words in reason, reason


def test_nightly_command_refuses_with_exit_2(tmp_path, monkeypatch):
    from streamjoin.pipelines.nightly.backfill import cli_run, nightly_options

    _write(tmp_path, 1, 50, 0.0)
    path = _config(tmp_path, 'policy = "flink"\nwatermark = "5min"', 5)
    monkeypatch.chdir(tmp_path)
    assert cli_run(path, Flags(), nightly_options(path, date=str(D2)), "test") == InputError.exit_code
    assert not (tmp_path / "out").exists()
