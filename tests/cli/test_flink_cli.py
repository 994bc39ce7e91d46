"""``streamjoin run --policy flink``: flags, TOML, outputs (per-stream late drops,
settings, latency 0) and the one-line refusals of what is not emulated
(CTR routing, nightly runs, more than two streams, sub-ms times); --chunk-rows equals the in-memory run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.cli import assert_chunked_run_equals_in_memory, pair_job_toml, run_cli
from helpers.flink import local_flink

from streamjoin.pipelines.base.timeunits import format_duration
from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.report.html import what_to_do
from streamjoin.pipelines.replay.reference import RefTuple

MS = 1000
S = 1_000_000
T0 = 1_700_000_000 * S


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Three keyed streams with heavy disorder, event times in whole ms (Parquet timestamps);
    ``fine.parquet`` has sub-millisecond event times."""
    root = tmp_path_factory.mktemp("flink")
    rng = np.random.default_rng(7)
    for name in ("left", "right", "third", "fine"):
        n = 300
        ts = T0 + rng.integers(0, 60_000, n) * MS + (rng.integers(0, MS, n) if name == "fine" else 0)
        delay = np.where(rng.random(n) < 0.2, rng.integers(0, 20 * S, n), rng.integers(0, S, n))
        pl.DataFrame({"ts": ts, "arrival": ts + delay, "key": rng.integers(0, 4, n)}).with_columns(
            pl.col("ts").cast(pl.Datetime("us")), pl.col("arrival").cast(pl.Datetime("us"))
        ).write_parquet(root / f"{name}.parquet")
    return root


def base_args(data: Path, out: Path, *streams: str) -> list[str]:
    args = ["run"]
    for s in streams or ("left", "right"):
        args += ["--stream", f"{s}={data / (s + '.parquet')}"]
    return args + ["--arrival", "arrival", "--key", "key", "--window", "2s", "--out", str(out)]


def model_of(data: Path, policy: PolicySpec):
    frames = [pl.read_parquet(data / f"{s}.parquet").with_columns(pl.col("ts", "arrival").cast(pl.Int64))
              for s in ("left", "right")]
    streams = [[RefTuple(i, r, t, a, (k,)) for r, (t, a, k) in enumerate(f.select("ts", "arrival", "key").rows())]
               for i, f in enumerate(frames)]
    return local_flink(streams, (2 * S, 2 * S), policy)


@pytest.mark.parametrize("interval,flag", [(0, ["--watermark-interval", "0"]), (200 * MS, [])])
def test_run_writes_pairs_drops_and_settings_equal_to_the_model(data: Path, tmp_path: Path, interval, flag) -> None:
    out = tmp_path / "out"
    run_cli(base_args(data, out) + ["--policy", "flink", "--watermark", "1s", "--watermark", "right=3s"] + flag,
            tmp_path)
    report = json.loads((out / "report.json").read_text())
    results = pl.read_parquet(out / "results.parquet")
    model = model_of(data, PolicySpec("flink", watermark=(S, 3 * S), watermark_interval_us=interval))
    assert set(results.select("left_row", "right_row").rows()) == set(model.emitted)
    assert report["emitted_results"] == len(model.emitted) < report["truth_results"]
    drops = [sum(1 for s, _ in model.dropped if s == i) for i in (0, 1)]
    assert [s["dropped_late"] for s in report["streams"]] == drops and sum(drops) > 0
    assert results["latency_us"].max() == 0 and report["latency_us"]["max"] == 0   # emitted on arrival
    assert report["memory_tuples"]["peak"] == max(map(sum, model.buffered))
    settings = report["policy_settings"]
    assert settings["watermark_us"] == [S, 3 * S] and settings["watermark_interval_us"] == interval
    assert settings["dropped_late"] == sum(drops)
    assert report["config"]["engine"] == "local"


def test_toml_settings(data: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "job.toml"
    cfg.write_text(pair_job_toml(data, f"""
policy = "flink"
watermark = "1s"
watermark_interval = "1s"
idleness = "300ms"
out = "{tmp_path / 'out'}"
""", right_extra='watermark = "3s"'))
    run_cli(["run", str(cfg)], tmp_path)
    settings = json.loads((tmp_path / "out" / "report.json").read_text())["policy_settings"]
    assert (settings["watermark_us"], settings["watermark_interval_us"]) == ([S, 3 * S], S)
    assert settings["idleness_us"] == 300 * MS


@pytest.mark.parametrize("extra,streams,needle", [
    (["--engine", "spark", "--router", "ctr"], (), "runs with --router none, atr or auto"),
    ([], ("left", "right", "third"), "exactly two streams"),
    (["--date", "2023-11-14"], (), "nightly runs"),
    ([], ("left", "fine"), "not a whole millisecond"),
    (["--chunk-rows", "50"], ("left", "fine"), "not a whole millisecond"),
    (["--watermark-interval", "100ms", "--idleness", "1s", "--chunk-rows", "50"], (),
     "flink with --idleness runs in memory for now"),
])
def test_not_emulated_is_refused_in_one_line(data: Path, tmp_path: Path, extra, streams, needle) -> None:
    out = tmp_path / "out"
    proc = run_cli(base_args(data, out, *streams) + ["--policy", "flink", "--watermark", "1s"] + extra,
                   tmp_path, ok=False)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr    # (after the load stage's log line, if any)
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--policy", "static", "--retention", "1s", "--watermark-interval", "0"], "setting of --policy flink"),
    (["--policy", "flink"], "needs --watermark"),
    (["--policy", "flink", "--watermark", "1500us"], "whole milliseconds"),
    (["--policy", "flink", "--watermark", "1s", "--window", "1500us"], "whole-millisecond windows"),
    (["--policy", "flink", "--watermark", "1s", "--watermark-policy", "max"], "settings of --policy spark-ss"),
    (["--policy", "flink", "--watermark", "1s", "--watermark-interval", "soon"], "watermark_interval"),
])
def test_bad_settings_are_one_line_exit_2(data: Path, tmp_path: Path, extra, needle) -> None:
    proc = run_cli(base_args(data, tmp_path / "out") + extra, tmp_path, ok=False)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------
# tune-buffer --policy flink
# ---------------------------------------------------------------------------


def run_recall(data: Path, tmp_path: Path, name: str, watermark_us: int, interval: str, idle: list | None = None
               ) -> float:
    out = tmp_path / name
    run_cli(base_args(data, out) + ["--policy", "flink", "--watermark", f"{watermark_us // MS}ms",
                                    "--watermark-interval", interval, "--no-results"] + (idle or []), tmp_path)
    return json.loads((out / "report.json").read_text())["recall"]


@pytest.mark.parametrize("q,interval,idle", [(0.9, "0", []), (0.97, "500ms", []),
                                            (0.95, "100ms", ["--idleness", "300ms"])])
def test_tune_buffer_recommendation_meets_the_target_and_1ms_less_does_not(data: Path, tmp_path: Path, q,
                                                                         interval, idle) -> None:
    out = tmp_path / "tune"
    proc = run_cli(["tune-buffer"] + base_args(data, out)[1:] +
                   ["--policy", "flink", "--watermark-interval", interval, "--recall", str(q)] + idle, tmp_path)
    t = json.loads((out / "tune.json").read_text())
    rec = t["recommendation"]
    assert t["policy"] == "flink" and t["watermark_interval_us"] == {"0": 0, "500ms": 500 * MS, "100ms": 100 * MS}[interval]
    assert t["idleness_us"] == (300 * MS if idle else None)
    assert t["config"]["policy"]["watermark_interval_us"] == t["watermark_interval_us"]
    assert rec["exact_us"] > 0 and rec["exact_us"] % MS == 0 and t["unreachable_results"] == 0
    # replayed by run: the exact minimum meets the target, 1 ms less does not; so does the grid value
    assert run_recall(data, tmp_path, "exact", rec["exact_us"], interval, idle) >= q
    assert run_recall(data, tmp_path, "exact-1", rec["exact_us"] - MS, interval, idle) < q
    assert run_recall(data, tmp_path, "at", rec["setting_us"], interval, idle) == rec["recall"] >= q
    # the curve equals the engine's recall at every replayed setting, and only grows
    curve = dict(zip(t["curve"]["setting_us"], t["curve"]["recall"]))
    shared = [c for c in t["candidates"] if c["setting_us"] in curve]
    assert len(shared) >= 3 and all(c["recall"] == curve[c["setting_us"]] for c in shared)
    assert all(a <= b for a, b in zip(t["curve"]["recall"], t["curve"]["recall"][1:]))
    assert all(c["latency_us"]["p95"] in (0, None) for c in t["candidates"])   # emitted on arrival
    # paste-ready: Flink's own API with the chosen delay, bounds and interval; the TOML
    snippet = t["snippet"]["text"]
    assert t["snippet"]["language"] == "java"
    assert f"forBoundedOutOfOrderness(Duration.ofMillis({rec['setting_us'] // MS}))" in snippet or \
        f"new BoundedOutOfOrdernessWatermarks<>(Duration.ofMillis({rec['setting_us'] // MS}))" in snippet
    assert ".between(Duration.ofMillis(-2000), Duration.ofMillis(2000))" in snippet and "r -> r.key" in snippet
    assert ("setAutoWatermarkInterval(" in snippet) == (interval != "0")
    assert (".withIdleness(Duration.ofMillis(300))" in snippet) == bool(idle)
    assert 'policy = "flink"' in t["toml"] and "watermark_interval" in t["toml"]
    assert "Flink job snippet:" in proc.stdout
    html = (out / "tune.html").read_text()
    assert "Paste into your Flink job" in html and "What this means in Flink" in html


def test_run_report_has_the_flink_delay_curve(data: Path, tmp_path: Path) -> None:
    """A flink run's report.json tuning is the curve over its own delay (not kslack's K):
    at the run's delay the curve gives the run's recall."""
    out = tmp_path / "out"
    run_cli(base_args(data, out) + ["--policy", "flink", "--watermark", "1s", "--watermark-interval", "0",
                                    "--recall", "0.99"], tmp_path)
    report = json.loads((out / "report.json").read_text())
    tuning = report["tuning"]
    assert tuning["policy"] == "flink" and tuning["watermark_interval_us"] == 0
    curve = dict(zip(tuning["curve"]["setting_us"], tuning["curve"]["recall"]))
    assert curve[S] == report["recall"] < 0.99
    need = tuning["setting_for_recall"]["0.99"]
    todo = what_to_do(report)[0]
    assert f"raise --watermark from 1s to {format_duration(need)}" in todo and "--policy flink" in todo
    assert run_recall(data, tmp_path, "need", need, "0") >= 0.99 > run_recall(data, tmp_path, "less", need - 10 * MS, "0")


def test_tune_buffer_flink_bad_options_are_one_line(data: Path, tmp_path: Path) -> None:
    args = ["tune-buffer"] + base_args(data, tmp_path / "tune")[1:]
    for extra, needle in ((["--policy", "flink", "--recall", "0.9", "--granularity", "1500us"], "whole milliseconds"),
                          (["--policy", "kslack", "--recall", "0.9", "--watermark-interval", "0"],
                           "--watermark-interval: a setting of --policy flink"),
                          (["--policy", "flink", "--recall", "0.9", "--per-period"], "not available for --policy flink")):
        proc = run_cli(args + extra, tmp_path, ok=False)
        assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_idleness_flag(data: Path, tmp_path: Path) -> None:
    """--idleness reaches the policy (TOML ``idleness``: test_toml_settings): pairs and
    drops equal the model's with withIdleness, which differ from those without it here."""
    out = tmp_path / "out"
    run_cli(base_args(data, out) + ["--policy", "flink", "--watermark", "200ms", "--watermark-interval", "100ms",
                                    "--idleness", "300ms"], tmp_path)
    report = json.loads((out / "report.json").read_text())
    results = pl.read_parquet(out / "results.parquet")
    model = model_of(data, PolicySpec("flink", watermark=(200 * MS,) * 2, watermark_interval_us=100 * MS,
                                      idleness_us=300 * MS))
    busy = model_of(data, PolicySpec("flink", watermark=(200 * MS,) * 2, watermark_interval_us=100 * MS))
    assert set(results.select("left_row", "right_row").rows()) == set(model.emitted) != set(busy.emitted)
    assert report["policy_settings"]["idleness_us"] == 300 * MS
    assert report["policy_settings"]["dropped_late"] == len(model.dropped)


@pytest.mark.parametrize("extra,needle", [
    (["--policy", "static", "--retention", "1s", "--idleness", "1s"], "--idleness: a setting of --policy flink"),
    (["--policy", "flink", "--watermark", "1s", "--watermark-interval", "0", "--idleness", "1s"],
     "--idleness needs --watermark-interval > 0"),
    (["--policy", "flink", "--watermark", "1s", "--idleness", "0"], "--idleness must be > 0"),
])
def test_bad_idleness_is_one_line_exit_2(data: Path, tmp_path: Path, extra, needle) -> None:
    proc = run_cli(base_args(data, tmp_path / "out") + extra, tmp_path, ok=False)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_chunked_run_equals_the_in_memory_run(data: Path, tmp_path: Path) -> None:
    """--chunk-rows: the bounded engine publishes what the in-memory engine publishes."""
    args = base_args(data, tmp_path / "unused") + ["--policy", "flink", "--watermark", "1s"]
    assert_chunked_run_equals_in_memory(args[:args.index("--out")] + args[args.index("--out") + 2:], tmp_path)


def test_tune_buffer_of_another_policy_takes_a_flink_jobs_toml(data: Path, tmp_path: Path) -> None:
    """tune-buffer accepts a run's config: a flink job's [run] watermark_interval and idleness
    change nothing a kslack tuning replays (they were refused as settings of another policy)."""
    job = tmp_path / "job.toml"
    job.write_text(f"""[run]
policy = "flink"
watermark = "1s"
watermark_interval = "100ms"
idleness = "1s"

[[stream]]
name = "left"
path = "{data / 'left.parquet'}"
arrival = "arrival"
window = "2s"
keys = ["key"]

[[stream]]
name = "right"
path = "{data / 'right.parquet'}"
arrival = "arrival"
window = "2s"
keys = ["key"]
""")
    plain = tmp_path / "plain.toml"
    plain.write_text(job.read_text().replace('watermark_interval = "100ms"\nidleness = "1s"\n', ""))
    tuned = []
    for cfg, name in ((job, "job"), (plain, "plain")):
        run_cli(["tune-buffer", str(cfg), "--policy", "kslack", "--recall", "0.9", "--out", str(tmp_path / name)],
                tmp_path)
        tuned.append(json.loads((tmp_path / name / "tune.json").read_text())["recommendation"]["exact_us"])
    assert tuned[0] == tuned[1] > 0
