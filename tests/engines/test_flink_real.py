"""``--policy flink`` against real Flink, row for row.

Flink comes from ``apache-flink-libraries`` (a ``[test]`` extra): the jars that
PyFlink bundles (``flink-dist`` and friends), without PyFlink's Python side.
PyFlink's Python API has no interval join (no ``KeyedStream.interval_join`` in
PyFlink 2.3), and ``apache-flink`` itself cannot share an environment with
PySpark 4.3 (its ``apache-beam`` pins ``pyarrow < 17``; PySpark's Arrow needs
``>= 18``).  So the job is a small Java driver,
``tests/engines/flink_job/IntervalJoinReplay.java``, compiled here with
``javac`` against those jars and run on Flink's local mini-cluster: the
real ``IntervalJoinOperator`` (bounds ``between(-W_right, +W_left)``, both
inclusive), per-input ``BoundedOutOfOrdernessWatermarks``, Flink's watermark
propagation and timers.

Deterministic by construction (see the driver's header): parallelism 1, ONE
source emitting both streams' records in arrival order (a tagged union), split
into the two keyed inputs, buffer timeout 0, periodic emission off; each
generator is asked to emit after each of its records (``--watermark-interval
0``) or at tick elements the test inserts at ``first arrival + k I`` of arrival
time (``--watermark-interval I``), and a gate releases the next element only
when the join has processed everything before it -- the end of input too: the
driver appends, through the gate, the MAX watermark of each generator (the
left one first), since Flink's own end-of-input MAX goes down both inputs
behind the last record, and the join may take the other input's MAX before
that record (a last record late, or rows it would have joined expired first:
one run in five differed once on a loaded machine).  What is *not* reproduced:
Flink's own periodic timer on processing time (``autoWatermarkInterval``
200 ms of wall clock), which no two runs of a live job place alike -- the ticks
stand in for it.

With ``--idleness`` the driver wraps the generator in Flink's own
``WatermarksWithIdleness`` whose clock is each tick's time (arrival time, as
the emulation measures idleness), and sends every tick, the left generator's
before the right one's; the cases silence one input, then the other, then
both, so inputs go idle, come back, and are idle together.

Asserted equal to the local engine's ``flink`` answer: the joined pairs, the
arrival index at which each came out (the later member's: emitted on arrival),
and the late records per side (Flink's late-data side outputs); and five runs
of the same job give the same lines in the same order.  One more job shows what
the gated end of input rules out: CASES[2] with the other input's end first
makes the last record late and loses its pairs.
"""

from __future__ import annotations

import dataclasses
import difflib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.flink import local_flink

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple, replay_order

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S
DRIVER = Path(__file__).parent / "flink_job" / "IntervalJoinReplay.java"
REPEATS = 5


def _flink_lib() -> Path:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        jars = distribution("apache-flink-libraries")
    except PackageNotFoundError:
        pytest.skip("SKIPPED LOUDLY: apache-flink-libraries is not installed (pip install -e '.[test]'); "
                    "--policy flink is NOT verified against real Flink in this run", allow_module_level=True)
    lib = Path(str(jars.locate_file("pyflink/lib")))
    if not list(lib.glob("flink-dist-*.jar")):
        pytest.fail(f"apache-flink-libraries is installed but {lib} holds no flink-dist jar")
    return lib


LIB = _flink_lib()
if shutil.which("java") is None or shutil.which("javac") is None:
    pytest.skip("SKIPPED LOUDLY: no java/javac (a JDK 17) on PATH; --policy flink is NOT verified against real "
                "Flink in this run", allow_module_level=True)


def disordered(seed: int, rows: int, span_s: float, grid_ms: int = 1) -> list[list[RefTuple]]:
    """Two keyed streams over ``span_s`` seconds of event time (multiples of
    ``grid_ms``): most rows a little late, a fifth very late (up to half the span)."""
    rng = np.random.default_rng(seed)
    streams = []
    for i in range(2):
        ts = T0 + rng.integers(0, int(span_s * 1000) // grid_ms, rows) * grid_ms * MS
        small = rng.integers(0, 300 * MS, rows)
        large = rng.integers(0, int(span_s * S / 2), rows)
        delay = np.where(rng.random(rows) < 0.2, large, small)
        key = rng.integers(0, 3, rows)
        streams.append([RefTuple(i, r, int(t), int(t + d), (int(k),))
                        for r, (t, d, k) in enumerate(zip(ts, delay, key))])
    return streams


def case_lines(streams, windows, policy: PolicySpec) -> list[str]:
    """The driver's case file: bounds and delays (ms) and the idleness (µs, 0 = none),
    then the elements in arrival order, with the ticks ``first + k I`` before the first
    record at or after them: the left generator's tick, then the right one's.  Without
    idleness one tick per gap is enough (later ones change nothing); with it every tick
    runs the idleness timer, so all are sent."""
    w_left, w_right = windows
    lines = [f"{-w_right // MS} {w_left // MS} {policy.watermark[0] // MS} {policy.watermark[1] // MS} "
             f"{policy.idleness_us or 0}"]
    order = replay_order(streams)
    interval = policy.watermark_interval_us
    next_tick = order[0].arrival + interval if interval else None
    for x in order:
        while next_tick is not None and next_tick <= x.arrival:
            lines += [f"2 -1 0 {next_tick}", f"3 -1 0 {next_tick}"]
            if not policy.idleness_us:
                next_tick += (x.arrival - next_tick) // interval * interval
            next_tick += interval
        lines.append(f"{x.stream} {x.row} {x.key[0]} {x.ts // MS}")
    return lines


def silenced(streams: list[list[RefTuple]], quiet: list[tuple[int, float, float]]) -> list[list[RefTuple]]:
    """``streams`` without the rows of stream ``i`` arriving in ``[T0 + a s, T0 + b s)``
    for each ``(i, a, b)`` in ``quiet`` (rows renumbered): silent spells for idleness."""
    out = []
    for i, rows in enumerate(streams):
        keep = [x for x in rows if not any(j == i and T0 + a * S <= x.arrival < T0 + b * S for j, a, b in quiet)]
        out.append([RefTuple(i, r, x.ts, x.arrival, x.key) for r, x in enumerate(keep)])
    return out


CASES = [
    # seed, rows per stream, event span (s), windows (µs), out-of-orderness (µs), watermark interval (µs),
    # event-time grid (ms), idleness (µs) and silent spells (stream, from s, to s) or None
    (21, 60, 8.0, (1 * S, 1 * S), (500 * MS, 500 * MS), 0, 1, None),
    (22, 60, 8.0, (1500 * MS, 700 * MS), (0, 2 * S), 0, 1, None),
    (23, 60, 8.0, (800 * MS, 0), (300 * MS, 0), 200 * MS, 1, None),
    (24, 60, 6.0, (2 * S, 500 * MS), (1 * S, 100 * MS), 1 * S, 1, None),
    # a 50 ms grid and delays of 49 / 149 ms put watermarks (max - D - 1 ms) on the grid: records exactly
    # at the watermark (not late: late is ts < G) and, with W = 0, records buffered at ts = G that stay
    # until G next moves (seed 35: a pair depends on it) are frequent
    (25, 60, 4.0, (100 * MS, 50 * MS), (49 * MS, 149 * MS), 0, 50, None),
    (35, 60, 4.0, (0, 100 * MS), (149 * MS, 49 * MS), 150 * MS, 50, None),
    (35, 60, 4.0, (0, 0), (49 * MS, 49 * MS), 0, 50, None),
    # withIdleness: silent spells of one input, then of the other, then of both at once
    (41, 80, 8.0, (1 * S, 1 * S), (300 * MS, 300 * MS), 200 * MS, 1,
     (700 * MS, [(1, 2.0, 4.5), (0, 6.0, 8.0), (1, 9.0, 11.0)])),
    (42, 80, 8.0, (500 * MS, 1500 * MS), (0, 500 * MS), 100 * MS, 1,
     (250 * MS, [(0, 1.0, 3.0), (1, 1.5, 3.0), (1, 5.0, 7.0)])),
    (43, 80, 6.0, (1 * S, 0), (100 * MS, 100 * MS), 300 * MS, 50,
     (1 * S + 1, [(1, 0.0, 2.5), (0, 3.0, 5.5), (1, 6.0, 9.0)])),
]


def case(c: int):
    """Streams, windows and policy of ``CASES[c]``."""
    seed, rows, span, windows, watermark, interval, grid, idle = CASES[c]
    streams = disordered(seed, rows, span, grid)
    idleness = None
    if idle is not None:
        idleness, quiet = idle
        streams = silenced(streams, quiet)
    return streams, windows, PolicySpec("flink", watermark=watermark, watermark_interval_us=interval,
                                        idleness_us=idleness)


def run_cases(root: Path, main: str, sources: list[Path], cases: list[list[str]]) -> dict[int, list[list[str]]]:
    """Compile the drivers, then run every case file (its lines) REPEATS times in one
    JVM (one mini-cluster job per run): {case index: [output lines of each run]}."""
    classes = root / "classes"
    subprocess.run(["javac", "-nowarn", "-cp", f"{LIB}/*", "-d", str(classes), *map(str, sources)], check=True,
                   capture_output=True)
    args = []
    for c, lines in enumerate(cases):
        path = root / f"case{c}.txt"
        path.write_text("\n".join(lines) + "\n")
        for k in range(REPEATS):
            args += [str(path), str(root / f"out{c}-{k}.txt")]
    jvm = ["java", "--add-opens", "java.base/java.util=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED"]
    done = subprocess.run(jvm + ["-cp", f"{classes}:{LIB}/*", main, *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return {c: [(root / f"out{c}-{k}.txt").read_text().splitlines() for k in range(REPEATS)]
            for c in range(len(cases))}


def other_end_first(lines: list[str]) -> list[str]:
    """A case file whose OTHER input ends (its generator's MAX watermark: the driver's
    end marker 4 / 5) just before the last record: what a live job does when the join
    takes the other input's end-of-input watermark before that record."""
    side = int(lines[-1].split()[0])
    return [*lines[:-1], f"{5 - side} -1 0 0", lines[-1]]


RACED = 2   # a case whose answer that order changes


@pytest.fixture(scope="module")
def flink_runs(tmp_path_factory):
    """{case: runs}, and at len(CASES) the runs of CASES[RACED] with the other end first."""
    lines = [case_lines(*case(c)) for c in range(len(CASES))]
    return run_cases(tmp_path_factory.mktemp("flink"), "IntervalJoinReplay", [DRIVER],
                     [*lines, other_end_first(lines[RACED])])


@pytest.mark.parametrize("c", range(len(CASES)))
def test_same_pairs_and_late_records_as_flink(flink_runs, c):
    streams, windows, policy = case(c)
    lines = flink_runs[c][0]
    pairs = {(int(f[1]), int(f[2])): int(f[3]) for f in (line.split() for line in lines) if f[0] == "P"}
    late = {(int(f[1]), int(f[2])) for f in (line.split() for line in lines) if f[0] == "L"}
    assert len(pairs) == sum(1 for line in lines if line.startswith("P "))     # no pair twice
    ours = local_flink(streams, windows, policy)
    # emitted set, row for row, and the arrival index that emitted each pair
    index = {(x.stream, x.row): a for a, x in enumerate(replay_order(streams))}
    assert set(pairs) == set(ours.emitted)
    assert pairs == {(left, right): max(index[0, left], index[1, right]) for left, right in ours.emitted}
    assert late == ours.dropped
    assert late and 0 < len(pairs) < len(ours.truth)            # the case drops rows and loses pairs
    if policy.idleness_us:                                       # and idleness changes the answer
        busy = local_flink(streams, windows, dataclasses.replace(policy, idleness_us=None))
        assert (busy.dropped, set(busy.emitted)) != (ours.dropped, set(ours.emitted))


def assert_identical_runs(runs: list[list[str]]) -> None:
    """Each run wrote run 0's lines in run 0's order; else the first run that did
    not, with the first differing lines (a unified diff, cut short)."""
    assert runs[0], "run 0 wrote no lines"
    for k, run in enumerate(runs[1:], 1):
        diff = difflib.unified_diff(runs[0], run, "run 0", f"run {k}", n=2, lineterm="")
        assert run == runs[0], f"run {k} of {len(runs)} differs from run 0:\n" + "\n".join(list(diff)[:24])


@pytest.mark.parametrize("c", range(len(CASES)))
def test_five_runs_of_the_same_job_are_identical(flink_runs, c):
    assert_identical_runs(flink_runs[c])


def test_the_other_inputs_end_before_the_last_record_changes_flinks_answer(flink_runs):
    """Why the driver gates the end of input: when the join takes the other input's
    end-of-input MAX watermark before the last record, the combined watermark first
    jumps to that record's own input's watermark, the record is late, and its pairs
    are lost.  Deterministic too once gated."""
    streams, windows, policy = case(RACED)
    runs = flink_runs[len(CASES)]
    assert_identical_runs(runs)
    lines = [line.split() for line in runs[0]]
    pairs = {(int(f[1]), int(f[2])) for f in lines if f[0] == "P"}
    late = {(int(f[1]), int(f[2])) for f in lines if f[0] == "L"}
    ours = local_flink(streams, windows, policy)
    last = replay_order(streams)[-1]
    lost = set(ours.emitted) - pairs
    assert lost and pairs < set(ours.emitted) and all(p[last.stream] == last.row for p in lost)
    assert late == ours.dropped | {(last.stream, last.row)}
