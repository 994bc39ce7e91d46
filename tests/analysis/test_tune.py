"""``tune-buffer``: required slack (SPEC §7) checked against the engine, and recommendations replayed.

* Property tests (hypothesis, random disordered inputs): replaying with the
  engine at a combination's required slack emits it, and 1 us less does not
  -- for the static retention per stream, the common static retention and
  the common kslack K.  The recall curve equals the engine's recall at every
  grid step; the fast per-stream memory equals the engine's memory; the
  exact two-stream search finds the least-memory feasible pair (brute force).
* End to end on the bundled samples: the recommendation replayed with
  ``run`` meets the target, one granularity step less misses it.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.cli import run_cli

from streamjoin.pipelines.analysis import tuning as T
from streamjoin.pipelines.replay.emit import emission
from streamjoin.pipelines.engines.local import join
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.progress import decide, memory_per_stream

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw, n_streams=st.integers(2, 3), max_rows=8):
    n = draw(n_streams)
    keyed = draw(st.booleans())
    ts, arrival, keys = [], [], []
    for _ in range(n):
        size = draw(st.integers(1, max_rows))
        t = draw(st.lists(st.integers(0, 40), min_size=size, max_size=size))
        d = draw(st.lists(st.one_of(st.integers(0, 3), st.integers(0, 40)), min_size=size, max_size=size))
        ts.append(np.array(t, dtype=np.int64))
        arrival.append(np.array(t, dtype=np.int64) + np.array(d, dtype=np.int64))
        keys.append(pl.DataFrame({"__key0": draw(st.lists(st.integers(0, 1), min_size=size, max_size=size))})
                    if keyed else None)
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    return ts, arrival, keys, windows


def _truth(problem):
    ts, arrival, keys, windows = problem
    out = join(ts, arrival, keys, windows, PolicySpec("none"))
    return out.replay, out.combos, windows


def _emitted(replay, combos, windows, policy) -> np.ndarray:
    """The engine's decision for every combination at one setting."""
    W = np.asarray(windows, dtype=np.int64)
    return emission(combos, replay, W, decide(replay, W, policy)).emitted


@SETTINGS
@given(problems())
def test_static_required_retention_per_stream_is_exact(problem):
    replay, combos, windows = _truth(problem)
    n = replay.n
    req = T.required_static(replay, combos, windows)
    assert (req >= 0).all()
    vectors = {tuple(int(v) for v in req[:, c]) for c in range(len(combos))}
    for vec in vectors:
        at = _emitted(replay, combos, windows, PolicySpec("static", retention=vec))
        # every combination whose requirement is met is emitted, and no other
        met = np.all(req <= np.asarray(vec)[:, None], axis=0)
        assert (at == met).all()
        for k in range(n):
            if vec[k] == 0:
                continue
            less = list(vec)
            less[k] -= 1  # 1 us less on one stream
            at_less = _emitted(replay, combos, windows, PolicySpec("static", retention=tuple(less)))
            exact = np.all(req == np.asarray(vec)[:, None], axis=0)
            assert not at_less[exact & (req[k] == vec[k])].any()


@SETTINGS
@given(problems())
def test_static_common_and_kslack_required_slack_is_exact(problem):
    replay, combos, windows = _truth(problem)
    n = replay.n
    common = T.required_static(replay, combos, windows).max(axis=0)
    k_req = T.required_kslack(replay, combos)
    for values, make in ((common, lambda s: PolicySpec("static", retention=(s,) * n)),
                         (k_req, lambda s: PolicySpec("kslack", k=(s,) * n))):
        for s in sorted(set(values.tolist())):
            at = _emitted(replay, combos, windows, make(s))
            assert at[values == s].all(), "not emitted at its required slack"
            assert (at == (values <= s)).all()
            if s > 0:
                assert not _emitted(replay, combos, windows, make(s - 1))[values == s].any(), "emitted 1us below"


@SETTINGS
@given(problems(), st.integers(1, 7), st.sampled_from(["static", "kslack"]))
def test_recall_curve_equals_engine_recall(problem, g, policy):
    replay, combos, windows = _truth(problem)
    cur = T.curve_only(replay, combos, windows, policy, g, 0.9)
    C = len(combos)
    for s, r in zip(cur["curve"]["setting_us"], cur["curve"]["recall"]):
        at = _emitted(replay, combos, windows, T.policy_for(policy, replay.n, s))
        assert r == (at.sum() / C if C else 1.0)
    # the recommendation meets 0.9, one step less does not
    s = cur["setting_us"]
    assert _emitted(replay, combos, windows, T.policy_for(policy, replay.n, s)).sum() >= 0.9 * C - 1e-9
    if s > 0:
        assert _emitted(replay, combos, windows, T.policy_for(policy, replay.n, s - g)).sum() < 0.9 * C
    assert cur["exact_us"] <= s
    if C:
        assert _emitted(replay, combos, windows, T.policy_for(policy, replay.n, cur["exact_us"])).sum() / C >= 0.9
        if cur["exact_us"] > 0:
            assert _emitted(replay, combos, windows, T.policy_for(policy, replay.n, cur["exact_us"] - 1)).sum() / C < 0.9


@SETTINGS
@given(problems(), st.lists(st.integers(0, 30), min_size=1, max_size=4))
def test_static_memory_totals_equal_engine_memory(problem, retentions):
    replay, combos, windows = _truth(problem)
    W = np.asarray(windows, dtype=np.int64)
    for k in range(replay.n):
        fast = T.static_memory_totals(replay, windows, k, retentions)
        for d, got in zip(retentions, fast):
            policy = PolicySpec("static", retention=(d,) * replay.n)
            assert got == memory_per_stream(replay, W, decide(replay, W, policy))[k].sum()


@SETTINGS
@given(problems(n_streams=st.just(2), max_rows=10), st.sampled_from([0.5, 0.8, 0.95, 1.0]), st.integers(1, 4),
       st.booleans())
def test_two_stream_search_is_least_memory(problem, q, g, by_period):
    replay, combos, windows = _truth(problem)
    W = np.asarray(windows, dtype=np.int64)
    req = T.required_static(replay, combos, windows)
    _, last = T.member_indexes(replay, combos)
    groups = T.period_index(replay, last, 10) if by_period else None
    common = T.grid_index(np.array([T.exact_quantile(req.max(axis=0), q)]), g)[0] if len(combos) else 0
    got = T.per_stream_static(replay, windows, req, g, T.Constraint(groups, q), int(common))
    if not len(combos):
        return
    assert got["method"] == "exact"
    top = T.grid_index(req, g).max(axis=1)

    def feasible(d) -> bool:
        at = _emitted(replay, combos, windows, PolicySpec("static", retention=tuple(int(v) * g for v in d)))
        gid = np.zeros(len(combos), np.int64) if groups is None else groups
        for grp in np.unique(gid):
            sel = gid == grp
            if at[sel].sum() / sel.sum() < q:
                return False
        return True

    def memory(d) -> int:
        policy = PolicySpec("static", retention=tuple(int(v) * g for v in d))
        return int(memory_per_stream(replay, W, decide(replay, W, policy)).sum())

    best = min((memory(d), sum(d)) for d in itertools.product(range(top[0] + 1), range(top[1] + 1)) if feasible(d))
    chosen = got["steps"]
    assert feasible(chosen)
    assert (memory(chosen), sum(chosen)) == best
    for k in range(2):  # Pareto-minimal: one step less on either stream misses the target
        if chosen[k] > 0:
            less = list(chosen)
            less[k] -= 1
            assert not feasible(less)


@SETTINGS
@given(problems(n_streams=st.just(3), max_rows=6), st.sampled_from([0.6, 0.9]))
def test_greedy_search_is_pareto_minimal(problem, q):
    replay, combos, windows = _truth(problem)
    req = T.required_static(replay, combos, windows)
    if not len(combos):
        return
    common = int(T.grid_index(np.array([T.exact_quantile(req.max(axis=0), q)]), 1)[0])
    got = T.per_stream_static(replay, windows, req, 1, T.Constraint(None, q), common)
    assert got["method"] == "greedy"

    def recall(d):
        return _emitted(replay, combos, windows, PolicySpec("static", retention=tuple(d))).sum() / len(combos)

    assert recall(got["steps"]) >= q
    for k in range(3):
        if got["steps"][k] > 0:
            less = list(got["steps"])
            less[k] -= 1
            assert recall(less) < q


def test_needed_count_matches_float_recall():
    for total in (1, 3, 7, 10, 1000, 1572964):
        for q in (0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
            m = T.needed_count(total, q)
            assert m / total >= q and (m == 0 or (m - 1) / total < q)


def test_toml_duration_round_trips():
    from streamjoin.pipelines.base.timeunits import parse_duration

    for us in (0, 1, 999, 1000, 10_000, 1_500_000, 2_000_000, 123_456_789):
        assert parse_duration(T.toml_duration(us)) == us


# ---------------------------------------------------------------------------
# end to end on the bundled samples: tune, then replay with `run`
# ---------------------------------------------------------------------------


def _recall(out: Path) -> tuple[float, list[dict]]:
    report = json.loads((out / "report.json").read_text())
    return report["recall"], report["periods"]


def _tune(tmp: Path, config: str, *args: str) -> dict:
    out = tmp / "tune"
    run_cli(["tune-buffer", str(ROOT / config), "--out", str(out), *args], tmp)
    assert (out / "tune.html").exists()
    return json.loads((out / "tune.json").read_text())


def _run(tmp: Path, config: str, name: str, *args: str) -> Path:
    out = tmp / name
    run_cli(["run", str(ROOT / config), "--no-results", "--out", str(out), *args], tmp)
    return out


@pytest.mark.parametrize("policy", ["static", "kslack"])
def test_soccer_recommendation_replayed_with_run(tmp_path, policy):
    q = 0.97
    t = _tune(tmp_path, "samples/soccer/soccer.toml", "--recall", str(q), "--policy", policy, "--per-period")
    rec = t["recommendation"]
    g = t["granularity_us"]
    assert rec["setting_us"] >= g, "the sample is disordered: the recommendation is not 0"
    flag = "--retention" if policy == "static" else "--k"
    at, _ = _recall(_run(tmp_path, "samples/soccer/soccer.toml", "at", "--policy", policy, flag, f"{rec['setting_us']}us"))
    below, _ = _recall(_run(tmp_path, "samples/soccer/soccer.toml", "below", "--policy", policy, flag,
                            f"{rec['setting_us'] - g}us"))
    assert at >= q > below
    assert at == rec["recall"] and below == rec["recall_one_step_below"]
    # every period meets the target at the per-period recommendation
    every = t["every_period"]["setting_us"]
    _, periods = _recall(_run(tmp_path, "samples/soccer/soccer.toml", "every", "--policy", policy, flag, f"{every}us"))
    assert all(p["recall"] >= q for p in periods if p["truth"])
    # the candidate table agrees with the runs
    by_setting = {c["setting_us"]: c for c in t["candidates"]}
    assert by_setting[rec["setting_us"]]["recall"] == at


def test_sensors_static_recommendation_replayed_with_the_engine():
    """Sensors in-process (loaded once): the engine's decisions and memory, as `run` computes them."""
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.io.load import load_all

    q, g = 0.95, 10_000
    cfg = resolve(ROOT / "samples/sensors/sensors.toml", Flags(policy="none", out=str(ROOT / "out" / "unused")))
    streams = load_all(list(cfg.streams))
    names = [s.name for s in streams]
    o = join([s.ts for s in streams], [s.arrival for s in streams], [s.keys if s.keys.width else None for s in streams],
             cfg.windows, PolicySpec("none"))
    t = T.tune(o.replay, o.combos, cfg.windows, names, policy="static", q=q, g=g, period_us=cfg.period_us,
               per_period=False)
    rec = t["recommendation"]

    def replay(vec) -> dict:
        return T.evaluate(o.replay, o.combos, cfg.windows, PolicySpec("static", retention=tuple(vec)))

    at = replay([rec["setting_us"]] * 2)
    below = replay([rec["setting_us"] - g] * 2)
    assert at["recall"] >= q > below["recall"]
    assert at["memory_tuples"] == rec["memory_tuples"]
    # per-stream values: meet the target with no more memory; one step less on either stream misses it
    assert rec["per_stream_method"] == "exact"
    vec = [rec["per_stream_us"][n] for n in names]
    at_vec = replay(vec)
    assert at_vec["recall"] >= q
    assert at_vec["memory_tuples"]["mean"] <= at["memory_tuples"]["mean"]
    for k in range(2):
        if vec[k] >= g:
            less = list(vec)
            less[k] -= g
            assert replay(less)["recall"] < q
    assert 'policy = "static"' in t["toml"] and f'retention = "{T.toml_duration(rec["setting_us"])}"' in t["toml"]
    assert any("withWatermark" in x for x in t["frameworks"])
    assert any("forBoundedOutOfOrderness" in x for x in t["frameworks"])


@pytest.mark.parametrize("args, message", [
    (["--recall", "1.5"], "recall"),
    (["--recall", "0"], "recall"),
    ([], "--recall"),
    (["--recall", "0.9", "--policy", "fifo"], "--policy"),  # run's policies map to their family (test_cli_first_hour)
    (["--recall", "0.9", "--granularity", "0"], "granularity"),
    (["--recall", "0.9", "--granularity", "ten"], "granularity"),
])
def test_bad_tune_input(tmp_path, args, message):
    proc = run_cli(["tune-buffer", str(ROOT / "samples/soccer/soccer.toml"), "--out", str(tmp_path / "t"), *args],
                   tmp_path, ok=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], proc.stderr
    assert not (tmp_path / "t").exists()



@SETTINGS
@given(problems())
def test_common_static_requirement_equals_max_of_per_stream(problem):
    """The fused form every run's report uses equals the per-stream matrix's max."""
    replay, combos, windows = _truth(problem)
    expected = T.required_static(replay, combos, windows).max(axis=0) if len(combos) else np.empty(0, np.int64)
    np.testing.assert_array_equal(T.required_static_common(replay, combos, windows), expected)
