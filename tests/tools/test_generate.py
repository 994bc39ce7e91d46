"""Tests for streamjoin.pipelines.tools.generate (synthetic streams with disorder)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.tools.generate import KINDS, generate, window_pair_count


@pytest.fixture(scope="module")
def soccer(tmp_path_factory):
    d = tmp_path_factory.mktemp("soccer")
    return d, generate("soccer", d, seed=7)


@pytest.fixture(scope="module")
def sensors(tmp_path_factory):
    d = tmp_path_factory.mktemp("sensors")
    return d, generate("sensors", d, seed=7, duration_s=240)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    return d, generate("bench", d, seed=7, scale=0.2)


def _read(paths):
    return {p.stem: pq.read_table(p) for p in paths}


def _ints(col) -> np.ndarray:
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    return col.to_numpy()


def _valid_times(t: pa.Table):
    ok = ~np.asarray(t["ts"].is_null())
    col = t["ts"].filter(pa.array(ok)), t["arrival"].filter(pa.array(ok))
    return _ints(col[0]), _ints(col[1])


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


# --- determinism ------------------------------------------------------------------


@pytest.mark.parametrize("kind, kw", [("soccer", {"duration_s": 5}), ("sensors", {"duration_s": 20}), ("bench", {"scale": 0.005}),
                                     ("bench3", {"scale": 0.005})])
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, kind, kw):
    a = generate(kind, tmp_path / "a", seed=3, **kw)
    b = generate(kind, tmp_path / "b", seed=3, **kw)
    c = generate(kind, tmp_path / "c", seed=4, **kw)
    assert [p.name for p in a] == [p.name for p in b] == [p.name for p in c]
    fa, fb, fc = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert fa == fb
    assert set(fa) == {p.name for p in a} | {f"{kind}.toml"}
    for p in a:
        assert fa[p.name] != fc[p.name]


def test_returns_parquet_paths_in_stream_order(soccer, sensors, bench):
    assert [p.name for p in soccer[1]] == ["ball.parquet", "players.parquet"]
    assert [p.name for p in sensors[1]] == ["temperature.parquet", "humidity.parquet"]
    assert [p.name for p in bench[1]] == ["left.parquet", "right.parquet"]
    for d, paths in (soccer, sensors, bench):
        assert all(p.parent == d and p.exists() for p in paths)
        assert not list(d.glob("*.tmp"))


def test_bad_arguments(tmp_path):
    with pytest.raises(InputError, match="unknown sample kind"):
        generate("football", tmp_path)
    with pytest.raises(InputError):
        generate("soccer", tmp_path, scale=0)
    with pytest.raises(InputError):
        generate("soccer", tmp_path, duration_s=-1)
    with pytest.raises(InputError):
        generate("soccer", tmp_path, seed=-1)
    assert KINDS == ("soccer", "sensors", "bench", "bench3")


# --- schemas ----------------------------------------------------------------------


def test_soccer_schema(soccer):
    t = _read(soccer[1])
    foot = dict(x=pa.int32(), y=pa.int32(), z=pa.int32(), v=pa.int64(), a=pa.int64())
    assert dict(zip(t["ball"].column_names, t["ball"].schema.types)) == dict(ts=pa.int64(), arrival=pa.int64(), **foot)
    assert dict(zip(t["players"].column_names, t["players"].schema.types)) == dict(
        sensor_id=pa.int32(), ts=pa.int64(), arrival=pa.int64(), **foot
    )
    ts = _ints(t["ball"]["ts"])
    assert 10_629_342_490_369_879 <= ts.min() < 10_629_342_490_369_879 + 10**10  # DEBS-like origin, ps
    assert np.all(np.abs(_ints(t["players"]["x"])) <= 52_500)
    assert np.all(np.abs(_ints(t["players"]["y"])) <= 34_000)


def test_sensors_schema(sensors):
    for t in _read(sensors[1]).values():
        assert t.schema.field("sensor_id").type == pa.string()
        assert t.schema.field("ts").type == pa.timestamp("us")
        assert t.schema.field("arrival").type == pa.timestamp("us")
        assert t.schema.field("value").type == pa.float64()
        ids = set(t["sensor_id"].drop_null().to_pylist())
        assert len(ids) == 50 and all(len(i) == 4 and i.startswith("s") for i in ids)


def test_bench_schema(bench):
    for t in _read(bench[1]).values():
        assert t.column_names == ["key", "ts", "arrival", "value"]
        assert t.schema.types == [pa.int64(), pa.int64(), pa.int64(), pa.float64()]


# --- row counts and rates -----------------------------------------------------------


def test_bench_row_counts_exact(tmp_path, bench):
    t = _read(bench[1])
    assert (t["left"].num_rows, t["right"].num_rows) == (400_000, 200_000)
    t = _read(generate("bench", tmp_path, scale=0.0123))
    assert (t["left"].num_rows, t["right"].num_rows) == (24_600, 12_300)


def test_soccer_rates(soccer):
    t = _read(soccer[1])
    ball = _ints(t["ball"]["ts"])
    span_s = (ball.max() - ball.min()) / 1e12
    assert 55 <= span_s <= 60
    assert 1600 <= t["ball"].num_rows / span_s <= 2300
    sid = _ints(t["players"]["sensor_id"])
    assert len(np.unique(sid)) == 8
    per_sensor = np.bincount(np.unique(sid, return_inverse=True)[1]) / span_s
    assert np.all((per_sensor >= 160) & (per_sensor <= 230))


def test_sensor_rates(sensors):
    for t in _read(sensors[1]).values():
        ts, _ = _valid_times(t)
        span_s = (ts.max() - ts.min()) / 1e6
        ids = t["sensor_id"].drop_null().to_numpy(zero_copy_only=False)
        _, counts = np.unique(ids, return_counts=True)
        rate = counts / span_s
        assert 3 <= rate.min() and rate.max() <= 30
        assert 8 <= rate.mean() <= 17


def test_rate_changes_during_run(bench):
    # non-homogeneous: per-second counts vary far more than Poisson noise would
    for t in _read(bench[1]).values():
        ts = _ints(t["ts"])
        per_s = np.bincount((ts - ts.min()) // 1_000_000)[:-1]
        assert per_s.std() > 3 * np.sqrt(per_s.mean())  # Poisson alone: std ~ sqrt(mean)


# --- disorder ---------------------------------------------------------------------


def _disorder(t: pa.Table):
    ts, arrival = _valid_times(t)
    delay = arrival - ts
    order = np.lexsort((np.arange(ts.size), arrival))  # replay order
    in_arrival = ts[order]
    late = in_arrival < np.maximum.accumulate(in_arrival)
    return ts, delay, late.mean()


@pytest.mark.parametrize("fixture", ["soccer", "sensors", "bench"])
def test_disorder_out_of_order_and_long_tail(request, fixture):
    for name, t in _read(request.getfixturevalue(fixture)[1]).items():
        ts, delay, ooo = _disorder(t)
        assert np.all(np.diff(ts) >= 0), f"{name}: rows must be written in ts order"
        assert delay.min() >= 0, f"{name}: arrival before ts"
        assert 0 < ooo < 0.9, name
        p50, p99 = np.percentile(delay, [50, 99])
        assert p99 > 5 * p50, name
        assert delay.max() > 40 * p50, name  # stalls: some tuples are hundreds of ms late


def test_jitter_scale_is_milliseconds(soccer, sensors, bench):
    for (d, paths), ups in ((soccer, 1e12), (sensors, 1e6), (bench, 1e6)):
        for t in _read(paths).values():
            _, delay, _ = _disorder(t)
            assert 0.5e-3 <= np.median(delay) / ups <= 6e-3


def test_stalled_tuples_arrive_together(soccer):
    # a stall releases a burst: many tuples share (nearly) one arrival instant
    ts, delay, _ = _disorder(_read(soccer[1])["ball"])
    arrival = ts + delay
    stalled = delay > 100 * 10**9  # > 100 ms late
    assert stalled.sum() > 100
    # the stalled tuples' arrivals cluster within the jitter scale of each other
    a = np.sort(arrival[stalled])
    assert np.median(np.diff(a)) < 10**9  # < 1 ms between consecutive stalled arrivals


# --- nulls (quarantine) ------------------------------------------------------------


def test_sensors_have_nulls(sensors):
    for t in _read(sensors[1]).values():
        n = t.num_rows
        assert 1 <= t["ts"].null_count <= 0.002 * n
        assert 1 <= t["sensor_id"].null_count <= 0.002 * n
        assert t["arrival"].null_count == 0
        assert t["value"].null_count == 0


def test_other_kinds_have_no_nulls(soccer, bench):
    for d, paths in (soccer, bench):
        for t in _read(paths).values():
            assert all(c.null_count == 0 for c in t.columns)


# --- pair counts and config ------------------------------------------------------


def test_window_pair_count_matches_brute_force():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10_000, 400), rng.integers(0, 10_000, 300)
    ka, kb = rng.integers(0, 5, 400), rng.integers(0, 5, 300)
    d = b[None, :] - a[:, None]  # y.ts - x.ts
    ok = ((d >= 0) & (d <= 70)) | ((d < 0) & (-d <= 30))
    assert window_pair_count(a, b, 70, 30) == ok.sum()
    assert window_pair_count(a, b, 70, 30, ka, kb) == (ok & (ka[:, None] == kb[None, :])).sum()
    sa, sb = np.array([f"k{k}" for k in ka], dtype=object), np.array([f"k{k}" for k in kb], dtype=object)
    assert window_pair_count(a, b, 70, 30, sa, sb) == (ok & (ka[:, None] == kb[None, :])).sum()


def test_bench_pairs_per_tuple(bench):
    t = _read(bench[1])
    left, right = t["left"], t["right"]
    pairs = window_pair_count(
        _ints(left["ts"]), _ints(right["ts"]), 100_000, 100_000, _ints(left["key"]), _ints(right["key"])
    )
    assert 2.4 <= pairs / (left.num_rows + right.num_rows) <= 3.0


@pytest.mark.parametrize("fixture, kind", [("soccer", "soccer"), ("sensors", "sensors"), ("bench", "bench")])
def test_config_toml(request, fixture, kind):
    d, paths = request.getfixturevalue(fixture)
    text = (d / f"{kind}.toml").read_text()
    assert text.startswith("# ")
    cfg = tomllib.loads(text)
    assert cfg["run"]["policy"] in ("none", "kslack", "mpkslack", "static")
    assert cfg["run"]["out"] == f"out/{kind}"
    streams = cfg["stream"]
    assert [s["name"] for s in streams] == [p.stem for p in paths]
    for s, p in zip(streams, paths):
        assert (d / s["path"]) == p
        assert s["ts"] == "ts" and s["arrival"] == "arrival"
        assert isinstance(s["keys"], list)
        schema = pq.read_schema(p)
        assert all(k in schema.names for k in s["keys"])
        if pa.types.is_timestamp(schema.field("ts").type):
            assert "unit" not in s
        else:
            assert s["unit"] in ("ps", "us")
    windows = {kind: [s["window"] for s in streams]}
    assert windows == {"soccer": {"soccer": ["1ms", "1ms"]}, "sensors": {"sensors": ["250ms", "250ms"]},
                       "bench": {"bench": ["100ms", "100ms"]}}[kind]


def test_window_pair_count_with_keys_over_a_span_past_the_pack_limit():
    """Review: the keyed count packed (key, ts) with a literal 2**62 and raised past it;
    it now packs through base/sorting.GroupedCodes (ranks past PACK_LIMIT)."""
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.integers(0, 1_000, 200), rng.integers(2**61, 2**61 + 1_000, 200)])
    b = np.concatenate([rng.integers(0, 1_000, 150), rng.integers(2**61, 2**61 + 1_000, 150)])
    ka, kb = rng.integers(0, 7, 400), rng.integers(0, 7, 300)
    d = b[None, :] - a[:, None]
    ok = ((d >= 0) & (d <= 70)) | ((d < 0) & (-d <= 30))
    assert window_pair_count(a, b, 70, 30, ka, kb) == (ok & (ka[:, None] == kb[None, :])).sum() > 0
