"""``report.html``: written by every run, self-contained, re-rendered from report.json, opens cleanly in Chromium.

The browser check loads the page in headless Chromium (installed by
``bash .ci/bootstrap --test``; the test fails where it is absent): no console output or
script errors, no failed resource loads, and every ``<img>`` decoded.  A small
probe script is put in front of a *copy* of the page to observe that from
inside the page; the untouched page is also loaded and must log nothing.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers.browser import CHROMIUM, chromium, probe
from helpers.cli import run_cli

from streamjoin.pipelines.report.build import MAX_SERIES_POINTS
from streamjoin.pipelines.report.html import what_to_do
from streamjoin.pipelines.report.json import validate

ROOT = Path(__file__).resolve().parents[2]
@pytest.fixture(scope="module")
def soccer_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    out = tmp / "out"
    run_cli(["run", str(ROOT / "samples/soccer/soccer.toml"), "--policy", "kslack", "--k", "5ms", "--recall", "0.97",
             "--no-results", "--out", str(out)], tmp)
    return out


def test_every_run_writes_a_self_contained_report(soccer_run):
    html = (soccer_run / "report.html").read_text()
    report = json.loads((soccer_run / "report.json").read_text())
    validate(report)
    assert report["outputs"]["report_html"].endswith("report.html")
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) == 4  # recall per period, memory, latency, tuning curve
    assert all(src.startswith("data:image/svg+xml;base64,") for src in images)
    assert not re.search(r'(src|href)="(https?:)?//', html), "no external resources"
    # the extra keys the page is rendered from
    series = report["memory_series"]
    assert 0 < series["points"] <= MAX_SERIES_POINTS == 2000
    assert len(series["arrival_us"]) == len(series["peak"]) == len(series["mean"]) == series["points"]
    assert max(series["peak"]) == report["memory_tuples"]["peak"]
    assert sum(report["latency_histogram"]["counts"]) == report["emitted_results"]
    tuning = report["tuning"]
    assert tuning["policy"] == "kslack" and tuning["truth_results"] == report["truth_results"]
    # recall 5ms < target 0.97: the summary says which setting to raise, and to what
    assert report["recall"] < 0.97
    todo = what_to_do(report)
    assert any("raise --k" in line and "below the target" in line for line in todo), todo


def test_report_command_rerenders_from_report_json_alone(soccer_run, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(soccer_run / "report.json", copy / "report.json")  # no inputs, no results: the JSON alone
    proc = run_cli(["report", str(copy)], tmp_path)
    assert proc.stdout.strip().endswith("report.html")
    assert (copy / "report.html").read_text() == (soccer_run / "report.html").read_text()


def test_report_command_bad_directory(tmp_path):
    proc = run_cli(["report", str(tmp_path / "nope")], tmp_path, ok=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1


def test_static_run_report_says_latency_zero(tmp_path):
    out = tmp_path / "out"
    run_cli(["run", str(ROOT / "samples/soccer/soccer.toml"), "--policy", "static", "--retention", "50ms",
             "--no-results", "--out", str(out)], tmp_path)
    html = (out / "report.html").read_text()
    assert "latency 0" in html
    assert len(re.findall(r"<img ", html)) == 3


@pytest.mark.parametrize("page", ["report.html", "tune.html"])
def test_html_opens_in_headless_chromium(soccer_run, tmp_path, page):
    # never skipped: a report nobody can open is a failure (`bash .ci/bootstrap --test` installs chromium)
    assert CHROMIUM is not None, "headless Chromium is required: run `bash .ci/bootstrap --test` (installs Debian's chromium)"
    if page == "tune.html":
        out = tmp_path / "tune"
        run_cli(["tune-buffer", str(ROOT / "samples/soccer/soccer.toml"), "--recall", "0.95", "--policy", "kslack",
                 "--out", str(out)], tmp_path)
        src = out / page
    else:
        src = soccer_run / page
    # 1. the page itself: loads, and nothing is logged to the console
    plain = chromium(src.as_uri(), tmp_path, "--dump-dom")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "<img" in plain.stdout
    console = [line for line in plain.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    # 2. a copy with the probe in front: no errors of any kind, every image decoded
    facts = probe(src, tmp_path)
    assert facts["errors"] == [], facts
    assert facts["external"] == 0
    assert facts["images"] >= 2 and facts["decoded"] == facts["images"], facts


def test_large_runs_estimate_the_tuning_curve_from_a_sample(monkeypatch):
    """Above TUNING_SAMPLE results the run's curve is a 1-in-k sample, said so, and close to exact."""

    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.engines.local import join
    from streamjoin.pipelines.io.load import load_all
    from streamjoin.pipelines.report import build as H

    cfg = resolve(ROOT / "samples/soccer/soccer.toml", Flags(policy="kslack", k=["5ms"], recall=0.97, out="unused"))
    streams = load_all(list(cfg.streams))
    outcome = join([s.ts for s in streams], [s.arrival for s in streams], [None, None], cfg.windows, cfg.policy)
    exact = H.extras(cfg, outcome)[0]["tuning"]
    monkeypatch.setattr(H, "TUNING_SAMPLE", 50_000)
    sampled = H.extras(cfg, outcome)[0]["tuning"]
    assert exact["sample_every"] == 1 and sampled["sample_every"] == -(-len(outcome.combos) // 50_000) > 1
    assert sampled["truth_results"] == exact["truth_results"] == len(outcome.combos)
    for q in ("0.9", "0.95", "0.99"):  # within two grid steps of the exact setting
        assert abs(sampled["setting_for_recall"][q] - exact["setting_for_recall"][q]) <= 2 * exact["granularity_us"]
