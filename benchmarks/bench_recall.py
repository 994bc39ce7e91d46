"""Recall-target benchmark (issue 5): qjoin and qkslack against MP-K-slack.

    python benchmarks/bench_recall.py [--recall 0.95] [--period 5s] [--samples soccer sensors]

Runs the real command once per sample and policy::

    streamjoin run samples/<s>/<s>.toml --policy P [--recall Q] --period 5s --no-results --out <tmp>

and prints, from each ``report.json``: overall recall, the periods whose
recall reached the target, mean / peak memory (tuples held) and mean / p95
latency, plus qjoin's memory and latency as a share of MP-K-slack's (QJoin's
published claims: memory -50..80 %, latency -80..95 %).  A 5 s period gives
13 periods on soccer (60 s) and 91 on sensors (450 s); the default 60 s
period would give only 1 and 8.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("mpkslack", "qkslack", "qjoin")


def streamjoin_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("streamjoin")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "streamjoin.cli.main"]


def run(sample: str, policy: str, recall: float, period: str, tmp: Path) -> dict:
    out = tmp / f"{sample}-{policy}"
    cmd = [*streamjoin_cmd(), "run", str(ROOT / "samples" / sample / f"{sample}.toml"), "--policy", policy,
           "--period", period, "--no-results", "--out", str(out)]
    if policy != "mpkslack":
        cmd += ["--recall", str(recall)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    report = json.loads((out / "report.json").read_text())
    periods = report["periods"]
    met = sum(p["recall"] >= recall for p in periods)
    decisions = report.get("policy_decisions") or []
    return {
        "sample": sample,
        "policy": policy,
        "recall": report["recall"],
        "met": met,
        "periods": len(periods),
        "mem_mean": report["memory_tuples"]["mean"],
        "mem_peak": report["memory_tuples"]["peak"],
        "lat_mean": report["latency_us"]["mean"] or 0.0,
        "lat_p95": report["latency_us"]["p95"] or 0,
        "decisions": len(decisions),
        "early": sum(d["reason"] != "interval" for d in decisions),
        "seconds": report["timings_s"]["total"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recall", type=float, default=0.95)
    ap.add_argument("--period", default="5s")
    ap.add_argument("--samples", nargs="+", default=["soccer", "sensors"])
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sample in args.samples:
            for policy in POLICIES:
                rows.append(run(sample, policy, args.recall, args.period, Path(tmp)))
    print(f"target recall {args.recall}, period {args.period}")
    print(f"{'sample':8} {'policy':9} {'recall':>7} {'periods>=Q':>11} {'mem mean':>9} {'mem peak':>9} "
          f"{'lat mean':>10} {'lat p95':>10} {'decisions (early)':>18} {'time':>6}")
    for r in rows:
        print(f"{r['sample']:8} {r['policy']:9} {r['recall']:7.4f} {r['met']:>5}/{r['periods']:<5} "
              f"{r['mem_mean']:9.0f} {r['mem_peak']:9d} {r['lat_mean'] / 1e3:8.1f}ms {r['lat_p95'] / 1e3:8.1f}ms "
              f"{r['decisions']:>10} ({r['early']:>4}) {r['seconds']:5.1f}s")
    print()
    for sample in args.samples:
        mp = next(r for r in rows if r["sample"] == sample and r["policy"] == "mpkslack")
        for policy in ("qjoin", "qkslack"):
            q = next(r for r in rows if r["sample"] == sample and r["policy"] == policy)
            mem = q["mem_mean"] / mp["mem_mean"] if mp["mem_mean"] else float("nan")
            lat = q["lat_mean"] / mp["lat_mean"] if mp["lat_mean"] else float("nan")
            print(f"{sample}: {policy} vs mpkslack: mean memory {mem:.1%}, mean latency {lat:.1%}, "
                  f"periods meeting target {q['met'] / q['periods']:.0%}")


if __name__ == "__main__":
    main()
