"""``streamjoin compare``: policies side by side.  Each row equals what ``run`` reports for
that policy; the lost causes add up to truth - emitted; the default set is the job, the
ideal operator with its delay and the tuned setting; ``[[compare]]`` tables and
``--policy`` texts; bad variants are one line, exit 2; compare.html opens cleanly in
headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers.browser import CHROMIUM, chromium, probe
from helpers.cli import run_cli

from streamjoin.pipelines.report.compare import validate

S = 1_000_000
MS = 1000
T0 = 1_700_000_000 * S

JOB = """\
[run]
policy = "spark-ss"
watermark = "2s"
trigger = "5s"
recall = 0.95
out = "out"

[[stream]]
name = "left"
path = "left.parquet"
arrival = "arrival"
window = "2s"
keys = ["key"]

[[stream]]
name = "right"
path = "right.parquet"
arrival = "arrival"
window = "2s"
keys = ["key"]
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Two keyed streams over 5 minutes, times in whole ms; most rows up to 1 s late,
    a quarter up to 20 s late."""
    root = tmp_path_factory.mktemp("compare")
    rng = np.random.default_rng(18)
    for name in ("left", "right"):
        n = 500
        ts = T0 + rng.integers(0, 300_000, n) * MS
        delay = np.where(rng.random(n) < 0.25, rng.integers(0, 20 * S, n), rng.integers(0, S, n))
        pl.DataFrame({"ts": ts, "arrival": ts + delay, "key": rng.integers(0, 3, n)}).with_columns(
            pl.col("ts").cast(pl.Datetime("us")), pl.col("arrival").cast(pl.Datetime("us"))
        ).write_parquet(root / f"{name}.parquet")
    (root / "job.toml").write_text(JOB)
    return root


@pytest.fixture(scope="module")
def default_set(data, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("default_set")
    proc = run_cli(["compare", str(data / "job.toml"), "--out", str(tmp / "out")], tmp)
    c = json.loads((tmp / "out" / "compare.json").read_text())
    c["_stdout"], c["_dir"] = proc.stdout, tmp / "out"
    return c


def run_report(data: Path, tmp_path: Path, name: str, policy_args: list[str]) -> dict:
    out = tmp_path / name
    run_cli(["run", str(data / "job.toml"), "--engine", "local", *policy_args, "--out", str(out), "--no-results"],
            tmp_path)
    return json.loads((out / "report.json").read_text())


def test_default_set_is_job_ideal_tuned_and_each_row_is_what_run_reports(default_set, data, tmp_path):
    c = default_set
    validate(c)
    assert [p["role"] for p in c["policies"]] == ["job", "ideal", "tuned"]
    job, ideal, tuned = c["policies"]
    assert job["text"] == "spark-ss --watermark 2s --trigger 5s"
    assert ideal["text"] == "static --retention 2s"          # the ideal operator with the job's delay
    assert tuned["text"].startswith("spark-ss --watermark ") and tuned["text"].endswith("--trigger 5s")
    assert c["recall_target"] == 0.95 and tuned["recall"] >= 0.95
    for row, args in ((job, []), (ideal, ["--policy", "static", "--retention", "2s"])):
        report = run_report(data, tmp_path, row["role"], args)
        assert row["emitted_results"] == report["emitted_results"]
        assert c["truth_results"] == report["truth_results"]
        assert row["recall"] == report["recall"]
        assert row["memory_tuples"]["peak"] == report["memory_tuples"]["peak"]
        assert row["latency_us"]["p50"] == report["latency_us"]["p50"]
        assert row["latency_us"]["p99"] == report["latency_us"]["p99"]
        assert row["dropped_late"] == {s["name"]: s["dropped_late"] for s in report["streams"]}
        met = sum(1 for p in report["periods"] if p["recall"] >= 0.95)
        assert (row["periods_meeting_target"], row["periods_with_results"]) == (met, len(report["periods"]))
    # the tuned delay is the least meeting the target: run at 1 ms less misses it
    delay_ms = int(tuned["policy"]["watermark"][0]) // MS
    if delay_ms:
        below = run_report(data, tmp_path, "below", ["--watermark", f"{delay_ms - 1}ms"])
        assert below["recall"] < 0.95


def test_a_flink_job_gets_its_tuned_delay_at_its_interval(data, tmp_path):
    """The tuned row of a flink job: the least forBoundedOutOfOrderness delay meeting the
    target at the job's watermark interval (run at it gives the row's recall, 1 ms less
    misses the target)."""
    job = tmp_path / "flink.toml"
    job.write_text(JOB.replace('policy = "spark-ss"', 'policy = "flink"')
                   .replace('trigger = "5s"', 'watermark_interval = "500ms"')
                   .replace('path = "left.parquet"', f'path = "{data / "left.parquet"}"')
                   .replace('path = "right.parquet"', f'path = "{data / "right.parquet"}"'))
    run_cli(["compare", str(job), "--out", str(tmp_path / "out")], tmp_path)
    c = json.loads((tmp_path / "out" / "compare.json").read_text())
    tuned = next(p for p in c["policies"] if p["role"] == "tuned")
    assert tuned["text"].startswith("flink --watermark ") and tuned["recall"] >= 0.95
    assert tuned["policy"]["watermark_interval_us"] == 500 * MS

    def recall_at(ms: int) -> float:
        out = tmp_path / f"run{ms}"
        run_cli(["run", str(job), "--engine", "local", "--watermark", f"{ms}ms", "--no-results", "--out", str(out)],
                tmp_path)
        return json.loads((out / "report.json").read_text())["recall"]

    delay_ms = int(tuned["policy"]["watermark"][0]) // MS
    assert recall_at(delay_ms) == tuned["recall"]
    if delay_ms:
        assert recall_at(delay_ms - 1) < 0.95


def test_engine_settings_of_the_job_are_inherited_and_said(data, tmp_path):
    """A same-engine variant keeps the job's join type (spark-ss) or idleness (flink), and the
    row's text says so; a spark-ss job cut by --trigger-files is refused in one line."""
    def job(policy_lines: str) -> Path:
        path = tmp_path / f"job{len(list(tmp_path.glob('job*.toml')))}.toml"
        path.write_text(JOB.replace('policy = "spark-ss"\nwatermark = "2s"\ntrigger = "5s"', policy_lines)
                        .replace('path = "left.parquet"', f'path = "{data / "left.parquet"}"')
                        .replace('path = "right.parquet"', f'path = "{data / "right.parquet"}"'))
        return path

    flink = job('policy = "flink"\nwatermark = "2s"\nwatermark_interval = "500ms"\nidleness = "3s"')
    run_cli(["compare", str(flink), "--policy", "job", "--policy", "flink --watermark 1s", "--out",
             str(tmp_path / "f")], tmp_path)
    rows = json.loads((tmp_path / "f" / "compare.json").read_text())["policies"]
    assert [r["policy"]["idleness_us"] for r in rows] == [3 * S, 3 * S]
    assert all("--idleness 3s" in r["text"] for r in rows), [r["text"] for r in rows]
    left = job('policy = "spark-ss"\nwatermark = "2s"\ntrigger = "5s"\njoin = "left"')
    run_cli(["compare", str(left), "--policy", "job", "--policy", "spark-ss --watermark 1s", "--out",
             str(tmp_path / "l")], tmp_path)
    rows = json.loads((tmp_path / "l" / "compare.json").read_text())["policies"]
    assert [r["policy"]["join"] for r in rows] == ["left", "left"] and all("--join left" in r["text"] for r in rows)
    files = job('policy = "spark-ss"\nwatermark = "2s"\ntrigger_files = 1')
    files.write_text(files.read_text().replace('arrival = "arrival"\n', ""))   # rows arrive with their batch
    proc = run_cli(["compare", str(files), "--out", str(tmp_path / "t")], tmp_path, ok=False)
    assert proc.returncode == 2 and "--trigger-files is not compared yet" in proc.stderr
    assert len([x for x in proc.stderr.splitlines() if x.startswith("error:")]) == 1


def test_causes_add_up_and_say_why(default_set):
    c = default_set
    job, ideal, _ = c["policies"]
    for p in c["policies"]:
        assert sum(p["lost"].values()) == c["truth_results"] - p["emitted_results"]
        assert sum(p["period_emitted"]) == p["emitted_results"]
    assert sum(c["periods"]["truth"]) == c["truth_results"]
    # a symmetric join drops nothing: everything it loses was evicted
    assert ideal["lost"]["late"] == ideal["lost"]["batch"] == 0 and ideal["lost"]["evicted"] > 0
    # spark-ss with a quarter of the rows up to 20 s late against a 2 s watermark drops rows
    assert job["lost"]["late"] > 0 and sum(job["dropped_late"].values()) > 0
    assert set(c["causes"]) == {"late", "evicted", "batch"}
    lines = c["_stdout"].splitlines()
    assert any(line.startswith("job: spark-ss --watermark 2s --trigger 5s: recall ") for line in lines)
    assert any("dropped as late" in line for line in lines)


def test_policy_texts_and_compare_tables(data, tmp_path):
    out = tmp_path / "explicit"
    run_cli(["compare", str(data / "job.toml"), "--out", str(out),
             "--policy", "flink --watermark 2s --watermark-interval 0",
             "--policy", "spark-ss --watermark left=1s --watermark right=3s --label narrow",
             "--policy", "kslack --k 500ms", "--policy", "job"], tmp_path)
    c = json.loads((out / "compare.json").read_text())
    assert [p["label"] for p in c["policies"]] == [
        "flink --watermark 2s --watermark-interval 0", "narrow", "kslack --k 500ms",
        "job: spark-ss --watermark 2s --trigger 5s"]
    assert c["policies"][1]["policy"]["watermark"] == [1 * S, 3 * S]
    assert c["policies"][1]["policy"]["trigger_us"] == 5 * S          # inherited from the job
    assert c["policies"][2]["lost"]["evicted"] == c["policies"][2]["lost"]["batch"] == 0
    # [[compare]] tables in the config; --policy flags replace them
    toml = data / "tables.toml"
    toml.write_text(JOB + '\n[[compare]]\npolicy = "static"\nretention = {left = "1s", right = "4s"}\nlabel = "lopsided"\n'
                    '\n[[compare]]\npolicy = "tuned"\n')
    out2 = tmp_path / "tables"
    run_cli(["compare", str(toml), "--out", str(out2)], tmp_path)
    c2 = json.loads((out2 / "compare.json").read_text())
    assert [p["label"] for p in c2["policies"]][0] == "lopsided"
    assert c2["policies"][0]["policy"]["retention"] == [1 * S, 4 * S] and c2["policies"][1]["role"] == "tuned"
    out3 = tmp_path / "flags_win"
    run_cli(["compare", str(toml), "--out", str(out3), "--policy", "none"], tmp_path)
    assert [p["text"] for p in json.loads((out3 / "compare.json").read_text())["policies"]] == ["none"]
    # the run's own TOML still runs: [[compare]] is for compare
    run_cli(["run", str(toml), "--engine", "local", "--no-results", "--out", str(tmp_path / "run")], tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--policy", "spark-sss --watermark 1s"], "unknown policy 'spark-sss'"),
    (["--policy", "static --retention"], "--retention needs a value"),
    (["--policy", "static --retention middle=1s"], "unknown stream name 'middle'"),
    (["--policy", "static --watermark 1s"], "watermark is not a setting of static"),
    (["--policy", "tuned --recall 0.9"], "tuned takes no settings"),
    (["--policy", "job", "--policy", "job"], "--policy job is given twice"),
    (["--policy", "static --retention 1parsec"], "bad retention '1parsec'"),
])
def test_bad_variants_are_one_line_exit_2(data, tmp_path, args, message):
    proc = run_cli(["compare", str(data / "job.toml"), "--out", str(tmp_path / "bad"), *args], tmp_path, ok=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "bad").exists()


def test_spark_ss_variant_on_another_job_needs_a_trigger(data, tmp_path):
    proc = run_cli(["compare", "--stream", f"left={data / 'left.parquet'}", "--stream", f"right={data / 'right.parquet'}",
                    "--arrival", "arrival", "--window", "2s", "--policy", "spark-ss --watermark 1s",
                    "--out", str(tmp_path / "x")], tmp_path, ok=False)
    assert proc.returncode == 2 and "needs --trigger" in proc.stderr


def test_compare_html_opens_in_headless_chromium(default_set, tmp_path):
    assert CHROMIUM is not None, "headless Chromium is required: run `bash .ci/bootstrap --test` (installs Debian's chromium)"
    page = default_set["_dir"] / "compare.html"
    html = page.read_text()
    for p in default_set["policies"]:
        assert p["label"] in html
    plain = chromium(page.as_uri(), tmp_path, "--dump-dom")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert not [line for line in plain.stderr.splitlines() if "CONSOLE" in line]
    facts = probe(page, tmp_path)
    assert facts["errors"] == [] and facts["external"] == 0
    assert facts["images"] == 1 and facts["decoded"] == 1, facts


def test_plot_groups_long_spans():
    """Over many periods the plot draws at most MAX_COMPARE_GROUPS groups, each group's recall
    the sum of emitted over the sum of truth of its periods."""
    from streamjoin.pipelines.report.plots import MAX_COMPARE_GROUPS, compare_plot_data

    P = 60 * S
    starts = [i * P for i in range(0, 3000, 2)]     # every other period has results
    truth = [10] * len(starts)
    c = {"period_us": P, "periods": {"start_us": starts, "truth": truth}, "time_origin": None,
         "policies": [{"label": "a", "period_emitted": [10, 0] * (len(starts) // 2)}]}
    d = compare_plot_data(c)
    assert len(d["x"]) <= MAX_COMPARE_GROUPS and d["k"] == 10
    assert d["recall"]["a"][0] == 0.6            # group of 10 periods: 5 with results, emitted 10,0,10,0,10 of 50


def test_flink_sql_is_refused_before_the_inputs_are_read(data, tmp_path, monkeypatch):
    """A flink-sql variant (or job) is refused in one line before any input is read: with a
    missing input file the flink-sql message comes first (what the user asked for cannot be
    done, whatever the inputs hold); the same variant in a [[compare]] table too."""
    missing = ["--stream", f"left={tmp_path / 'missing.parquet'}", "--stream", f"right={data / 'right.parquet'}",
               "--arrival", "arrival", "--window", "2s"]
    refused = "compare does not take flink-sql yet"
    proc = run_cli(["compare", *missing, "--policy", "static --retention 1s", "--policy", "flink-sql --watermark 1s",
                    "--out", str(tmp_path / "x")], tmp_path, ok=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: --policy 'flink-sql --watermark 1s': {refused} (its lost results are not classified into causes); "
        "run it with streamjoin run"]
    proc = run_cli(["compare", *missing, "--out", str(tmp_path / "x")], tmp_path, ok=False)   # the file is read
    assert proc.returncode == 2 and "missing.parquet" in proc.stderr and refused not in proc.stderr
    toml = tmp_path / "job.toml"
    toml.write_text(JOB.replace("path = \"", f"path = \"{data}/") + '\n[[compare]]\npolicy = "flink-sql"\n')
    proc = run_cli(["compare", str(toml), "--out", str(tmp_path / "x")], tmp_path, ok=False)
    assert proc.returncode == 2 and "--policy 'flink-sql': " + refused in proc.stderr
    assert not (tmp_path / "x").exists()

    # in-process: run_compare refuses before it loads anything (the job's flink-sql too)
    from streamjoin.pipelines.base.errors import InputError
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.config.variants import parse_policy_text
    from streamjoin.pipelines.jobs import compare as C

    def no_load(*args, **kwargs):
        raise AssertionError("inputs read")

    monkeypatch.setattr(C, "load_all", no_load)
    cfg = resolve(data / "job.toml", Flags(out=str(tmp_path / "y"), engine="local", router="none"),
                  output_kind="compare")
    with pytest.raises(InputError, match="^--policy 'flink-sql': compare does not take flink-sql"):
        C.run_compare(cfg, [parse_policy_text("none"), parse_policy_text("flink-sql")])
    sql_job = resolve(data / "job.toml", Flags(out=str(tmp_path / "y"), engine="local", router="none",
                                               policy="flink-sql", watermark=["1s"]), output_kind="compare")
    with pytest.raises(InputError, match="^compare does not take flink-sql"):
        C.run_compare(sql_job, [])
    with pytest.raises(AssertionError, match="inputs read"):   # an accepted list goes on to load
        C.run_compare(cfg, [parse_policy_text("none")])
