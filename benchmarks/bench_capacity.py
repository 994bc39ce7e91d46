"""Capacity benchmark (issue 20): what a finite machine does to recall, latency and cost.

    python benchmarks/bench_capacity.py [--runs 5] [--scale 0.1] [--svg docs/img/capacity.svg]
    python benchmarks/bench_capacity.py --quick        # a small smoke run (a few seconds per row)
    python benchmarks/bench_capacity.py --kernels      # the bounded-queue kernel: compiled vs plain Python
    python benchmarks/bench_capacity.py --cost-only    # only the cost relative to the plain replay

Two datasets: the core synthetic data (``streamjoin generate bench``, the set
``bench_core.py`` uses; ``--scale`` multiplies its 2M + 1M tuples over 30 s;
``kslack --k 50ms``) and the corpus' real ``flights`` dataset
(``benchmarks/corpus.py``: NYC departures 2013 and the hourly weather, a year;
its own ``static --retention 30min``).  Load = input tuples / arrival span.
For each capacity factor ``f`` from 2 (twice the load) down to 0.5:

* shedding (``--capacity``): one operator (``cpu=1``) with service time
  ``tuple = 1 / (f x load)``, a queue of ``B`` tuples per stream, full queue
  ``shed=drop-new`` or ``shed=replace-oldest`` (seed 000);
* flow control (``--flow-control``, seed 001): service rate ``rate = f x load``,
  buffer ``B`` per unit, ``b0 = B/2``, default gains, ``policy=max-flow`` or
  ``min-flow``.

``B`` = two default control intervals of the load (``default_interval`` of the
span: 10 ms for 30 s, 10 min for a year).  Each row is one fresh
``streamjoin run`` process (``bench_core.one_run``): recall, latency p50 / p95 /
p99 (from each tuple's own arrival), tuples shed, tuples delayed, the model's
own stage (``join.capacity`` / ``flow_control`` in ``report.json`` timings).

Cost: whole-process wall and CPU time of the plain replay, shedding
(drop-new; the bounded-queue kernel), the same ``--capacity`` without a
queue cap (unbounded: numpy only), flow control (max-flow; the interval
kernel) and both in one run (the shedding ``--capacity`` behind the
max-flow units), all at ``f = 1``, in rotating order (after one warm-up
round), medians.  ``--cost-only``: only these tables.

Placement: ``samples/flights/flights.toml --engine spark --router atr
--partitions 3 --segment 6h`` with ``--load-weights 5,0.1,0.1`` and
``0.1,5,0.1``: ``routing.atr.segment_partitions`` and the per-partition loads.

``--svg PATH``: recall and latency p99 against the capacity factor, shedding
vs flow control, drawn with the reports' own chart writer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402
from bench_core import ensure_data, one_run, streamjoin_cmd  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "data" / "corpus"
FACTORS = (2.0, 1.5, 1.25, 1.0, 0.75, 0.5)
QUICK_FACTORS = (2.0, 1.0, 0.5)
#: (model, setting): shedding by --capacity, flow control by --flow-control
MODES = (("shed", "drop-new"), ("shed", "replace-oldest"), ("flow", "max-flow"), ("flow", "min-flow"))
QUICK_MODES = (("shed", "drop-new"), ("flow", "max-flow"))
#: the placement example: ATR on Spark, weights favouring cpu vs memory
PLACEMENT_CONFIG = ROOT / "samples" / "flights" / "flights.toml"
PLACEMENT_ARGS = ["--engine", "spark", "--router", "atr", "--partitions", "3", "--segment", "6h"]
PLACEMENT_WEIGHTS = ("5,0.1,0.1", "0.1,5,0.1")
COLORS = {"drop-new": "#dc2626", "replace-oldest": "#f59e0b", "max-flow": "#2563eb", "min-flow": "#16a34a"}


def load_facts(config: Path) -> dict:
    """Input tuples, arrival span (us) and load (tuples/s) as the replay sees them (valid rows only)."""
    from streamjoin.pipelines.config.flow_control import default_interval
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.io.load import load_all

    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve(config, Flags(out=str(Path(tmp) / "o"), engine="local"))
        streams = load_all(list(cfg.streams), cfg.max_quarantine)
    arrival = np.concatenate([s.arrival for s in streams])
    span = int(arrival.max() - arrival.min())
    load = arrival.size / (span / 1e6)
    interval = default_interval(span)
    return {"tuples": int(arrival.size), "span_us": span, "load": load, "interval_us": interval,
            "buffer": max(1, round(2 * load * interval / 1e6))}


def _policy_args(spec: str | None) -> list[str]:
    if not spec:
        return []
    name, _, setting = spec.partition(":")
    flag = {"kslack": "--k", "static": "--retention"}.get(name)
    return ["--policy", name, *([flag, setting] if flag and setting else [])]


def model_args(model: str, setting: str, factor: float, facts: dict) -> list[str]:
    """The option of one capacity model at ``factor`` x the load (same factor, same buffer for both)."""
    if model == "shed":
        return ["--capacity", f"tuple={1e9 / (factor * facts['load']):.0f}ns,queue={facts['buffer']},shed={setting}"]
    return ["--flow-control", f"buffer={facts['buffer']},rate={factor * facts['load']:.6g},policy={setting}"]


def row(report: dict) -> dict:
    """What one run's report says: recall, latency, shed / delayed tuples, the model's stage time."""
    cap, fc = report.get("capacity"), report.get("flow_control")
    shed = (cap["shed"]["queue_drop_new"] + cap["shed"]["queue_replaced"]) if cap else 0
    delayed = fc["added_delay_us"]["all"]["delayed"] if fc else 0
    t = report["timings_s"]
    return {"recall": report["recall"], **{p: report["latency_us"][p] for p in ("p50", "p95", "p99")},
            "shed": shed, "delayed": delayed, "model_s": t.get("join.capacity", 0.0) + t.get("flow_control", 0.0),
            "stages_s": t.get("total", 0.0), "wall_s": report["wall_s"], "cpu_s": report["cpu_s"]}


def sweep(config: Path, policy: str | None, facts: dict, factors, modes) -> list[dict]:
    """The plain run, then one run per (model, setting, factor); first an uncounted shedding run
    and an uncounted flow-control run (a fresh checkout builds the kernels once: base/jit.py)."""
    base = _policy_args(policy)
    one_run(config, [*base, *model_args("shed", "drop-new", 1.0, facts)])
    one_run(config, [*base, *model_args("flow", "max-flow", 1.0, facts)])
    rows = [{"model": "none", "setting": "-", "factor": None, **row(one_run(config, base))}]
    for model, setting in modes:
        for f in factors:
            rows.append({"model": model, "setting": setting, "factor": f,
                         **row(one_run(config, [*base, *model_args(model, setting, f, facts)]))})
            print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return rows


def cost(config: Path, policy: str | None, facts: dict, runs: int) -> dict:
    """Plain, shedding (drop-new), the unbounded queue, flow control (max-flow) and shedding behind
    flow control at 1x, in rotating order; a warm-up round first."""
    base = _policy_args(policy)
    shed = model_args("shed", "drop-new", 1.0, facts)
    flow = model_args("flow", "max-flow", 1.0, facts)
    kinds = {"plain": base, "shed": [*base, *shed],
             "queue": [*base, shed[0], shed[1].split(",queue=")[0]],   # the same service time, no queue cap
             "flow": [*base, *flow], "both": [*base, *shed, *flow]}
    names = list(kinds)
    got: dict[str, list[dict]] = {k: [] for k in names}
    for r in range(runs + 1):
        for k in names[r % len(names):] + names[:r % len(names)]:
            rep = row(one_run(config, kinds[k]))
            if r:
                got[k].append(rep)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("wall_s", "cpu_s", "stages_s", "model_s")} for k, v in got.items()}
    for k in names[1:]:
        med[k]["wall_ratio"] = med[k]["wall_s"] / med["plain"]["wall_s"]
        med[k]["cpu_ratio"] = med[k]["cpu_s"] / med["plain"]["cpu_s"]
    return med


def placement() -> list[dict]:
    """The ATR plan of the flights sample on Spark under each weight set."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in PLACEMENT_WEIGHTS:
            dest = Path(tmp) / w
            t0 = time.perf_counter()
            subprocess.run([*streamjoin_cmd(), "run", str(PLACEMENT_CONFIG), *PLACEMENT_ARGS, "--load-weights", w,
                            "--no-results", "--out", str(dest)], check=True, capture_output=True)
            rep = json.loads((dest / "report.json").read_text())
            ro = rep["routing"]
            out.append({"weights": w, "segments": ro["atr"]["segment_partitions"], "imbalance": ro["load_imbalance"],
                        "parts": ro["per_partition"], "recall": rep["recall"], "wall_s": time.perf_counter() - t0})
    return out


# -- output --------------------------------------------------------------------------------

def _fmt_us(v) -> str:
    if v is None:
        return "-"
    for div, unit in ((86_400e6, "d"), (3_600e6, "h"), (60e6, "min"), (1e6, "s"), (1e3, "ms")):
        if abs(v) >= div:
            return f"{v / div:.3g} {unit}"
    return f"{v:.0f} us"


def print_sweep(name: str, facts: dict, rows: list[dict]) -> None:
    print(f"\n{name}: {facts['tuples']:,} tuples, load {facts['load']:,.4g} tuples/s, "
          f"B = {facts['buffer']:,} tuples (2 x {_fmt_us(facts['interval_us'])} of the load)\n")
    print("| model | setting | capacity / load | recall | latency p50 | p95 | p99 | shed tuples | delayed tuples "
          "| model stage s | run wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        f = "-" if r["factor"] is None else f"{r['factor']:g}x"
        print(f"| {r['model']} | {r['setting']} | {f} | {r['recall']:.4f} | {_fmt_us(r['p50'])} | {_fmt_us(r['p95'])} "
              f"| {_fmt_us(r['p99'])} | {r['shed']:,} | {r['delayed']:,} | {r['model_s']:.3f} | {r['wall_s']:.2f} |")


def print_cost(name: str, med: dict, runs: int) -> None:
    print(f"\n{name}: cost at 1x, medians of {runs} rotating runs\n")
    print("| run | wall s | CPU s | wall / plain | CPU / plain | stages s | model stage s |")
    print("|---|---|---|---|---|---|---|")
    for k, label in (("plain", "plain replay"), ("shed", "--capacity, queue=B, shed=drop-new (kernel)"),
                     ("queue", "--capacity, unbounded queue (numpy only)"), ("flow", "--flow-control, max-flow (kernel)"),
                     ("both", "--capacity queue=B drop-new with --flow-control max-flow")):
        m = med[k]
        ratios = "1.00 | 1.00" if k == "plain" else f"{m['wall_ratio']:.2f} | {m['cpu_ratio']:.2f}"
        print(f"| {label} | {m['wall_s']:.2f} | {m['cpu_s']:.2f} | {ratios} | {m['stages_s']:.2f} | "
              f"{'-' if k == 'plain' else format(m['model_s'], '.3f')} |")


def print_placement(rows: list[dict]) -> None:
    print("\nplacement: samples/flights --engine spark --router atr --partitions 3 --segment 6h\n")
    print("| --load-weights | segment -> partition | load per partition | phi_cpu | phi_mem | imbalance |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ps = r["parts"]
        fmt = lambda key: " / ".join(f"{p[key]:.2f}" for p in ps)  # noqa: E731
        print(f"| {r['weights']} | {' '.join(map(str, r['segments']))} | {fmt('load')} | {fmt('phi_cpu')} "
              f"| {fmt('phi_mem')} | {r['imbalance']:.3f} |")


def figure(results: dict[str, list[dict]]):
    """Recall (top) and latency p99 (bottom, log) against the capacity factor: one line per
    model setting and dataset (the first dataset solid, the second dashed)."""
    from streamjoin.pipelines.report.svg import Figure

    fig = Figure(rows=2, ratios=[1, 1], title="Capacity: shedding (--capacity) vs flow control (--flow-control)")
    top, bottom = fig.axes
    top.ylabel, bottom.ylabel = "recall", "latency p99 (s)"
    bottom.yscale, bottom.xlabel = "log", "capacity / load (cpu=1 service time 1/(f x load); flow rate f x load)"
    top.legend = True
    factors = sorted({r["factor"] for rows in results.values() for r in rows if r["factor"] is not None})
    for ax in (top, bottom):
        ax.xticks, ax.xticklabels = factors, [f"{f:g}x" for f in factors]
    for style, (name, rows) in zip(("-", "--"), results.items()):
        for setting, color in COLORS.items():
            pts = sorted((r["factor"], r) for r in rows if r["setting"] == setting)
            if not pts:
                continue
            xs = [f for f, _ in pts]
            top.plot(xs, [r["recall"] for _, r in pts], color=color, style=style, marker="o",
                     label=f"{name} {setting}")
            bottom.plot(xs, [max(r["p99"], 1) / 1e6 for _, r in pts], color=color, style=style, marker="o")
    return fig


# -- the bounded-queue kernel (the compiled-kernel decision, docs/performance.md) ---------------

def python_bounded(arrival, stream, service, n, cap, replace):
    """The compiled kernel's body run by the Python interpreter (for the comparison only)."""
    from streamjoin.pipelines.capacity.queueing import _bounded_kernel  # noqa: PLC2701 - benchmark only
    return _bounded_kernel(arrival, stream, service, n, cap, replace)


def kernels(config: Path) -> dict[str, float]:
    """The bounded queue compiled (base/jit.py) vs the same loop in Python, numpy's Lindley closed
    form, and what loading the compiled kernel costs in this process."""
    from streamjoin.pipelines.capacity import queueing
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.io.load import load_all
    from streamjoin.pipelines.replay.progress import build_replay

    with tempfile.TemporaryDirectory() as tmp:
        cfg = resolve(config, Flags(out=str(Path(tmp) / "o"), engine="local"))
        streams = load_all(list(cfg.streams), cfg.max_quarantine)
    replay = build_replay([s.ts for s in streams], [s.arrival for s in streams])
    t_ns = queueing.relative_ns(replay.arrival)
    stream = replay.stream.astype(np.int64)
    service = np.full(replay.N, 700_000, np.int64)
    t0 = time.perf_counter()
    queueing.compiled_kernel()     # load (or, the first time on this machine, build) the kernel
    out = {"N": replay.N, "load_s": time.perf_counter() - t0}
    for name, fn in (("compiled", queueing.bounded_queue), ("python", python_bounded)):
        t0 = time.perf_counter()
        fn(t_ns, stream, service, replay.n, 50, True)
        out[f"bounded_{name}_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    queueing.lindley(t_ns, service)
    out["lindley_numpy_s"] = time.perf_counter() - t0
    return out


def datasets(scale: float, corpus_scale: float) -> dict[str, tuple[Path, str | None]]:
    """name -> (config, policy); the flights dataset keeps its job.toml's policy."""
    flights = CORPUS / f"scale-{corpus_scale:g}"
    toml = flights / "flights" / corpus.TOML_NAME
    if not toml.exists():
        corpus.build("flights", flights, scale=corpus_scale)
    return {"core": (ensure_data(scale), "kslack:50ms"), "flights": (toml, None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small data, 3 factors, 2 models, 1 cost round")
    ap.add_argument("--scale", type=float, default=None, help="core data row-count multiplier (default 0.1; quick 0.02)")
    ap.add_argument("--runs", type=int, default=None, help="rotating runs for the cost table (default 5; quick 1)")
    ap.add_argument("--svg", type=Path, default=None, help="write the recall / latency p99 plot here")
    ap.add_argument("--no-placement", action="store_true", help="skip the Spark placement example")
    ap.add_argument("--cost-only", action="store_true", help="only the cost tables (no sweep, no placement)")
    ap.add_argument("--kernels", action="store_true", help="only time the bounded-queue kernel on samples/sensors")
    a = ap.parse_args()
    if a.kernels:
        k = kernels(ROOT / "samples" / "sensors" / "sensors.toml")
        print(f"kernels over N={k['N']:,} arrivals: bounded queue compiled {k['bounded_compiled_s']:.4f} s "
              f"(loaded in {k['load_s']:.4f} s), plain Python {k['bounded_python_s']:.3f} s, "
              f"Lindley numpy {k['lindley_numpy_s']:.4f} s")
        return
    scale = a.scale if a.scale is not None else (0.02 if a.quick else 0.1)
    runs = a.runs if a.runs is not None else (1 if a.quick else 5)
    factors, modes = (QUICK_FACTORS, QUICK_MODES) if a.quick else (FACTORS, MODES)
    with open("/proc/loadavg") as fh:
        print(f"load average at start: {' '.join(fh.read().split()[:3])}")
    results = {}
    for name, (config, policy) in datasets(scale, 0.1 if a.quick else 1.0).items():
        facts = load_facts(config)
        if not a.cost_only:
            results[name] = rows = sweep(config, policy, facts, factors, modes)
            print_sweep(f"{name} ({policy or 'job.toml policy'})", facts, rows)
        print_cost(name, cost(config, policy, facts, runs), runs)
    if not (a.no_placement or a.cost_only):
        print_placement(placement())
    if a.svg and results:
        a.svg.parent.mkdir(parents=True, exist_ok=True)
        a.svg.write_text(figure(results).svg())
        print(f"\nwrote {a.svg}")
    with open("/proc/loadavg") as fh:
        print(f"load average at end: {' '.join(fh.read().split()[:3])}")


if __name__ == "__main__":
    main()
