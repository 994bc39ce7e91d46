"""The reference replay: a per-arrival oracle for SPEC §2–§4.

This module is the *independent check* of the fast engines.  It is written to
be verified by reading, not to be fast: it walks the replay one arrival at a
time and keeps explicit buffers, exactly as SPEC §4 describes the operators.
It never uses the SPEC's "closed forms" to decide what is emitted (it only
asserts, at the end, that its operational answer agrees with them).  Use it on
tiny inputs only -- the truth is computed by brute force over
``itertools.product`` of all streams.

Semantics in brief (SPEC is authoritative)
------------------------------------------
* **Replay order**: every tuple of every stream, sorted by
  ``(arrival, stream, row)``; the position is the arrival index ``a``.
  ``M_i(a)`` = largest ``ts`` of stream *i* seen at indexes ``<= a`` (−∞ if
  none); frontier ``T(a) = min_i M_i(a)``; delay ``δ(x) = M_i(a_x) − x.ts``.
* **Valid combination** (one tuple per stream): every member *k* has
  ``max_ts − t_k.ts <= W_k``, and all members have equal keys (and an optional
  extra predicate holds).  **Truth** = all valid combinations.
* **Symmetric family** (``static``): per arrival *y* at index *a*: update
  ``M, T`` and ``H_i(a) = max_{a'<=a}(T(a') − d_i)``; purge buffered *x* of
  stream *i* with ``x.ts + W_i < H_i(a)``; emit *y* × buffers of the other
  streams (latency 0); insert *y* unless ``y.ts + W_s < H_s(a)`` ("expired on
  arrival" -- it still joined in the step before).
* **Sorting family** (``none``/``kslack``/``mpkslack``): release horizon
  ``R(a) = max_{a'<=a} min_i(M_i(a') − K_i(a'))``.  *y* is dropped as late iff
  ``y.ts < R(a−1)``; otherwise it waits in the sort buffer until the first
  step with ``R(a) >= y.ts`` (or the end of input, where everything left is
  flushed).  Released tuples enter an in-order window join; after all
  releases of a step the join state drops tuples with ``x.ts + W_s < R(a)``.
* **Micro-batch emulation** (``spark-ss``, :func:`replay_micro_batches`;
  batches cut by input files: :func:`replay_micro_batches_files`): a loop
  over Spark Structured Streaming's micro-batches with explicit state lists
  and matched flags, inner and outer joins (docs/semantics.md, "spark-ss").
* **Interval-join emulation** (``flink``, :func:`replay_interval_join`): a
  loop over records and watermarks with explicit generators, per-input
  watermarks, buffers and cleanup timers (docs/semantics.md, "flink").

Worked example (policy ``none``, ``W = (10, 10)``)::

    stream 0 (A): a0 ts=0  arr=0     a1 ts=10 arr=10
    stream 1 (B): b0 ts=2  arr=2     b1 ts=1  arr=15   (b1 is out of order)

    replay order: a0, b0, a1, b1   (indexes 0..3)
    a=0  a0 arrives; B has no tuple, R(0)=−∞      sort buffer {a0}     memory 1
    a=1  b0 arrives; R(1)=min(0,2)=0 → release a0 (join state empty)   memory 2
    a=2  a1 arrives; R(2)=min(10,2)=2 → release b0, it meets a0:
         emit (0,0) at arrival[2]=10, latency 10 − max(0,2) = 8        memory 3
    a=3  b1 arrives; b1.ts=1 < R(2)=2 → dropped as late                memory 3
    end  flush a1; it meets b0: emit (1,0) at 15 (last arrival), latency 5

    truth = {(0,0), (0,1), (1,0), (1,1)}; emitted = truth minus b1's combos.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..policies import SORTING, SYMMETRIC, PolicySpec

NEG_INF = float("-inf")  # "no tuple seen yet"; compares correctly with any int

Predicate = Callable[[tuple["RefTuple", ...]], bool]


@dataclass(frozen=True)
class RefTuple:
    """One input tuple.

    Attributes:
        stream: 0-based stream index.
        row: 0-based row index within its stream (its position in ``streams[stream]``).
        ts: event time, int microseconds.
        arrival: arrival time, int microseconds.
        key: key values; the join predicate is equality of these tuples across
            all members of a combination.
        vec: vector values (distance predicates, expressions); only the
            ``predicate`` passed to :func:`replay` looks at them.
    """

    stream: int
    row: int
    ts: int
    arrival: int
    key: tuple = ()
    vec: tuple = ()


@dataclass
class ReferenceResult:
    """What a replay produced (the fields every engine adapter must return).

    Attributes:
        truth: every valid combination, as ``(row of stream 0, row of stream 1, ...)``.
        emitted: combination -> ``(emission_time_us, latency_us)``.
        memory: tuples held after processing each arrival index ``a = 0..N-1``.
        dropped: ``(stream, row)`` dropped as late (sorting family).
        expired: ``(stream, row)`` expired on arrival (symmetric family).
        order: replay order, ``(stream, row)`` at each arrival index.
    """

    truth: set[tuple[int, ...]] = field(default_factory=set)
    emitted: dict[tuple[int, ...], tuple[int, int]] = field(default_factory=dict)
    memory: list[int] = field(default_factory=list)
    dropped: set[tuple[int, int]] = field(default_factory=set)
    expired: set[tuple[int, int]] = field(default_factory=set)
    order: list[tuple[int, int]] = field(default_factory=list)


# --------------------------------------------------------------------------- #
# Validity and truth (SPEC §3)
# --------------------------------------------------------------------------- #


def is_valid(members: Sequence[RefTuple], windows: Sequence[int], predicate: Predicate | None = None) -> bool:
    """SPEC §3: is the combination ``members`` (one tuple per stream, in stream order) valid?

    Condition 1: every member *k* lies within its own window of the newest
    member, ``max_ts − t_k.ts <= W_k``.  Condition 2: all key tuples are equal
    and, if given, ``predicate(members)`` is true.
    """
    newest = max(m.ts for m in members)
    if any(newest - m.ts > windows[m.stream] for m in members):
        return False
    if any(m.key != members[0].key for m in members):
        return False
    return predicate is None or bool(predicate(tuple(members)))


def _combo(members: Sequence[RefTuple]) -> tuple[int, ...]:
    """The combination's identity: the row of each member, in stream order."""
    return tuple(m.row for m in members)


def brute_force_truth(
    streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], predicate: Predicate | None = None
) -> set[tuple[int, ...]]:
    """Every valid combination (SPEC §3 "truth"), by trying all of them.

    Args:
        streams: ``streams[i]`` = stream *i*'s tuples, row = index in the list.
        windows: ``windows[i]`` = ``W_i`` in microseconds.
        predicate: optional extra condition ANDed with key equality.

    Returns:
        The set of ``(row of stream 0, row of stream 1, ...)`` of all valid
        combinations.  Cost is the product of the stream sizes: tiny inputs only.
    """
    return {_combo(c) for c in itertools.product(*streams) if is_valid(c, windows, predicate)}


# --------------------------------------------------------------------------- #
# Replay
# --------------------------------------------------------------------------- #


def replay_order(streams: Sequence[Sequence[RefTuple]]) -> list[RefTuple]:
    """SPEC §2: all tuples sorted by ``(arrival, stream, row)``."""
    return sorted((x for s in streams for x in s), key=lambda x: (x.arrival, x.stream, x.row))


def _check_inputs(streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], policy: PolicySpec) -> None:
    """Reject malformed test inputs loudly (a wrong row index would silently corrupt combos)."""
    n = len(streams)
    if n < 2:
        raise ValueError(f"need at least 2 streams, got {n}")
    if len(windows) != n or any(w < 0 for w in windows):
        raise ValueError(f"need one window >= 0 per stream, got {windows!r}")
    for i, s in enumerate(streams):
        for r, x in enumerate(s):
            if (x.stream, x.row) != (i, r):
                raise ValueError(f"streams[{i}][{r}] says stream={x.stream}, row={x.row}")
    for label, values in (("k", policy.k), ("retention", policy.retention)):
        if values is not None and len(values) != n:
            raise ValueError(f"policy {label} needs one value per stream, got {values!r}")


def replay(
    streams: Sequence[Sequence[RefTuple]],
    windows: Sequence[int],
    policy: PolicySpec,
    predicate: Predicate | None = None,
    schedule: Sequence[Sequence[int]] | None = None,
) -> ReferenceResult:
    """Replay the streams arrival by arrival under ``policy`` (SPEC §2–§4).

    Args:
        streams: ``streams[i]`` = stream *i*'s tuples; ``streams[i][r]`` must
            have ``stream == i`` and ``row == r``.
        windows: ``windows[i]`` = ``W_i`` in microseconds (``>= 0``).
        policy: a :class:`PolicySpec` of the symmetric or sorting family.
        predicate: optional extra join condition on the members (ANDed with key
            equality).
        schedule: optional time-varying values, ``schedule[i][a]`` = ``d_i(a)``
            (symmetric family) or ``K_i(a)`` (sorting family) at arrival index
            ``a``; they replace the policy's own values (required for the
            recall-target policies ``qjoin`` / ``qkslack``, whose values an
            online controller decides).  Without it nothing changes.

    Returns:
        A :class:`ReferenceResult`.  Guarantees (asserted before returning):
        no combination is emitted twice; every emitted combination is in the
        truth; sorting family: emitted == truth combinations with no dropped
        member; symmetric family: emitted agrees with SPEC §4.1's closed form.
    """
    _check_inputs(streams, windows, policy)
    order = replay_order(streams)
    if schedule is None and policy.adaptive:
        raise ValueError(f"policy {policy.name} needs a schedule (the values its controller decided)")
    if schedule is not None and (len(schedule) != len(streams) or any(len(v) != len(order) for v in schedule)):
        raise ValueError("schedule needs one value per stream and arrival index")
    truth = brute_force_truth(streams, windows, predicate)
    if policy.family == SYMMETRIC:
        result, horizons = _replay_symmetric(order, len(streams), windows, policy, predicate, schedule)
    elif policy.family == SORTING:
        result = _replay_sorting(order, len(streams), windows, policy, predicate, schedule)
    else:  # pragma: no cover - PolicySpec already validates the name
        raise ValueError(f"unknown policy family {policy.family!r}")
    result.truth = truth
    result.order = [(x.stream, x.row) for x in order]

    # Self-checks: they catch a misreading of the SPEC, not engine bugs.
    assert set(result.emitted) <= truth, "emitted a combination that is not valid"
    if policy.family == SORTING:
        expected = {c for c in truth if not any((i, r) in result.dropped for i, r in enumerate(c))}
        assert set(result.emitted) == expected, "sorting family must emit exactly the truth minus dropped members"
    else:
        # SPEC §4.1 closed form: a valid combination whose last-arriving member
        # is y (index a_y) is emitted iff every other member x has
        # x.ts + W_{s(x)} >= H_{s(x)}(a_y).
        index = {key: a for a, key in enumerate(result.order)}
        for combo in truth:
            members = [streams[i][r] for i, r in enumerate(combo)]
            a_y = max(index[(m.stream, m.row)] for m in members)
            closed = all(
                m.ts + windows[m.stream] >= horizons[a_y][m.stream]
                for m in members
                if index[(m.stream, m.row)] != a_y
            )
            assert closed == (combo in result.emitted), f"SPEC 4.1 closed form disagrees for {combo}"
    return result


def _emit(emitted: dict, members: Sequence[RefTuple], now: int) -> None:
    """Record an emission at replay time ``now``; latency counts from the last member's arrival."""
    combo = _combo(members)
    assert combo not in emitted, f"combination {combo} emitted twice"
    latency = now - max(m.arrival for m in members)
    assert latency >= 0, "a result cannot be emitted before its last member arrived"
    emitted[combo] = (now, latency)


def _replay_symmetric(
    order: list[RefTuple], n: int, windows: Sequence[int], policy: PolicySpec, predicate: Predicate | None,
    schedule: Sequence[Sequence[int]] | None = None,
) -> tuple[ReferenceResult, list[list[float]]]:
    """SPEC §4.1: per-stream buffers, a tuple joins the moment it arrives.

    Returns the result and ``H_i(a)`` after every index (for the self-check).
    """
    d = policy.retention
    M = [NEG_INF] * n  # M_i(a)
    H = [NEG_INF] * n  # H_i(a); only ever raised, so it is the running max
    buffers: list[list[RefTuple]] = [[] for _ in range(n)]
    H_history: list[list[float]] = []  # H after each index, for the closed-form self-check
    out = ReferenceResult()

    for a, y in enumerate(order):
        s = y.stream
        # 1. update M, T, H including y (d_i(a) from the schedule when one is given)
        M[s] = max(M[s], y.ts)
        T = min(M)
        for i in range(n):
            H[i] = max(H[i], T - (d[i] if schedule is None else schedule[i][a]))
        H_history.append(list(H))
        # 2. purge every buffered x of stream i whose window ends before H_i
        for i in range(n):
            buffers[i] = [x for x in buffers[i] if not x.ts + windows[i] < H[i]]
        # 3. y meets every combination of buffered tuples of the other streams
        candidates = [[y] if i == s else buffers[i] for i in range(n)]
        for members in itertools.product(*candidates):
            if is_valid(members, windows, predicate):
                _emit(out.emitted, members, y.arrival)
        # 4. keep y for later arrivals, unless its own window already ended
        if y.ts + windows[s] < H[s]:
            out.expired.add((s, y.row))
        else:
            buffers[s].append(y)
        out.memory.append(sum(len(b) for b in buffers))

    return out, H_history


def _replay_sorting(
    order: list[RefTuple], n: int, windows: Sequence[int], policy: PolicySpec, predicate: Predicate | None,
    schedule: Sequence[Sequence[int]] | None = None,
) -> ReferenceResult:
    """SPEC §4.2: K-slack sort buffer + synchronising merge + in-order window join."""
    M = [NEG_INF] * n  # M_i(a)
    K = list(policy.k) if policy.name == "kslack" else [0] * n  # K_i(a); mpkslack raises it
    R = NEG_INF  # R(a-1) at the top of step a, R(a) after the update
    sort_buffer: list[RefTuple] = []
    join_state: list[list[RefTuple]] = [[] for _ in range(n)]
    out = ReferenceResult()

    def release(x: RefTuple, now: int) -> None:
        """x leaves the sort buffer: join it with the released tuples of the other streams."""
        candidates = [[x] if i == x.stream else join_state[i] for i in range(n)]
        for members in itertools.product(*candidates):
            if is_valid(members, windows, predicate):
                _emit(out.emitted, members, now)
        join_state[x.stream].append(x)

    def release_ready(now: int, horizon: float) -> None:
        """Release every waiting tuple with ts <= horizon, oldest first (the order does not
        change what is emitted: each combination is produced by whichever of its members
        is released last, and all releases of a step share the emission time)."""
        nonlocal sort_buffer
        ready = sorted((x for x in sort_buffer if x.ts <= horizon), key=lambda x: (x.ts, x.stream, x.row))
        sort_buffer = [x for x in sort_buffer if not x.ts <= horizon]
        for x in ready:
            release(x, now)

    for a, y in enumerate(order):
        s = y.stream
        # The drop decision uses R(a-1): only what was known before y arrived.
        late = y.ts < R
        # Update M_i(a), K_i(a), R(a) -- a dropped tuple still counts as seen
        # (it raises nothing in M since it is behind, but its delay feeds mpkslack).
        M[s] = max(M[s], y.ts)
        if policy.name == "mpkslack":
            K[s] = max(K[s], M[s] - y.ts)  # δ(y) = M_s(a_y) − y.ts
        if schedule is not None:
            K = [schedule[i][a] for i in range(n)]  # K_i(a) decided by a controller
        R = max(R, min(M[i] - K[i] for i in range(n)))
        if late:
            out.dropped.add((s, y.row))
        else:
            sort_buffer.append(y)
        release_ready(y.arrival, R)
        # Purge only after all of this step's releases: two tuples released together
        # may still join each other even if both windows are already behind R(a).
        for i in range(n):
            join_state[i] = [x for x in join_state[i] if not x.ts + windows[i] < R]
        out.memory.append(len(sort_buffer) + sum(len(js) for js in join_state))

    # End of input: flush whatever still waits, at the last arrival time.
    if order:
        release_ready(order[-1].arrival, float("inf"))
    return out


# --------------------------------------------------------------------------- #
# Micro-batch engine emulation: spark-ss (SPEC §4.4, docs/semantics.md)
# --------------------------------------------------------------------------- #


@dataclass
class MicroBatchReference:
    """What :func:`replay_micro_batches` produced.

    Attributes:
        truth: every valid pair ``(left row, right row)``.
        emitted: pair -> ``(batch, emission_time_us, latency_us)``.
        outer: outer joins: ``(stream, row)`` of each null-padded row ->
            ``(batch, emission_time_us, latency_us)``.
        dropped: ``(stream, row)`` dropped as late by the watermark.
        state_rows: per batch ``0..last``, ``(left rows, right rows)`` in join
            state after the batch.
        watermarks: per batch, the global watermark (ms) in force for it.
    """

    truth: set[tuple[int, int]] = field(default_factory=set)
    emitted: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)
    outer: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)
    dropped: set[tuple[int, int]] = field(default_factory=set)
    state_rows: list[tuple[int, int]] = field(default_factory=list)
    watermarks: list[int] = field(default_factory=list)


def _toward_zero(value: int, divisor: int) -> int:
    """``value / divisor`` truncated towards zero, as Scala's ``Double.toLong``."""
    q = abs(value) // divisor
    return -q if value < 0 else q


def replay_micro_batches(streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], policy: PolicySpec,
                         predicate: Predicate | None = None) -> MicroBatchReference:
    """Spark Structured Streaming's stream-stream join (inner, left or right outer:
    ``policy.join``), one micro-batch at a time.

    Written from the rules of docs/semantics.md ("spark-ss"), with explicit
    state lists of ``[row, matched]``: for every batch ``j`` (every trigger
    interval from the first arrival's to the last's, empty ones too, then one
    more, the no-data batch after the last), drop the rows at or below the
    previous batch's watermark; left rows probe the right state (marking what
    they match) and are all stored, matched if they matched; right rows probe
    the left state likewise and are stored unless at or below the right state
    watermark -- or, in a right outer join, unmatched; at the batch end evict
    state rows at or below the state watermarks, emitting the outer side's
    unmatched ones null-padded; then move each stream's watermark with the
    batch's largest event time (ms) and the global one by the policy.
    """
    if len(streams) != 2:
        raise ValueError("spark-ss joins two streams")
    T = policy.trigger_us
    out = MicroBatchReference(truth=brute_force_truth(streams, windows, predicate))
    tuples = replay_order(streams)
    if not tuples:
        return out
    base = tuples[0].arrival // T
    by_batch: dict[int, list[RefTuple]] = {}
    for x in tuples:
        by_batch.setdefault(x.arrival // T - base, []).append(x)
    return _micro_batch_loop(by_batch, lambda j: (base + j + 1) * T, lambda x: x.arrival, windows, policy,
                             predicate, out)


def replay_micro_batches_files(files: Sequence[Sequence[tuple[str, int, Sequence[RefTuple]]]],
                               windows: Sequence[int], policy: PolicySpec,
                               predicate: Predicate | None = None) -> MicroBatchReference:
    """The same join with micro-batches cut by input files (``--trigger-files N``,
    ``maxFilesPerTrigger``).  ``files``: per stream, its files as ``(path,
    modification time µs, rows)``.  Each stream's files are taken in order of
    modification time in whole ms, then path, ``N`` per batch; batch ``j`` runs at
    ``P(j)``: the latest modification time of the files of batches ``0..j``, or
    1 µs after ``P(j - 1)`` if that is later; the no-data batch after the last
    at ``P(last) + 1 µs``.  A row arrives when its batch runs (its arrival
    field is not read)."""
    if len(files) != 2:
        raise ValueError("spark-ss joins two streams")
    N = policy.trigger_files
    streams = [[x for _, _, rows in fs for x in rows] for fs in files]
    out = MicroBatchReference(truth=brute_force_truth(streams, windows, predicate))
    batch_of: dict[tuple[int, int], int] = {}
    latest: dict[int, int] = {}
    for fs in files:
        for rank, (path, mtime, rows) in enumerate(sorted(fs, key=lambda f: (f[1] // 1000, f[0]))):
            j = rank // N
            latest[j] = max(latest.get(j, mtime), mtime)
            for x in rows:
                batch_of[(x.stream, x.row)] = j
    if not latest:
        return out
    runs: list[int] = []
    for j in range(max(latest) + 1):
        at = max(latest[k] for k in range(j + 1))
        runs.append(at if not runs else max(at, runs[-1] + 1))
    runs.append(runs[-1] + 1)
    by_batch: dict[int, list[RefTuple]] = {}
    for s in streams:
        for x in s:
            by_batch.setdefault(batch_of[(x.stream, x.row)], []).append(x)
    for j in by_batch:      # replay order inside a batch: stream, then row (they all arrive at P(j))
        by_batch[j].sort(key=lambda x: (x.stream, x.row))
    if not by_batch:
        return out
    return _micro_batch_loop(by_batch, lambda j: runs[j], lambda x: runs[batch_of[(x.stream, x.row)]], windows,
                             policy, predicate, out)


def _micro_batch_loop(by_batch: dict[int, list[RefTuple]], end_of, arrival_of, windows: Sequence[int],
                      policy: PolicySpec, predicate: Predicate | None, out: MicroBatchReference
                      ) -> MicroBatchReference:
    """The per-batch loop of :func:`replay_micro_batches` over the rows of each
    batch (``by_batch``); batch ``j`` emits at ``end_of(j)``, a row arrived at
    ``arrival_of(row)``."""
    MS = 1000
    padded = policy.padded_sides
    last = max(by_batch)
    own: list[int | None] = [None, None]        # each stream's watermark (ms); None: no rows yet
    global_wm = 0                               # the query's watermark (ms), never moves down
    previous_wm = 0                             # the watermark batch j - 1 ran with
    state: list[list[list]] = [[], []]          # per side: [row, matched]
    for j in range(last + 2):
        wm = global_wm
        end = end_of(j)
        rows = by_batch.get(j, [])
        live = []
        for x in rows:
            if x.ts <= previous_wm * MS:
                out.dropped.add((x.stream, x.row))
            else:
                live.append(x)
        state_wm = [(_toward_zero(wm * MS - windows[side], MS) - 1) * MS for side in (0, 1)]
        for side in (0, 1):                     # left rows first, then right rows
            for x in live:
                if x.stream != side:
                    continue
                matched = False
                for entry in state[1 - side]:
                    y = entry[0]
                    pair = (x, y) if side == 0 else (y, x)
                    if is_valid(pair, windows, predicate):
                        out.emitted[_combo(pair)] = (j, end, end - max(arrival_of(x), arrival_of(y)))
                        entry[1] = matched = True
                if side == 0 or x.ts > state_wm[side] or (1 in padded and not matched):
                    state[side].append([x, matched])
        for side in (0, 1):
            for x, matched in state[side]:
                if x.ts <= state_wm[side] and side in padded and not matched:
                    out.outer[(x.stream, x.row)] = (j, end, end - arrival_of(x))
            state[side] = [e for e in state[side] if e[0].ts > state_wm[side]]
        if j > last:
            break                               # the no-data batch after the last: nothing more runs
        out.watermarks.append(wm)
        out.state_rows.append((len(state[0]), len(state[1])))
        for side in (0, 1):
            times = [x.ts // MS for x in rows if x.stream == side]   # every row counts, late ones too
            if times:
                moved = max(times) - policy.watermark[side] // MS
                if own[side] is None or moved > own[side]:
                    own[side] = moved
        values = [0 if o is None else o for o in own]
        chosen = min(values) if policy.watermark_policy == "min" else max(values)
        previous_wm = wm
        global_wm = max(global_wm, chosen)
    return out


# --------------------------------------------------------------------------- #
# Interval-join engine emulation: flink (SPEC §4.4, docs/semantics.md)
# --------------------------------------------------------------------------- #


@dataclass
class IntervalJoinReference:
    """What :func:`replay_interval_join` produced.

    Attributes:
        truth: every valid pair ``(left row, right row)``.
        emitted: pair -> ``(emission_time_us, latency_us)``.
        dropped: ``(stream, row)`` dropped as late.
        buffered: per arrival index, ``(left rows, right rows)`` in the
            buffers once that record (and what follows it at that instant) is
            processed.
    """

    truth: set[tuple[int, int]] = field(default_factory=set)
    emitted: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    dropped: set[tuple[int, int]] = field(default_factory=set)
    buffered: list[tuple[int, int]] = field(default_factory=list)


def replay_interval_join(streams: Sequence[Sequence[RefTuple]], windows: Sequence[int], policy: PolicySpec,
                         predicate: Predicate | None = None) -> IntervalJoinReference:
    """Flink's interval join with bounded-out-of-orderness watermarks, one event at a time.

    Written from Flink's operators (docs/semantics.md "flink"), not from the
    closed form: each input has a generator (largest timestamp seen; it emits
    ``max - D - 1 ms`` when asked, passing on only increasing values); the
    operator keeps each input's last watermark and its own, the minimum, and
    fires the cleanup timers at or below it whenever it rises.  A record is
    late if its timestamp is below the operator's watermark; otherwise it is
    buffered, joined with the other buffer's records in ``[ts - W_right,
    ts + W_left]`` (left record) and registers a timer at ``ts + W_own``.
    Generators are asked after each record of their input
    (``watermark_interval_us == 0``) or, both, at every tick ``first + k I``
    before the records arriving at or after it.  With ``idleness_us``
    (``withIdleness``) each generator runs Flink's idleness timer at its ticks,
    the emitter marks its input idle or active, and the operator's minimum
    leaves idle inputs out.
    """
    if len(streams) != 2:
        raise ValueError("flink joins two streams")
    MS = 1000
    interval = policy.watermark_interval_us
    idleness = policy.idleness_us
    out = IntervalJoinReference(truth=brute_force_truth(streams, windows, predicate))
    tuples = replay_order(streams)
    largest: list[float] = [NEG_INF, NEG_INF]       # each generator's max timestamp
    emitted_wm: list[float] = [NEG_INF, NEG_INF]    # each emitter's last watermark
    emitter_idle = [False, False]                   # each emitter's status (WatermarkEmitter.idle)
    input_idle = [False, False]                     # the operator's view of each input's status
    # WatermarksWithIdleness / IdlenessTimer per generator
    counter, last_counter = [0, 0], [0, 0]
    inactive_since: list[int | None] = [None, None]
    idle_now = [False, False]
    operator_wm: float = NEG_INF
    buffers: list[list[RefTuple]] = [[], []]
    timers: list[tuple[int, RefTuple]] = []         # (time, record)

    def combine() -> None:
        """The operator's watermark: the minimum over the inputs that are not idle (the
        maximum when both are), only up."""
        nonlocal operator_wm
        active = [emitted_wm[i] for i in (0, 1) if not input_idle[i]]
        combined = min(active) if active else max(emitted_wm)
        if combined > operator_wm:
            operator_wm = combined
            for time, x in list(timers):
                if time <= operator_wm:
                    timers.remove((time, x))
                    buffers[x.stream].remove(x)

    def emit_watermark(side: int) -> None:
        if largest[side] == NEG_INF:
            return
        value = largest[side] - policy.watermark[side] - MS
        if value <= emitted_wm[side]:
            return                                  # the emitter passes on only increasing watermarks
        if emitter_idle[side]:                      # markActive: the status first, then the watermark
            emitter_idle[side] = input_idle[side] = False
            combine()
        emitted_wm[side] = value
        combine()

    def periodic(side: int, now: int) -> None:
        if idleness:
            if counter[side] != last_counter[side]:
                last_counter[side] = counter[side]
                inactive_since[side] = None
                idle = False
            elif inactive_since[side] is None:
                inactive_since[side] = now
                idle = False
            else:
                idle = now - inactive_since[side] > idleness
            if idle:
                if not idle_now[side]:
                    idle_now[side] = True
                    if not emitter_idle[side]:      # markIdle
                        emitter_idle[side] = input_idle[side] = True
                        combine()
                return
        emit_watermark(side)

    next_tick = tuples[0].arrival + interval if tuples and interval else None
    for x in tuples:
        while next_tick is not None and next_tick <= x.arrival:
            periodic(0, next_tick)
            periodic(1, next_tick)
            next_tick += interval
        if x.ts < operator_wm:
            out.dropped.add((x.stream, x.row))
        else:
            buffers[x.stream].append(x)
            for y in buffers[1 - x.stream]:
                pair = (x, y) if x.stream == 0 else (y, x)
                if is_valid(pair, windows, predicate):
                    out.emitted[_combo(pair)] = (x.arrival, 0)
            timers.append((x.ts + windows[x.stream], x))
        largest[x.stream] = max(largest[x.stream], x.ts)
        counter[x.stream] += 1
        idle_now[x.stream] = False
        if not interval:
            emit_watermark(x.stream)
        out.buffered.append((len(buffers[0]), len(buffers[1])))
    return out
