"""``streamjoin calibrate`` end to end on tiny inputs: calibrate.json holds the documented keys
(machine, 3 x 3 inputs with every run's time, the fit) and the printed ``--capacity`` line is
the one in calibrate.json and parses; bad options are one line, exit 2.  No timing value is
asserted -- only structure and positivity (the fit's maths: tests/analysis/test_calibration.py)."""

from __future__ import annotations

import json
import re

import pytest

from helpers.cli import run_cli

from streamjoin.pipelines.capacity.spec import parse_capacity
from streamjoin.pipelines.jobs.calibrate import SCALES, WINDOWS_US

RUNS = 2


def test_calibrate_writes_calibrate_json_and_prints_the_capacity_line(tmp_path):
    proc = run_cli(["calibrate", "--out", "cal", "--runs", str(RUNS), "--scale", "0.1"], tmp_path, ok=False)
    assert proc.returncode in (0, 1), proc.stderr
    c = json.loads((tmp_path / "cal" / "calibrate.json").read_text())
    assert {"kind", "tool_version", "command", "engine", "policy", "runs", "scale", "machine", "method", "inputs",
            "fit", "capacity_option", "problem", "timings_s", "outputs"} <= set(c)
    assert (c["kind"], c["engine"], c["policy"], c["runs"]) == ("calibrate", "local", "static --retention 2s", RUNS)
    m = c["machine"]
    assert m["cpu_model"] and m["cores"] >= 1 and 1 <= m["cores_usable"] <= m["cores"]
    assert len(m["load_average"]) == 3 and len(m["load_average_end"]) == 3
    inputs = c["inputs"]
    # every size with every window, each timed --runs times; the median is of those times
    assert sorted((i["scale"], i["window_us"]) for i in inputs) == sorted(
        (s * 0.1, w) for s in SCALES for w in WINDOWS_US)
    for i in inputs:
        assert i["tuples"] > 0 and 0 < i["results"] <= i["truth_results"]
        assert len(i["times_s"]) == RUNS and all(t > 0 for t in i["times_s"])
        assert min(i["times_s"]) <= i["median_s"] <= max(i["times_s"])
    # sizes vary the tuples, widths the results per tuple: at each size, more results per wider window
    assert len({i["tuples"] for i in inputs}) == len(SCALES)
    for n in {i["tuples"] for i in inputs}:
        by_width = sorted((i["window_us"], i["results"]) for i in inputs if i["tuples"] == n)
        assert [w for w, _ in by_width] == sorted(WINDOWS_US)
        assert all(a[1] < b[1] for a, b in zip(by_width, by_width[1:])), by_width
    f = c["fit"]
    assert f["tuple_ns"] > 0   # time grows with the input, however noisy the machine
    assert len(f["residual_s"]) == len(inputs) and f["residual_rms_s"] >= 0
    lines = proc.stdout.splitlines()
    assert any(line.startswith("machine: ") and "load average" in line for line in lines)
    assert any(line.startswith("fit quality: R^2") for line in lines)
    if proc.returncode == 0:
        assert lines[-1] == c["capacity_option"]
        m = re.fullmatch(r"--capacity (tuple=(\d+)ns,result=(\d+)ns)", lines[-1])
        assert m, lines[-1]
        spec = parse_capacity(m.group(1))
        assert spec.tuple_ns == round(f["tuple_ns"]) > 0 and spec.result_ns == round(f["result_ns"]) >= 0
    else:   # a negative fitted time on a noisy machine: said, published, no line to paste
        assert c["capacity_option"] is None and c["problem"]
        assert lines[-1].startswith("no --capacity line: ")
    # cron: a plain progress line per measured join on stderr
    assert f"calibrate join {len(inputs) * RUNS}/{len(inputs) * RUNS}" in proc.stderr


def test_bad_options_are_one_line_exit_2(tmp_path):
    for args, message in (
        (["--engine", "spark"], "times the local engine's join only"),
        (["--engine", "flink"], "expected local"),
        (["--runs", "0"], "expected a whole number >= 1"),
        (["--scale", "0"], "expected a number > 0"),
        (["--policy", "flink --watermark 1s"], "expected one the capacity model runs"),
        (["--policy", "tuned"], "expected one the capacity model runs"),
    ):
        proc = run_cli(["calibrate", "--out", "cal", *args], tmp_path, ok=False)
        assert proc.returncode == 2, (args, proc.stderr)
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], (args, proc.stderr)
        assert not (tmp_path / "cal").exists()


def test_on_a_terminal_a_progress_bar_not_log_lines(tmp_path):
    from helpers.cli import run_tty

    code, frames = run_tty(["calibrate", "--out", "cal", "--runs", "1", "--scale", "0.05"], tmp_path, columns=120,
                           screen=False)
    assert code in (0, 1), frames
    assert "streamjoin: calibrate join" not in frames   # the cron lines
    assert re.search(r"calibrate: [\d,]+ tuples, W \d+ms .* \d+/9", frames), frames   # the bar: label, done/total
    assert "fit quality: R^2" in frames and (tmp_path / "cal" / "calibrate.json").exists()


def test_settings_are_checked_once_before_the_display_opens_and_out_is_locked(tmp_path, monkeypatch):
    from streamjoin.pipelines.base.errors import InputError
    from streamjoin.pipelines.jobs import calibrate as C

    calls, opened = [], []
    check = C.check_settings
    monkeypatch.setattr(C, "check_settings", lambda s: (calls.append(s), check(s))[1])

    class Display:
        def __enter__(self):
            opened.append(len(calls))
            return self

        def __exit__(self, *exc):
            return False

    class Generated(Exception):
        pass

    def generate(*args, **kwargs):   # stops the job at its first piece of work
        raise Generated

    bad = C.CalibrateSettings(out=tmp_path / "cal", runs=0)
    with pytest.raises(InputError, match="--runs 0"):
        C.run_calibrate(bad, generate=generate, display=Display())
    assert len(calls) == 1 and opened == [] and list(tmp_path.iterdir()) == []   # no lock file, no --out
    good = C.CalibrateSettings(out=tmp_path / "cal", runs=1, scale=0.05)
    with pytest.raises(Generated):
        C.run_calibrate(good, generate=generate, display=Display())
    assert len(calls) == 2 and opened == [2]   # checked once more (this run), then the display opened
