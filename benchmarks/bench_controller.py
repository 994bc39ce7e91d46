"""Recall-target controllers before and after a change: whole ``join`` wall time,
medians of alternating runs in one process (issue 15, item 3).

    python benchmarks/bench_controller.py --before REV [--runs 3] [--corpus data/corpus]
                                          CASE [CASE ...]     # CASE = dataset:policy:Q

``REV``'s ``pipelines/policies/controller.py`` (``git show``) is loaded beside
the current one, as a sibling module of the same package (so its relative
imports resolve to the current tree's other modules), and the two
controllers' classes are swapped in turn for each run: the same process, the
same loaded data, the same truth enumeration; only the decisions' cost
differs.  Runs alternate (before, after, after, before, ...) and the medians
are printed.  Default controller settings, the default period from the span
(as ``bench_recall.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

from streamjoin.pipelines.base.timeunits import default_period  # noqa: E402
from streamjoin.pipelines.config.settings import Flags, resolve  # noqa: E402
from streamjoin.pipelines.engines.local import join  # noqa: E402
from streamjoin.pipelines.io.load import bad_arrivals_of, load_all  # noqa: E402
from streamjoin.pipelines.policies import PolicySpec, RecallTarget  # noqa: E402
from streamjoin.pipelines.policies import controller as current  # noqa: E402

CLASSES = ("QJoinController", "QKSlackController")


def load_before(rev: str):
    """``rev``'s controller module, as ``streamjoin.pipelines.policies._controller_before``."""
    src = subprocess.run(["git", "show", f"{rev}:pipelines/policies/controller.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "controller_before.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(f"{current.__package__}._controller_before", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git revision of the controller to compare with")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    ap.add_argument("cases", nargs="+", help="dataset:policy:Q, e.g. clicks:qjoin:0.99")
    args = ap.parse_args(argv)
    before = load_before(args.before)
    versions = {"before": {c: getattr(before, c) for c in CLASSES},
                "after": {c: getattr(current, c) for c in CLASSES}}
    print(f"{'dataset':8} {'policy':8} {'Q':>4} {'before s':>9} {'after s':>8}  "
          f"(medians of {args.runs} alternating runs)")
    for case in args.cases:
        name, policy, q = case.split(":")
        toml = Path(args.corpus) / name / "job.toml"
        if not toml.exists():
            corpus.build(name, Path(args.corpus), 1.0)
        cfg = resolve(toml, Flags(out=str(ROOT / "out" / "_bench_controller_unused")), check_out=False)
        streams = load_all(list(cfg.streams))
        ts = [s.ts for s in streams]
        arrival = [s.arrival for s in streams]
        keys = [s.keys if s.keys.width else None for s in streams]
        span = max(int(a.max()) for a in arrival if len(a)) - min(int(a.min()) for a in arrival if len(a))
        spec = PolicySpec(policy, target=RecallTarget(float(q), period_us=default_period(span)))
        times = {"before": [], "after": []}
        for r in range(args.runs):
            for label in (("before", "after") if r % 2 == 0 else ("after", "before")):
                for c, cls in versions[label].items():
                    setattr(current, c, cls)      # controller.schedule looks the class up by name
                t0 = time.perf_counter()
                join(ts, arrival, keys, cfg.windows, spec, bad_arrivals=bad_arrivals_of(streams))
                times[label].append(time.perf_counter() - t0)
        for c, cls in versions["after"].items():
            setattr(current, c, cls)
        print(f"{name:8} {policy:8} {float(q):4.2f} {np.median(times['before']):9.1f} {np.median(times['after']):8.1f}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
