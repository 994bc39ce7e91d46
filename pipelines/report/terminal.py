"""The terminal output of ``run`` and ``tune-buffer``: a rich table on a TTY,
plain ``key: value`` lines otherwise."""

from __future__ import annotations

from typing import Any

from ..analysis.metrics import fmt_recall
from ..base.timeunits import format_duration
from .html import period_text, worst_periods


def _fmt_rate(v):
    """Per second, or per minute / hour / day for slow streams (a year of clicks: ``2.9/h``, not ``0.0/s``)."""
    if v is None:
        return "-"
    for per, unit in ((1, "s"), (60, "min"), (3600, "h")):
        if v * per >= 1:
            return f"{v * per:,.1f}/{unit}"
    return f"{v * 86400:,.1f}/d"


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Plain-text summary (cron logs, pipes): one fact per line."""
    lat = report["latency_us"]
    lines = [
        f"policy: {report['config']['policy']['name']}  router: {report['routing']['router']}",
        f"truth_results: {report['truth_results']}",
        f"emitted_results: {report['emitted_results']}",
        f"recall: {report['recall']:.6f}",
        f"duplicates: {report['duplicates']}",
        f"latency: mean {format_duration(lat['mean'])} p50 {format_duration(lat['p50'])} "
        f"p95 {format_duration(lat['p95'])} p99 {format_duration(lat['p99'])} max {format_duration(lat['max'])}",
        f"memory_tuples: peak {report['memory_tuples']['peak']} mean {report['memory_tuples']['mean']:.1f}",
    ]
    if report.get("period_us"):
        lines.append(f"period: {_period_line(report)}")
    for s in report["streams"]:
        d = s["delay_us"]
        lines.append(
            f"stream {s['name']}: rows {s['rows']} quarantined {s['quarantined']} rate {_fmt_rate(s['rate_per_s'])} "
            f"delay p50 {format_duration(d['p50'])} p95 {format_duration(d['p95'])} max {format_duration(d['max'])} "
            f"dropped_late {s['dropped_late']} expired_on_arrival {s['expired_on_arrival']}"
        )
    bounded = report.get("bounded")
    if bounded:
        lines.append(f"bounded memory: {bounded['chunks']} chunks of ~{bounded['chunk_rows']:,} tuples, "
                     f"state peak {bounded['state_peak_tuples']:,} tuples between chunks")
    total = report["timings_s"].get("total")
    if total is not None:
        lines.append(f"time: {total:.2f}s ({report.get('input_tuples_per_s') or 0:,.0f} input tuples/s)")
    lines.append(f"report: {report['outputs'].get('report', '-')}")
    if report["outputs"].get("report_html"):
        lines.append(f"report_html: {report['outputs']['report_html']}")
    return lines


def _period_line(report: dict[str, Any]) -> str:
    return period_text(report).removeprefix("period ")


def worst_period_rows(report: dict[str, Any]) -> tuple[list[list[str]], int]:
    """The worst periods (at most ``MAX_PERIOD_ROWS``) as table rows, and how many are not shown."""
    periods = report.get("periods") or []
    if not periods:
        return [], 0
    start = periods[0]["start_us"]
    shown, hidden = worst_periods(periods, "recall")
    return [["+" + format_duration(p["start_us"] - start), f"{p['truth']:,}", f"{p['emitted']:,}",
             fmt_recall(p["recall"])] for p in shown], hidden


def render_rich(report: dict[str, Any], console) -> None:
    """A table per concern, for people at a terminal."""
    from rich.table import Table

    lat = report["latency_us"]
    head = Table(title="streamjoin run", show_header=False)
    head.add_column("metric", style="bold")
    head.add_column("value")
    head.add_row("policy / router", f"{report['config']['policy']['name']} / {report['routing']['router']}")
    head.add_row("truth results", f"{report['truth_results']:,}")
    head.add_row("emitted results", f"{report['emitted_results']:,}")
    recall_style = "green" if report["recall"] >= (report.get("recall_target") or 0) else "red"
    head.add_row("recall", f"[{recall_style}]{report['recall']:.4%}[/]")
    head.add_row("duplicates", str(report["duplicates"]))
    head.add_row("latency mean / p95 / max",
                 f"{format_duration(lat['mean'])} / {format_duration(lat['p95'])} / {format_duration(lat['max'])}")
    head.add_row("memory peak / mean (tuples)",
                 f"{report['memory_tuples']['peak']:,} / {report['memory_tuples']['mean']:,.1f}")
    if report.get("period_us"):
        head.add_row("period", _period_line(report))
    total = report["timings_s"].get("total")
    if total is not None:
        head.add_row("time", f"{total:.2f}s ({report.get('input_tuples_per_s') or 0:,.0f} tuples/s)")
    console.print(head)
    t = Table(title="streams")
    for col in ("stream", "rows", "quarantined", "rate", "delay p50", "delay p95", "delay max", "dropped late", "expired"):
        t.add_column(col, justify="right" if col != "stream" else "left")
    for s in report["streams"]:
        d = s["delay_us"]
        t.add_row(s["name"], f"{s['rows']:,}", str(s["quarantined"]), _fmt_rate(s["rate_per_s"]),
                  format_duration(d["p50"]), format_duration(d["p95"]), format_duration(d["max"]),
                  str(s["dropped_late"]), str(s["expired_on_arrival"]))
    console.print(t)
    rows, hidden = worst_period_rows(report)
    if len(rows) > 1 or hidden:
        pt = Table(title="periods" if not hidden else "worst periods")
        for col in ("start", "truth", "emitted", "recall"):
            pt.add_column(col, justify="right")
        for r in rows:
            pt.add_row(*r)
        console.print(pt)
        if hidden:
            console.print(f"the {len(rows)} worst periods ({hidden:,} more in report.json)")
    console.print(f"report: {report['outputs'].get('report', '-')}")


# ---------------------------------------------------------------------------
# tune-buffer
# ---------------------------------------------------------------------------


def tune_lines(t: dict[str, Any]) -> list[str]:
    """Plain-text output (cron, pipes): summary, candidates, snippet, frameworks."""
    label = "retention" if t["policy"] == "static" else "K"
    lines = list(t["summary"])
    lines.append(f"{label:>10} {'recall':>8} {'mem peak':>9} {'mem mean':>10} {'lat mean':>9} {'lat p95':>9}")
    for c in t["candidates"]:
        lines.append(f"{format_duration(c['setting_us']):>10} {fmt_recall(c['recall']):>8} {c['memory_tuples']['peak']:>9,} "
                     f"{c['memory_tuples']['mean']:>10,.1f} {format_duration(c['latency_us']['mean']):>9} "
                     f"{format_duration(c['latency_us']['p95']):>9}")
    if t.get("periods"):
        shown, hidden = worst_periods(t["periods"], "recall_at_recommendation")
        which = "per period" if not hidden else f"the {len(shown)} worst periods ({hidden:,} more in tune.json)"
        lines.append(f"{which} (start, truth, exact, on grid, recall at recommendation):")
        start = t["periods"][0]["start_us"]
        for p in shown:
            lines.append(f"  +{format_duration(p['start_us'] - start)} {p['truth']:,} {format_duration(p['exact_us'])} "
                         f"{format_duration(p['setting_us'])} {fmt_recall(p['recall_at_recommendation'])}")
    lines.append("config snippet:")
    lines += ["  " + x for x in t["toml"].rstrip("\n").split("\n")]
    lines += t["frameworks"]
    lines.append(f"tune: {t['outputs']['tune']}  html: {t['outputs']['html']}")
    return lines


def render_tune_rich(t: dict[str, Any], console) -> None:
    from rich.panel import Panel
    from rich.table import Table

    label = "retention" if t["policy"] == "static" else "K"
    rec = t["recommendation"]
    console.print(Panel("\n".join(t["summary"]), title=f"tune-buffer: {t['policy']}, recall >= {t['recall_target']:g}"))
    table = Table(title="replayed settings")
    for col in (label, "recall", "memory peak", "memory mean", "latency mean", "latency p95"):
        table.add_column(col, justify="right")
    for c in t["candidates"]:
        style = "bold green" if c["setting_us"] == rec["setting_us"] else None
        table.add_row(format_duration(c["setting_us"]), fmt_recall(c["recall"]), f"{c['memory_tuples']['peak']:,}",
                      f"{c['memory_tuples']['mean']:,.1f}", format_duration(c["latency_us"]["mean"]),
                      format_duration(c["latency_us"]["p95"]), style=style)
    console.print(table)
    if t.get("periods"):
        shown, hidden = worst_periods(t["periods"], "recall_at_recommendation")
        pt = Table(title="per period" if not hidden else f"the {len(shown)} worst periods ({hidden:,} more in tune.json)")
        for col in ("start", "truth", f"exact {label}", "on grid", "recall at recommendation"):
            pt.add_column(col, justify="right")
        start = t["periods"][0]["start_us"]
        for p in shown:
            pt.add_row("+" + format_duration(p["start_us"] - start), f"{p['truth']:,}", format_duration(p["exact_us"]),
                       format_duration(p["setting_us"]), f"{fmt_recall(p['recall_at_recommendation'])}")
        console.print(pt)
    console.print(Panel(t["toml"].rstrip("\n"), title="paste into your config"))
    for x in t["frameworks"]:
        console.print(x)
    console.print(f"tune: {t['outputs']['tune']}  html: {t['outputs']['html']}")
