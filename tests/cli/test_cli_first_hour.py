"""The first hour with ``streamjoin`` (issue 16): what a new user meets first.

Flags that look like flags, ``--version``, defaults in ``--help``,
``tune-buffer`` taking a copy-pasted ``run`` command line, whole numbers in
rich tables at 80 columns, a missed recall target said in words, where
``report.html`` is, and tune-buffer values printed with enough digits to
tell them apart.
"""

from __future__ import annotations

import io
import json
import re
from importlib import metadata
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.cli import CMD, cli_env, run_cli, run_tty
from test_cli import SENSOR_ARGS, assert_plain, sensors  # noqa: F401  (sensors: a fixture)

RUN_FLAGS = ("--adapt-segment", "--no-results", "--json", "--force", "--fail-under-target")


def _options_help(command: str, tmp_path: Path) -> dict[str, str]:
    """``streamjoin COMMAND --help`` as {option: its type column + help text}, one entry per option."""
    proc = run_cli([command, "--help"] if command else ["--help"], cwd=tmp_path)
    assert_plain(proc.stdout)
    rows: dict[str, str] = {}
    current = None
    for line in proc.stdout.splitlines():
        body = line.strip().strip("│").strip()
        m = re.match(r"^(--[a-z-]+)\s*(.*)$", body)
        if m:
            current = m.group(1)
            rows[current] = m.group(2)
        elif current and body and not body.startswith(("╭", "╰")):
            rows[current] += " " + body
        elif body.startswith(("╭", "╰")):
            current = None
    return {k: " ".join(v.split()) for k, v in rows.items()}


# ----------------------------------------------------------------------------
# 1. flags are flags
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["", "run", "tune-buffer", "backfill", "inspect"])
def test_help_shows_no_bool_metavar(command: str, tmp_path: Path) -> None:
    opts = _options_help(command, tmp_path)
    assert "--help" in opts
    assert not [o for o, text in opts.items() if "<bool>" in text], opts


@pytest.mark.parametrize("flag", RUN_FLAGS)
@pytest.mark.parametrize("word", ["true", "False", "1"])
def test_value_after_a_flag_is_a_one_line_usage_error(flag: str, word: str, tmp_path: Path) -> None:
    proc = run_cli(["run", "--stream", "a=a.parquet", flag, word], cwd=tmp_path, ok=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ")
    assert f"{flag} is a flag" in proc.stderr and f"'{flag} {word}'" in proc.stderr
    assert "config file not found" not in proc.stderr


def test_value_after_a_tune_buffer_flag_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(["tune-buffer", "--recall", "0.9", "--per-period", "yes"], cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--per-period is a flag" in proc.stderr


def test_an_option_value_spelled_like_a_bool_is_still_a_value(tmp_path: Path) -> None:
    # `--where true` is a (silly but legal) predicate: the flag check must not touch option values
    proc = run_cli(["run", "--where", "true", "nothing.toml"], cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and "is a flag" not in proc.stderr and "nothing.toml" in proc.stderr


# ----------------------------------------------------------------------------
# 2. --version
# ----------------------------------------------------------------------------


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    proc = run_cli(["--version"], cwd=tmp_path)
    assert proc.stdout == f"streamjoin {metadata.version('streamjoin')}\n"
    assert re.fullmatch(r"streamjoin \d+\.\d+\.\d+\S*\n", proc.stdout)
    assert "--version" in run_cli(["--help"], cwd=tmp_path).stdout


# ----------------------------------------------------------------------------
# 3. defaults in --help
# ----------------------------------------------------------------------------

PERIOD_DEFAULT = "default: from the replay span, <= 1000 periods"


def test_run_help_states_the_defaults(tmp_path: Path) -> None:
    opts = _options_help("run", tmp_path)
    assert "(default: none)" in opts["--policy"]
    assert "(default: none)" in opts["--router"]
    assert "(default: spark, or $STREAMJOIN_ENGINE; spark whenever a router or a Spark setting is given)" \
        in opts["--engine"]
    assert PERIOD_DEFAULT in opts["--period"]
    assert "(default: ts)" in opts["--ts"]
    assert "(default: local[*])" in opts["--master"]
    assert "(default: text)" in opts["--log-format"]


def test_tune_buffer_help_states_the_defaults(tmp_path: Path) -> None:
    opts = _options_help("tune-buffer", tmp_path)
    assert "[default: static]" in opts["--policy"]
    assert PERIOD_DEFAULT in opts["--period"]
    assert "(default: ts)" in opts["--ts"]
    assert "[default: out/tune]" in opts["--out"]
    assert "default: from the data" in opts["--granularity"]


def test_every_option_with_a_value_says_its_default_or_that_it_is_needed(tmp_path: Path) -> None:
    """No option of run / tune-buffer taking a value leaves a user guessing what happens without it
    (and no help text is cut short at 80 columns)."""
    for command in ("run", "tune-buffer"):
        opts = _options_help(command, tmp_path)
        said = re.compile(r"default|required|needs|nightly|repeatable|no effect")
        silent = [o for o, text in opts.items() if text.startswith("<") and not said.search(text)]
        assert not silent, (command, {o: opts[o] for o in silent})
        assert not [o for o, text in opts.items() if "…" in text], (command, opts)


# ----------------------------------------------------------------------------
# 4. tune-buffer takes a copy-pasted run command line
# ----------------------------------------------------------------------------

RUN_ONLY = ["--engine", "spark", "--master", "local[2]", "--partitions", "2", "--router", "none",
            "--spark-conf", "spark.ui.enabled=false", "--segment", "2s", "--load-weights", "1,1,1",
            "--adapt-segment", "--chunk-rows", "0", "--no-results", "--k", "5ms", "--interval", "1s",
            "--basic-window", "2ms", "--trigger", "rate_ratio=4", "--fail-under-target"]


def _tune(d: Path, args: list[str], out: str, *, ok: bool = True):
    proc = run_cli(["tune-buffer", *SENSOR_ARGS, "--recall", "0.9", "--out", out, *args], cwd=d, ok=ok)
    return proc, (json.loads((d / out / "tune.json").read_text()) if ok else None)


def test_tune_buffer_accepts_the_options_of_run_and_says_they_change_nothing(sensors: dict) -> None:
    d = sensors["dir"]
    plain, base = _tune(d, ["--policy", "kslack"], "t0")
    assert "note:" not in plain.stderr
    proc, copied = _tune(d, ["--policy", "kslack", *RUN_ONLY], "t1")
    assert copied["recommendation"] == base["recommendation"]
    assert copied["candidates"] == base["candidates"]
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, proc.stderr
    for opt in ("--engine", "--master", "--partitions", "--router", "--spark-conf", "--chunk-rows", "--k",
                "--no-results", "--fail-under-target"):
        assert opt in notes[0], notes[0]
    assert "in-process" in notes[0] and "do not change" in notes[0]
    # a bad value is still an error, as in run
    proc, _ = _tune(d, ["--engine", "sprak"], "t2", ok=False)
    assert proc.returncode == 2 and "--engine sprak" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(("run_policy", "tuned"), [("qkslack", "kslack"), ("mpkslack", "kslack"), ("qjoin", "static")])
def test_tune_buffer_tunes_the_fixed_policy_of_runs_family(sensors: dict, run_policy: str, tuned: str) -> None:
    d = sensors["dir"]
    _, direct = _tune(d, ["--policy", tuned], "direct")
    proc, mapped = _tune(d, ["--policy", run_policy], "mapped")
    assert mapped["policy"] == tuned and mapped["recommendation"] == direct["recommendation"]
    assert f"--policy {run_policy}" in proc.stderr and tuned in proc.stderr


def test_tune_buffer_explains_the_nightly_options_it_refuses(sensors: dict) -> None:
    proc, _ = _tune(sensors["dir"], ["--date", "2024-01-02"], "t", ok=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--date" in proc.stderr and "--stream" in proc.stderr and "No such option" not in proc.stderr


def test_tune_buffer_help_lists_runs_options_in_their_own_panel(tmp_path: Path) -> None:
    proc = run_cli(["tune-buffer", "--help"], cwd=tmp_path)
    text = proc.stdout
    panel = text[text.index("no effect here"):]
    for opt in ("--engine", "--master", "--router", "--k", "--chunk-rows"):
        assert opt in panel
    assert "--date" not in text


# ----------------------------------------------------------------------------
# 5. whole numbers in rich tables at 80 columns
# ----------------------------------------------------------------------------

BIG = {"rows": 121_000_000, "quarantined": 1_234_567, "dropped_late": 12_345_678, "expired_on_arrival": 9_876_543}


def _render(render, data, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system=None)
    render(data, console)
    return console.file.getvalue()


def _big_report(d: Path) -> dict:
    proc = run_cli(["run", *SENSOR_ARGS, "--policy", "mpkslack", "--recall", "0.95", "--period", "100ms",
                    "--json", "--out", "out"], cwd=d)
    report = json.loads(proc.stdout)
    for s in report["streams"]:
        s.update(BIG, rate_per_s=1_234_567.8, name=s["name"] + "_sensor_stream")
    report["truth_results"], report["emitted_results"] = 1_234_567_890, 1_168_234_567
    report["memory_tuples"].update(peak=98_765_432, mean=87_654_321.5)
    return report


def _whole(text: str, numbers: list[str]) -> None:
    assert "…" not in text, text
    flat = text.replace("\n", " ")
    for n in numbers:
        assert re.search(rf"(?<![\d,.]){re.escape(n)}(?![\d,])", flat), (n, text)


@pytest.mark.parametrize("width", [80, 60])
def test_run_tables_print_every_number_whole(sensors: dict, width: int) -> None:
    from streamjoin.pipelines.report.terminal import render_rich

    text = _render(render_rich, _big_report(sensors["dir"]), width)
    _whole(text, ["121,000,000", "1,234,567", "12,345,678", "9,876,543", "1,234,567.8/s",
                  "1,234,567,890", "1,168,234,567", "98,765,432", "87,654,321.5"])
    assert "temp_sensor_stream" in text and "hum_sensor_stream" in text
    assert max(len(line) for line in text.splitlines()) <= width


@pytest.mark.parametrize("width", [80, 60])
def test_tune_tables_print_every_number_whole(sensors: dict, width: int) -> None:
    from streamjoin.pipelines.report.terminal import render_tune_rich

    _, t = _tune(sensors["dir"], ["--per-period", "--period", "100ms", "--json"], "tj")
    for i, c in enumerate(t["candidates"]):
        c["memory_tuples"].update(peak=123_456_789 + i, mean=23_456_789.5)
    for p in t["periods"]:
        p["truth"] = 7_654_321
    text = _render(render_tune_rich, t, width)
    _whole(text, [f"{123_456_789 + i:,}" for i in range(len(t["candidates"]))] + ["23,456,789.5", "7,654,321"])
    assert max(len(line) for line in text.splitlines()) <= width


# ----------------------------------------------------------------------------
# 6. a missed recall target in words; 7. where report.html is
# ----------------------------------------------------------------------------

MISS = ["run", *SENSOR_ARGS, "--policy", "mpkslack", "--recall", "0.99", "--out", "out"]


def _recall_6(d: Path) -> str:
    from streamjoin.pipelines.analysis.metrics import fmt_recall

    recall = json.loads((d / "out" / "report.json").read_text())["recall"]
    assert recall < 0.99
    return fmt_recall(recall, 6)


def test_missed_target_with_fail_under_target_says_why_exit_3(sensors: dict) -> None:
    d = sensors["dir"]
    proc = run_cli([*MISS, "--fail-under-target"], cwd=d, ok=False)
    assert proc.returncode == 3, proc.stderr
    r = _recall_6(d)
    assert f"recall: {r}\n" in proc.stdout
    assert f"target: missed (recall {r} < 0.99); exit 3 because --fail-under-target\n" in proc.stdout


def test_missed_target_without_the_flag_is_said_and_exits_0(sensors: dict) -> None:
    d = sensors["dir"]
    proc = run_cli(MISS, cwd=d)
    r = _recall_6(d)
    assert f"target: missed (recall {r} < 0.99); exit 0 (with --fail-under-target: exit 3)\n" in proc.stdout


def test_met_target_is_said(sensors: dict) -> None:
    d = sensors["dir"]
    proc = run_cli([*MISS[:-4], "--recall", "0.5", "--out", "out", "--fail-under-target"], cwd=d)
    assert re.search(r"^target: met \(recall 0\.\d{6} >= 0\.5\)$", proc.stdout, re.M), proc.stdout
    assert "report_html: out/report.html\n" in proc.stdout


def test_terminal_says_the_target_was_missed_and_where_report_html_is(sensors: dict) -> None:
    d = sensors["dir"]
    code, text = run_tty([*MISS, "--fail-under-target"], d)
    assert code == 3, text
    r = _recall_6(d)
    flat = " ".join(text.split())
    assert f"target: missed (recall {r} < 0.99); exit 3 because --fail-under-target" in flat, text
    assert "report.html: out/report.html" in flat, text
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


# ----------------------------------------------------------------------------
# 8. tune-buffer values told apart, texts in plain words
# ----------------------------------------------------------------------------


def test_format_durations_prints_different_values_differently() -> None:
    from streamjoin.pipelines.base.timeunits import format_durations

    assert format_durations([330_400, 332_000, 330_000]) == ["330.4ms", "332ms", "330ms"]
    assert format_durations([1_000_000, 1_001_000, 1_000_000]) == ["1s", "1.001s", "1s"]
    assert format_durations([12_345, None, 12_345]) == ["12.3ms", "-", "12.3ms"]  # 3 digits when enough
    assert format_durations([999_950, 999_960]) == ["999.95ms", "999.96ms"]
    assert format_durations([999_950]) == ["1000ms"]  # never 1e+03ms


def _tune_result(exact: int, g: int, policy: str = "static") -> dict:
    from streamjoin.pipelines.analysis.tuning import summary_text

    step = -(-exact // g)
    rec = {"exact_us": exact, "setting_us": step * g, "recall": 0.9512345, "one_step_below_us": (step - 1) * g,
           "recall_one_step_below": 0.9487, "memory_tuples": {"peak": 120, "mean": 80.5},
           "per_stream_us": {"a": step * g, "b": (step - 3) * g}, "per_stream_method": "exact",
           "per_stream_recall": 0.9501, "per_stream_memory_tuples": {"mean": 70.25},
           "latency_us": {"mean": 1_500, "p95": 9_000}}
    t = {"policy": policy, "recall_target": 0.95, "granularity_us": g, "granularity_source": "default: ...",
         "period_us": 60_000_000, "recommendation": rec,
         "every_period": {"setting_us": (step + 2) * g, "periods_meeting_target_at_recommendation": 7,
                          "periods_with_truth": 9}}
    return {**t, "summary": summary_text(t)}


@pytest.mark.parametrize("policy", ["static", "kslack"])
def test_tune_summary_tells_the_exact_value_from_the_grid_values(policy: str) -> None:
    text = "\n".join(_tune_result(330_400, 2_000, policy)["summary"])
    assert "330.4ms" in text and "332ms" in text and "330ms" in text
    assert re.search(r"\b330ms\b", text.replace("330.4ms", "")), text
    text = "\n".join(_tune_result(10_000_700, 1_000, policy)["summary"])  # 3 digits would print all as 10s
    assert "10.0007s" in text and "10.001s" in text and "10s" in text


@pytest.mark.parametrize("policy", ["static", "kslack"])
def test_tune_summary_is_in_plain_words(policy: str) -> None:
    lines = _tune_result(330_400, 2_000, policy)["summary"]
    text = "\n".join(lines)
    for jargon in ("->", "each the", "(exact);", "release horizon", "/9 periods", "one step less ("):
        assert jargon not in text, (jargon, text)
    assert "One grid step less" in text and "7 of 9 periods" in text
    assert all(line[:1].isupper() for line in lines), lines


def test_tune_tables_tell_grid_settings_apart(sensors: dict) -> None:
    from streamjoin.pipelines.report.terminal import tune_lines

    _, t = _tune(sensors["dir"], ["--policy", "kslack", "--granularity", "1us", "--period", "100ms", "--per-period"], "tg")
    table = [line.split()[0] for line in tune_lines(t)
             if re.match(r"\s+[\d.]+(us|ms|s)\s+\d\.\d{4}\s", line)]
    assert len(table) == len(t["candidates"]) > 3
    assert len(set(table)) == len({c["setting_us"] for c in t["candidates"]}), table
    html = (sensors["dir"] / "tg" / "tune.html").read_text()
    replayed = html[html.index("Replayed settings"):]
    cells = re.findall(r"<tr><td>([^<]+)</td>", replayed[:replayed.index("</table>")])
    assert cells == table, (cells, table)


def test_report_html_memory_caption_is_a_sentence(sensors: dict) -> None:
    d = sensors["dir"]
    run_cli(["run", *SENSOR_ARGS, "--policy", "mpkslack", "--out", "out"], cwd=d)
    html = (d / "out" / "report.html").read_text()
    assert "each the peak / mean over" not in html
    report = json.loads((d / "out" / "report.json").read_text())
    from streamjoin.pipelines.report.html import memory_text

    # the wording itself is pinned in tests/report/test_report_readability.py
    sentence = memory_text(report["memory_series"])
    assert sentence.endswith(".") and sentence[0].isupper() and sentence in html
