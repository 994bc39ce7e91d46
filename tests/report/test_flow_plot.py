"""report.html's flow-control section (issue 20 item 3): the occupancy / r_max plot and its table,
from report.json's ``flow_control`` alone; nothing without it."""

from __future__ import annotations

import numpy as np

from streamjoin.pipelines.capacity.flow import delay_arrivals, flow_report
from streamjoin.pipelines.config.flow_control import FlowControl
from streamjoin.pipelines.report.html import flow_section
from streamjoin.pipelines.report.plots import flow_figure


def _section():
    fc = FlowControl(buffer=8, rate=2000.0, interval_us=1000)
    arrivals = [np.arange(0, 20_000, 200, dtype=np.int64), np.zeros(30, dtype=np.int64)]
    flow = delay_arrivals(arrivals, fc)
    return flow_report(flow, fc, ["a", "b"], arrivals)


def test_flow_figure_draws_every_unit_and_marks_b0_and_b() -> None:
    section = _section()
    fig = flow_figure(section)
    occ, rate = fig.axes[0], fig.axes[1]
    assert [m.label for m in occ.marks if m.kind == "step"] == ["a", "b"]
    assert len([m for m in rate.marks if m.kind == "step"]) == 2
    lines = {m.label: m.y for m in occ.marks if m.kind == "hline"}
    assert lines == {"target b0 = 4": [4.0], "buffer B = 8": [8]}
    # the drawn occupancy is the report's series, unit by unit
    assert [m.y for m in occ.marks if m.kind == "step"] == [section["series"]["occupancy_mean"][n] for n in "ab"]
    svg = fig.svg()
    assert svg.startswith("<svg") and "r_max (tuples/s)" in svg and "tuples in buffer" in svg


def test_flow_section_only_with_flow_control() -> None:
    assert flow_section({}) == []
    html = "".join(flow_section({"flow_control": _section()}))
    assert "Flow control (seed 001)" in html and "data:image/svg+xml;base64," in html
    # stream b's 30 tuples at t = 0 queue behind a 1-tuple-per-interval share: it is in the table
    assert "<td>b</td>" in html
