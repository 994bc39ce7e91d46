"""Issue 20 item 4: LLF with real loads (seed 000, ``w = w1 Phi_cpu + w2 Phi_mem + w3 Phi_net``).

cpu, mem and net are three different uses (work, tuples held x window,
tuples shipped), each over its capacity, so ``--load-weights`` changes the
placement when the resources differ -- and never the join's result.  Pure
Python (no JVM): the planners as functions and the routed plane in-process
(``spark_join(..., plane="local")``, the functions the Spark tasks run).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.adapters import key_frames, local_engine
from helpers.strategies import ref_streams

from streamjoin.pipelines.engines.spark.engine import spark_join
from streamjoin.pipelines.engines.spark.routing import RouteSettings, make_route_plans
from streamjoin.pipelines.replay.probe_order import probe_order
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.route import BIG, Capacity, atr, ctr, histogram, place

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- hand-computed placements

#: three pieces (cpu, mem, net): a is tuple-heavy, b state-heavy, c small
PIECES = [(2, 0, 2), (1, 4, 1), (1, 0, 1)]


def test_hand_computed_placement_changes_with_the_weights():
    """Fair-share capacities (totals / 2): cpu 2, mem 2, net 2.

    (1,1,1) -> weights 1/3 each: a -> p0 (all empty, lowest id): w0 = (1 + 0 + 1)/3 = 0.667;
    b -> p1: w1 = (0.5 + 2 + 0.5)/3 = 1.0; c -> p0 (0.667 < 1.0).
    (5,0.1,0.1) -> /5.2: a -> p0: w0 = (5 + 0.1)/5.2 = 0.981; b -> p1:
    w1 = (2.5 + 0.2 + 0.05)/5.2 = 0.529; c -> p1."""
    even, loads = place(PIECES, 2, (1, 1, 1))
    assert even.tolist() == [0, 1, 0]
    assert (loads.cpu.tolist(), loads.mem.tolist(), loads.net.tolist()) == ([3, 1], [0, 4], [3, 1])
    assert loads.cap.tolist() == [2, 2, 2]
    cpu_heavy, loads = place(PIECES, 2, (5, 0.1, 0.1))
    assert cpu_heavy.tolist() == [0, 1, 1]
    assert (loads.cpu.tolist(), loads.mem.tolist()) == ([2, 2], [0, 4])
    assert loads.w() == pytest.approx([(5 * 1 + 0.1 * 1) / 5.2, (5 * 1 + 0.1 * 2 + 0.1 * 1) / 5.2])


def test_hand_computed_placement_with_a_given_capacity():
    """mem=100 per partition: b's 4 tuples held are Phi 0.04, so (1,1,1) now
    balances cpu and net: a -> p0 (w0 = 0.667), b -> p1 (w1 = (0.5 + 0.04 + 0.5)/3
    = 0.347), c -> p1."""
    part, loads = place(PIECES, 2, (1, 1, 1), Capacity(mem=100))
    assert part.tolist() == [0, 1, 1]
    assert loads.cap.tolist() == [2, 100, 2]
    assert loads.phi()[1].tolist() == [0, 0.04]


def reference_llf(use, P, weights, cap):
    """LLF as the seed writes it, one piece at a time: Phi = U / C, w = sum w_R Phi_R."""
    w = np.asarray(weights, float) / sum(weights)
    U = [[0.0, 0.0, 0.0] for _ in range(P)]
    out = []
    for piece in use:
        loads = [sum(w[r] * (U[p][r] / cap[r] if cap[r] > 0 else 0.0) for r in range(3)) for p in range(P)]
        totals = [sum(U[p][r] / cap[r] if cap[r] > 0 else 0.0 for r in range(3)) for p in range(P)]
        best = min(range(P), key=lambda p: (loads[p], totals[p], p))
        for r in range(3):
            U[best][r] += piece[r]
        out.append(best)
    return out


def skewed():
    """A fast stream with window 0 everywhere and a slow one with a large window in the
    first half only: segments differ in tuples and in state held."""
    rng = np.random.default_rng(0)
    ts = [np.sort(rng.integers(0, 1_000_000, 4000)), np.sort(rng.integers(0, 500_000, 400))]
    return ts, [0, 50_000]


def test_atr_placement_follows_the_weights_on_real_segments():
    ts, W = skewed()
    hist = histogram(ts)
    plans = {w: atr.plan(hist, W, 50_000, 2, w) for w in ((1, 1, 1), (5, 0.1, 0.1), (0.1, 5, 0.1))}
    assert plans[(1, 1, 1)].part.tolist() != plans[(5, 0.1, 0.1)].part.tolist()
    assert plans[(0.1, 5, 0.1)].part.tolist() != plans[(5, 0.1, 0.1)].part.tolist()
    span = hist.t_end - hist.t0
    for w, p in plans.items():
        # the segments' uses, independently: received ranges by the seed's rule (no role switch here)
        assert p.switches == 0 and set(p.master.tolist()) == {0}
        use = []
        for j in range(len(p.start)):
            t = hist.t0 + 50_000 * j
            got = [float(hist.count(0, t, t + 50_000)), float(hist.count(1, t - W[1], t + 50_000 + W[0]))]
            use.append((sum(got) / (span / 1e6), (got[0] * W[0] + got[1] * W[1]) / span, sum(got) / (span / 1e6)))
        cap = np.sum(use, axis=0) / 2
        assert p.part.tolist() == reference_llf(use, 2, w, cap), w
    # state-heavy weights balance the state held better than tuple-heavy ones
    phi_mem = {w: p.estimated.phi()[1].max() for w, p in plans.items()}
    assert phi_mem[(0.1, 5, 0.1)] < phi_mem[(5, 0.1, 0.1)]


def test_ctr_placement_follows_the_weights():
    ts, W = skewed()
    hist = histogram(ts)
    hosts = {w: ctr.plan(hist, W, 50_000, 2, [0, 1], w).host.tolist() for w in ((1, 1, 1), (0.1, 5, 0.1))}
    assert hosts[(1, 1, 1)] != hosts[(0.1, 5, 0.1)]


# ---------------------------------------------------------------- the result never depends on the placement

@st.composite
def routed(draw):
    n = draw(st.integers(2, 3))
    streams = ref_streams(draw, n, 9, keyed=draw(st.booleans()))
    windows = tuple(draw(st.integers(0, 12)) for _ in range(n))
    name = draw(st.sampled_from(["none", "kslack", "static"]))
    policy = (PolicySpec(name, k=tuple(draw(st.integers(0, 20)) for _ in range(n))) if name == "kslack" else
              PolicySpec(name, retention=tuple(draw(st.integers(0, 20)) for _ in range(n))) if name == "static" else
              PolicySpec(name))
    weight = st.floats(0, 5, allow_nan=False)
    weights = draw(st.tuples(weight, weight, weight).filter(lambda w: sum(w) > 0))
    cap = st.one_of(st.none(), st.floats(1e-3, 1e6))
    capacity = Capacity(draw(cap), draw(cap), draw(cap))
    costs = (draw(st.floats(0, 3)), draw(st.floats(0, 3)))
    return streams, windows, policy, weights, capacity, costs


def columns(streams):
    return ([np.array([t.ts for t in s], dtype=np.int64) for s in streams],
            [np.array([t.arrival for t in s], dtype=np.int64) for s in streams])


def emitted_of(out):
    combos = list(zip(*[r.tolist() for r in out.combos.rows]))
    assert len(combos) == len(set(combos))
    return set(combos), {c for c, m in zip(combos, out.emission.emitted.tolist()) if m}


@SETTINGS
@given(routed(), st.sampled_from(["atr", "ctr"]), st.sampled_from([2, 3, 5]), st.integers(1, 15))
def test_any_weights_and_capacities_give_the_same_join(problem, router, partitions, segment):
    streams, windows, policy, weights, capacity, costs = problem
    ref = local_engine(streams, windows, policy)
    ts, ar = columns(streams)
    out = spark_join(ts, ar, key_frames(streams), windows, policy, plane="local",
                     settings=RouteSettings(router, partitions, segment, weights, capacity=capacity, costs=costs))
    truth, emitted = emitted_of(out)
    assert truth == ref.truth
    assert emitted == set(ref.emitted)
    table = out.routing["per_partition"]
    assert len(table) == partitions
    w = np.asarray(weights) / sum(weights)
    for p in table:   # Phi = use / capacity, load = normalised weighted sum
        for r in ("cpu", "mem", "net"):
            c = out.routing["capacity"][r]
            assert p[f"phi_{r}"] == pytest.approx(p[r] / c if c > 0 else 0.0)
        assert p["load"] == pytest.approx(w @ [p["phi_cpu"], p["phi_mem"], p["phi_net"]])


# ---------------------------------------------------------------- measured loads == a per-tuple count

def atr_reference(plan, ts, W):
    """Per tuple: every partition whose segment's receive range holds it (seed 000:
    master ``[L_j, t_{j+1})``, slave ``[L_j - W_k, t_{j+1} + W_A)``, ``L_j = t_j`` or
    ``t_j - W_A`` right after a master switch); one copy per partition."""
    J = len(plan.start)
    copies = np.zeros((len(ts), plan.partitions), dtype=np.int64)
    for k, tk in enumerate(ts):
        for x in tk.tolist():
            where = set()
            for j in range(J):
                A = int(plan.master[j])
                start, end = int(plan.start[j]), int(plan.end[j])
                L = start if j == 0 or int(plan.master[j - 1]) == A else start - W[A]
                lo, hi = (L, end) if k == A else (L - W[k], end + W[A])
                if j == 0:
                    lo = -BIG
                if j == J - 1:
                    hi = BIG
                if lo <= x < hi:
                    where.add(int(plan.part[j]))
            for p in where:
                copies[k, p] += 1
    return copies, copies.sum(axis=0), copies.sum(axis=0)


def ctr_reference(plan, ts):
    """Per tuple: stored at its segment's host, a probe copy at every other host of its first hop."""
    P = plan.partitions
    stored = np.zeros((len(ts), P), dtype=np.int64)
    moved_in = np.zeros(P, dtype=np.int64)
    for k, tk in enumerate(ts):
        for x in tk.tolist():
            j = min(max((x - plan.base) // plan.T, 0), plan.slots - 1)
            home = int(plan.host[k, j])
            stored[k, home] += 1
            for d in plan.dest(k, j, 1, home):
                if d != home:
                    moved_in[d] += 1
    tuples_in = stored.sum(axis=0) + moved_in
    return stored, tuples_in, tuples_in   # two streams: no intermediate results


@SETTINGS
@given(st.data(), st.sampled_from(["atr", "ctr"]), st.sampled_from([2, 3, 4]), st.integers(1, 20))
def test_measured_loads_equal_a_per_tuple_count(data, router, partitions, segment):
    n = 2 if router == "ctr" else data.draw(st.integers(2, 3))
    streams = ref_streams(data.draw, n, 12, ts_max=60, keyed=True)
    windows = tuple(data.draw(st.integers(0, 15)) for _ in range(n))
    weights = data.draw(st.sampled_from([(1, 1, 1), (5, 0.1, 0.1), (0.1, 5, 0.1)]))
    costs = (data.draw(st.sampled_from([1.0, 2.5])), data.draw(st.sampled_from([0.0, 0.5])))
    ts, ar = columns(streams)
    settings_ = RouteSettings(router, partitions, segment, weights, costs=costs)
    out = spark_join(ts, ar, key_frames(streams), windows, PolicySpec("none"), plane="local", settings=settings_)
    if not any(len(t) for t in ts):
        return
    probe = probe_order(ts, key_frames(streams), list(windows), None)   # as the engine plans
    plan = make_route_plans(ts, list(windows), settings_, probe.order, probe.selectivity)[0][router][0]
    assert plan.to_dict() == {k: out.routing[router][k] for k in plan.to_dict()}   # the engine's plan
    stored, tuples_in, received = atr_reference(plan, ts, windows) if router == "atr" else ctr_reference(plan, ts)
    nonempty = [t for t in ts if len(t)]
    span = max(max(int(t.max()) for t in nonempty) - min(int(t.min()) for t in nonempty), 1)
    table = out.routing["per_partition"]
    for p in range(partitions):
        got = table[p]
        assert got.get("n_in", 0) == tuples_in[p]
        cand = got.get("n_cand", 0)
        assert got["cpu"] == pytest.approx((costs[0] * tuples_in[p] + costs[1] * cand) / (span / 1e6))
        assert got["mem"] == pytest.approx(sum(windows[k] * stored[k, p] for k in range(n)) / span)
        assert got["net"] == pytest.approx(received[p] / (span / 1e6))
