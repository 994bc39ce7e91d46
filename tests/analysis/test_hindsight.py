"""``report.json`` ``hindsight``: qjoin / qkslack against the best fixed setting chosen in hindsight.

* Property test (hypothesis, random disordered inputs): the fixed setting,
  fixed+, and their recall, periods meeting ``Q``, mean memory and mean
  latency equal a brute force that replays *every* fixed setting from 0 up to
  the largest possible need with the engine (``static`` / ``kslack``) and
  counts per period with :func:`metrics.periods` -- no required slack in it.
* The verdict: constructed stationary vs shifting delay distributions flip
  ``stationarity.changed`` and the sentence's reason, end to end through
  ``streamjoin run``; each reason of :func:`verdict` from its own numbers.
* The section is in the report (JSON, terminal line, HTML, which renders in
  headless Chromium) of qjoin / qkslack runs with a target and absent for
  every other policy; report.json's contract checks it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.browser import CHROMIUM, probe
from helpers.cli import run_cli

from streamjoin.pipelines.analysis import hindsight as H
from streamjoin.pipelines.analysis import metrics
from streamjoin.pipelines.analysis import tuning as T
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.emit import emission
from streamjoin.pipelines.replay.progress import decide, memory_per_stream
from streamjoin.pipelines.report.json import validate

from helpers.adapters import key_frames
from helpers.strategies import ref_streams


@st.composite
def problems(draw, max_rows=7, ts_max=40):
    """2-3 streams of heavily disordered tuples (times 0..ts_max us), windows 0..12 us, as columns."""
    n = draw(st.integers(2, 3))
    streams = ref_streams(draw, n, max_rows, ts_max=ts_max, keyed=draw(st.booleans()))
    ts = [np.array([t.ts for t in s], dtype=np.int64) for s in streams]
    arrival = [np.array([t.arrival for t in s], dtype=np.int64) for s in streams]
    return ts, arrival, key_frames(streams), tuple(draw(st.integers(0, 12)) for _ in range(n))


def _brute(replay, combos, windows, fixed_policy: str, q: float, period_us: int, top: int) -> dict:
    """Replay every setting 0..top with the engine; the least meeting Q in >= 95 % of the
    periods with results (fixed) and that and Q overall (fixed+), with their numbers."""
    W = np.asarray(windows, dtype=np.int64)
    rows = []
    for s in range(top + 1):
        spec = (PolicySpec("static", retention=(s,) * replay.n) if fixed_policy == "static"
                else PolicySpec("kslack", k=(s,) * replay.n))
        dec = decide(replay, W, spec)
        em = emission(combos, replay, W, dec)
        per = [p for p in metrics.periods(em.last, em.emitted, replay.arrival, period_us, q) if p["truth"]]
        met = sum(p["recall"] >= q for p in per)
        lat = em.latency_us[em.emitted]
        rows.append({"setting_us": s, "recall": float(em.emitted.mean()) if len(combos) else 1.0,
                     "periods_meeting_target": met, "periods": len(per),
                     # report.json's convention: 0 held when nothing arrived
                     "memory_tuples_mean": float(memory_per_stream(replay, W, dec).sum(axis=0).mean())
                     if replay.N else 0.0,
                     "latency_us_mean": float(lat.mean()) if len(lat) else None})
    fixed = next(r for r in rows if not r["periods"] or r["periods_meeting_target"] / r["periods"] >= 0.95)
    plus = next(r for r in rows if r["setting_us"] >= fixed["setting_us"] and r["recall"] >= q)
    return {"fixed": fixed, "fixed_plus": plus}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(problems(max_rows=7), problems(max_rows=40, ts_max=150)), st.sampled_from(["qjoin", "qkslack"]),
       st.sampled_from([0.5, 0.8, 0.95, 1.0]), st.integers(1, 6))
def test_fixed_settings_equal_a_brute_force_over_every_setting(problem, policy, q, period_us):
    """(Many periods, so that 95 % of them can leave one out and fixed+ exceed fixed.)"""
    ts, arrival, keys, windows = problem
    out = join(ts, arrival, keys, windows, PolicySpec("none"))
    replay, combos = out.replay, out.combos
    members = T.member_indexes(replay, combos)
    adaptive = {"recall": 1.0, "periods_meeting_target": 0, "periods_with_results": 0,
                "memory_tuples_mean": 1.0, "latency_us_mean": 1.0}
    h = H.hindsight(replay, combos, windows, members, policy=policy, q=q, period_us=period_us, adaptive=adaptive)
    # no need exceeds the largest arrival minus the smallest ts (T(a) <= that, windows >= 0)
    top = int(max((a.max() for a in arrival if len(a)), default=0) - min((t.min() for t in ts if len(t)), default=0)) + 1
    want = _brute(replay, combos, windows, h["fixed_policy"], q, period_us, top)
    for key in ("fixed", "fixed_plus"):
        got, ref = h[key], want[key]
        assert got["setting_us"] == ref["setting_us"], key
        assert got["recall"] == pytest.approx(ref["recall"], abs=1e-12)
        assert got["periods_meeting_target"] == ref["periods_meeting_target"]
        assert got["memory_tuples_mean"] == pytest.approx(ref["memory_tuples_mean"], rel=1e-12)
        if ref["latency_us_mean"] is None:
            assert got["latency_us_mean"] is None
        else:
            assert got["latency_us_mean"] == pytest.approx(ref["latency_us_mean"], rel=1e-12, abs=1e-9)
    assert h["periods_with_results"] == want["fixed"]["periods"]
    assert h["overall_need_us"] == (T.exact_quantile(
        T.required_static_common(replay, combos, windows) if h["fixed_policy"] == "static"
        else T.required_kslack(replay, combos), q) if len(combos) else 0)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from(["qjoin", "qkslack"]), st.sampled_from([0.8, 0.95, 1.0]))
def test_brute_force_with_many_periods(seed, policy, q):
    """Dozens of periods with results (hypothesis' lists stay short): fixed+ above fixed occurs."""
    rng = np.random.default_rng(seed)
    ts = [np.sort(rng.integers(0, 150, 50)) for _ in range(2)]
    arrival = [t + np.where(rng.random(50) < 0.1, rng.integers(0, 60, 50), rng.integers(0, 3, 50)) for t in ts]
    test_fixed_settings_equal_a_brute_force_over_every_setting.hypothesis.inner_test(
        (ts, arrival, [None, None], (3, 3)), policy, q, 3)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=300), st.integers(1, 30),
       st.sampled_from([0.5, 0.9, 0.99]), st.randoms(use_true_random=False))
def test_period_grouping_matches_a_loop(values, periods, q, rnd):
    """Needs per period and the hindsight-fixed setting against a per-period Python loop."""
    v = np.array(values, dtype=np.int64)
    p = np.array([rnd.randrange(periods) * 7 for _ in values], dtype=np.int64)
    needs = H.period_needs(v, p, q)
    loop = [T.exact_quantile(v[p == k], q) for k in sorted(set(p.tolist()))]
    assert needs.tolist() == loop
    share_ok = [s for s in sorted(set(loop) | {0}) if sum(n <= s for n in loop) / len(loop) >= H.PERIOD_SHARE]
    assert H.hindsight_fixed(v, p, q) == min(share_ok)


def _write_job(root: Path, shifting: bool, seconds: int = 60, rate: int = 200, seed: int = 1) -> Path:
    """Two unkeyed streams, W = 5 ms, 1 s periods: stream b's delays are a 50/50 mixture of
    exponentials with means 0.5 ms and 50 ms throughout (stationary), or the small ones in
    the first half of the run and the large ones in the second (shifting)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name in ("a", "b"):
        n = seconds * rate
        ts = np.sort(rng.integers(0, seconds * 1_000_000, n))
        if name == "a":
            d = rng.exponential(200, n)
        elif shifting:
            d = np.where(ts < seconds * 500_000, rng.exponential(500, n), rng.exponential(50_000, n))
        else:
            d = np.where(rng.random(n) < 0.5, rng.exponential(50_000, n), rng.exponential(500, n))
        pl.DataFrame({"ts": ts, "arrival": ts + d.astype(np.int64)}).write_parquet(root / f"{name}.parquet")
    (root / "job.toml").write_text("".join(
        f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
        f'window = "5ms"\n\n' for s in "ab"))
    return root / "job.toml"


@pytest.mark.parametrize("policy", ["qjoin", "qkslack"])
def test_verdict_flips_between_stationary_and_shifting_delays(tmp_path, policy):
    found = {}
    for shifting in (False, True):
        job = _write_job(tmp_path / f"in{int(shifting)}", shifting)
        out = tmp_path / f"out{int(shifting)}"
        proc = run_cli(["run", str(job), "--engine", "local", "--policy", policy, "--recall", "0.9",
                        "--period", "1s", "--out", str(out)], tmp_path)
        h = json.loads((out / "report.json").read_text())["hindsight"]
        assert [line for line in proc.stdout.splitlines() if line.startswith("hindsight: ")] == \
            [f"hindsight: {h['text']}"]
        found[shifting] = h
    still, moved = found[False], found[True]
    assert still["stationarity"]["changed"] is False and moved["stationarity"]["changed"] is True
    assert still["stationarity"]["adaptable"] < H.CHANGE_THRESHOLD <= moved["stationarity"]["adaptable"]
    assert still["reason"] in ("stationary", "cheaper_stationary", "nothing_to_save")
    assert moved["reason"] in ("need_changed", "margin")
    assert "did not change beyond chance" in still["text"] and "changed over the run" in moved["text"]


def _section(**over) -> dict:
    h = {"policy": "qjoin", "fixed_policy": "static", "measure": "memory_tuples_mean", "recall_target": 0.9,
         "period_share": 0.95, "periods_with_results": 100,
         "adaptive": {"recall": 0.95, "periods_meeting_target": 99, "memory_tuples_mean": 80.0},
         "fixed": {"setting_us": 1000, "recall": 0.93, "periods_meeting_target": 95, "memory_tuples_mean": 100.0},
         "fixed_plus": {"setting_us": 1000, "recall": 0.93, "periods_meeting_target": 95, "memory_tuples_mean": 100.0},
         "ratio": 0.8, "ratio_plus": 0.8,
         "stationarity": {"headroom": 0.5, "headroom_by_chance": 0.2, "adaptable": 0.3, "changed": True}}
    for k, v in over.items():
        h[k] = {**h[k], **v} if isinstance(v, dict) and isinstance(h.get(k), dict) else v
    return h


@pytest.mark.parametrize("over, reason", [
    ({}, "need_changed"),
    ({"stationarity": {"changed": False}}, "cheaper_stationary"),
    ({"adaptive": {"recall": 0.85}}, "target_missed"),
    ({"adaptive": {"periods_meeting_target": 94}}, "target_missed"),
    ({"ratio": 1.2, "ratio_plus": 1.2}, "margin"),
    ({"ratio": 1.2, "ratio_plus": 1.2, "stationarity": {"changed": False}}, "stationary"),
    ({"ratio": 1.2, "ratio_plus": 0.7, "fixed_plus": {"setting_us": 5000}}, "overall_promise"),
    ({"ratio": 1.2, "ratio_plus": 1.2, "fixed": {"setting_us": 0}}, "nothing_to_save"),
    ({"periods_with_results": 0, "ratio": None, "ratio_plus": None, "adaptive": {"periods_meeting_target": 0}},
     "no_results"),
])
def test_each_reason_follows_from_its_numbers(over, reason):
    v = H.verdict(_section(**over))
    assert v["reason"] == reason
    assert v["verdict"] == {"need_changed": "cheaper", "cheaper_stationary": "cheaper",
                            "target_missed": "not comparable", "no_results": "not comparable"}.get(reason, "costlier")
    assert v["text"].startswith("qjoin ") and v["text"].endswith(".")


def test_section_only_for_adaptive_policies_with_a_target(tmp_path):
    job = _write_job(tmp_path / "in", shifting=True, seconds=10, rate=100)
    reports = {}
    for policy, extra in (("qkslack", ["--recall", "0.9"]), ("static", ["--retention", "5ms", "--recall", "0.9"]),
                          ("kslack", ["--k", "5ms", "--recall", "0.9"]), ("none", [])):
        out = tmp_path / policy
        proc = run_cli(["run", str(job), "--engine", "local", "--policy", policy, "--out", str(out), *extra], tmp_path)
        reports[policy] = (json.loads((out / "report.json").read_text()), proc.stdout,
                           (out / "report.html").read_text())
    report, stdout, page = reports["qkslack"]
    assert report["hindsight"]["computed"] is True and "hindsight" in report["timings_s"]
    validate(report)   # report.json's contract checks the section when present
    del report["hindsight"]["fixed_plus"]["latency_us_mean"]
    with pytest.raises(ValueError, match="hindsight.fixed_plus missing 'latency_us_mean'"):
        validate(report)
    assert "Against the best fixed setting (hindsight)" in page and "kslack (fixed+)" in page
    assert CHROMIUM is not None, "headless Chromium is required: run `bash .ci/bootstrap --test`"
    facts = probe(tmp_path / "qkslack" / "report.html", tmp_path)   # the page with the section renders cleanly
    assert facts["errors"] == [] and facts["external"] == 0 and facts["decoded"] == facts["images"] >= 2, facts
    for policy in ("static", "kslack", "none"):
        report, stdout, page = reports[policy]
        assert "hindsight" not in report and "hindsight" not in report["timings_s"]
        assert "hindsight:" not in stdout and "Against the best fixed setting" not in page


@pytest.mark.parametrize("policy, fixed", [("qjoin", "static"), ("qkslack", "kslack")])
def test_run_report_hands_its_curves_required_slacks_to_hindsight(tmp_path, monkeypatch, policy, fixed):
    """The run report's exact tuning curve computes every combination's required slack for
    the run's fixed policy; ``hindsight`` takes them (it computes none again) and gives the
    same section as computing them itself.  A sampled curve hands none over."""
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.io.load import load_all
    from streamjoin.pipelines.report import build as B

    job = _write_job(tmp_path / "in", shifting=True, seconds=10, rate=100)
    cfg = resolve(job, Flags(policy=policy, recall=0.9, period="1s", out=str(tmp_path / "unused")))
    streams = load_all(list(cfg.streams))
    outcome = join([s.ts for s in streams], [s.arrival for s in streams], [None, None], cfg.windows, cfg.policy)
    keys, required = B.extras(cfg, outcome)
    assert required[0] == fixed and len(required[1]) == len(outcome.combos) > 0
    np.testing.assert_array_equal(required[1], T.required_slacks(outcome.replay, outcome.combos, cfg.windows, fixed))
    report = {"periods": [], "recall": 1.0, "memory_tuples": {"mean": 1.0}, "latency_us": {"mean": 1.0}}
    own = B.hindsight_of(cfg, outcome, report)

    def refuse(*args, **kwargs):
        raise AssertionError("hindsight recomputed the required slacks")

    monkeypatch.setattr(H, "required_slacks", refuse)
    assert B.hindsight_of(cfg, outcome, report, required=required) == own
    with pytest.raises(AssertionError, match="recomputed"):   # another fixed policy's slacks are not used
        B.hindsight_of(cfg, outcome, report, required=("kslack" if fixed == "static" else "static", required[1]))
    monkeypatch.setattr(B, "TUNING_SAMPLE", len(outcome.combos) // 2)
    assert B.extras(cfg, outcome)[1] is None and B.extras(cfg, outcome)[0]["tuning"]["sample_every"] > 1
