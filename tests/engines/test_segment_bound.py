"""A user-given ``--segment`` is bounded by the input (docs/semantics.md "Segment
length"): more segments than input tuples (and than 65,536 and the default's 16
per partition) is a one-line error naming the option, the span, the segment count and
the smallest ``--segment`` accepted; exit 2, nothing written."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cli import run_cli
from test_long_span import write_year, year_flags

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.base.timeunits import parse_duration
from streamjoin.pipelines.engines.spark.routing import RouteSettings, check_segment, route_plans_from
from streamjoin.pipelines.route import Histogram


def _hist(tuples: int, span_us: int) -> Histogram:
    counts = np.zeros((2, 100))
    counts[0, 0] = tuples // 2
    counts[1, -1] = tuples - tuples // 2
    return Histogram(0, span_us // 100, counts)


def test_too_many_segments_is_an_error_with_the_smallest_accepted_segment():
    hist = _hist(200_000, 7 * 86_400_000_000)            # a week, 200,000 tuples
    with pytest.raises(InputError) as err:
        route_plans_from(hist, 1_000_000, [60_000_000, 0], RouteSettings("atr", 2, segment_us=1_000_000), [0, 1])
    msg = str(err.value)
    assert msg == ("--segment 1s cuts the 7d span into 604,800 segments, more than the 200,000 input tuples allow "
                   "(at most 200,000); the smallest accepted is --segment 3.024s")
    smallest = parse_duration(msg.rsplit(" ", 1)[1])
    check_segment(hist, smallest, 2)                 # accepted: at most 200,000 segments
    check_segment(hist, 3_024_000, 2)                # exactly 200,000
    with pytest.raises(InputError):
        check_segment(hist, smallest - 1, 2)


def test_few_tuples_may_always_have_65536_segments_or_16_per_partition():
    hist = _hist(20, 65_536_000)
    check_segment(hist, 1_000, 4)
    with pytest.raises(InputError, match="65,602 segments, more than the 65,536 always allowed .the 20 input tuples allow fewer.; the smallest accepted is --segment 1ms"):
        check_segment(hist, 999, 4)
    hist = _hist(20, 131_072_000)                   # 8,192 partitions: 16 x 8,192 = 131,072
    check_segment(hist, 1_000, 8_192)
    with pytest.raises(InputError, match="more than 16 per partition allow .at most 131,072; 20 input tuples."):
        check_segment(hist, 999, 8_192)


def test_default_segment_is_not_checked():
    """Only a user-given T is: the default one gives 16 x partitions segments."""
    hist = _hist(20, 1_000_000_000)
    plans, T, _ = route_plans_from(hist, 1_000_000, [0, 0], RouteSettings("atr", 2), [0, 1])
    assert len(plans["atr"][0].start) == 1_000


def test_cli_segment_beyond_the_input_exits_2_with_one_line(tmp_path):
    paths = write_year(tmp_path / "data", rows=2_000)
    out = tmp_path / "out"
    proc = run_cli(["run", *year_flags(paths), "--engine", "spark", "--master", "local[1]", "--router", "ctr",
                    "--partitions", "2", "--spark-conf", "spark.ui.enabled=false", "--segment", "1min",
                    "--no-results", "--out", str(out)], tmp_path, ok=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: --segment 1min cuts the ")
    assert "segments, more than the 65,536 always allowed (the 2,000 input tuples allow fewer); the smallest " \
        "accepted is --segment 8." \
        in lines[0], lines[0]
    assert not (out / "report.json").exists()


def test_adapt_segment_never_goes_below_a_quarter_of_the_checked_segment():
    """``--adapt-segment`` moves T by ``T // 4`` a step: with zero windows (no
    replication, so a smaller T always looks cheaper) and a T not divisible by 4 it
    used to walk down to ``T mod (T // 4)`` -- 1 us here, 40 million segments --
    past the bound the checked T promised (at most about four times it)."""
    from streamjoin.pipelines.route import atr
    hist = Histogram(0, 400_000, np.ones((2, 100)))         # 40 s, 200 tuples
    T = 4_000_001
    check_segment(hist, T, 2)
    plan = atr.plan(hist, [0, 0], T, 2, adapt=True)
    assert min(plan.lengths) >= T // 4
    assert len(plan.start) <= 4 * -(-40_000_000 // T) + 1
