"""``report.html`` / ``tune.html``: self-contained pages people look at.

One file, no external resources: the plots are SVGs embedded as base64
``data:`` URIs and the styles are inline, so the page can be mailed, archived
or opened from a cron host's output directory.  ``report.html`` is rendered
from ``report.json`` alone (the extra keys :func:`~streamjoin.pipelines.report.build.extras` adds hold the
downsampled memory series, the latency histogram and the tuning curve), so
``streamjoin report DIR`` re-renders it without the input data.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np


from ..base.errors import InputError
from ..io.lock import OutputLock, lock_of
from ..io.output import recover, write_file_atomic
from ..base.timeunits import format_duration, format_durations
from ..analysis.metrics import fmt_recall

#: period rows shown in tables (report.html, the terminal, tune-buffer): the worst ones; the JSON keeps all
MAX_PERIOD_ROWS = 20


# ---------------------------------------------------------------------------
# "what to do"
# ---------------------------------------------------------------------------


#: the setting each tuned policy's curve is drawn over
SETTING_LABEL = {"static": "retention", "kslack": "K", "spark-ss": "watermark", "flink": "watermark"}
#: the engine an emulating policy's snippet is written for
ENGINE_OF = {"spark-ss": "Spark", "flink": "Flink"}


def setting_label(policy: str | None) -> str:
    """``retention`` / ``K`` / ``watermark``: what a tuning curve's x axis is."""
    return SETTING_LABEL.get(policy or "", "K")


#: each tuned policy's setting in report.json's config.policy, and its flag
SETTING_KEY = {"static": ("retention", "--retention"), "kslack": ("k", "--k"), "spark-ss": ("watermark", "--watermark"),
               "flink": ("watermark", "--watermark")}


def _current_setting(policy: dict[str, Any]) -> int | None:
    key = SETTING_KEY.get(policy.get("name"), (None,))[0]
    values = policy.get(key) if key else None
    return max(values) if values else None


def _trigger_text(settings: dict[str, Any]) -> str:
    """A spark-ss run's micro-batches as its option: ``--trigger 5s`` or ``--trigger-files 2``."""
    if settings.get("trigger_files"):
        return f"--trigger-files {settings['trigger_files']}"
    return f"--trigger {format_duration(settings.get('trigger_us'))}"


def _tune_hint(tuning: dict[str, Any], q: str) -> str:
    """Where the report's one-value curve comes from, and what tune-buffer adds."""
    policy = tuning.get("policy")
    if policy == "static":
        return f"one value for every stream; `streamjoin tune-buffer --recall {q}` finds per-stream values"
    if policy == "spark-ss" and tuning.get("trigger_files"):
        return ("one delay for both streams at these file micro-batches (--trigger-files "
                f"{tuning['trigger_files']}; `streamjoin tune-buffer` cuts batches by --trigger DUR only)")
    if policy == "spark-ss":
        return (f"one delay for both streams at this trigger; `streamjoin tune-buffer --recall {q} --policy spark-ss "
                f"--trigger {format_duration(tuning.get('trigger_us'))}` shows its memory and a PySpark snippet")
    if policy == "flink":
        return (f"one delay for both inputs at this watermark interval; `streamjoin tune-buffer --recall {q} --policy "
                f"flink --watermark-interval {format_duration(tuning.get('watermark_interval_us'))}` shows its memory "
                "and a Flink snippet")
    return f"one K for every stream; `streamjoin tune-buffer --recall {q} --policy kslack` shows its memory and latency"


def what_to_do(report: dict[str, Any]) -> list[str]:
    """A few plain sentences: is the target met, and which setting to move."""
    out: list[str] = []
    policy = report.get("config", {}).get("policy", {})
    name = policy.get("name", "?")
    target = report.get("recall_target")
    recall = report["recall"]
    tuning = report.get("tuning") or {}
    knob = setting_label(tuning.get("policy"))
    flag = SETTING_KEY.get(tuning.get("policy"), SETTING_KEY["kslack"])[1]
    tuned_policy = tuning.get("policy")
    at = tuning.get("setting_for_recall") or {}
    current = _current_setting(policy)
    if report.get("duplicates"):
        out.append(f"{report['duplicates']} duplicate results were emitted: this is a bug, please report it.")
    if target is not None:
        need = at.get(f"{target:g}")
        low = [p for p in report.get("periods", []) if p["truth"] and p["recall"] < target]
        with_truth = [p for p in report.get("periods", []) if p["truth"]]
        if recall < target:
            if need is not None and name == tuned_policy:
                hint = _tune_hint(tuning, f"{target:g}")
                about = "about " if tuning.get("sample_every", 1) > 1 else ""  # estimated from a sample
                out.append(f"Recall {fmt_recall(recall)} is below the target {target:g}: raise {flag} from "
                           f"{format_duration(current)} to {about}{format_duration(need)} ({hint}).")
            elif need is not None:
                out.append(f"Recall {fmt_recall(recall)} is below the target {target:g} with policy {name}: "
                           f"`--policy {tuned_policy} {flag} {format_duration(need)}` meets it "
                           f"(`streamjoin tune-buffer --recall {target:g} --policy {tuned_policy}` for details).")
            elif tuning.get("unreachable_results"):
                out.append(f"Recall {fmt_recall(recall)} is below the target {target:g}, and no watermark reaches "
                           f"it: {tuning['unreachable_results']:,} results have a member at or before the epoch "
                           f"(ts <= 0), which Spark drops as late whatever the delay.")
            elif name == "flink-sql":   # no tuning curve: its recall is not monotone in the delay
                out.append(f"Recall {fmt_recall(recall)} is below the target {target:g}.  Flink SQL's interval join "
                           "has no exact least delay (its recall is not monotone in the delay, docs/semantics.md "
                           "\"flink-sql\"); try larger --watermark values, or `streamjoin tune-buffer --recall "
                           f"{target:g} --policy flink` for the DataStream interval join.")
            else:
                out.append(f"Recall {fmt_recall(recall)} is below the target {target:g}: run `streamjoin tune-buffer --recall {target:g}`.")
        else:
            msg = f"Recall {fmt_recall(recall)} meets the target {target:g}."
            if need is not None and current is not None and name == tuned_policy and need < current:
                msg += (f" {flag} {format_duration(need)} would still meet it with less memory "
                        f"(now {format_duration(current)}; mean {report['memory_tuples']['mean']:,.0f} tuples).")
            out.append(msg)
        if low:
            worst = f"{len(low)} of {len(with_truth)} periods are below the target (worst {fmt_recall(min(p['recall'] for p in low))})"
            out.append(f"{worst}." if tuned_policy in ENGINE_OF or name == "flink-sql" else  # no --per-period for them
                       f"{worst}; `streamjoin tune-buffer --recall {target:g} --per-period` gives the setting that "
                       "meets it in every period.")
    else:
        parts = [f"{q} needs {format_duration(v)}" for q, v in at.items() if v is not None]
        if parts and tuned_policy:
            out.append(f"No --recall target given (recall {fmt_recall(recall)}). With policy {tuned_policy}, a recall of "
                       + ", ".join(parts) + f" of {knob}.")
        else:
            out.append(f"No --recall target given (recall {fmt_recall(recall)}).")
    cap, flow = report.get("capacity"), report.get("flow_control")
    if cap and cap.get("recall_lost_to_capacity"):
        out.append(f"The capacity model lost {cap['recall_lost_to_capacity']:.4f} of recall (recall "
                   f"{fmt_recall(cap['recall_without_capacity'])} on an infinite machine); the settings above are "
                   "for an infinite machine: a larger CPU share (cpu=), cheaper service (tuple=, result=) or longer "
                   "queues (queue=) recover that part.")
    lat = report.get("latency_us") or {}
    if lat.get("p95") and (cap or flow):
        cause = ("queueing on the finite machine (--capacity)" if cap
                 else "back-pressure delaying arrivals (--flow-control)")
        out.append(f"Latency p95 is {format_duration(lat['p95'])}, counted from each tuple's own arrival: "
                   f"much of it is {cause}; see below.")
    elif lat.get("p95") and name == "spark-ss":
        out.append(f"Latency p95 is {format_duration(lat['p95'])}: results wait for the end of their micro-batch "
                   f"({_trigger_text(policy)}); a shorter trigger lowers it, the "
                   f"watermark does not change it.")
    elif lat.get("p95"):
        out.append(f"Latency p95 is {format_duration(lat['p95'])}: a sorting policy holds results until its slack "
                   f"passes; `--policy static` joins on arrival (latency 0) at a memory cost.")
    quarantined = sum(s.get("quarantined", 0) for s in report.get("streams", []))
    if quarantined:
        out.append(f"{quarantined:,} input rows were quarantined (null time or key): see quarantine/.")
    return out


def worst_first(periods: list[dict[str, Any]], key: str, rows: int = MAX_PERIOD_ROWS) -> tuple[list[dict], int]:
    """The ``rows`` periods with the lowest ``key``, worst first (ties: more truth first,
    then earlier), and how many are left out: the pages' collapsed period tables."""
    order = sorted(periods, key=lambda p: (p[key], -p["truth"], p["start_us"]))
    return order[:rows], max(0, len(periods) - rows)


def worst_periods(periods: list[dict[str, Any]], key: str, rows: int = MAX_PERIOD_ROWS) -> tuple[list[dict], int]:
    """:func:`worst_first`'s periods in time order (the terminal's tables)."""
    shown, hidden = worst_first(periods, key, rows)
    return sorted(shown, key=lambda p: p["start_us"]), hidden


def period_start_text(start_us: int, first_us: int, time_origin: str | None) -> str:
    """A period's start in a table: a UTC date and time when the times are calendar
    times (report.json ``time_origin``), else the time after the first listed period."""
    if time_origin is None:
        return f"+{format_duration(start_us - first_us)}"
    at = np.datetime64(int(start_us), "us")
    text = np.datetime_as_string(at, unit="s").replace("T", " ")
    return text[:-3] if text.endswith(":00") else text


def memory_text(series: dict[str, Any]) -> str:
    """The sentence under the memory plot: what one point of it stands for."""
    n = series["arrivals_per_point"]
    if n <= 1:
        return "One point per arriving tuple: the number of tuples held right after it arrived."
    return (f"Each point covers about {n:,.0f} consecutive arriving tuples: the shaded area is the most "
            f"tuples held at once among them, the line the average.")


def period_text(report: dict[str, Any]) -> str:
    """One line about the recall period: its length, where it came from, how many periods."""
    P = report.get("period_us")
    source = report.get("period_source") or "user"
    total, empty = report.get("periods_total"), report.get("periods_empty")
    text = f"period {format_duration(P)} ({source})"
    if total is not None:
        text += f": {total - (empty or 0):,} of {total:,} periods have results"
    target = report.get("recall_target")
    if target is not None:
        below = sum(1 for p in report.get("periods", []) if p["truth"] and p["recall"] < target)
        text += f", {below:,} below the target {target:g}"
    return text


# ---------------------------------------------------------------------------
# page assembly
# ---------------------------------------------------------------------------

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f8fafc;color:#0f172a}
main{max-width:960px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.sub{color:#64748b;font-size:13px;margin-bottom:16px;overflow-wrap:anywhere}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:10px 14px;min-width:150px}
.card .k{color:#64748b;font-size:12px}.card .v{font-size:20px;font-weight:600}
.ok{color:#15803d}.bad{color:#b91c1c}
table{border-collapse:collapse;background:#fff;font-size:13px;width:100%}
th,td{border:1px solid #e2e8f0;padding:4px 8px;text-align:right}th{background:#f1f5f9}
td:first-child,th:first-child{text-align:left}
img{max-width:100%;background:#fff;border:1px solid #e2e8f0;border-radius:8px;margin:6px 0}
.plot{overflow-x:auto}
.todo{background:#fff7ed;border:1px solid #fed7aa;border-radius:8px;padding:8px 16px}
pre{background:#0f172a;color:#e2e8f0;padding:12px;border-radius:8px;overflow-x:auto;font-size:13px;white-space:pre-wrap}
.scroll{overflow-x:auto}
p,li{overflow-wrap:anywhere}
details{margin:6px 0}summary{cursor:pointer;color:#334155;font-size:14px;padding:4px 0}
@media (max-width:600px){main{padding:12px}.card{min-width:0;flex:1 1 40%}.card .v{font-size:17px}
.plot img{max-width:none;width:600px}}
"""


def _e(v: Any) -> str:
    return html.escape(str(v))


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><link rel=\"icon\" href=\"data:,\"><style>{STYLE}</style></head>"
            f"<body><main>{''.join(body)}</main></body></html>\n")


def _card(k: str, v: str, cls: str = "") -> str:
    return f"<div class=\"card\"><div class=\"k\">{_e(k)}</div><div class=\"v {cls}\">{_e(v)}</div></div>"


def _img(uri: str, alt: str) -> str:
    """A plot; on a phone it keeps a readable width and scrolls sideways."""
    return f"<div class=\"plot\"><img src=\"{uri}\" alt=\"{_e(alt)}\"></div>"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<div class=\"scroll\"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _periods_table(periods: list[dict[str, Any]], key: str, headers: list[str], cells, source: str,
                   time_origin: str | None) -> str:
    """Collapsed (``<details>``): the worst periods by ``key``, worst first; ``cells(p)``
    gives a row after its start; the full list is in ``source`` (report.json or tune.json)."""
    shown, hidden = worst_first(periods, key)
    first = min(p["start_us"] for p in periods)
    rows = [[period_start_text(p["start_us"], first, time_origin), *cells(p)] for p in shown]
    which = (f"all {len(shown):,} periods with results" if not hidden else
             f"the {len(shown):,} worst of {len(periods):,} periods with results")
    start = "start (UTC)" if time_origin is not None else "start"
    return (f"<details class=\"periods\"><summary>{_e(which[0].upper() + which[1:])}, worst first "
            f"(full list: &quot;periods&quot; in {_e(source)})</summary>{_table([start, *headers], rows)}</details>")


def render_report(report: dict[str, Any]) -> str:
    """The run report page, from ``report.json`` content."""
    from . import plots

    target = report.get("recall_target")
    recall = report["recall"]
    lat = report["latency_us"]
    pol = report.get("config", {}).get("policy", {})
    ok = "ok" if target is None or recall >= target else "bad"
    body = [
        "<h1>streamjoin run report</h1>",
        f"<div class=\"sub\">{_e(report.get('command', ''))} &middot; streamjoin {_e(report.get('tool_version', ''))}</div>",
        "<div class=\"cards\">",
        _card("policy", pol.get("name", "?")),
        _card("recall" + ("" if target is None else f" (target {target:g})"), f"{fmt_recall(recall)}", ok),
        _card("results emitted / truth", f"{report['emitted_results']:,} / {report['truth_results']:,}"),
        _card("latency mean / p95", f"{format_duration(lat['mean'])} / {format_duration(lat['p95'])}"),
        _card("memory peak / mean", f"{report['memory_tuples']['peak']:,} / {report['memory_tuples']['mean']:,.0f} tuples"),
        _card("duplicates", str(report.get("duplicates")), "bad" if report.get("duplicates") else ""),
        "</div>",
        "<h2>What to do</h2><div class=\"todo\"><ul>",
        *[f"<li>{_e(line)}</li>" for line in what_to_do(report)],
        "</ul></div>",
        "<h2>Recall per period</h2>",
        _img(plots.recall_per_period(report.get("periods", []), target, period_us=report.get("period_us"),
                                     total=report.get("periods_total"), time_origin=report.get("time_origin")),
             "recall per period"),
    ]
    if report.get("period_us"):
        body.append(f"<div class=\"sub\">{_e(period_text(report))}</div>")
    series = report.get("memory_series")
    if series:
        body += ["<h2>Memory</h2>",
                 _img(plots.memory_over_time(series, report.get("time_origin")), "memory over time"),
                 f"<div class=\"sub\">{_e(memory_text(series))}</div>"]
    hist = report.get("latency_histogram")
    if hist is not None and report["emitted_results"] and not lat.get("max"):
        body += ["<h2>Latency</h2>", f"<p>All {report['emitted_results']:,} results were emitted the moment their "
                 "last member arrived (latency 0: the symmetric join emits on arrival).</p>"]
    elif hist is not None:
        body += ["<h2>Latency</h2>", _img(plots.latency_distribution(hist, lat), "latency distribution")]
    if report.get("hindsight"):
        body += hindsight_section(report["hindsight"])
    if report.get("capacity"):
        body += _capacity_section(report["capacity"], report.get("time_origin"))
    tuning = report.get("tuning")
    if tuning and tuning.get("curve"):
        label = setting_label(tuning["policy"])
        cur = _current_setting(pol) if pol.get("name") == tuning["policy"] else None
        marks = {"current": cur} if cur is not None else {}
        if tuning.get("setting_us") is not None:
            marks["needed for target"] = tuning["setting_us"]
        body += [f"<h2>Tuning curve ({_e(tuning['policy'])})</h2>",
                 _img(plots.tuning_curve(tuning["curve"], target=target, label=label, marks=marks), "tuning curve"),
                 "<div class=\"sub\">" + (
                     "Exact: for every result, the smallest " if tuning.get("sample_every", 1) == 1 else
                     f"Estimated from one in every {tuning['sample_every']:,} results: for each, the smallest ") + _e(label) +
                 " at which it is emitted (SPEC §7" + (
                     f"; one withWatermark delay for both streams at this run's "
                     f"{_e(_trigger_text(tuning))} and watermark policy "
                     f"{_e(tuning.get('watermark_policy'))}: recall only grows with it, docs/semantics.md"
                     if tuning["policy"] == "spark-ss" else
                     f"; one forBoundedOutOfOrderness delay for both inputs at this run's watermark interval "
                     f"{_e(format_duration(tuning.get('watermark_interval_us')))}: recall only grows with it, "
                     "docs/semantics.md" if tuning["policy"] == "flink" else "") +
                 "). `streamjoin tune-buffer` gives exact values and adds memory and latency per setting.</div>"]
    rows = [[s["name"], f"{s['rows']:,}", s["quarantined"], format_duration(s["delay_us"]["p50"]),
             format_duration(s["delay_us"]["p95"]), format_duration(s["delay_us"]["max"]), s["dropped_late"],
             s["expired_on_arrival"]] for s in report["streams"]]
    head = ["stream", "rows", "quarantined", "delay p50", "delay p95", "delay max", "dropped late",
            "expired on arrival"]
    if any(s.get("window") for s in report["streams"]):   # a count window: each stream's window in words
        rows = [[*r, s.get("window", "")] for r, s in zip(rows, report["streams"])]
        head.append("window")
    body += ["<h2>Streams</h2>", _table(head, rows)]
    outer = report.get("outer_join")
    if outer:   # spark-ss / flink-sql outer joins: the null-padded rows, apart from recall
        olat = outer["latency_us"]
        body += [f"<p>{_e(outer['join'])} outer join: {outer['rows']:,} rows of {_e(outer['stream'])} had no "
                 f"partner and were emitted null-padded when the join evicted them from its state (latency p50 "
                 f"{_e(format_duration(olat['p50']))}, p95 {_e(format_duration(olat['p95']))}, max "
                 f"{_e(format_duration(olat['max']))}); recall counts the pairs only.</p>"]
    body += flow_section(report)
    periods = report.get("periods", [])
    if periods:
        body += ["<h2>Periods</h2>",
                 _periods_table(periods, "recall", ["truth", "emitted", "recall", "target"],
                                lambda p: [f"{p['truth']:,}", f"{p['emitted']:,}", fmt_recall(p["recall"]),
                                           "-" if p["target"] is None else f"{p['target']:g}"],
                                "report.json", report.get("time_origin"))]
    return _page("streamjoin report", body)


def flow_section(report: dict[str, Any]) -> list[str]:
    """The "Flow control" part of the run page (``--flow-control``; nothing without it):
    the added delay per stream, then buffer occupancy and the control law's rate over time."""
    from . import plots

    flow = report.get("flow_control")
    if not flow:
        return []
    st = flow["settings"]
    rows = [[name, f"{d['delayed']:,}", format_duration(d["p50"]), format_duration(d["p99"]),
             format_duration(d["max"]), f"{flow['occupancy'][name]['peak']:,.1f}"]
            for name, d in flow["added_delay_us"]["streams"].items() if d["max"] is not None]
    n = flow["series"]["intervals_per_point"]
    return ["<h2>Flow control (seed 001)</h2>",
            f"<p>{_e(st['policy'])}: one unit per stream, buffer B = {st['buffer']:,} tuples, target b0 = "
            f"{st['target']:g}, service rate {st['rate']:,.0f} tuples/s shared by the units, control every "
            f"{_e(format_duration(st['interval_us']))}. Back-pressure delays arrivals (nothing is dropped); "
            "latency above counts from each tuple's own arrival.</p>",
            _table(["stream", "tuples delayed", "added delay p50", "p99", "max", "buffer peak"], rows),
            _img(plots.flow_over_time(flow, report.get("time_origin")), "buffer occupancy over time"),
            f"<div class=\"sub\">Each point covers about {n:,.0f} control intervals: the line is the mean "
            "occupancy, the shaded area the peak; the lower panel is the rate r_max each unit admits "
            "(seed 001 equation 8).</div>"]
def hindsight_section(h: dict[str, Any]) -> list[str]:
    """qjoin / qkslack against the best fixed setting chosen in hindsight (issue 15 item 4):
    the verdict, then the run, the fixed setting and fixed+ side by side."""
    head = ["<h2>Against the best fixed setting (hindsight)</h2>", f"<div class=\"todo\"><p>{_e(h['text'])}</p></div>"]
    if not h.get("computed"):
        return head
    name = setting_label(h["fixed_policy"])
    n = h["periods_with_results"]
    mine = "memory" if h["measure"] == "memory_tuples_mean" else "latency"

    def row(label: str, e: dict[str, Any], setting: str, ratio: float | None) -> list[str]:
        return [label, setting, fmt_recall(e["recall"]), f"{e['periods_meeting_target']:,} of {n:,}",
                f"{e['memory_tuples_mean']:,.1f}", format_duration(e["latency_us_mean"]),
                "-" if ratio is None else f"{ratio:.2f}"]

    f, fp, st = h["fixed"], h["fixed_plus"], h["stationarity"]
    rows = [row(h["policy"], h["adaptive"], "adaptive", None),
            row(f"{h['fixed_policy']} (fixed)", f, format_duration(f["setting_us"]), h["ratio"]),
            row(f"{h['fixed_policy']} (fixed+)", fp, format_duration(fp["setting_us"]), h["ratio_plus"])]
    need = h["per_period_need_us"]
    return head + [
        _table(["", name, "recall", f"periods with recall >= {h['recall_target']:g}", "memory mean (tuples)",
                "latency mean", f"{h['policy']} {mine} / this"], rows),
        f"<div class=\"sub\">fixed: the least {_e(name)} meeting the target in at least "
        f"{h['period_share']:.0%} of the periods with results; fixed+: the least meeting it overall as well "
        f"(overall need {_e(format_duration(h['overall_need_us']))}). Exact, from every result's required "
        f"{_e(name)} (SPEC §7, as tune-buffer --per-period), and replayed. Per-period need: median "
        f"{_e(format_duration(need['p50']))}, max {_e(format_duration(need['max']))}; headroom "
        f"{st['headroom']:.2f} (mean over periods of 1 - need / fixed), {st['headroom_by_chance']:.2f} with the results "
        f"shuffled across periods: the need {'changed' if st['changed'] else 'did not change'} beyond chance "
        f"(docs/semantics.md).</div>"]


def _capacity_section(cap: dict[str, Any], time_origin: str | None) -> list[str]:
    """The capacity model (issue 20): what it shed and lost, queueing delay, queue occupancy."""
    from . import plots   # lazily, as render_report does

    shed = cap["shed"]
    load = cap.get("offered_load")
    lines = [
        f"Offered load {load:.3g} of one operator" if load is not None else "Offered load: -",
        f"{cap['processed']:,} tuples processed; shed: {shed['queue_drop_new']:,} dropped on arrival (queue full), "
        f"{shed['queue_replaced']:,} replaced in the queue, {shed['state_evicted']:,} evicted from join state",
        f"recall without the capacity model {fmt_recall(cap['recall_without_capacity'])} "
        f"(lost to disorder {cap['recall_lost_to_disorder']:.4f}); lost to capacity "
        f"{cap['recall_lost_to_capacity']:.4f}, gained {cap['recall_gained_under_capacity']:.4f}",
    ]
    budget = cap.get("state_budget")
    if budget and budget.get("periods_limited_by_budget") is not None:
        lines.append(f"state budget {budget['cap_tuples']:,} tuples: {budget['periods_limited_by_budget']} periods "
                     f"missed the target because of the budget, {budget.get('periods_missed_by_shedding', 0)} "
                     f"because the queue shed results, {budget['periods_missed_by_controller']} "
                     "because of the controller (missed without the budget and without shedding losses)")
    if budget and budget.get("decisions") is not None:
        lines.append(f"{budget['decisions_wanting_more_state']} of {budget['decisions']} controller decisions wanted "
                     "more state than the budget")
    body = ["<h2>Capacity</h2><ul>", *[f"<li>{_e(x)}</li>" for x in lines], "</ul>"]
    q = cap["queueing_delay_us"]
    if q.get("max"):
        body += ["<h3>Queueing delay</h3>",
                 _img(plots.queueing_distribution(cap["queueing_histogram"], q), "queueing delay per tuple")]
    else:
        body += ["<h3>Queueing delay</h3><p>No tuple waited: each found the operator idle.</p>"]
    body += ["<h3>Queue occupancy</h3>",
             _img(plots.occupancy_over_time(cap["occupancy_series"], time_origin), "queue occupancy over time")]
    return body


def render_tune(t: dict[str, Any]) -> str:
    from . import plots

    rec = t["recommendation"]
    label = setting_label(t["policy"])
    setting, exact = format_durations([rec["setting_us"], rec["exact_us"]])  # 332ms next to 330.4ms, not 330ms
    body = [
        f"<h1>streamjoin tune-buffer: {_e(t['policy'])}, recall &ge; {t['recall_target']:g}</h1>",
        f"<div class=\"sub\">{_e(t.get('command', ''))}</div>",
        "<div class=\"cards\">",
        _card(f"recommended {label}", setting, "ok"),
        _card("exact minimum", exact),
        _card("recall there", fmt_recall(rec["recall"])),
        _card("recall one grid step less", fmt_recall(rec["recall_one_step_below"])),
        _card("memory peak / mean", f"{rec['memory_tuples']['peak']:,} / {rec['memory_tuples']['mean']:,.0f}"),
        "</div>",
        "<h2>Summary</h2><div class=\"todo\"><ul>", *[f"<li>{_e(x)}</li>" for x in t["summary"]], "</ul></div>",
        "<h2>Paste into your config</h2>", f"<pre>{_e(t['toml'])}</pre>",
        *([f"<h2>Paste into your {ENGINE_OF[t['policy']]} job</h2><pre>{_e(t['snippet']['text'])}</pre>"] if t.get("snippet") else []),
        "<h2>Curve</h2>",
        _img(plots.tuning_curve(t["curve"], target=t["recall_target"], label=label,
                                marks={"recommended": rec["setting_us"]}, candidates=t["candidates"]), "tuning curve"),
    ]
    if t["policy"] != "static":  # the symmetric family emits on arrival: latency 0 at every setting
        body.append(_img(plots.latency_curve(t["candidates"], label), "latency curve"))
    settings = format_durations([c["setting_us"] for c in t["candidates"]])
    crow = [[s, fmt_recall(c["recall"]), f"{c['memory_tuples']['peak']:,}",
             f"{c['memory_tuples']['mean']:,.1f}", format_duration(c["latency_us"]["mean"]),
             format_duration(c["latency_us"]["p95"])] for c, s in zip(t["candidates"], settings)]
    body += ["<h2>Replayed settings</h2>",
             _table([label, "recall", "memory peak", "memory mean", "latency mean", "latency p95"], crow)]
    if t.get("periods"):
        body += ["<h2>Per period</h2>",
                 _periods_table(t["periods"], "recall_at_recommendation",
                                ["truth", f"exact {label}", f"{label} on grid", "recall at recommendation"],
                                lambda p: [f"{p['truth']:,}", format_duration(p["exact_us"]),
                                           format_duration(p["setting_us"]), fmt_recall(p["recall_at_recommendation"])],
                                "tune.json", t.get("time_origin"))]
    engines = ENGINE_OF.get(t["policy"], "Spark and Flink")
    body += [f"<h2>What this means in {engines}</h2>", *[f"<p>{_e(x)}</p>" for x in t["frameworks"]]]
    return _page("streamjoin tune-buffer", body)


# ---------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------


def rerender(directory: Path) -> Path:
    """``streamjoin report DIR``: rebuild ``report.html`` (or ``tune.html``) from its JSON.

    Written as every output is (:mod:`streamjoin.pipelines.io.output`): under
    the lock of ``DIR`` (a run writing it -> exit 4), staged beside the page
    and renamed over it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: no report.json or tune.json (give a streamjoin --out directory)")
    with OutputLock(lock_of(directory), str(directory)):
        return _rerender(directory)


def _rerender(directory: Path) -> Path:
    if (directory / "report.json").is_file():
        try:
            report = json.loads((directory / "report.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{directory / 'report.json'}: not readable JSON ({exc})") from None
        target = directory / "report.html"
        recover(target)
        write_file_atomic(target, render_report(report))
        return target
    if (directory / "tune.json").is_file():
        try:
            t = json.loads((directory / "tune.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{directory / 'tune.json'}: not readable JSON ({exc})") from None
        target = directory / "tune.html"
        recover(target)
        write_file_atomic(target, render_tune(t))
        return target
    raise InputError(f"{directory}: no report.json or tune.json (give a streamjoin --out directory)")


# ---------------------------------------------------------------------------
# compare.html
# ---------------------------------------------------------------------------


def render_compare(c: dict[str, Any]) -> str:
    """The ``streamjoin compare`` page, from ``compare.json`` content: the side-by-side
    table, what each policy loses and why, and recall per period of each policy."""
    from . import compare, plots

    body = [
        f"<h1>streamjoin compare: {len(c['policies'])} policies, {c['truth_results']:,} results in truth</h1>",
        f"<div class=\"sub\">{_e(c.get('command', ''))}</div>",
        "<h2>Side by side</h2>", _table(compare.HEADERS, compare.table_rows(c)),
        "<h2>What each policy loses, and why</h2><div class=\"todo\"><ul>",
        *[f"<li>{_e(x)}</li>" for x in compare.summary_lines(c)], "</ul></div>",
        "<h2>Recall per period</h2>",
        _img(plots.compare_recall(c), "recall per period of each policy") if c["periods"]["start_us"] else
        "<p>No results in truth: nothing to plot.</p>",
        "<h2>The causes</h2><ul>", *[f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in c["causes"].items()], "</ul>",
        "<h2>The policies</h2>",
        _table(["policy", "as --policy", "dropped late (rows)"],
               [[p["label"], p["text"], ", ".join(f"{k} {v:,}" for k, v in p["dropped_late"].items())]
                for p in c["policies"]]),
    ]
    return _page("streamjoin compare", body)
