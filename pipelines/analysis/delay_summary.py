"""The opening sentences of a ``tune-buffer`` summary for an engine's watermark delay
(``spark-ss``: :mod:`.watermark_tuning`, ``flink``: :mod:`.flink_tuning`)."""

from __future__ import annotations

from typing import Any

from ..base.timeunits import format_durations
from .metrics import fmt_recall


def recommendation_lines(t: dict[str, Any], subject: str) -> tuple[list[str], str]:
    """The opening sentences of a watermark-delay summary (``spark-ss``, ``flink``): the
    exact minimum of ``subject``, its grid value and one step less; and the grid
    value as those sentences write it."""
    rec = t["recommendation"]
    exact, setting, below, grid = format_durations(
        [rec["exact_us"], rec["setting_us"], rec["one_step_below_us"], t["granularity_us"]])
    lines = [f"The smallest {subject} that reaches recall {t['recall_target']} is exactly {exact}; rounded up to "
             f"the {grid} grid it is {setting}, which gives recall {fmt_recall(rec['recall'], 6)}."]
    if rec["one_step_below_us"] is not None:
        lines.append(f"One grid step less, {below}, gives recall {fmt_recall(rec['recall_one_step_below'], 6)}: "
                     "below the target.")
    return lines, setting
