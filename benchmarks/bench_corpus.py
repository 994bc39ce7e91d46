"""Whole-process cost of every corpus dataset with default settings (issue 15).

    python benchmarks/bench_corpus.py [--corpus data/corpus] [--scales 0.25 1] [--only NAME ...]
                                      [--engine local] [--recall 0.95]

For each dataset and scale (``benchmarks/corpus.py``; a scale shrinks the
rows and keeps the span), runs the real command as a new user would --
the dataset's ``job.toml`` and nothing else (its policy, the default period,
report.json + report.html, no results file) -- and, with ``--recall Q``, the
same with ``--policy qjoin --recall Q`` and ``--policy qkslack --recall Q``::

    /usr/bin/time -v streamjoin run DIR/job.toml --engine local --no-results --out TMP

and prints rows, span, wall seconds and peak RSS (GNU time's "Maximum
resident set size"), plus the period the run chose.  The point: cost follows
the rows, not the span (a year of 75k rows costs what 20 minutes of 75k rows
costs).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

from streamjoin.pipelines.base.timeunits import format_duration  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def streamjoin_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("streamjoin")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "streamjoin.cli.main"]


def run_once(toml: Path, engine: str, extra: list[str], tmp: Path) -> dict:
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["/usr/bin/time", "-v", *streamjoin_cmd(), "run", str(toml), "--engine", engine, "--no-results",
           "--out", str(out), *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip().splitlines()[-1]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    report = json.loads((out / "report.json").read_text())
    return {"wall_s": wall, "rss_gb": rss_kb / 1e6, "period_us": report.get("period_us"),
            "recall": report["recall"], "rows": sum(s["rows"] for s in report["streams"]),
            "job_s": report["timings_s"].get("total")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT / "data" / "corpus-scaled"))
    ap.add_argument("--scales", nargs="*", type=float, default=[0.25, 1.0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--engine", default="local")
    ap.add_argument("--recall", type=float, default=None)
    args = ap.parse_args(argv)
    variants = [("job.toml", [])]
    if args.recall is not None:
        variants += [(f"qjoin {args.recall}", ["--policy", "qjoin", "--recall", str(args.recall)]),
                     (f"qkslack {args.recall}", ["--policy", "qkslack", "--recall", str(args.recall)])]
    print(f"{'dataset':8} {'scale':>5} {'rows':>8} {'span':>7} {'run':14} {'period':>6} {'recall':>7} "
          f"{'wall s':>7} {'job s':>6} {'RSS GB':>7}")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in args.only or corpus.DATASETS:
            for scale in args.scales:
                if name == "flights" and scale > 1:
                    continue
                root = Path(args.corpus) / f"x{scale:g}"
                toml = root / name / "job.toml"
                if not toml.exists():
                    corpus.build(name, root, scale)
                span = corpus.facts(toml)["span_us"]
                for label, extra in variants:
                    r = run_once(toml, args.engine, extra, tmp)
                    print(f"{name:8} {scale:5g} {r['rows']:8d} {format_duration(span):>7} {label:14} "
                          f"{format_duration(r['period_us']):>6} {r['recall']:7.4f} {r['wall_s']:7.2f} "
                          f"{r['job_s'] or 0:6.2f} {r['rss_gb']:7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
