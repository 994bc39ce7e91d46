"""The pages people open (issue 16): what the plots are built from and the HTML, not pixels.

* recall per period: every failing period is listed and drawn on its own (red
  triangles), empty periods are not drawn at all, result counts are drawn below;
* calendar inputs (epoch-unit integers, Parquet timestamps) get ``time_origin`` in
  report.json / tune.json and UTC date axes and dates in the tables; other
  clocks get a relative axis;
* period tables are collapsed (``<details>``), worst first, at most 20 rows;
* setting axes (tuning, latency curves) are logarithmic when the useful range would
  be squeezed, with units on every tick and label;
* the memory plot's sentence is plain English.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.cli import run_cli

from streamjoin.pipelines.report import html as H
from streamjoin.pipelines.report import plots
from streamjoin.pipelines.report.json import EPOCH, calendar_origin

ROOT = Path(__file__).resolve().parents[2]
MIN_US = 60_000_000
P = 10 * MIN_US
T0_US = 1_709_510_400_000_000  # 2024-03-04 00:00 UTC
DURATION = re.compile(r"^\d+(\.\d+)?(us|ms|s|min|h|d)$")


def _periods(n: int, *, empty: range = range(0), failing: dict[int, float] | None = None, start: int = T0_US):
    """``n`` periods of 10 min (sparse: those in ``empty`` are left out, as in report.json);
    recall 1 except ``failing`` (index -> recall); truth grows with the index."""
    out = []
    for i in range(n):
        if i in empty:
            continue
        truth = 100 + i
        recall = (failing or {}).get(i, 1.0)
        out.append({"start_us": start + i * P, "end_us": start + (i + 1) * P, "truth": truth,
                    "emitted": round(truth * recall), "recall": round(truth * recall) / truth, "target": 0.99})
    return out


def test_failing_periods_each_listed_and_empty_periods_not_drawn():
    failing = {3: 0.5, 17: 0.9, 40: 0.98}
    periods = _periods(60, empty=range(20, 30), failing=failing)
    d = plots.recall_plot_data(periods, 0.99, period_us=P, total=60)
    # every failing period, and only those, at its own recall
    assert d["failing"]["start_us"] == [T0_US + i * P for i in sorted(failing)]
    assert d["failing"]["truth"] == [100 + i for i in sorted(failing)]
    assert d["failing"]["recall"] == [p["recall"] for p in periods if p["recall"] < 0.99]
    # one group per period with results: the 10 empty ones are gaps, not bars at 1.0
    g = d["groups"]
    assert g["k"] == 1 and len(g["start_us"]) == 50
    assert not set(g["start_us"]) & {T0_US + i * P for i in range(20, 30)}
    assert g["truth"] == [p["truth"] for p in periods]  # results per period, drawn below
    assert "50 of 60 periods have results, 3 below the target" in d["title"]
    # drawn in a colour and marker of their own, one marker per failing period
    fig = plots.recall_figure(periods, 0.99, period_us=P, total=60)
    marked = [m for m in fig.axes[0].marks if m.marker == plots.FAIL_MARKER]
    assert len(marked) == 1 and marked[0].color == plots.TARGET != plots.ACCENT
    assert marked[0].y == d["failing"]["recall"]
    assert "below target (3 periods)" in fig.axes[0].legend_labels()
    # and drawn: one red triangle per failing period in the SVG, and one in the legend
    assert fig.svg().count(f'fill="{plots.TARGET}" stroke="#7f1d1d"') == 3 + 1


def test_failing_periods_stay_individual_when_periods_are_grouped():
    failing = {5: 0.3, 6: 0.95, 999: 0.7}
    periods = _periods(1_000, empty=range(400, 700), failing=failing)
    d = plots.recall_plot_data(periods, 0.99, period_us=P, total=1_000)
    g = d["groups"]
    assert g["k"] == 5 and len(g["start_us"]) <= plots.MAX_BARS
    assert len(g["start_us"]) == 140  # 700 periods with results / 5; none for the 300 empty ones
    assert d["failing"]["start_us"] == [T0_US + i * P for i in sorted(failing)]
    # a failing period is marked inside its group's span
    for x, start in zip(d["failing"]["x"], d["failing"]["start_us"]):
        i = g["start_us"].index(start - (start - T0_US) % (5 * P))
        assert g["x"][i] < x < g["x_end"][i]
    assert d["ylim"][0] <= 0.3


def test_date_axis_only_for_calendar_times():
    periods = _periods(432, failing={10: 0.5})  # three days of 10 min
    d = plots.recall_plot_data(periods, 0.99, period_us=P, time_origin=EPOCH)
    assert d["x_kind"] == "date" and d["xlabel"] == "period start (UTC)"
    assert d["groups"]["x"][0] == T0_US  # 2024-03-04 00:00 UTC, in epoch microseconds
    fig = plots.recall_figure(periods, 0.99, period_us=P, time_origin=EPOCH)
    assert fig.axes[1].xscale == "date"
    ticks = fig.axes[1].xtick_labels()  # concise UTC labels: a day's start by its date, hours within it
    assert "Mar 05" in ticks and "12:00" in ticks and len(ticks) <= 9, ticks
    mem = plots.memory_figure({"arrival_us": [T0_US, T0_US + 86_400_000_000], "peak": [1, 2], "mean": [1, 1.5]},
                              EPOCH)
    assert mem.axes[0].xlabel == "arrival time (UTC)"
    # a clock from an arbitrary origin (soccer: picoseconds near 10,629 s): time after the first
    rel = plots.recall_plot_data(_periods(432, start=10_629_000_000), 0.99, period_us=P)
    assert rel["x_kind"] == "relative" and rel["xlabel"] == "period start (d after the first period with results)"
    assert rel["groups"]["x"][0] == 0
    fig = plots.recall_figure(_periods(432, start=10_629_000_000), 0.99, period_us=P)
    assert fig.axes[1].xscale == "linear"
    assert all(re.fullmatch(r"\d+(\.\d+)?", t) for t in fig.axes[1].xtick_labels())


def test_calendar_origin_from_the_arrival_span():
    assert calendar_origin(T0_US, T0_US + 3 * 86_400_000_000) == EPOCH == "1970-01-01T00:00:00Z"
    assert calendar_origin(1_700_000_000_000_000, 1_700_000_100_000_000) == EPOCH  # bench3: epoch us integers
    assert calendar_origin(10_629_342_490, 10_929_342_490) is None  # soccer's clock
    assert calendar_origin(0, 250_000_000_000) is None  # seconds from 0
    assert calendar_origin(None, None) is None


@pytest.fixture(scope="module")
def three_days(tmp_path_factory) -> Path:
    """Three days of epoch-ms integers, one key per 10 minutes, minutes of disorder on
    one link and an empty day-2 morning: kslack 1min fails some periods."""
    tmp = tmp_path_factory.mktemp("three_days")
    rng = np.random.default_rng(16)
    t0_ms = T0_US // 1000
    n = 3 * 24 * 60  # one a minute
    ts = t0_ms + np.arange(n, dtype=np.int64) * 60_000 + rng.integers(0, 1_000, n)
    keep = ~((ts >= t0_ms + 86_400_000 + 2 * 3_600_000) & (ts < t0_ms + 86_400_000 + 7 * 3_600_000))
    ts = ts[keep]
    key = (ts - t0_ms) // 600_000
    late = rng.uniform(0, 1, ts.size) < 0.05
    b_ts = ts + 20_000
    b_arrival = b_ts + np.where(late, 5 * 60_000, 500)
    pq.write_table(pa.table({"k": key, "ts": ts, "arrival": ts + 500}), tmp / "a.parquet")
    pq.write_table(pa.table({"k": key, "ts": b_ts, "arrival": b_arrival}), tmp / "b.parquet")
    streams = "".join(f"""
[[stream]]
name = "{s}"
path = "{s}.parquet"
ts = "ts"
arrival = "arrival"
unit = "ms"
window = "2min"
keys = ["k"]
""" for s in "ab")
    (tmp / "days.toml").write_text(f'[run]\npolicy = "kslack"\nk = "1min"\n{streams}')
    out = tmp / "out"
    run_cli(["run", str(tmp / "days.toml"), "--recall", "0.99", "--engine", "local", "--no-results",
             "--out", str(out)], tmp)
    return out


def _details(html: str) -> str:
    m = re.search(r"<h2>Periods</h2>(<details[^>]*>.*?</details>)", html, re.S)
    assert m, "no collapsed periods table"
    return m.group(1)


def test_calendar_run_report_has_dates_and_a_collapsed_worst_first_table(three_days):
    report = json.loads((three_days / "report.json").read_text())
    assert report["time_origin"] == EPOCH
    periods = report["periods"]
    below = [p for p in periods if p["recall"] < 0.99]
    assert report["periods_empty"] > 0 and len(below) > 20  # the case the table must collapse
    html = (three_days / "report.html").read_text()
    table = _details(html)
    assert not re.match(r"<details[^>]*\bopen\b", table)  # collapsed until clicked
    summary = re.search(r"<summary>(.*?)</summary>", table).group(1)
    assert summary == (f"The 20 worst of {len(periods):,} periods with results, worst first "
                       f"(full list: &quot;periods&quot; in report.json)")
    rows = re.findall(r"<tr><td>(.*?)</td><td>[\d,]+</td><td>[\d,]+</td><td>([\d.]+)</td>", table)
    assert len(rows) == 20
    shown = [float(r) for _, r in rows]
    assert shown == sorted(shown) and shown[0] == pytest.approx(min(p["recall"] for p in periods), abs=1e-4)
    assert all(re.fullmatch(r"2024-03-0[4-7] \d\d:\d\d(:\d\d)?", start) for start, _ in rows), rows[:3]
    assert "<th>start (UTC)</th>" in table
    assert H.memory_text(report["memory_series"]) in html and "each the peak / mean over" not in html


def test_relative_clock_report_keeps_offsets(tmp_path):
    out = tmp_path / "out"
    run_cli(["run", str(ROOT / "samples/soccer/soccer.toml"), "--policy", "kslack", "--k", "5ms", "--recall", "0.97",
             "--no-results", "--out", str(out)], tmp_path)
    report = json.loads((out / "report.json").read_text())
    assert report["time_origin"] is None
    table = _details((out / "report.html").read_text())
    starts = re.findall(r"<tr><td>([^<]*)</td>", table)
    assert starts and all(s.startswith("+") for s in starts)
    assert "<th>start</th>" in table


def test_tune_page_axes_say_their_units(three_days, tmp_path):
    cfg = three_days.parent / "days.toml"
    out = tmp_path / "tune"
    run_cli(["tune-buffer", str(cfg), "--recall", "0.99", "--policy", "kslack", "--per-period", "--out", str(out)],
            tmp_path)
    t = json.loads((out / "tune.json").read_text())
    assert t["time_origin"] == EPOCH
    html = (out / "tune.html").read_text()
    table = re.search(r"<h2>Per period</h2>(<details[^>]*>.*?</details>)", html, re.S).group(1)
    assert re.search(r"<tr><td>2024-03-0\d \d\d:\d\d(:\d\d)?</td>", table)
    rec = t["recommendation"]["setting_us"]
    fig = plots.tuning_figure(t["curve"], target=0.99, label="K", marks={"recommended": rec},
                              candidates=t["candidates"])
    _assert_setting_axis(fig.axes[0], t["curve"]["setting_us"], log=True)
    assert fig.axes[1].ylabel == "memory (mean tuples held)"
    legend = fig.axes[0].legend_labels()
    assert f"recommended {H.format_duration(rec)}" in legend  # no 6.42817min
    lat = plots.latency_figure(t["candidates"], "K")
    _assert_setting_axis(lat.axes[0], [c["setting_us"] for c in t["candidates"]], log=False)  # 32s .. 280s
    assert re.fullmatch(r"result latency \((us|ms|s|min|h|d)\)", lat.axes[0].ylabel)


def _assert_setting_axis(ax, settings, *, log: bool):
    """Log scale with a duration on every tick when the settings are wide apart (the
    useful range near 0 would be squeezed), else linear with the unit in the label."""
    pos = [s for s in settings if s > 0]
    assert (max(pos) / min(pos) >= plots.LOG_RATIO) == log
    if log:
        assert ax.xscale == "log" and ax.xlabel == "K (log scale)"
        labels = ax.xtick_labels()
        assert len(labels) >= 2 and all(DURATION.match(x) for x in labels), labels
    else:
        assert ax.xscale == "linear" and re.fullmatch(r"K \((us|ms|s|min|h|d)\)", ax.xlabel)


def test_narrow_setting_range_stays_linear_with_a_unit():
    curve = {"setting_us": [0, 10_000, 20_000, 30_000], "recall": [0.9, 0.95, 0.99, 1.0]}
    fig = plots.tuning_figure(curve, target=0.99, label="retention")
    assert fig.axes[0].xscale == "linear" and fig.axes[0].xlabel == "retention (ms)"


def test_duration_ticks_are_round():
    assert plots.duration_ticks(5e6, 11 * MIN_US) == [10_000_000, MIN_US, 10 * MIN_US]  # 10s, 1min, 10min
    assert [H.format_duration(t) for t in plots.duration_ticks(20e3, 400e3)] == ["20ms", "50ms", "100ms", "200ms"]


def test_memory_sentence_is_plain():
    text = H.memory_text({"points": 2000, "arrivals_per_point": 106.3})
    assert text == ("Each point covers about 106 consecutive arriving tuples: the shaded area is the most tuples "
                    "held at once among them, the line the average.")
    assert H.memory_text({"points": 10, "arrivals_per_point": 1.0}).startswith("One point per arriving tuple")
