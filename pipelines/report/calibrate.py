"""What ``streamjoin calibrate`` prints: the fitted service times, how well they fit, the
machine and the paste-ready ``--capacity`` option (plain lines: a terminal and cron alike)."""

from __future__ import annotations

from typing import Any

from ..base.timeunits import format_duration


def _ns(ns: float) -> str:
    return f"{ns:.0f}ns" if abs(ns) < 1000 else format_duration(ns / 1000)


def calibrate_lines(c: dict[str, Any]) -> list[str]:
    """The summary of a ``calibrate.json``."""
    f, m = c["fit"], c["machine"]
    load = m.get("load_average")
    load_text = "/".join(f"{x:g}" for x in load) if load else "unknown"
    end = m.get("load_average_end")
    r2 = "undefined (every time equal)" if f["r2"] is None else f"{f['r2']:.4f}"
    inputs = c["inputs"]
    truth = sum(i["truth_results"] for i in inputs)
    emitted = sum(i["results"] for i in inputs)
    lines = [
        f"calibrate: engine {c['engine']}, policy {c['policy']}: {len(inputs)} inputs "
        f"({min(i['tuples'] for i in inputs):,}..{max(i['tuples'] for i in inputs):,} tuples, "
        f"{min(i['results'] for i in inputs):,}..{max(i['results'] for i in inputs):,} results), "
        f"{c['runs']} runs each, median join time",
        f"machine: {m['cpu_model']}, {m['cores']} cores ({m['cores_usable']} usable), load average {load_text} "
        f"(1/5/15 min) at the start" + (f", {'/'.join(f'{x:g}' for x in end)} at the end" if end else ""),
        f"fit: time = tuple * tuples + result * results + intercept: tuple {_ns(f['tuple_ns'])}, "
        f"result {_ns(f['result_ns'])}, intercept {format_duration(f['intercept_s'] * 1e6)}",
        f"fit quality: R^2 {r2}, residuals rms {format_duration(f['residual_rms_s'] * 1e6)}, "
        f"max {format_duration(f['residual_max_abs_s'] * 1e6)} ({f['residual_max_relative']:.0%} of that run's time)",
    ]
    if emitted < truth:
        lines.append(f"note: the policy emitted {emitted / truth:.1%} of the inputs' results; the per-result time "
                     "also pays for enumerating the ones it lost")
    if c["capacity_option"]:
        lines.append(c["capacity_option"])
    else:
        lines.append(f"no --capacity line: {c['problem']}")
    return lines
