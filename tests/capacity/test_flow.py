"""Seed 001 flow control (issue 20 item 3): the interval-loop fast path
(pipelines/capacity/flow.py) against the per-tuple reference
(pipelines/capacity/flow_reference.py), a hand-computed control step, and
the guarantees: no tuple lost, never earlier, nothing delayed below capacity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.adapters import local_engine
from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.capacity.flow import delay_arrivals, end_to_end_latency, series
from streamjoin.pipelines.capacity.flow_reference import control_law, reference_flow
from streamjoin.pipelines.config.flow_control import FlowControl, parse_flow_control
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay


# ---------------------------------------------------------------- golden: one control step by hand

def test_control_law_one_step_by_hand() -> None:
    # equation 8 with K = 1, L = 1: rho(n) = 5, b(n) = 8, b(n-1) = 6, b0 = 4, lambda = (0.5, 0.25),
    # mu_1 = 0.2, r_max(n-1) = 7, rho(n-1) = 5:  5 - 0.5*4 - 0.25*2 - 0.2*2 = 2.1
    assert control_law(5.0, [8.0, 6.0], [7.0], [5.0], 4.0, (0.5, 0.25), (0.2,)) == pytest.approx(2.1)
    # the same with rho(n) = 1: 1 - 2.9 < 0, clamped by [.]^+
    assert control_law(1.0, [8.0, 6.0], [7.0], [5.0], 4.0, (0.5, 0.25), (0.2,)) == 0.0
    # below the target the law admits more than it processes
    assert control_law(5.0, [0.0], [], [], 4.0, (0.5,), ()) == 7.0


def test_one_unit_two_intervals_by_hand() -> None:
    """B = 10, b0 = 6, lambda_0 = 0.5, rate 4000/s, interval 1 ms -> rho = 4 tuples per interval.
    Ten tuples arrive at t = 0..9 us.
    m = 0: b = 0, r_max = 4 - 0.5*(0 - 6) = 7, credit = floor(min(7, 10 - 0 + 4)) = 7: tuples 0..6
           pass on arrival, 7..9 wait; p = min(4, 7) = 4 -> b(1) = 3 (eq. 7).
    m = 1: r_max = 4 - 0.5*(3 - 6) = 5.5, credit = floor(min(5.5, 10 - 3 + 4)) = 5: the three waiting
           tuples leave paced over the interval, in FIFO order: t_1 + k*1000//3 = 1000, 1333, 1666;
           p = min(4, 3 + 3) = 4 -> b(2) = 2."""
    fc = FlowControl(buffer=10, rate=4000.0, target=6.0, interval_us=1000, lambdas=(0.5,))
    out = delay_arrivals([np.arange(10, dtype=np.int64)], fc)
    assert out.arrival[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 1000, 1333, 1666]
    assert out.occupancy[:, 0].tolist() == [0.0, 3.0, 2.0]
    assert out.rate[:, 0].tolist() == [7.0, 5.5]
    assert out.admitted[:, 0].tolist() == [7, 3]
    assert series(out, ["s"])["rate_per_s"]["s"] == [7000.0, 5500.0]


def test_min_flow_holds_every_stream_behind_the_blocked_one() -> None:
    """Two units, shares 1/2 each (equal counts), rho = 1 tuple per interval, B = 1, b0 = 0, no
    gains: credit = floor(min(1, 1 - 0 + 1)) = 1 per unit per interval.  Stream 0 brings three
    tuples at t = 0, stream 1 one tuple at t = 1 and two at t = 5000.  max-flow: stream 1's first
    tuple passes on arrival; min-flow: it waits behind stream 0's tuples (head of line) and leaves in
    interval 2 as the second of two admitted, at t_2 + 1*1000//2 = 2500."""
    a = [np.array([0, 0, 0], dtype=np.int64), np.array([1, 5000, 5000], dtype=np.int64)]
    common = dict(buffer=1, rate=2000.0, target=0.0, interval_us=1000, lambdas=())
    mx = delay_arrivals(a, FlowControl(**common, policy="max-flow"))
    mn = delay_arrivals(a, FlowControl(**common, policy="min-flow"))
    assert mx.arrival[0].tolist() == [0, 1000, 2000] and mx.arrival[1].tolist() == [1, 5000, 6000]
    assert mn.arrival[0].tolist() == [0, 1000, 2000] and mn.arrival[1].tolist() == [2500, 5000, 6000]


# ---------------------------------------------------------------- fast path == reference

@st.composite
def flow_problems(draw):
    n = draw(st.integers(1, 3))
    span = draw(st.integers(1, 60_000))
    arrivals = [np.array(draw(st.lists(st.integers(0, span), max_size=40)), dtype=np.int64) for _ in range(n)]
    buffer = draw(st.integers(1, 30))
    fc = FlowControl(
        buffer=buffer,
        rate=draw(st.sampled_from([150.0, 700.0, 1000.0, 3333.3, 20000.0, 1e6])),
        target=draw(st.one_of(st.none(), st.integers(0, buffer).map(float))),
        interval_us=draw(st.sampled_from([700, 1000, 2500, 10_000])),
        policy=draw(st.sampled_from(["max-flow", "min-flow"])),
        lambdas=tuple(draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]), max_size=3))),
        mus=tuple(draw(st.lists(st.sampled_from([0.0, 0.1, 0.3]), max_size=2))),
        surge=draw(st.sampled_from([0.0, 0.2, 0.5])),
        bucket=draw(st.sampled_from([1.0, 2.0, 5.0])),
    )
    return arrivals, fc


@settings(max_examples=300, deadline=None)
@given(flow_problems())
def test_fast_path_equals_the_per_tuple_reference(problem) -> None:
    arrivals, fc = problem
    fast = delay_arrivals(arrivals, fc)
    ref = reference_flow([a.tolist() for a in arrivals], fc)
    assert [a.tolist() for a in fast.arrival] == ref["arrival"]
    assert fast.occupancy.tolist() == ref["occupancy"]
    for key in ("rate", "processing", "admitted"):   # per interval and unit; (0, n) when nothing arrives
        assert getattr(fast, key).tolist() == ref[key]
        assert getattr(fast, key).shape == (len(ref[key]), len(arrivals))


@settings(max_examples=300, deadline=None)
@given(flow_problems())
def test_no_tuple_is_lost_or_early_and_buffers_stay_within_b(problem) -> None:
    arrivals, fc = problem
    out = delay_arrivals(arrivals, fc)
    for a, d in zip(arrivals, out.arrival):
        assert len(d) == len(a) and (d >= a).all()
    assert out.admitted.sum(axis=0).tolist() == [len(a) for a in arrivals]   # every tuple admitted once
    assert (out.occupancy >= 0).all() and (out.occupancy <= fc.buffer).all()  # eq. 7: never overflows
    # FIFO per unit: a later arrival never reaches the join before an earlier one of its stream
    for a, d in zip(arrivals, out.arrival):
        order = np.lexsort((np.arange(len(a)), a))
        assert (np.diff(d[order]) >= 0).all()
    if fc.policy == "min-flow" and sum(len(a) for a in arrivals):   # one FIFO over every stream: replay order kept
        a_all, d_all = np.concatenate(arrivals), np.concatenate(out.arrival)
        st_all = np.concatenate([np.full(len(a), j) for j, a in enumerate(arrivals)])
        rows = np.concatenate([np.arange(len(a)) for a in arrivals])
        assert (np.diff(d_all[np.lexsort((rows, st_all, a_all))]) >= 0).all()


@settings(max_examples=200, deadline=None)
@given(flow_problems(), st.sampled_from([1.001, 1.5, 4.0]))   # 1.001: rate * dt / 1e6 may round below
def test_capacity_above_the_load_delays_nothing(problem, headroom) -> None:
    """Each unit's share of the service rate covers its stream's busiest interval: b stays 0,
    r_max >= rho, so every tuple passes on arrival (the law's default gain, no surge)."""
    arrivals, fc = problem
    sizes = [len(a) for a in arrivals]
    if not sum(sizes):
        return
    t0 = min(int(a.min()) for a in arrivals if len(a))
    busiest = max(np.bincount((a - t0) // fc.interval_us).max() / (len(a) / sum(sizes))
                  for a in arrivals if len(a))
    fast = FlowControl(buffer=fc.buffer, rate=headroom * busiest * 1e6 / fc.interval_us, target=fc.target,
                       interval_us=fc.interval_us, policy=fc.policy)
    out = delay_arrivals(arrivals, fast)
    assert all((d == a).all() for a, d in zip(arrivals, out.arrival))


def _ref_streams(arrivals, ts_rng):
    return [[RefTuple(stream=i, row=r, ts=int(ts_rng[i][r]), arrival=int(t), key=(int(ts_rng[i][r]) % 2,))
             for r, t in enumerate(a)] for i, a in enumerate(arrivals)]


@settings(max_examples=120, deadline=None)
@given(flow_problems(), st.sampled_from(["kslack", "static", "none"]), st.integers(0, 2000))
def test_the_replay_on_delayed_arrivals_emits_what_the_reference_replay_does(problem, policy, seed) -> None:
    """The emitted set (and emission times) of the local engine on the fast path's delayed arrivals
    equals the reference replay's on the reference's delayed arrivals; every tuple is replayed."""
    arrivals, fc = problem
    if len(arrivals) < 2:
        arrivals = [*arrivals, np.array([0, 5], dtype=np.int64)]
    rng = np.random.default_rng(seed)
    ts = [np.maximum(a - rng.integers(0, 3000, len(a)), 0) for a in arrivals]   # event time <= arrival
    spec = {"kslack": PolicySpec("kslack", k=(2000,) * len(arrivals)),
            "static": PolicySpec("static", retention=(2000,) * len(arrivals)), "none": PolicySpec("none")}[policy]
    windows = (4000,) * len(arrivals)
    fast = local_engine(_ref_streams(delay_arrivals(arrivals, fc).arrival, ts), windows, spec)
    ref = replay(_ref_streams(reference_flow([a.tolist() for a in arrivals], fc)["arrival"], ts), windows, spec)
    assert fast.emitted == ref.emitted
    assert sorted(fast.order) == sorted((i, r) for i, a in enumerate(arrivals) for r in range(len(a)))


def test_end_to_end_latency_counts_from_the_original_arrival() -> None:
    original = [np.array([0, 10], dtype=np.int64), np.array([5, 50], dtype=np.int64)]
    rows = [np.array([0, 1]), np.array([0, 1])]
    assert end_to_end_latency(np.array([1000, 60]), rows, original).tolist() == [995, 10]


# ---------------------------------------------------------------- settings

@pytest.mark.parametrize("text, message", [
    ("buffer=10", "rate= is required"),
    ("buffer=10,rate=5,speed=3", "'speed=3'"),
    ("buffer=0,rate=5", "buffer=0"),
    ("buffer=10,rate=-1", "rate=-1"),
    ("buffer=10,rate=5,target=11", "target=11"),
    ("buffer=10,rate=5,policy=fair", "policy=fair"),
    ("buffer=10,rate=5,lambda=0.5:x", "lambda='x'"),
    ("buffer=10,rate=5,interval=5", "interval"),
    ("buffer=10,rate=5,surge=1", "surge=1"),
    ("buffer=10,rate=5,rate=6", "given twice"),
    ("buffer=10,rate=5,interval=2d", "interval=2d"),
])
def test_bad_settings_are_one_line_input_errors(text, message) -> None:
    with pytest.raises(InputError) as exc:
        parse_flow_control(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_settings_parse_the_seed_names() -> None:
    fc = parse_flow_control("buffer=100,rate=2500.5,target=30,interval=5ms,policy=min-flow,lambda=0.5:0.2,"
                            "mu=0.1,surge=0.25,bucket=3")
    assert fc == FlowControl(buffer=100, rate=2500.5, target=30.0, interval_us=5000, policy="min-flow",
                             lambdas=(0.5, 0.2), mus=(0.1,), surge=0.25, bucket=3.0)
    assert parse_flow_control("buffer=9,rate=1").b0 == 4.5   # default b0 = B / 2


def test_toml_flow_control_flags_win_and_other_commands_refuse_it(tmp_path) -> None:
    from streamjoin.pipelines.config.settings import Flags, resolve

    toml = tmp_path / "job.toml"
    toml.write_text('[run]\npolicy = "none"\nout = "o"\nflow_control = "buffer=10,rate=100,policy=min-flow"\n'
                    '[[stream]]\nname = "a"\npath = "a.parquet"\nwindow = "1ms"\n'
                    '[[stream]]\nname = "b"\npath = "b.parquet"\nwindow = "1ms"\n')
    cfg = resolve(toml, Flags(out=str(tmp_path / "o1")))
    assert cfg.flow_control == FlowControl(buffer=10, rate=100.0, policy="min-flow")
    assert cfg.to_dict()["flow_control"]["target"] == 5.0
    cfg = resolve(toml, Flags(out=str(tmp_path / "o2"), flow_control="buffer=20,rate=5"))
    assert cfg.flow_control == FlowControl(buffer=20, rate=5.0)
    for kind in ("tune-buffer", "compare"):
        with pytest.raises(InputError, match=f"flow_control: {kind} replays"):
            resolve(toml, Flags(out=str(tmp_path / f"o-{kind}")), output_kind=kind)
    both = resolve(toml, Flags(out=str(tmp_path / "o3"), capacity="tuple=5us", engine="local"))
    assert both.capacity == "tuple=5us" and both.flow_control == FlowControl(buffer=10, rate=100.0, policy="min-flow")


def test_a_span_of_too_many_intervals_is_refused_before_any_work() -> None:
    year = 365 * 86_400_000_000
    with pytest.raises(InputError, match="give interval= of at least 6307200us"):
        delay_arrivals([np.array([0, year], dtype=np.int64)], FlowControl(buffer=5, rate=10.0, interval_us=1000))


def test_a_drain_past_the_interval_bound_is_an_input_error(monkeypatch) -> None:
    """Ten tuples in the first interval, a unit that processes one per interval: the drain needs
    more intervals than a bound of 5 allows (the kernel stops and says so, nothing is returned)."""
    from streamjoin.pipelines.capacity import flow

    monkeypatch.setattr(flow, "MAX_INTERVALS", 5)
    with pytest.raises(InputError, match="more than 5 control intervals of 1000 us"):
        delay_arrivals([np.arange(10, dtype=np.int64)], FlowControl(buffer=2, rate=1000.0, interval_us=1000))
    monkeypatch.setattr(flow, "MAX_INTERVALS", 100)
    assert delay_arrivals([np.arange(10, dtype=np.int64)], FlowControl(buffer=2, rate=1000.0, interval_us=1000)
                          ).rate.shape[0] > 5


def test_the_default_interval_follows_the_span_so_a_year_costs_what_its_tuples_cost() -> None:
    """Without interval=, Δt is the smallest human step keeping <= 100,000 intervals: a year of
    readings (200 per stream, one every ~44 h) runs at 10min (52,560 intervals over the span) --
    no refusal, no 3e9-step loop -- and equals the reference with the same default; the report
    says it was chosen."""
    from streamjoin.pipelines.capacity.flow import flow_report

    n, span = 200, 365 * 86_400_000_000
    rng = np.random.default_rng(3)
    arrivals = [np.sort(np.arange(n, dtype=np.int64) * (span // n) + rng.integers(0, span // n, n))
                for _ in range(2)]
    fc = FlowControl(buffer=3, rate=n / (span / 1e6))    # half the load of the two streams
    out = delay_arrivals(arrivals, fc)
    assert out.interval_us == 600_000_000
    assert out.rate.shape[0] <= 2 * 52_561               # the span's intervals plus draining the backlog
    ref = reference_flow(arrivals, fc)
    assert [a.tolist() for a in out.arrival] == ref["arrival"]
    assert any((d > a).any() for d, a in zip(out.arrival, arrivals)), "half the load must delay something"
    report = flow_report(out, fc, ["a", "b"], arrivals)
    assert report["settings"]["interval_us"] == 600_000_000 and report["interval_source"].startswith("default")
    short = delay_arrivals([np.array([0, 30_000_000], dtype=np.int64)], FlowControl(buffer=3, rate=10.0))
    assert short.interval_us == 10_000                   # 30 s: the 10ms of short replays


def test_added_delay_percentiles_are_nearest_rank_like_every_report_percentile() -> None:
    """Ten delays 0, 10, ..., 90 us: nearest rank gives p99 = the 10th smallest (90; numpy's
    "lower" rule would give 80) and p50 = the 5th smallest (40)."""
    from streamjoin.pipelines.capacity.flow import FlowOutcome, flow_report

    original = np.zeros(10, np.int64)
    flow = FlowOutcome([np.arange(10, dtype=np.int64) * 10], 0, 1000, np.zeros((1, 1)), np.zeros((0, 1)),
                       np.zeros((0, 1)), np.zeros((0, 1), np.int64), np.ones(1))
    d = flow_report(flow, FlowControl(buffer=4, rate=1000.0, interval_us=1000), ["s"], [original])["added_delay_us"]
    assert d["all"] == {"mean": 45.0, "p50": 40, "p99": 90, "max": 90, "delayed": 9}
    assert d["streams"]["s"] == d["all"]
