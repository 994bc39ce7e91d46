"""Recall-target policies ``qjoin`` and ``qkslack`` (SPEC §4.3, issue 5).

* the fast engine equals the per-arrival reference replay fed the same
  time-varying schedule (hypothesis);
* decisions are online: what arrives after ``t`` never changes a decision
  made at or before ``t`` (hypothesis);
* rate- and bad-row-triggered early decisions (seed 003);
* the published claims on the bundled samples (QJoin vs MP-K-slack);
* CLI / config plumbing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.adapters import key_frames, local_engine
from helpers.strategies import assert_same, problems

from streamjoin.pipelines.analysis import metrics
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.replay.candidates import key_ids
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.io.load import load_all
from streamjoin.pipelines.policies import PolicySpec, RecallTarget, Triggers
from streamjoin.pipelines.policies.controller import QJoinController, schedule
from streamjoin.pipelines.replay.progress import build_replay
from streamjoin.pipelines.replay.reference import RefTuple, replay

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def targets(draw):
    """Tiny controller settings so that tiny inputs (times 0..80 us) see many decisions and triggers."""
    return RecallTarget(
        recall=draw(st.sampled_from([0.5, 0.8, 0.95, 1.0])),
        interval_us=draw(st.integers(1, 15)),
        granularity_us=draw(st.integers(1, 5)),
        basic_window_us=draw(st.integers(1, 6)),
        period_us=draw(st.integers(3, 40)),
        probe_us=draw(st.integers(1, 5)),
        rate_history_us=draw(st.integers(2, 30)),
        triggers=Triggers(rate_min_count=draw(st.integers(1, 3)), bad_rows_min=1,
                          rate_history=draw(st.sampled_from(["recent", "run"])),
                          min_streams=draw(st.integers(1, 2))),
    )


def _columns(streams):
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    return ts, arrival


@SETTINGS
@given(problems(), st.sampled_from(["qjoin", "qkslack"]), targets())
def test_engine_equals_reference_with_schedule(problem, name, target):
    streams, windows, _ = problem
    policy = PolicySpec(name, target=target)
    ts, arrival = _columns(streams)
    # the controller counts partners per key, as the engine's does
    values = schedule(name, build_replay(ts, arrival), windows, target, keys=key_ids(key_frames(streams))).values
    ref = replay(streams, windows, policy, schedule=values.tolist())
    assert_same(local_engine(streams, windows, policy), ref)


@SETTINGS
@given(problems(n_streams=st.just(2), max_rows=14), st.sampled_from(["qjoin", "qkslack"]), targets())
def test_engine_equals_reference_with_schedule_two_streams(problem, name, target):
    streams, windows, _ = problem
    policy = PolicySpec(name, target=target)
    ts, arrival = _columns(streams)
    values = schedule(name, build_replay(ts, arrival), windows, target, keys=key_ids(key_frames(streams))).values
    assert_same(local_engine(streams, windows, policy), replay(streams, windows, policy, schedule=values.tolist()))


def test_reference_without_schedule_is_unchanged_and_adaptive_needs_one():
    streams = [[RefTuple(0, 0, 0, 0), RefTuple(0, 1, 10, 10)], [RefTuple(1, 0, 2, 2), RefTuple(1, 1, 1, 15)]]
    plain = replay(streams, (10, 10), PolicySpec("static", retention=(0, 0)))
    same = replay(streams, (10, 10), PolicySpec("static", retention=(0, 0)), schedule=[[0] * 4, [0] * 4])
    assert plain.emitted == same.emitted and plain.memory == same.memory
    with pytest.raises(ValueError):
        replay(streams, (10, 10), PolicySpec("qjoin", target=RecallTarget(0.9)))


@SETTINGS
@given(problems(n_streams=st.integers(2, 3), max_rows=12), st.sampled_from(["qjoin", "qkslack"]), targets(),
       st.data())
def test_decisions_are_online(problem, name, target, data):
    """Removing or changing what arrives after t never changes a decision made at or before t."""
    streams, windows, _ = problem
    every = sorted({x.arrival for s in streams for x in s})
    if not every:
        return
    t = data.draw(st.sampled_from(every))
    bad = [sorted(data.draw(st.lists(st.integers(0, 80), max_size=6))) for _ in streams]
    ts, arrival = _columns(streams)
    keys = key_ids(key_frames(streams))
    full = schedule(name, build_replay(ts, arrival), windows, target, bad, keys=keys)

    # (a) everything after t removed
    kept = [[x for x in s if x.arrival <= t] for s in streams]
    kept_ts = [np.array([x.ts for x in s], dtype=np.int64) for s in kept]
    kept_arr = [np.array([x.arrival for x in s], dtype=np.int64) for s in kept]
    kept_keys = None if keys is None else [k[a <= t] for k, a in zip(keys, arrival)]
    cut = schedule(name, build_replay(kept_ts, kept_arr), windows, target, [[b for b in bs if b <= t] for bs in bad],
                   keys=kept_keys)
    # (b) everything after t changed (new event times, later arrivals, other bad rows)
    shift = data.draw(st.integers(1, 20))
    changed_ts = [np.where(a > t, (c * 7 + shift) % 50, c) for c, a in zip(ts, arrival)]
    changed_arr = [np.where(a > t, a + shift, a) for a in arrival]
    changed_bad = [[b for b in bs if b <= t] + [t + shift] * 3 for bs in bad]
    moved = schedule(name, build_replay(changed_ts, changed_arr), windows, target, changed_bad, keys=keys)

    # A decision is taken only where it governs an arrival (one tick per gap), so
    # the truncated run takes a subset of the full run's decisions up to t:
    # each must be identical, whatever came after t.
    by_time = {e["time_us"]: e for e in full.log}
    moved_by_time = {e["time_us"]: e for e in moved.log}
    assert all(e["time_us"] <= t for e in cut.log)
    assert all(by_time.get(e["time_us"]) == e for e in cut.log)
    assert all(moved_by_time.get(e["time_us"]) == e for e in cut.log)
    # every decision of the full run that governs a tuple arrived by t is one the truncated run took
    full_times = np.array(sorted(by_time), dtype=np.int64)
    which = np.searchsorted(full_times, [x.arrival for s in kept for x in s], side="left") - 1
    governing = {int(full_times[k]) for k in which if k >= 0}
    assert governing <= {e["time_us"] for e in cut.log}
    # and the values in force for every tuple that arrived by t
    n_early = sum(len(s) for s in kept)
    assert np.array_equal(full.values[:, :n_early], cut.values)


def _two_streams(rate_hz: float, seconds: float, stall=None, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(2):
        t = np.arange(0, seconds, 1 / rate_hz) * 1e6
        delay = rng.exponential(2000, t.size)
        if stall is not None and i == 1:
            a, b = stall
            inside = (t >= a * 1e6) & (t < b * 1e6)
            delay[inside] = b * 1e6 - t[inside] + rng.exponential(2000, inside.sum())
        out.append((t.astype(np.int64), (t + delay).astype(np.int64)))
    return [o[0] for o in out], [o[1] for o in out]


def test_stall_triggers_an_early_decision_and_holds_a_floor():
    ts, arrival = _two_streams(1000, 6, stall=(3.0, 3.6))
    ctl = QJoinController(build_replay(ts, arrival), (1000, 1000), RecallTarget(0.95, period_us=2_000_000))
    sched = ctl.run()
    rate = [e for e in sched.log if "rate" in e["reason"]]
    assert rate, "the stall of stream 1 must trigger early decisions"
    assert all(3_000_000 < e["time_us"] < 4_700_000 for e in rate)
    assert {tr["stream"] for e in rate for tr in e["triggers"]} == {1}
    # while stream 1 is silent it owes a backlog, late by up to the silence, that will probe
    # stream 0's buffer: stream 0's retention covers as much of it as the target needs --
    # most of it, but not the whole silence (no fixed floor)
    during = [e for e in rate if e["time_us"] < 3_600_000]
    assert during
    last = during[-1]
    owed = last["time_us"] - 3_000_000 + 100_000          # the silence, and one more probe (L / 10)
    assert [b["stream"] for b in last["backlog"]] == [1] and abs(last["backlog"][0]["silence_us"] - owed) < 2_000
    assert 0.5 * owed <= last["retention_us"][0] < owed
    # and the target holds in every period of the real run
    out = join(ts, arrival, [None, None], (1000, 1000), PolicySpec("qjoin", target=RecallTarget(0.95, period_us=2_000_000)))
    per = metrics.periods(out.emission.last, out.emission.emitted, out.replay.arrival, 2_000_000, 0.95)
    assert all(p["recall"] >= 0.95 for p in per if p["truth"])
    # regular decisions every L from the first arrival as well
    first = min(int(a.min()) for a in arrival)
    assert [e["time_us"] for e in sched.log if e["reason"] == "interval"][:3] == [
        first + k * 1_000_000 for k in (1, 2, 3)]


def test_burst_of_bad_rows_triggers_an_early_decision():
    ts, arrival = _two_streams(1000, 5)
    bad = [np.array([], dtype=np.int64), np.full(12, 2_550_000, dtype=np.int64)]
    log = schedule("qkslack", build_replay(ts, arrival), (1000, 1000), RecallTarget(0.9), bad).log
    hits = [e for e in log if "bad_rows" in e["reason"]]
    assert len(hits) == 1 and hits[0]["triggers"][0]["stream"] == 1 and hits[0]["triggers"][0]["observed"] == 12
    assert 2_550_000 <= hits[0]["time_us"] < 2_650_000


def test_recall_target_validation():
    with pytest.raises(InputError):
        PolicySpec("qjoin")
    with pytest.raises(InputError):
        RecallTarget(1.5)
    with pytest.raises(InputError):
        RecallTarget(0.9, interval_us=0)


# --------------------------------------------------------------------------- #
# The published claims on the bundled samples (period 5 s: 13 periods on soccer, 91 on sensors)
# --------------------------------------------------------------------------- #

PERIOD_US = 5_000_000


def _measure(toml: Path, policy: PolicySpec):
    cfg = resolve(toml, Flags(out=str(ROOT / "out" / "_unused_recall_test")), check_out=False)
    streams = load_all(list(cfg.streams))
    out = join([s.ts for s in streams], [s.arrival for s in streams],
               [s.keys if s.keys.width else None for s in streams], cfg.windows, policy)
    em = out.emission
    per = metrics.periods(em.last, em.emitted, out.replay.arrival, PERIOD_US, 0.95)
    lat = em.latency_us[em.emitted]
    mem = out.memory.sum(axis=0)
    return {
        "recall": float(em.emitted.mean()),
        "periods_ok": sum(p["recall"] >= 0.95 for p in per) / len(per),
        "mem": float(mem.mean()),
        "lat": float(lat.mean()),
    }


@pytest.fixture(scope="module", params=["soccer/soccer.toml", "sensors/sensors.toml"])
def sample(request):
    toml = ROOT / "samples" / request.param
    target = RecallTarget(0.95, period_us=PERIOD_US)
    return {
        "mpkslack": _measure(toml, PolicySpec("mpkslack")),
        "qjoin": _measure(toml, PolicySpec("qjoin", target=target)),
        "qkslack": _measure(toml, PolicySpec("qkslack", target=target)),
    }


def test_qjoin_meets_the_target_overall_and_per_period(sample):
    q = sample["qjoin"]
    assert q["recall"] >= 0.95
    assert q["periods_ok"] >= 0.90


def test_qjoin_memory_and_latency_against_mpkslack(sample):
    # QJoin's published claim is -50..80 % memory against MP-K-slack for a recall
    # target on average.  The promise here is per period (issue 15): the needs of
    # recent periods stay in force, stall periods included (a feed that stalls every
    # few minutes must be covered before it stalls again).  Measured: 0.54x (soccer)
    # and 0.62x (sensors) of MP-K-slack's memory, every 5 s period meeting 0.95
    # (MP-K-slack: 12/13 and 89/91).
    q, mp = sample["qjoin"], sample["mpkslack"]
    assert q["mem"] <= 0.65 * mp["mem"]
    assert q["periods_ok"] >= mp["periods_ok"]
    assert q["lat"] <= 0.2 * mp["lat"]


def test_qkslack_meets_the_target_with_less_latency_than_mpkslack(sample):
    q, mp = sample["qkslack"], sample["mpkslack"]
    assert q["recall"] >= 0.95 and q["periods_ok"] >= 0.90
    assert q["lat"] < mp["lat"] and q["mem"] < mp["mem"]


# --------------------------------------------------------------------------- #
# CLI and config
# --------------------------------------------------------------------------- #

def _cli(*args, cwd):
    return subprocess.run([str(Path(sys.executable).parent / "streamjoin"), *args], capture_output=True, text=True,
                          cwd=cwd)


def test_cli_requires_recall_for_qjoin(tmp_path):
    r = _cli("run", str(ROOT / "samples/soccer/soccer.toml"), "--policy", "qjoin", "--out", str(tmp_path / "o"),
             cwd=tmp_path)
    assert r.returncode == 2 and "--recall" in r.stderr


def test_cli_qkslack_report_has_decisions_and_targets(tmp_path):
    toml = tmp_path / "run.toml"
    text = (ROOT / "samples/soccer/soccer.toml").read_text()
    text = text.replace('path = "ball.parquet"', f'path = "{ROOT}/samples/soccer/ball.parquet"')
    text = text.replace('path = "players.parquet"', f'path = "{ROOT}/samples/soccer/players.parquet"')
    text = text.replace('policy = "mpkslack"', 'policy = "qkslack"\nrecall = 0.9\ninterval = "2s"\n'
                        'granularity = "5ms"\nbasic_window = "20ms"\nperiod = "10s"')
    toml.write_text(text)
    r = _cli("run", str(toml), "--out", str(tmp_path / "o"), "--no-results", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    target = report["config"]["policy"]["target"]
    assert (target["recall"], target["interval_us"], target["granularity_us"], target["basic_window_us"]) == (
        0.9, 2_000_000, 5_000, 20_000)
    assert all(p["target"] == 0.9 for p in report["periods"])
    decisions = report["policy_decisions"]
    assert decisions and set(decisions[0]["k_us"]) == {"ball", "players"}
    assert {d["reason"] for d in decisions} >= {"interval"}
    assert any("rate" in d["reason"] for d in decisions)
