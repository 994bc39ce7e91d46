"""The native Spark path's progress pieces without a JVM (issue 19): the shared
carried-summary chain (``engines/spark/progress.carried_from`` over
``first_summary``) against ``replay/partitioned_progress``'s own chain, and each
tuple's release and end of stay in memory found in its own partition or the
later one ``native_progress.local_search`` marks (``search_head``) against a
per-tuple loop over the whole replay -- on random inputs cut into random
partitions, empty ones included; the same under a recall-target policy's
decision table (``qjoin``: each stream's tuples searched in its own horizon
``H_k``; ``qkslack``: in ``R``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.engines.spark.native_progress import (FOREIGN_MAX, crossing_events, local_search,
                                                                  marked_in, search_head)
from streamjoin.pipelines.engines.spark.progress import carried_from, first_summary
from streamjoin.pipelines.policies import SORTING, PolicySpec
from streamjoin.pipelines.policies.recall_target import RecallTarget
from streamjoin.pipelines.replay import partitioned_progress as sp

INT = np.int64


def policies(n):
    return st.sampled_from([PolicySpec("none"), PolicySpec("mpkslack"),
                            PolicySpec("kslack", k=tuple(range(0, 3 * n, 3))),
                            PolicySpec("static", retention=tuple(range(1, 2 * n + 1, 2)))])


@st.composite
def problems(draw):
    n = draw(st.integers(2, 4))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    ts, ar = [], []
    for _ in range(n):
        m = int(rng.integers(0, 25))
        t = rng.integers(0, 80, m)
        late = rng.random(m) < 0.3
        ts.append(t.astype(INT))
        ar.append((t + np.where(late, rng.integers(0, 40, m), rng.integers(0, 3, m))).astype(INT))
    W = tuple(int(x) for x in rng.integers(0, 12, n))
    cuts = draw(st.lists(st.integers(0, sum(len(t) for t in ts)), max_size=6))
    return n, ts, ar, W, draw(policies(n)), sorted(cuts)


def reference_search(G, v, a, strict):
    """Per tuple: the first index >= a where G reaches v (strict: exceeds it), len(G) if never."""
    for i in range(a, len(G)):
        if (G[i] > v) if strict else (G[i] >= v):
            return i
    return len(G)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_native_carries_and_searches_equal_the_whole_replay(problem):
    n, ts, ar, W, policy, cuts = problem
    ref = sp.driver_facts(ts, ar, W, policy)
    N = len(ref["a"])
    bounds = [0, *cuts, N]
    chunks = [{k: ref[k][a:b] for k in ("stream", "row", "ts", "arrival")} for a, b in zip(bounds, bounds[1:])]
    s0 = [first_summary(c, n) for c in chunks]
    sorting = policy.family == SORTING
    cy = carried_from(s0, lambda Mc, Kc: [sp.summary3(c, n, policy, m, k) for c, m, k in zip(chunks, Mc, Kc)],
                      n, policy)
    # the chain of partitioned_progress.progress_chunks, summary2 with the carried M
    offsets, Mc, N2 = sp.carries_from([sp.summary1(c, n) for c in chunks], n)
    assert offsets == cy.offsets and N2 == cy.N == N
    assert all((x == y).all() for x, y in zip(Mc, cy.M))
    if policy.name == "mpkslack":
        Kc = sp.prefix_max([sp.summary2(c, n, m) for c, m in zip(chunks, Mc)], np.zeros(n, INT))
        assert all((x == y).all() for x, y in zip(Kc, cy.K))
    if N:
        assert (cy.first, cy.last_arrival) == (int(ref["arrival"][0]), int(ref["arrival"][-1]))
        assert (cy.ts_min, cy.ts_max) == (int(ref["ts"].min()), int(ref["ts"].max()))
    d = np.zeros(n, INT) if sorting else np.asarray(policy.retention, INT)
    G_all = ref["R"] if sorting else ref["T"]
    G_end = cy.R_end if sorting else cy.T_end
    last = cy.last_arrival or 0
    per = [sp.facts(c, n, W, policy, o, m, k, r, h)
           for c, o, m, k, r, h in zip(chunks, cy.offsets, cy.M, cy.K, cy.R, cy.H)]
    Gs = [f["R"] if sorting else f["T"] for f in per]
    assert all((G_all[a:b] == g).all() for a, b, g in zip(bounds, bounds[1:], Gs))
    for p, (c, f) in enumerate(zip(chunks, per)):
        held = ~f["dropped"]
        lim = c["ts"] + np.asarray(W, INT)[c["stream"]] + d[c["stream"]]
        for v, strict in ((c["ts"], False), (lim, True)):
            if not strict and not sorting:
                continue
            idx, us, to = local_search(Gs[p], v, f["a"], c["arrival"], strict, held, cy.offsets[p], G_end, p, N, last)
            enc = marked_in(idx, to)   # the one column the facts frame carries: -1 - q where marked for q
            assert (enc < 0).tolist() == (to >= 0).tolist()
            assert np.where(enc < 0, -1 - enc, idx).tolist() == np.where(to >= 0, to, idx).tolist()
            for q in np.unique(to[to >= 0]):       # found in the later partition marked
                mine = to == q
                assert q > p and bounds[q + 1] > bounds[q]
                idx[mine], us[mine] = search_head(Gs[q], per[q]["a"], chunks[q]["arrival"], v[mine], f["a"][mine],
                                                  c["arrival"][mine], strict)
            want = np.array([reference_search(G_all, int(x), int(a), strict) if h else N
                             for x, a, h in zip(v, f["a"], held)], INT)
            assert idx.tolist() == want.tolist()
            assert us.tolist() == [int(ref["arrival"][i]) if i < N else last for i in want]
            if not strict:   # the local replay's release (partitioned_progress.facts_from_replay)
                assert idx.tolist() == ref["rel"][bounds[p]:bounds[p + 1]].tolist()
                assert us.tolist() == ref["rel_us"][bounds[p]:bounds[p + 1]].tolist()


@settings(max_examples=200, deadline=None)
@given(problems(), st.sampled_from(["qjoin", "qkslack"]), st.integers(0, 10**6))
def test_native_searches_under_a_decision_table(problem, name, seed):
    """A random decision table (times, per-stream values): the carried chain with MP-K-slack's
    carried K, each partition's facts equal to the whole replay's (one chunk), and each held
    tuple's end of stay (qjoin: the first index where its stream's H_k exceeds ts + W_k;
    qkslack: R, and its release) found in its own or the marked later partition equal to a
    per-tuple loop over the whole replay's sequence."""
    n, ts, ar, W, _, cuts = problem
    rng = np.random.default_rng(seed)
    policy = PolicySpec(name, target=RecallTarget(0.9, period_us=50, interval_us=10))
    D = int(rng.integers(0, 6))
    schedule = (np.sort(rng.integers(0, 120, D)).astype(INT), rng.integers(0, 30, (n, D)).astype(INT))
    order = sp.driver_facts(ts, ar, W, PolicySpec("none"))
    N = len(order["a"])
    whole = {k: order[k] for k in ("stream", "row", "ts", "arrival")}
    ref = sp.progress_chunks([whole], n, W, policy, schedule=schedule)
    bounds = [0, *cuts, N]
    chunks = [{k: v[a:b] for k, v in whole.items()} for a, b in zip(bounds, bounds[1:])]
    sorting = policy.family == SORTING
    cy = carried_from([first_summary(c, n) for c in chunks],
                      lambda Mc, Kc: [sp.summary3(c, n, policy, m, k, schedule) for c, m, k in zip(chunks, Mc, Kc)],
                      n, policy, scheduled=True)
    _, Mc, _ = sp.carries_from([sp.summary1(c, n) for c in chunks], n)
    Kc = sp.prefix_max([sp.summary2(c, n, m) for c, m in zip(chunks, Mc)], np.zeros(n, INT))
    assert all((x == y).all() for x, y in zip(Kc, cy.K))
    per = [sp.facts(c, n, W, policy, o, m, k, r, h, schedule)
           for c, o, m, k, r, h in zip(chunks, cy.offsets, cy.M, cy.K, cy.R, cy.H)]
    seqs = ["R"] if sorting else [f"H{k}" for k in range(n)]
    for j, g in enumerate(seqs):
        assert all((ref[g][a:b] == f[g]).all() for a, b, f in zip(bounds, bounds[1:], per))
        ends = cy.R_end if sorting else [int(h[j]) for h in cy.H_end]
        # the sequence at each non-empty partition's last tuple
        assert [int(ref[g][b - 1]) for a, b in zip(bounds, bounds[1:]) if b > a] == \
            [e for e, a, b in zip(ends, bounds, bounds[1:]) if b > a]
    last = cy.last_arrival or 0
    for p, (c, f) in enumerate(zip(chunks, per)):
        held = ~f["dropped"]
        lim = c["ts"] + np.asarray(W, INT)[c["stream"]]
        searches = [(c["ts"], False, "R", held), (lim, True, "R", held)] if sorting else \
            [(lim, True, f"H{k}", c["stream"] == k) for k in range(n)]
        for v, strict, g, mine in searches:
            ends = cy.R_end if sorting else [int(h[int(g[1:])]) for h in cy.H_end]
            idx, us, to = local_search(f[g], v, f["a"], c["arrival"], strict, mine, cy.offsets[p], ends, p, N, last)
            for q in np.unique(to[to >= 0]):
                sel = to == q
                assert q > p and bounds[q + 1] > bounds[q]
                idx[sel], us[sel] = search_head(per[q][g], per[q]["a"], chunks[q]["arrival"], v[sel], f["a"][sel],
                                                c["arrival"][sel], strict)
            want = np.array([reference_search(ref[g], int(x), int(a), strict) if h else N
                             for x, a, h in zip(v, f["a"], mine)], INT)
            assert idx.tolist() == want.tolist()
            assert us.tolist() == [int(whole["arrival"][i]) if i < N else last for i in want]


def _crossing_rows(kind, g, i, stream, d):
    import pyarrow as pa

    return pa.table({c: np.asarray(v, INT) for c, v in
                     (("kind", kind), ("g", g), ("i", i), ("stream", stream), ("d", d))})


@settings(max_examples=60, deadline=None)
@given(Q=st.integers(1, 6), n=st.integers(1, 4), seed=st.integers(0, 10**6), m=st.integers(0, 40))
def test_crossing_events_are_the_per_row_sums(Q, n, seed, m):
    """``crossing_events`` (the driver side of the in-order memory scan): each partition's
    carried-in memory is the sum of the kind-0 rows of the partitions before it, and it
    receives exactly its kind-1 rows, in their order -- against a loop over the rows."""
    rng = np.random.default_rng(seed)
    k0 = rng.integers(0, 3 * Q * n + 1)
    kind = np.concatenate([np.zeros(k0, INT), np.ones(m, INT)])
    rng.shuffle(kind)
    g, stream = rng.integers(0, Q, len(kind)), rng.integers(0, n, len(kind))
    i, d = rng.integers(0, 10**6, len(kind)), rng.integers(-5, 6, len(kind))
    carry, incoming = crossing_events(_crossing_rows(kind, g, i, stream, d), Q, n)
    want_carry, want_in = np.zeros((Q, n), INT), {}
    for p in range(Q):
        for j in range(len(kind)):
            if kind[j] == 0 and g[j] < p:
                want_carry[p, stream[j]] += d[j]
            if kind[j] == 1 and g[j] == p:
                want_in.setdefault(p, []).append((i[j], stream[j], d[j]))
    assert np.array_equal(carry, want_carry)
    assert sorted(incoming) == sorted(want_in)
    for p, events in want_in.items():
        assert list(zip(*(a.tolist() for a in incoming[p]))) == [tuple(map(int, e)) for e in events]


def test_crossing_events_at_the_cap_fit_the_driver_budget():
    """At ``FOREIGN_MAX`` boundary-crossing events the in-order memory scan's driver side --
    the aggregated rows, ``crossing_events``' arrays and their pickled copy in the scan
    task -- stays within a quarter of the native path's driver budget (160 MB above the
    session's start, test_spark_native.test_capped_driver_runs_native_not_current).
    The cap was 2,000,000: about 175 MB of these alone."""
    import pickle

    Q, n, E = 16, 4, FOREIGN_MAX
    sums = np.arange(Q * n)
    kind = np.concatenate([np.zeros(len(sums), INT), np.ones(E, INT)])
    g = np.concatenate([sums // n, np.arange(E) * Q // E])
    i = np.concatenate([np.zeros(len(sums), INT), np.arange(E) * 7])
    stream = np.concatenate([sums % n, np.arange(E) % n])
    rows = _crossing_rows(kind, g, i, stream, -np.ones(len(kind), INT))
    carry, incoming = crossing_events(rows, Q, n)
    assert sum(len(v[0]) for v in incoming.values()) == E
    held = rows.nbytes + sum(a.nbytes for v in incoming.values() for a in v) \
        + len(pickle.dumps(incoming, protocol=pickle.HIGHEST_PROTOCOL))
    assert held <= 40 * 2**20, held
