"""The terminal output of ``run`` and ``tune-buffer``: a rich table on a TTY,
plain ``key: value`` lines otherwise."""

from __future__ import annotations

from typing import Any

from ..analysis.metrics import fmt_recall
from ..base.timeunits import format_duration, format_durations
from .html import ENGINE_OF, period_text, setting_label, worst_periods


def _fmt_rate(v):
    """Per second, or per minute / hour / day for slow streams (a year of clicks: ``2.9/h``, not ``0.0/s``)."""
    if v is None:
        return "-"
    for per, unit in ((1, "s"), (60, "min"), (3600, "h")):
        if v * per >= 1:
            return f"{v * per:,.1f}/{unit}"
    return f"{v * 86400:,.1f}/d"


def target_line(report: dict[str, Any], fail_under_target: bool) -> str | None:
    """Whether the recall target was met, and what that does to the exit code (None: no target)."""

    target = report.get("recall_target")
    if target is None:
        return None
    recall = fmt_recall(report["recall"], 6)  # truncated: a missed target never prints as reached
    if report["recall"] >= target:
        return f"target: met (recall {recall} >= {target:g})"
    if fail_under_target:
        return f"target: missed (recall {recall} < {target:g}); exit 3 because --fail-under-target"
    return f"target: missed (recall {recall} < {target:g}); exit 0 (with --fail-under-target: exit 3)"


ROUTING_COLUMNS = ["partition", "cpu /s", "Φ cpu", "mem", "Φ mem", "net /s", "Φ net", "load w"]


def routing_rows(report: dict[str, Any]) -> list[list[str]]:
    """Per partition of a routed run: each resource's use and Φ = use / capacity, and
    the LLF load (docs/semantics.md, "Load of a partition"); none for one machine."""
    rows = []
    for p in report["routing"].get("per_partition") or []:
        if "phi_cpu" not in p:
            continue
        rows.append([str(p["partition"]), f"{p['cpu']:,.4g}", f"{p['phi_cpu']:.3f}", f"{p['mem']:,.4g}",
                     f"{p['phi_mem']:.3f}", f"{p['net']:,.4g}", f"{p['phi_net']:.3f}", f"{p['load']:.3f}"])
    return rows


def summary_lines(report: dict[str, Any], fail_under_target: bool = False) -> list[str]:
    """Plain-text summary (cron logs, pipes): one fact per line."""

    lat = report["latency_us"]
    target = target_line(report, fail_under_target)
    lines = [
        f"policy: {report['config']['policy']['name']}  router: {report['routing']['router']}",
        f"truth_results: {report['truth_results']}",
        f"emitted_results: {report['emitted_results']}",
        f"recall: {fmt_recall(report['recall'], 6)}",
        *([target] if target else []),
        f"duplicates: {report['duplicates']}",
        f"latency: mean {format_duration(lat['mean'])} p50 {format_duration(lat['p50'])} "
        f"p95 {format_duration(lat['p95'])} p99 {format_duration(lat['p99'])} max {format_duration(lat['max'])}",
        f"memory_tuples: peak {report['memory_tuples']['peak']} mean {report['memory_tuples']['mean']:.1f}",
    ]
    if report.get("period_us"):
        lines.append(f"period: {_period_line(report)}")
    if report.get("outer_join"):
        lines.append(f"outer_rows: {_outer_line(report['outer_join'])}")
    if report.get("flow_control"):
        lines.append(f"flow_control: {flow_line(report['flow_control'])}")
    if report.get("capacity"):
        lines.append(f"capacity: {_capacity_line(report['capacity'])}")
    if report.get("hindsight"):
        lines.append(f"hindsight: {report['hindsight']['text']}")
    for s in report["streams"]:
        d = s["delay_us"]
        lines.append(
            f"stream {s['name']}: rows {s['rows']} quarantined {s['quarantined']} rate {_fmt_rate(s['rate_per_s'])} "
            f"delay p50 {format_duration(d['p50'])} p95 {format_duration(d['p95'])} max {format_duration(d['max'])} "
            f"dropped_late {s['dropped_late']} expired_on_arrival {s['expired_on_arrival']}"
            + (f" window {s['window']}" if s.get("window") else "")   # shown with a count window
        )
    for row in routing_rows(report):
        lines.append("partition " + row[0] + ": " + " ".join(f"{c.replace(' /s', '/s')} {v}"
                                                           for c, v in zip(ROUTING_COLUMNS[1:], row[1:])))
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


def flow_line(flow: dict[str, Any]) -> str:
    """``--flow-control``: the forwarding policy, tuples delayed and the delay back-pressure added."""
    d = flow["added_delay_us"]["all"]
    if d["max"] is None:
        return f"{flow['settings']['policy']}, no tuples"
    return (f"{flow['settings']['policy']}, {d['delayed']:,} tuples delayed, added delay p50 "
            f"{format_duration(d['p50'])} p99 {format_duration(d['p99'])} max {format_duration(d['max'])}")
def _capacity_line(cap: dict[str, Any]) -> str:
    """The capacity model in one line: shed tuples, queueing delay, recall lost to it."""
    shed, q = cap["shed"], cap["queueing_delay_us"]
    return (f"shed {shed['queue_drop_new'] + shed['queue_replaced']:,} from queues, {shed['state_evicted']:,} "
            f"evicted from state; queueing p50 {format_duration(q['p50'])} p99 {format_duration(q['p99'])} "
            f"max {format_duration(q['max'])}; recall {fmt_recall(cap['recall_without_capacity'])} without "
            f"it, lost to capacity {cap['recall_lost_to_capacity']:.4f}")


def _outer_line(outer: dict[str, Any]) -> str:
    """An outer join's null-padded rows: how many, of which stream, and their latency."""
    lat = outer["latency_us"]
    return (f"{outer['rows']:,} of {outer['stream']} ({outer['join']} outer join; not in recall), latency "
            f"p50 {format_duration(lat['p50'])} p95 {format_duration(lat['p95'])} max {format_duration(lat['max'])}")


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


def _widest_word(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(w) for w in str(text).split()), default=0)


def _table_width(widths: list[int]) -> int:
    """Width of a rich Table (default box, one space of padding) with these column widths."""
    return sum(widths) + 3 * len(widths) + 1


def fitted_tables(title: str | None, columns: list[str], rows: list[list[str]], width: int, *,
                  row_styles: list[str | None] | None = None, show_header: bool = True,
                  justify: str = "right", label_style: str | None = None) -> list:
    """``rows`` as rich Tables no wider than ``width`` that print every cell whole.

    A column is never narrower than its longest word (cells and headers wrap at
    spaces, never inside a number).  When the columns do not fit side by side,
    the table is turned on its side -- one line per column, one column per row,
    headed by the row's first cell -- and split into as many tables as needed.
    The first column is a label (left-aligned, in ``label_style``); the others
    are aligned by ``justify``.
    """
    from rich.table import Table

    styles = row_styles or [None] * len(rows)

    def table(heads: list[str], body: list[list[str]], body_styles, col_styles, name) -> Table:
        t = Table(title=name, show_header=show_header)
        for i, head in enumerate(heads):
            need = max([_widest_word(head) if show_header else 0] + [_widest_word(r[i]) for r in body])
            t.add_column(head, justify="left" if i == 0 else justify, min_width=need, overflow="fold",
                         style=label_style if i == 0 else col_styles[i])
        for r, style in zip(body, body_styles):
            t.add_row(*r, style=style)
        return t

    need = [max([_widest_word(c) if show_header else 0] + [_widest_word(r[i]) for r in rows])
            for i, c in enumerate(columns)]
    if _table_width(need) <= width or not rows:
        return [table(columns, rows, styles, [None] * len(columns), title)]
    # on its side: chunks of rows, as many as fit next to the label column
    label = max(_widest_word(c) for c in columns)
    chunks: list[list[int]] = [[]]
    for i, r in enumerate(rows):
        w = max(_widest_word(c) for c in r)
        taken = [label] + [max(_widest_word(c) for c in rows[j]) for j in chunks[-1]]
        if chunks[-1] and _table_width(taken + [w]) > width:
            chunks.append([])
        chunks[-1].append(i)
    out = []
    for n, chunk in enumerate(chunks, 1):
        heads = [columns[0]] + [rows[i][0] for i in chunk]
        body = [[columns[j]] + [rows[i][j] for i in chunk] for j in range(1, len(columns))]
        name = title if len(chunks) == 1 or title is None else f"{title} ({n}/{len(chunks)})"
        out.append(table(heads, body, [None] * len(body), [None] + [styles[i] for i in chunk], name))
    return out


def render_rich(report: dict[str, Any], console, fail_under_target: bool = False) -> None:
    """A table per concern, for people at a terminal; then the target and where the reports are."""

    lat = report["latency_us"]
    width = console.width
    head = [
        ["policy / router", f"{report['config']['policy']['name']} / {report['routing']['router']}"],
        ["truth results", f"{report['truth_results']:,}"],
        ["emitted results", f"{report['emitted_results']:,}"],
    ]
    recall_style = "green" if report["recall"] >= (report.get("recall_target") or 0) else "red"
    head += [
        ["recall", f"[{recall_style}]{fmt_recall(report['recall'], 6)}[/]"],
        ["duplicates", str(report["duplicates"])],
        ["latency mean / p95 / max",
         f"{format_duration(lat['mean'])} / {format_duration(lat['p95'])} / {format_duration(lat['max'])}"],
        ["memory peak / mean (tuples)",
         f"{report['memory_tuples']['peak']:,} / {report['memory_tuples']['mean']:,.1f}"],
    ]
    if report.get("period_us"):
        head.append(["period", _period_line(report)])
    if report.get("outer_join"):
        head.append(["outer rows (null-padded)", _outer_line(report["outer_join"])])
    if report.get("flow_control"):
        head.append(["flow control (seed 001)", flow_line(report["flow_control"])])
    if report.get("capacity"):
        head.append(["capacity (--capacity)", _capacity_line(report["capacity"])])
    if report.get("hindsight"):
        head.append(["vs best fixed setting (hindsight)", report["hindsight"]["text"]])
    total = report["timings_s"].get("total")
    if total is not None:
        head.append(["time", f"{total:.2f}s ({report.get('input_tuples_per_s') or 0:,.0f} tuples/s)"])
    console.print(*fitted_tables("streamjoin run", ["metric", "value"], head, width, show_header=False,
                                 justify="left", label_style="bold"))
    rows = []
    for s in report["streams"]:
        d = s["delay_us"]
        rows.append([s["name"], f"{s['rows']:,}", f"{s['quarantined']:,}", _fmt_rate(s["rate_per_s"]),
                     format_duration(d["p50"]), format_duration(d["p95"]), format_duration(d["max"]),
                     f"{s['dropped_late']:,}", f"{s['expired_on_arrival']:,}"])
    console.print(*fitted_tables("streams", ["stream", "rows", "quarantined", "rate", "delay p50", "delay p95",
                                             "delay max", "dropped late", "expired"], rows, width))
    rows = routing_rows(report)
    if rows:
        console.print(*fitted_tables("partitions (use, Φ = use / capacity)", ROUTING_COLUMNS, rows, width))
    rows, hidden = worst_period_rows(report)
    if len(rows) > 1 or hidden:
        console.print(*fitted_tables("periods" if not hidden else "worst periods",
                                     ["start", "truth", "emitted", "recall"], rows, width))
        if hidden:
            console.print(f"the {len(rows)} worst periods ({hidden:,} more in report.json)")
    target = target_line(report, fail_under_target)
    if target:
        console.print(target, style=None if report["recall"] >= report["recall_target"] else "bold red",
                      highlight=False)
    console.print(f"report: {report['outputs'].get('report', '-')}", highlight=False)
    if report["outputs"].get("report_html"):
        console.print(f"report.html: {report['outputs']['report_html']}", highlight=False)


# ---------------------------------------------------------------------------
# tune-buffer
# ---------------------------------------------------------------------------


def tune_lines(t: dict[str, Any]) -> list[str]:
    """Plain-text output (cron, pipes): summary, candidates, snippet, frameworks."""
    label = setting_label(t["policy"])
    lines = list(t["summary"])
    lines.append(f"{label:>10} {'recall':>8} {'mem peak':>9} {'mem mean':>10} {'lat mean':>9} {'lat p95':>9}")
    for c, setting in zip(t["candidates"], format_durations([c["setting_us"] for c in t["candidates"]])):
        lines.append(f"{setting:>10} {fmt_recall(c['recall']):>8} {c['memory_tuples']['peak']:>9,} "
                     f"{c['memory_tuples']['mean']:>10,.1f} {format_duration(c['latency_us']['mean']):>9} "
                     f"{format_duration(c['latency_us']['p95']):>9}")
    if t.get("periods"):
        shown, hidden = worst_periods(t["periods"], "recall_at_recommendation")
        which = "per period" if not hidden else f"the {len(shown)} worst periods ({hidden:,} more in tune.json)"
        lines.append(f"{which} (start, truth, exact, on grid, recall at recommendation):")
        start = t["periods"][0]["start_us"]
        values = format_durations([v for p in shown for v in (p["exact_us"], p["setting_us"])])
        for p, exact, setting in zip(shown, values[::2], values[1::2]):
            lines.append(f"  +{format_duration(p['start_us'] - start)} {p['truth']:,} {exact} {setting} "
                         f"{fmt_recall(p['recall_at_recommendation'])}")
    lines.append("config snippet:")
    lines += ["  " + x for x in t["toml"].rstrip("\n").split("\n")]
    if t.get("snippet"):
        lines.append(f"{ENGINE_OF[t['policy']]} job snippet:")
        lines += ["  " + x for x in t["snippet"]["text"].rstrip("\n").split("\n")]
    lines += t["frameworks"]
    lines.append(f"tune: {t['outputs']['tune']}  html: {t['outputs']['html']}")
    return lines


def render_tune_rich(t: dict[str, Any], console) -> None:
    from rich.panel import Panel
    from rich.text import Text

    label = setting_label(t["policy"])
    rec = t["recommendation"]
    width = console.width
    console.print(Panel("\n".join(t["summary"]), title=f"tune-buffer: {t['policy']}, recall >= {t['recall_target']:g}"))
    rows, styles = [], []
    for c, setting in zip(t["candidates"], format_durations([c["setting_us"] for c in t["candidates"]])):
        styles.append("bold green" if c["setting_us"] == rec["setting_us"] else None)
        rows.append([setting, fmt_recall(c["recall"]), f"{c['memory_tuples']['peak']:,}",
                     f"{c['memory_tuples']['mean']:,.1f}", format_duration(c["latency_us"]["mean"]),
                     format_duration(c["latency_us"]["p95"])])
    console.print(*fitted_tables("replayed settings", [label, "recall", "memory peak", "memory mean", "latency mean",
                                                       "latency p95"], rows, width, row_styles=styles))
    if t.get("periods"):
        shown, hidden = worst_periods(t["periods"], "recall_at_recommendation")
        start = t["periods"][0]["start_us"]
        values = format_durations([v for p in shown for v in (p["exact_us"], p["setting_us"])])
        rows = [["+" + format_duration(p["start_us"] - start), f"{p['truth']:,}", exact, setting,
                 fmt_recall(p["recall_at_recommendation"])] for p, exact, setting in zip(shown, values[::2], values[1::2])]
        console.print(*fitted_tables("per period" if not hidden else f"the {len(shown)} worst periods ({hidden:,} more in tune.json)",
                                     ["start", "truth", f"exact {label}", "on grid", "recall at recommendation"],
                                     rows, width))
    # Text: no markup, so "[run]" stays in the snippet
    console.print(Panel(Text(t["toml"].rstrip("\n")), title="paste into your config"))
    if t.get("snippet"):
        console.print(Panel(Text(t["snippet"]["text"].rstrip("\n")), title=f"paste into your {ENGINE_OF[t['policy']]} job"))
    for x in t["frameworks"]:
        console.print(x)
    console.print(f"tune: {t['outputs']['tune']}  html: {t['outputs']['html']}")


def compare_lines(c: dict[str, Any]) -> list[str]:
    """``streamjoin compare`` for pipes and logs: one ``label: key value, ...`` line per policy,
    then what each loses and why."""
    from .compare import HEADERS, summary_lines, table_rows

    out = [f"{r[0]}: " + ", ".join(f"{h} {v}" for h, v in zip(HEADERS[1:], r[1:])) for r in table_rows(c)]
    out += summary_lines(c)
    out.append(f"compare.json: {c['outputs']['compare']}")
    out.append(f"compare.html: {c['outputs']['html']}")
    return out


def render_compare_rich(c: dict[str, Any], console) -> None:
    """``streamjoin compare`` at a terminal: the side-by-side table (on its side when narrow), then the why."""
    from .compare import HEADERS, summary_lines, table_rows

    for table in fitted_tables("policies side by side", HEADERS, table_rows(c), console.width):
        console.print(table)
    for line in summary_lines(c):
        console.print(line, markup=False, highlight=False)
    console.print(f"compare.json: {c['outputs']['compare']}", markup=False, highlight=False)
    console.print(f"compare.html: {c['outputs']['html']}", markup=False, highlight=False)
