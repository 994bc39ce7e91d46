"""Recall targets on the corpus (issue 15): qjoin and qkslack against the best
fixed setting chosen in hindsight.

    python benchmarks/bench_recall.py [--corpus data/corpus] [--scale 1] [--only NAME ...]
                                      [--recall 0.8 0.9 0.95 0.99] [--json out.json]

For every corpus dataset (``benchmarks/corpus.py``, built if missing) and
target ``Q``, with **default controller settings** (only the recall target
and the period are given; the period is the default one, chosen from the
replay span):

* ``qjoin --recall Q`` and ``qkslack --recall Q`` run on the local engine;
* the **hindsight-best fixed setting** is computed exactly from the required
  slack of every valid combination (SPEC §7, what ``tune-buffer
  --per-period`` computes): per period with results, the least common
  retention (``static``) / ``K`` (``kslack``) that reaches ``Q`` in it; the
  fixed setting is the least one meeting ``Q`` in at least 95 % of those
  periods -- the per-period criterion of issue 15 -- and is then replayed
  like the others (``hindsight_fixed``: the function behind every qjoin /
  qkslack run's ``report.json`` ``hindsight``);
* **fixed+**: the least fixed setting meeting the adaptive policies' whole
  promise, Q overall as well (the larger of the above and the exact overall
  quantile of the required settings); where it differs from "fixed" (the
  per-period setting gives up rare periods that hold many results: a stall's
  burst, a nightly batch), it is replayed too.

Printed per row: overall recall, share of periods (with results) meeting Q,
mean memory (tuples held, mean over arrival indexes), mean latency, and the
adaptive policy's memory (qjoin) / latency (qkslack) as a share of the fixed
setting's and of the fixed+ setting's.  Everything is in-process (one load and one truth per dataset).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

from streamjoin.pipelines.analysis import metrics  # noqa: E402
from streamjoin.pipelines.config.settings import Flags, resolve  # noqa: E402
from streamjoin.pipelines.engines.local import join  # noqa: E402
from streamjoin.pipelines.io.load import load_all  # noqa: E402
from streamjoin.pipelines.policies import PolicySpec, RecallTarget  # noqa: E402
from streamjoin.pipelines.io.load import bad_arrivals_of  # noqa: E402
from streamjoin.pipelines.base.timeunits import default_period, format_duration  # noqa: E402
from streamjoin.pipelines.analysis.tuning import exact_quantile, member_indexes, required_kslack, required_static_common  # noqa: E402
# the fixed setting under the per-period criterion: the product's own (report.json "hindsight")
from streamjoin.pipelines.analysis.hindsight import PERIOD_SHARE, hindsight_fixed  # noqa: E402

TARGETS = (0.8, 0.9, 0.95, 0.99)


def measure(out, period_us: int, q: float) -> dict:
    em = out.emission
    per = [p for p in metrics.periods(em.last, em.emitted, out.replay.arrival, period_us, q) if p["truth"]]
    lat = em.latency_us[em.emitted]
    return {
        "recall": float(em.emitted.mean()) if len(em.emitted) else 1.0,
        "periods_ok": float(np.mean([p["recall"] >= q for p in per])) if per else 1.0,
        "periods": len(per),
        "mem_mean": float(out.memory.sum(axis=0).mean()) if out.memory.size else 0.0,
        "lat_mean_us": float(lat.mean()) if len(lat) else 0.0,
    }


def _fixed(name: str, setting: int, n: int) -> PolicySpec:
    return (PolicySpec("static", retention=(int(setting),) * n) if name == "static"
            else PolicySpec("kslack", k=(int(setting),) * n))


def bench_dataset(toml: Path, targets) -> list[dict]:
    cfg = resolve(toml, Flags(out=str(ROOT / "out" / "_bench_recall_unused")), check_out=False)
    streams = load_all(list(cfg.streams))
    ts = [s.ts for s in streams]
    arrival = [s.arrival for s in streams]
    keys = [s.keys if s.keys.width else None for s in streams]
    W = cfg.windows
    bad = bad_arrivals_of(streams)
    first = min(int(a.min()) for a in arrival if len(a))
    last = max(int(a.max()) for a in arrival if len(a))
    P = default_period(last - first)
    base = join(ts, arrival, keys, W, PolicySpec("none"))
    _, last_idx = member_indexes(base.replay, base.combos)
    period = (base.replay.arrival[last_idx] - base.replay.arrival[0]) // P
    req = {"static": required_static_common(base.replay, base.combos, W),
           "kslack": required_kslack(base.replay, base.combos)}
    rows = []
    for q in targets:
        for adaptive, fixed_name in (("qjoin", "static"), ("qkslack", "kslack")):
            t0 = time.perf_counter()
            out = join(ts, arrival, keys, W, PolicySpec(adaptive, target=RecallTarget(q, period_us=P)), bad_arrivals=bad)
            secs = time.perf_counter() - t0
            a = measure(out, P, q)
            setting = hindsight_fixed(req[fixed_name], period, q)
            n = len(W)
            spec = _fixed(fixed_name, setting, n)
            f = measure(join(ts, arrival, keys, W, spec), P, q)
            whole = max(setting, exact_quantile(req[fixed_name], q) if len(req[fixed_name]) else 0)
            f_plus = f if whole == setting else measure(join(ts, arrival, keys, W, _fixed(fixed_name, whole, n)), P, q)
            rows.append({"dataset": toml.parent.name, "period_us": P, "q": q, "policy": adaptive, **a,
                         "seconds": secs, "fixed": fixed_name, "fixed_setting_us": setting,
                         **{f"fixed_{k}": v for k, v in f.items()},
                         "fixed_plus_setting_us": int(whole), **{f"fixed_plus_{k}": v for k, v in f_plus.items()}})
    return rows


def _versus(r: dict, prefix: str) -> str:
    """qjoin's memory / qkslack's latency as a share of a fixed setting's."""
    mine, key = ("mem_mean", "mem") if r["policy"] == "qjoin" else ("lat_mean_us", "lat")
    theirs = r[prefix + mine]
    return f"{key} {r[mine] / theirs:.2f}" if theirs else f"{key}   nan"


def table(rows: list[dict]) -> str:
    head = (f"{'dataset':8} {'P':>5} {'Q':>4} {'policy':8} {'recall':>7} {'ok%':>5} {'mem':>9} {'lat':>8} "
            f"| {'fixed':14} {'recall':>7} {'ok%':>5} {'mem':>9} {'lat':>8} | {'vs fixed':>9} "
            f"| {'fixed+':14} {'vs fixed+':>9} {'s':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        vs, vs_plus = _versus(r, "fixed_"), _versus(r, "fixed_plus_")
        fixed = f"{r['fixed']} {format_duration(r['fixed_setting_us'])}"
        plus = f"{r['fixed']} {format_duration(r['fixed_plus_setting_us'])}"
        lines.append(
            f"{r['dataset']:8} {format_duration(r['period_us']):>5} {r['q']:4.2f} {r['policy']:8} "
            f"{r['recall']:7.4f} {100 * r['periods_ok']:5.1f} {r['mem_mean']:9.0f} "
            f"{format_duration(r['lat_mean_us']):>8} | {fixed:14} {r['fixed_recall']:7.4f} "
            f"{100 * r['fixed_periods_ok']:5.1f} {r['fixed_mem_mean']:9.0f} {format_duration(r['fixed_lat_mean_us']):>8} "
            f"| {vs:>9} | {plus:14} {vs_plus:>9} {r['seconds']:5.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--recall", nargs="*", type=float, default=list(TARGETS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    root = Path(args.corpus)
    rows = []
    for name in args.only or corpus.DATASETS:
        toml = root / name / "job.toml"
        if not toml.exists():
            corpus.build(name, root, args.scale)
        rows += bench_dataset(toml, args.recall)
        print(table([r for r in rows if r["dataset"] == name]).split("\n", 2)[-1] if len(rows) > 8 else table(rows),
              flush=True)
    print()
    print(table(rows))
    adaptive_ok = sum(r["periods_ok"] >= PERIOD_SHARE and r["recall"] >= r["q"] for r in rows)
    print(f"\ntarget held (recall >= Q overall and in >= {PERIOD_SHARE:.0%} of periods): {adaptive_ok}/{len(rows)}")
    for prefix, label in (("fixed_", "fixed"), ("fixed_plus_", "fixed+")):
        key = {"qjoin": "mem_mean", "qkslack": "lat_mean_us"}
        wins = {p: sum(r[key[p]] < r[prefix + key[p]] for r in rows if r["policy"] == p) for p in key}
        print(f"cheaper than {label}: qjoin (memory) {wins['qjoin']}/{sum(r['policy'] == 'qjoin' for r in rows)}, "
              f"qkslack (latency) {wins['qkslack']}/{sum(r['policy'] == 'qkslack' for r in rows)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
