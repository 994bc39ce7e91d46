"""Deterministic synthetic streams with realistic disorder (``streamjoin generate``).

Three sample kinds, each written as one Parquet file per stream plus a ready
``<kind>.toml`` config (see :func:`generate`):

``soccer``
    Modelled on the DEBS 2013 Grand Challenge (a real-time locating system on
    a football pitch).  Stream ``ball`` (one sensor, ~2000 Hz) and stream
    ``players`` (4 players x 2 foot sensors, ~200 Hz each, ``sensor_id``).
    ``ts``/``arrival`` are int64 **picoseconds** starting near the DEBS origin
    ``10_629_342_490_369_879`` ps; ``x``/``y``/``z`` int32 mm on a 105 m x 68 m
    pitch centred on (0, 0); ``v`` int64 |velocity| in um/s and ``a`` int64
    |acceleration| in um/s^2, as in DEBS.  Players follow smooth bounded
    trajectories (a few sinusoids, 0-7 m/s, plus a gait oscillation of the
    feet); the ball alternates between *possession* (circling within ~0.5 m
    of a player) and *passes* (a straight line, 8-25 m/s, some lobbed) to
    another player, so the ball is near some player most of the time.
``sensors``
    Keyed IoT readings: streams ``temperature`` and ``humidity``, 50 sensors
    ``s000``..``s049`` each sampling at its own 5-20 Hz, ``ts``/``arrival`` as
    Parquet ``timestamp[us]``, ``value`` float64.  About 0.05 % of the rows
    have a null ``ts`` and another 0.05 % a null ``sensor_id`` (at least one
    of each per stream) so that quarantine is exercised.
``bench``
    The benchmark set: keyed streams ``left`` / ``right`` with exactly
    2,000,000 / 1,000,000 rows at ``scale=1`` (linear in ``scale``), int64
    ``key`` (skewed popularity), int64 microsecond ``ts``/``arrival``, float64
    ``value``.  With windows of 100 ms on both sides the constants give about
    2.7 valid pairs per input tuple (~8.1 M pairs for 3 M tuples).

Event times (rate model)
------------------------
Each stream has a *rate multiplier* ``m(t)`` that changes during the run:
piecewise constant (levels redrawn at Poisson-distributed change points, at
least one -- soccer, bench) or smoothly varying (a sum of slow sinusoids -- sensors).  With
``L(t) = integral of m`` the tuple times are obtained by time rescaling,
``t = L^-1(u)``: ``u`` is a Poisson process of the base rate for Poisson
streams (bench; the count is fixed, so ``u`` are uniform order statistics), or
``u = (k + phase + small clock jitter) / rate`` for periodic sensors (soccer,
sensors).  Either way the result is a non-homogeneous process whose local
rate follows ``m(t)``.

Disorder model (per stream)
---------------------------
``arrival = ts + delay`` where

* every tuple gets a small network **jitter**, lognormal with a mean of a few
  milliseconds (a heavy-ish right tail of its own), and
* the link suffers **stalls**: stall start times form a Poisson process
  (one every ~10-20 s on average, at least one per stream), each lasting a
  log-uniform time between ~50 ms and 1-2 s.  Every tuple generated while a stall is in progress is held
  back and arrives only when the stall ends (overlapping stalls merge: the
  tuple waits for the end of the merged outage), plus its own jitter.

So most tuples arrive a few ms late and nearly in order, while tuples caught
in a stall arrive in a burst up to seconds late: the delay distribution has a
long tail (p99 >> p50), and the stream is out of order both within the jitter
scale and across stalls.  ``arrival`` is quantised to the unit of ``ts`` and
never precedes it.  Rows are written in event-time (``ts``) order, as a sensor
log would be; the ``arrival`` column alone carries the disorder (streamjoin
sorts by arrival itself).

Determinism
-----------
All randomness comes from ``numpy.random.Generator`` streams seeded by
``SeedSequence([seed, kind, stream])``; there are no wall-clock timestamps.
Files are written with pyarrow, a fixed row-group size and zstd compression,
so the same ``seed`` and arguments give byte-identical files (for a given
pyarrow version, which is recorded in the Parquet footer).

Everything is vectorised with numpy; the only Python loops run over a handful
of fixed-point iterations or over streams, never over tuples.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..base.errors import InputError
from ..base.sorting import GroupedCodes
from .arrivals import (cumulative_rate, delays, periodic_times, piecewise_multiplier, poisson_times, quantise,
                       smooth_multiplier, time_grid)

__all__ = ["KINDS", "generate", "window_pair_count"]

KINDS = ("soccer", "sensors", "bench", "bench3")

#: rows per Parquet row group (fixed, so files are byte-identical run to run)
ROW_GROUP_SIZE = 1 << 17
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3
_DELTA_COLUMNS = ("ts", "arrival")

#: default durations (seconds) at scale 1
DEFAULT_DURATION_S = {"soccer": 60.0, "sensors": 450.0, "bench": 300.0, "bench3": 300.0}


# --- soccer constants -------------------------------------------------------
SOCCER_T0_PS = 10_629_342_490_369_879  # first DEBS 2013 timestamp (ps)
BALL_HZ = 2000.0
FOOT_HZ = 200.0
PLAYER_SENSOR_IDS = np.array([13, 14, 47, 16, 49, 88, 19, 52], dtype=np.int32)  # 4 players x (left, right)
PITCH_HALF_X_M = 52.5
PITCH_HALF_Y_M = 34.0
SOCCER_WINDOW = "1ms"

# --- sensors constants ------------------------------------------------------
SENSORS_T0_US = 1_714_521_600_000_000  # 2024-05-01T00:00:00 (naive, UTC)
N_SENSORS = 50
SENSOR_HZ = (5.0, 20.0)
NULL_SHARE = 0.0005
SENSORS_WINDOW = "250ms"

# --- bench constants --------------------------------------------------------
BENCH_T0_US = 1_700_000_000_000_000  # 2023-11-14T22:13:20 (naive, UTC)
BENCH_LEFT_ROWS = 2_000_000
BENCH_RIGHT_ROWS = 1_000_000
BENCH_KEYS = 278  # tuned (with the Zipf exponent and duration) for ~2.7 pairs per input tuple
BENCH_ZIPF = 0.5
BENCH_WINDOW_US = 100_000
BENCH_WINDOW = "100ms"
BENCH3_ROWS = 500_000   # per stream, at scale 1
BENCH3_KEYS = 227       # with 300 s: ~2.7 results per input tuple (as the 2-stream bench) for a 3-way join within 100 ms

_KIND_ID = {k: i for i, k in enumerate(KINDS)}


def _rng(seed: int, kind: str, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, _KIND_ID[kind], stream]))


# ----------------------------------------------------------------------------
# exact pair count (two streams) -- used for the TOML comments, tests, tuning
# ----------------------------------------------------------------------------


def window_pair_count(ts0, ts1, w0: int, w1: int, keys0=None, keys1=None) -> int:
    """Number of valid pairs of a two-way window join (SPEC §3), vectorised.

    A pair ``(x in S0, y in S1)`` is valid iff the keys are equal (when given)
    and ``y.ts - x.ts <= w0`` when ``y`` is newer, ``x.ts - y.ts <= w1`` when
    ``x`` is newer, i.e. ``y.ts`` lies in ``[x.ts - w1, x.ts + w0]``.  Times
    and windows are integers in one unit.  Rows whose ts or key is null must
    be removed by the caller.
    """
    ts0 = np.asarray(ts0, dtype=np.int64)
    ts1 = np.asarray(ts1, dtype=np.int64)
    if ts0.size == 0 or ts1.size == 0:
        return 0
    lo = min(ts0.min(), ts1.min())
    r0, r1 = ts0 - lo, ts1 - lo
    if keys0 is not None:
        _, codes = np.unique(np.concatenate([np.asarray(keys0), np.asarray(keys1)]), return_inverse=True)
        codes = codes.astype(np.int64).ravel()
        # (key, ts) as one int64; through the times' ranks when key count x span would pass PACK_LIMIT
        packed = GroupedCodes(np.concatenate([r0, r1]), int(codes.max()) + 1)
        k0, k1 = codes[: ts0.size] * packed.width, codes[ts0.size :] * packed.width
        r1 = np.sort(k1 + packed.codes(r1))
        hi = np.searchsorted(r1, k0 + packed.query(r0 + w0, "right"), side="left")
        lo_ = np.searchsorted(r1, k0 + packed.query(r0 - w1, "left"), side="left")
        return int((hi - lo_).sum())
    r1 = np.sort(r1)
    hi = np.searchsorted(r1, r0 + w0, side="right")
    lo_ = np.searchsorted(r1, r0 - w1, side="left")
    return int((hi - lo_).sum())


# ----------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------


def _write_parquet(table: pa.Table, path: Path, meta: dict) -> None:
    md = dict(table.schema.metadata or {})
    md[b"streamjoin.generate"] = json.dumps(meta, sort_keys=True).encode()
    table = table.replace_schema_metadata(md)
    tmp = path.with_name(path.name + ".tmp")
    # Time columns are near-sorted integers: delta encoding halves their size
    # (readable by pyarrow, polars and Spark >= 3.3).  Other columns: defaults.
    delta = {c: "DELTA_BINARY_PACKED" for c in table.column_names if c in _DELTA_COLUMNS}
    pq.write_table(
        table,
        tmp,
        row_group_size=ROW_GROUP_SIZE,
        compression=COMPRESSION,
        compression_level=COMPRESSION_LEVEL,
        use_dictionary=[c for c in table.column_names if c not in delta],
        column_encoding=delta or None,
    )
    os.replace(tmp, path)


def _stream_toml(name, path, *, unit, window, keys) -> str:
    lines = [
        "[[stream]]",
        f'name = "{name}"',
        f'path = "{path}"',
        'ts = "ts"',
        'arrival = "arrival"',
    ]
    if unit:
        lines.append(f'unit = "{unit}"')
    lines.append(f'window = "{window}"')
    lines.append("keys = [" + ", ".join(f'"{k}"' for k in keys) + "]")
    return "\n".join(lines) + "\n"


def _write_toml(path: Path, header: list[str], run: list[str], streams: list[str]) -> None:
    text = "".join(f"# {h}\n" if h else "#\n" for h in header)
    text += "[run]\n" + "".join(r + "\n" for r in run) + "\n"
    text += "\n".join(streams)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _delay_stats(ts, arrival, ups) -> str:
    if len(ts) == 0:
        return "no rows"
    d = (arrival - ts) / ups * 1e3
    p50, p99 = np.percentile(d, [50, 99])
    return f"delay p50 {p50:.1f} ms, p99 {p99:.0f} ms, max {d.max():.0f} ms"


# ----------------------------------------------------------------------------
# soccer
# ----------------------------------------------------------------------------


class _Players:
    """Smooth bounded player trajectories: centre = c + sum_k A_k sin(w_k t + p_k)."""

    def __init__(self, rng, n_players: int):
        base_amp = np.array([15.0, 5.0, 1.5])  # m
        base_period = np.array([60.0, 15.0, 4.0])  # s  -> up to ~6-7 m/s combined
        shape = (n_players, base_amp.size)
        self.ax = base_amp * rng.uniform(0.5, 1.3, shape)
        self.ay = 0.65 * base_amp * rng.uniform(0.5, 1.3, shape)
        self.wx = 2 * np.pi / (base_period * rng.uniform(0.7, 1.4, shape))
        self.wy = 2 * np.pi / (base_period * rng.uniform(0.7, 1.4, shape))
        self.px = rng.uniform(0, 2 * np.pi, shape)
        self.py = rng.uniform(0, 2 * np.pi, shape)
        self.cx = rng.uniform(-30.0, 30.0, n_players)
        self.cy = rng.uniform(-15.0, 15.0, n_players)

    def centre(self, pid, t):
        """Position, velocity and acceleration of players ``pid`` at ``t`` (arrays)."""
        tt = t[:, None]
        out = []
        for c, a, w, p in ((self.cx, self.ax, self.wx, self.px), (self.cy, self.ay, self.wy, self.py)):
            A, W, P = a[pid], w[pid], p[pid]
            arg = W * tt + P
            s, co = np.sin(arg), np.cos(arg)
            out.append((c[pid] + (A * s).sum(1), (A * W * co).sum(1), -(A * W * W * s).sum(1)))
        (x, vx, ax), (y, vy, ay) = out
        return x, y, vx, vy, ax, ay


_DRIBBLE_R = 0.5  # m, ball circles the player in possession
_DRIBBLE_W = 2 * np.pi * 0.7
_BALL_R = 0.11  # m, ball radius (z of a ball on the ground)
_PASS_DRAG = 1.2  # a pass ends at exp(-1.2) ~ 30 % of its initial speed


def _ball_near(players, pid, t):
    x, y, *_ = players.centre(pid, t)
    return x + _DRIBBLE_R * np.cos(_DRIBBLE_W * t), y + _DRIBBLE_R * np.sin(_DRIBBLE_W * t)


def _ball_path(rng, players, n_players, duration, t):
    """Ball x, y, z (m) at times ``t``: possession segments alternating with passes."""
    n = int(duration / 1.5) + 16  # more segments than needed
    hold = rng.uniform(0.6, 4.0, n)
    steps = np.concatenate(([rng.integers(0, n_players)], rng.integers(1, n_players, n)))
    holder = np.cumsum(steps) % n_players  # consecutive holders always differ
    speed = rng.uniform(8.0, 25.0, n)
    lob = np.where(rng.random(n) < 0.3, rng.uniform(1.0, 8.0, n), 0.0)
    d = np.ones(n)
    for _ in range(6):  # fixed point: pass duration = distance(start, receiver at arrival) / speed
        T = np.concatenate(([0.0], np.cumsum(hold + d)))  # possession starts
        k0, k1 = T[:-1] + hold, T[1:]
        x0, y0 = _ball_near(players, holder[:-1], k0)
        x1, y1 = _ball_near(players, holder[1:], k1)
        d = np.clip(np.hypot(x1 - x0, y1 - y0) / speed, 0.1, 4.0)
    T = np.concatenate(([0.0], np.cumsum(hold + d)))
    k0, k1 = T[:-1] + hold, T[1:]
    x0, y0 = _ball_near(players, holder[:-1], k0)
    x1, y1 = _ball_near(players, holder[1:], k1)
    assert T[-1] > duration

    bounds = np.empty(2 * n)
    bounds[0::2], bounds[1::2] = T[:-1], k0
    idx = np.searchsorted(bounds, t, side="right") - 1
    j, is_pass = idx // 2, (idx % 2) == 1
    bx, by = _ball_near(players, holder[j], t)
    bz = np.full(t.size, _BALL_R)
    jp = j[is_pass]
    s = (t[is_pass] - k0[jp]) / d[jp]
    roll = np.expm1(-_PASS_DRAG * s) / np.expm1(-_PASS_DRAG)  # the ball slows down along the line
    bx[is_pass] = x0[jp] + roll * (x1[jp] - x0[jp])
    by[is_pass] = y0[jp] + roll * (y1[jp] - y0[jp])
    bz[is_pass] = _BALL_R + 4.0 * lob[jp] * s * (1.0 - s)
    return bx, by, bz


def _mm(a, rng, noise_mm, lo=None, hi=None):
    v = a * 1000.0 + rng.normal(0.0, noise_mm, a.size)
    if lo is not None:
        v = np.clip(v, lo, hi)
    return np.round(v).astype(np.int32)


def _um(a, resolution: int):
    """Metres (per s / s^2) -> int64 micrometres, rounded to ``resolution`` um."""
    return (np.round(a * (1e6 / resolution)) * resolution).astype(np.int64)


def _soccer(seed: int, duration: float):
    disorder = dict(jitter_sigma=0.8, stall_every=12.0, stall_min=0.05, stall_max=2.0)
    world = _rng(seed, "soccer", 0)
    n_players = PLAYER_SENSOR_IDS.size // 2
    players = _Players(world, n_players)
    x_lim = (-PITCH_HALF_X_M * 1000, PITCH_HALF_X_M * 1000)
    y_lim = (-PITCH_HALF_Y_M * 1000, PITCH_HALF_Y_M * 1000)
    grid = time_grid(duration)
    tables = {}

    # ball: one sensor at ~2000 Hz; rate dips while the ball is out of play / radio congestion
    rng = _rng(seed, "soccer", 1)
    m = piecewise_multiplier(rng, grid, mean_len=6.0, lo=0.8, hi=1.15)
    _, t = periodic_times(rng, [BALL_HZ], grid, cumulative_rate(grid, m))
    bx, by, bz = _ball_path(world, players, n_players, duration, t)
    # |v| and |a| from the (noise-free) path
    vx, vy, vz = (np.gradient(c, t) for c in (bx, by, bz))
    ax, ay, az = (np.gradient(c, t) for c in (vx, vy, vz))
    delay, _ = delays(rng, t, duration, jitter_mean=0.002, **disorder)
    ts, arrival = quantise(t, delay, SOCCER_T0_PS, "ps")
    tables["ball"] = pa.table(
        {
            "ts": pa.array(ts, pa.int64()),
            "arrival": pa.array(arrival, pa.int64()),
            "x": _mm(bx, rng, 10.0, *x_lim),
            "y": _mm(by, rng, 10.0, *y_lim),
            "z": _mm(bz, rng, 10.0, 0, 20_000),
            "v": _um(np.sqrt(vx**2 + vy**2 + vz**2), 1),
            "a": _um(np.sqrt(ax**2 + ay**2 + az**2), 1000),
        }
    )

    # players: 8 foot sensors at ~200 Hz each, own clocks, shared radio multiplier
    rng = _rng(seed, "soccer", 2)
    m = piecewise_multiplier(rng, grid, mean_len=8.0, lo=0.8, hi=1.1)
    rates = FOOT_HZ * rng.uniform(0.97, 1.03, PLAYER_SENSOR_IDS.size)
    src, t = periodic_times(rng, rates, grid, cumulative_rate(grid, m))
    order = np.argsort(t, kind="stable")
    src, t = src[order], t[order]
    pid, side = src // 2, np.where(src % 2 == 0, 1.0, -1.0)  # left / right leg
    cx, cy, cvx, cvy, cax, cay = players.centre(pid, t)
    gait_w = 2 * np.pi * 1.8
    gait_p = np.where(side > 0, 0.0, np.pi) + 0.3 * pid
    g = gait_w * t + gait_p
    step = 0.2  # m, foot swing along x
    fx = cx + step * np.sin(g)
    fy = cy + 0.12 * side
    lift = np.sin(g)
    fz = 0.08 + 0.12 * np.maximum(lift, 0.0)
    fvx = cvx + step * gait_w * np.cos(g)
    fvz = np.where(lift > 0, 0.12 * gait_w * np.cos(g), 0.0)
    fax = cax - step * gait_w**2 * np.sin(g)
    faz = np.where(lift > 0, -0.12 * gait_w**2 * lift, 0.0)
    delay, _ = delays(rng, t, duration, jitter_mean=0.003, **disorder)
    ts, arrival = quantise(t, delay, SOCCER_T0_PS, "ps")
    tables["players"] = pa.table(
        {
            "sensor_id": pa.array(PLAYER_SENSOR_IDS[src], pa.int32()),
            "ts": pa.array(ts, pa.int64()),
            "arrival": pa.array(arrival, pa.int64()),
            "x": _mm(fx, rng, 20.0, *x_lim),
            "y": _mm(fy, rng, 20.0, *y_lim),
            "z": _mm(fz, rng, 20.0, 0, 3_000),
            "v": _um(np.sqrt(fvx**2 + cvy**2 + fvz**2), 1),
            "a": _um(np.sqrt(fax**2 + cay**2 + faz**2), 1000),
        }
    )

    # counted on the engine's times: int64 us, picoseconds floored (SPEC §1)
    b, p = tables["ball"], tables["players"]
    pairs = window_pair_count(b["ts"].to_numpy() // 10**6, p["ts"].to_numpy() // 10**6, 1_000, 1_000)
    n_in = b.num_rows + p.num_rows
    header = [
        f"soccer: synthetic DEBS 2013 Grand Challenge-style positions, {duration:g} s, seed {seed}.",
        f"ball: 1 sensor ~{BALL_HZ:g} Hz ({b.num_rows} rows); players: 8 foot sensors ~{FOOT_HZ:g} Hz each ({p.num_rows} rows).",
        "ts/arrival are int64 picoseconds; x/y/z mm on a 105 m x 68 m pitch centred on (0,0); v um/s; a um/s^2.",
        f"Disorder: lognormal jitter + network stalls (ball: {_delay_stats(b['ts'].to_numpy(), b['arrival'].to_numpy(), 1e12)}).",
        "",
        "The join pairs every ball position with every foot-sensor reading taken within 1 ms of it",
        "(no key; a pair is valid iff |ball.ts - players.ts| <= 1 ms).  Windows of 1 ms keep the result",
        f"modest: truth = {pairs} pairs, {pairs / n_in:.2f} per input tuple (times floored to us, as streamjoin reads them).",
        "Generated by: streamjoin generate soccer --out samples/soccer --seed 7",
    ]
    run = ['policy = "mpkslack"        # or none / kslack / static', '# k = "50ms"               # for kslack',
           '# retention = "50ms"       # for static', 'out = "out/soccer"']
    streams = [
        _stream_toml("ball", "ball.parquet", unit="ps", window=SOCCER_WINDOW, keys=[]),
        _stream_toml("players", "players.parquet", unit="ps", window=SOCCER_WINDOW, keys=[]),
    ]
    return tables, header, run, streams


# ----------------------------------------------------------------------------
# sensors
# ----------------------------------------------------------------------------


def _sensors(seed: int, duration: float):
    disorder = dict(jitter_sigma=1.0, stall_every=10.0, stall_min=0.05, stall_max=2.0)
    world = _rng(seed, "sensors", 0)
    ids = np.array([f"s{i:03d}" for i in range(N_SENSORS)], dtype=object)
    base_temp = world.uniform(18.0, 26.0, N_SENSORS)
    base_hum = world.uniform(35.0, 65.0, N_SENSORS)
    drift_period = world.uniform(300.0, 1200.0, N_SENSORS)
    drift_phase = world.uniform(0, 2 * np.pi, N_SENSORS)
    grid = time_grid(duration)
    tables = {}
    for stream_no, name in ((1, "temperature"), (2, "humidity")):
        rng = _rng(seed, "sensors", stream_no)
        m = smooth_multiplier(rng, grid, periods=[(120.0, 400.0), (20.0, 60.0)], depths=[0.35, 0.15])
        rates = rng.uniform(*SENSOR_HZ, N_SENSORS)
        src, t = periodic_times(rng, rates, grid, cumulative_rate(grid, m))
        order = np.argsort(t, kind="stable")
        src, t = src[order], t[order]
        drift = np.sin(2 * np.pi * t / drift_period[src] + drift_phase[src])
        if name == "temperature":
            value = np.round(base_temp[src] + 1.5 * drift + rng.normal(0.0, 0.05, t.size), 2)
        else:
            value = np.round(base_hum[src] - 4.0 * drift + rng.normal(0.0, 0.3, t.size), 1)
        delay, _ = delays(rng, t, duration, jitter_mean=0.004, **disorder)
        ts, arrival = quantise(t, delay, SENSORS_T0_US, "us")
        n = t.size
        k = min(n, max(1, int(round(NULL_SHARE * n))))  # at least one of each (if any rows)
        null_ts = np.zeros(n, dtype=bool)
        null_ts[rng.choice(max(n, 1), size=k, replace=False)] = True
        null_id = np.zeros(n, dtype=bool)
        null_id[rng.choice(max(n, 1), size=k, replace=False)] = True
        tables[name] = pa.table(
            {
                "sensor_id": pa.array(ids[src], pa.string(), mask=null_id),
                "ts": pa.array(ts, pa.timestamp("us"), mask=null_ts),
                "arrival": pa.array(arrival, pa.timestamp("us")),
                "value": pa.array(value, pa.float64()),
            }
        )

    t_, h_ = tables["temperature"], tables["humidity"]

    def valid(tb):
        ok = ~(np.asarray(tb["ts"].is_null()) | np.asarray(tb["sensor_id"].is_null()))
        return tb["ts"].cast(pa.int64()).to_numpy(zero_copy_only=False)[ok], tb["sensor_id"].to_numpy(zero_copy_only=False)[ok]

    (ts0, k0), (ts1, k1) = valid(t_), valid(h_)
    pairs = window_pair_count(ts0, ts1, 250_000, 250_000, k0, k1)
    n_in = ts0.size + ts1.size
    tt = t_["ts"].cast(pa.int64()).to_numpy(zero_copy_only=False)
    ta = t_["arrival"].cast(pa.int64()).to_numpy()
    ok = ~np.asarray(t_["ts"].is_null())
    header = [
        f"sensors: synthetic keyed IoT readings, {N_SENSORS} sensors s000..s{N_SENSORS - 1:03d}, {duration:g} s, seed {seed}.",
        f"temperature ({t_.num_rows} rows) and humidity ({h_.num_rows} rows); each sensor samples at its own 5-20 Hz",
        "with a smoothly varying rate; ts/arrival are Parquet timestamp[us]; value float64.",
        f"~{NULL_SHARE:.2%} of rows have a null ts and ~{NULL_SHARE:.2%} a null sensor_id: they are quarantined.",
        f"Disorder: lognormal jitter + network stalls (temperature: {_delay_stats(tt[ok], ta[ok], 1e6)}).",
        "",
        "The join pairs a temperature and a humidity reading of the same sensor taken within 250 ms",
        "of each other (key sensor_id; valid iff equal sensor_id and |dts| <= 250 ms):",
        f"truth = {pairs} pairs, {pairs / n_in:.2f} per (valid) input tuple.",
        "Generated by: streamjoin generate sensors --out samples/sensors --seed 7",
    ]
    run = ['policy = "static"          # or none / kslack / mpkslack', '# k = "50ms"               # for kslack',
           'retention = "500ms"        # for static', 'out = "out/sensors"']
    streams = [
        _stream_toml("temperature", "temperature.parquet", unit=None, window=SENSORS_WINDOW, keys=["sensor_id"]),
        _stream_toml("humidity", "humidity.parquet", unit=None, window=SENSORS_WINDOW, keys=["sensor_id"]),
    ]
    return tables, header, run, streams


# ----------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------


def _keyed_table(rng, n: int, grid, duration: float, key_ids, weights) -> pa.Table:
    """One benchmark stream: Poisson arrivals with rate changes, Zipf keys, moderate disorder."""
    m = piecewise_multiplier(rng, grid, mean_len=10.0, lo=0.6, hi=1.4)
    t = poisson_times(rng, n, grid, cumulative_rate(grid, m))
    key = key_ids[rng.choice(len(key_ids), size=n, p=weights)]
    value = rng.normal(0.0, 1.0, n)
    delay, _ = delays(rng, t, duration, jitter_mean=0.002, jitter_sigma=0.8, stall_every=20.0,
                       stall_min=0.05, stall_max=1.0)
    ts, arrival = quantise(t, delay, BENCH_T0_US, "us")
    return pa.table({
        "key": pa.array(key, pa.int64()),
        "ts": pa.array(ts, pa.int64()),
        "arrival": pa.array(arrival, pa.int64()),
        "value": pa.array(value, pa.float64()),
    })


def _bench(seed: int, duration: float, scale: float):
    grid = time_grid(duration)
    # key popularity: Zipf-like (rank^-BENCH_ZIPF), fixed (not random) so the pair rate is stable
    weights = 1.0 / np.arange(1, BENCH_KEYS + 1) ** BENCH_ZIPF
    weights /= weights.sum()
    world = _rng(seed, "bench", 0)
    key_ids = world.permutation(np.arange(1, BENCH_KEYS + 1, dtype=np.int64) * 1009)  # not rank-ordered
    tables = {}
    for stream_no, name, rows in ((1, "left", BENCH_LEFT_ROWS), (2, "right", BENCH_RIGHT_ROWS)):
        rng = _rng(seed, "bench", stream_no)
        tables[name] = _keyed_table(rng, int(round(rows * scale)), grid, duration, key_ids, weights)
    l_, r_ = tables["left"], tables["right"]
    pairs = window_pair_count(
        l_["ts"].to_numpy(), r_["ts"].to_numpy(), BENCH_WINDOW_US, BENCH_WINDOW_US, l_["key"].to_numpy(), r_["key"].to_numpy()
    )
    n_in = l_.num_rows + r_.num_rows
    header = [
        f"bench: benchmark set, {duration:g} s, scale {scale:g}, seed {seed}.",
        f"left ({l_.num_rows} rows) and right ({r_.num_rows} rows): int64 key ({BENCH_KEYS} keys, Zipf {BENCH_ZIPF:g}),",
        "ts/arrival int64 microseconds, value float64; Poisson arrivals with piecewise-constant rate changes.",
        f"Disorder: lognormal jitter + network stalls (left: {_delay_stats(l_['ts'].to_numpy(), l_['arrival'].to_numpy(), 1e6)}).",
        "",
        "The join pairs left and right tuples with the same key within 100 ms of each other",
        "(W_0 = W_1 = 100 ms: valid iff equal key and |dts| <= 100 ms):",
        f"truth = {pairs} pairs, {pairs / n_in:.2f} per input tuple.",
        "Generated by: streamjoin generate bench --out <dir> --seed 7",
    ]
    run = ['policy = "mpkslack"        # or none / kslack / static', '# k = "50ms"               # for kslack',
           '# retention = "50ms"       # for static', 'out = "out/bench"']
    streams = [
        _stream_toml("left", "left.parquet", unit="us", window=BENCH_WINDOW, keys=["key"]),
        _stream_toml("right", "right.parquet", unit="us", window=BENCH_WINDOW, keys=["key"]),
    ]
    return tables, header, run, streams


def _bench3(seed: int, duration: float, scale: float):
    """Three keyed streams of the same shape as ``bench`` (multi-way benchmark)."""
    grid = time_grid(duration)
    weights = 1.0 / np.arange(1, BENCH3_KEYS + 1) ** BENCH_ZIPF
    weights /= weights.sum()
    world = _rng(seed, "bench3", 0)
    key_ids = world.permutation(np.arange(1, BENCH3_KEYS + 1, dtype=np.int64) * 1009)
    tables = {}
    n = int(round(BENCH3_ROWS * scale))
    for stream_no, name in ((1, "a"), (2, "b"), (3, "c")):
        tables[name] = _keyed_table(_rng(seed, "bench3", stream_no), n, grid, duration, key_ids, weights)
    a_ = tables["a"]
    header = [
        f"bench3: three keyed streams a, b, c ({n} rows each), {duration:g} s, scale {scale:g}, seed {seed}.",
        f"int64 key ({BENCH3_KEYS} keys, Zipf {BENCH_ZIPF:g}), ts/arrival int64 microseconds, value float64.",
        f"Disorder: lognormal jitter + network stalls (a: {_delay_stats(a_['ts'].to_numpy(), a_['arrival'].to_numpy(), 1e6)}).",
        "",
        "The join makes (a, b, c) triples with the same key whose members are all within 100 ms",
        "of each other (every W = 100 ms).",
        "Generated by: streamjoin generate bench3 --out <dir> --seed 7 [--scale S]",
    ]
    run = ['policy = "static"          # or none / kslack / mpkslack', 'retention = "50ms"', 'out = "out/bench3"']
    streams = [_stream_toml(x, f"{x}.parquet", unit="us", window=BENCH_WINDOW, keys=["key"]) for x in ("a", "b", "c")]
    return tables, header, run, streams


# ----------------------------------------------------------------------------
# public entry point
# ----------------------------------------------------------------------------


def generate(kind: str, out_dir: Path, *, seed: int = 7, duration_s: float | None = None, scale: float = 1.0) -> list[Path]:
    """Write the ``kind`` sample into ``out_dir``; return the Parquet paths.

    Writes ``out_dir/<stream>.parquet`` for each stream and ``out_dir/<kind>.toml``
    (a ready streamjoin config).  ``scale`` multiplies the row counts: for
    ``soccer``/``sensors`` through the default duration (an explicit
    ``duration_s`` takes precedence); for ``bench`` the row counts are exactly
    ``2_000_000 * scale`` and ``1_000_000 * scale`` and the default duration is
    ``300 s * scale`` (same rate and pair density at every scale); an explicit
    ``duration_s`` changes the density instead.  Same arguments => byte-identical
    files.
    """
    if kind not in KINDS:
        raise InputError(f"unknown sample kind {kind!r}: expected one of {', '.join(KINDS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"bad seed {seed!r}: expected an integer >= 0")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise InputError(f"bad scale {scale!r}: expected a number > 0")
    if duration_s is not None and (
        isinstance(duration_s, bool)
        or not isinstance(duration_s, (int, float))
        or not (math.isfinite(duration_s) and duration_s > 0)
    ):
        raise InputError(f"bad duration {duration_s!r}: expected a number of seconds > 0")
    if kind == "bench" and round(BENCH_RIGHT_ROWS * scale) < 1:
        raise InputError(f"bad scale {scale!r}: the bench set needs at least one row per stream")
    duration = float(duration_s) if duration_s is not None else DEFAULT_DURATION_S[kind] * scale
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    if kind == "soccer":
        tables, header, run, streams = _soccer(int(seed), duration)
    elif kind == "sensors":
        tables, header, run, streams = _sensors(int(seed), duration)
    elif kind == "bench3":
        tables, header, run, streams = _bench3(int(seed), duration, float(scale))
    else:
        tables, header, run, streams = _bench(int(seed), duration, float(scale))

    paths = []
    for name, table in tables.items():
        path = out_dir / f"{name}.parquet"
        meta = {"kind": kind, "stream": name, "seed": int(seed), "duration_s": duration, "scale": float(scale)}
        _write_parquet(table, path, meta)
        paths.append(path)
    _write_toml(out_dir / f"{kind}.toml", header, run, streams)
    return paths
