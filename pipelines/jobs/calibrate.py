"""``streamjoin calibrate``: measure ``--capacity tuple=DUR,result=DUR`` on this machine (issue 20 item 1).

Generates a few deterministic inputs (the ``bench`` sample of
``streamjoin generate`` at :data:`SCALES`, in a temporary directory),
replays each with every window width of :data:`WINDOWS_US` -- the sizes vary
the tuple count, the widths the results per tuple, independently -- times the
named engine's join stage exactly as ``run`` times it (``jobs/run.py``: the
local engine's :func:`~streamjoin.pipelines.engines.local.join` call,
nothing else), ``runs`` times per input in alternating order, and fits the
medians with :func:`~streamjoin.pipelines.analysis.calibration.fit`.
Publishes ``calibrate.json`` (machine, inputs, every time, the fit)
atomically under ``--out``.

The generator lives in the ``tools`` layer, above ``jobs``: the caller
passes it in (``generate``, the signature of
:func:`streamjoin.pipelines.tools.generate.generate`).  Only the local engine
is measured: the capacity model runs on it alone (docs/semantics.md,
"Capacity (issue 20)").
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.calibration import capacity_option, fit
from ..base.errors import InputError
from ..base.version import tool_version
from ..config.options import check_target, check_writable
from ..config.settings import Flags, resolve
from ..config.variants import DEFAULT_ROLES, parse_policy_text, variant_policy
from ..engines.local import join
from ..io.load import bad_arrivals_of, load_all
from ..io.output import AtomicOutput, locks_out
from ..replay.predicates import space_of, where_of
from ..report.json import json_safe
from .run import resolve_period

#: scales of the ``bench`` sample (3,000,000 tuples at 1, over 300 s): 150,000 .. 600,000 tuples at --scale 1
SCALES = (0.05, 0.1, 0.2)
#: window widths W (both streams), microseconds: about 0.7, 2.7 and 11 results per tuple on ``bench``
WINDOWS_US = (25_000, 100_000, 400_000)
SEED = 7
DEFAULT_RUNS = 5
#: the ideal operator with a retention above the inputs' largest delay (about 1 s): it emits every result
#: (emitted = truth), so ``result=`` is the cost of one result, not of one emitted among lost ones
DEFAULT_POLICY = "static --retention 2s"
#: policies the capacity model runs (docs/semantics.md, "Capacity": where it runs)
CAPACITY_POLICIES = ("none", "kslack", "mpkslack", "qkslack", "static", "qjoin")
ENGINES = ("local", "spark")
METHOD = ("median join-stage time (the local engine's join call, as run times it) of each input over the runs, "
          "runs in alternating order after one unmeasured warm-up join; least squares "
          "time = tuple * tuples + result * results + intercept over the medians; results = results the policy "
          "emits (the capacity model's per-result charge); the intercept is reported, not used")

RunCallback = Callable[[int, int, str, float], None]


@dataclass(frozen=True)
class CalibrateSettings:
    """What ``streamjoin calibrate`` was asked (``scale`` multiplies :data:`SCALES`)."""

    out: Path
    engine: str = "local"
    policy: str = DEFAULT_POLICY
    runs: int = DEFAULT_RUNS
    scale: float = 1.0


def check_settings(s: CalibrateSettings) -> None:
    """One-line refusals before any work."""
    if s.engine not in ENGINES:
        raise InputError(f"calibrate --engine {s.engine!r}: expected local")
    if s.engine == "spark":
        raise InputError("calibrate --engine spark: calibrate times the local engine's join only; "
                         "use --engine local")
    if isinstance(s.runs, bool) or not isinstance(s.runs, int) or s.runs < 1:
        raise InputError(f"calibrate --runs {s.runs!r}: expected a whole number >= 1")
    if not (isinstance(s.scale, (int, float)) and np.isfinite(s.scale) and s.scale > 0):
        raise InputError(f"calibrate --scale {s.scale!r}: expected a number > 0")
    if round(min(SCALES) * s.scale * 1_000_000) < 1:
        raise InputError(f"calibrate --scale {s.scale!r}: the smallest input would have no rows")
    variant = parse_policy_text(s.policy)
    if variant.role in DEFAULT_ROLES or variant.name not in CAPACITY_POLICIES:
        raise InputError(f"calibrate --policy {s.policy!r}: expected one the capacity model runs "
                         f"({', '.join(CAPACITY_POLICIES)}), with its settings")
    check_target(s.out, "calibrate")
    check_writable(s.out)


def machine() -> dict[str, Any]:
    """This machine: CPU model, cores (all and usable by this process), load average now."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "cores_usable": usable,
        "load_average": _load(), "platform": platform.platform(), "python": platform.python_version(),
    }


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _inputs(generate, root: Path, s: CalibrateSettings) -> list[dict[str, Any]]:
    """Generate and load each size once: ``[{scale, cfg, streams, policy}]``."""
    loaded = []
    for i, scale in enumerate(SCALES):
        folder = root / f"size{i}"
        generate("bench", folder, seed=SEED, scale=scale * s.scale)
        cfg = resolve(folder / "bench.toml", Flags(out=str(root / "unused"), engine="local"))
        streams = load_all(list(cfg.streams))
        cfg = resolve_period(cfg, streams)
        policy = variant_policy(parse_policy_text(s.policy), cfg.policy, cfg.streams, None, cfg.period_us)
        loaded.append({"scale": scale * s.scale, "cfg": cfg, "streams": streams, "policy": policy})
    return loaded


def _timed_join(case: dict[str, Any], window_us: int) -> tuple[float, int, int, int]:
    """(seconds of the join call, tuples replayed, results emitted, truth results)."""
    cfg, streams, policy = case["cfg"], case["streams"], case["policy"]
    keys = [st.keys if st.keys.width else None for st in streams]
    bad = bad_arrivals_of(streams, policy.target.triggers.bad_rows_reason) if policy.adaptive else None
    space, where = space_of(cfg, streams), where_of(cfg, streams)
    t0 = time.perf_counter()
    outcome = join([st.ts for st in streams], [st.arrival for st in streams], keys, [window_us] * len(streams),
                   policy, space=space, where=where, bad_arrivals=bad)
    seconds = time.perf_counter() - t0
    return (seconds, len(outcome.replay.arrival), int(np.count_nonzero(outcome.emission.emitted)),
            len(outcome.combos))


def run_calibrate(s: CalibrateSettings, *, generate, command: str = "calibrate",
                  on_run: RunCallback | None = None, display: AbstractContextManager | None = None) -> dict[str, Any]:
    """Measure, fit, publish ``calibrate.json``; return it.  ``generate``: see the module doc.
    ``on_run(done, total, label, seconds)`` after each measured join (progress); ``display``:
    held open while the work runs (the CLI's progress bar).  The settings are checked once
    (:func:`check_settings`), first: a bad one fails before ``display`` opens or ``--out``
    is locked."""
    check_settings(s)
    with display if display is not None else nullcontext():
        return _measure(s, generate=generate, command=command, on_run=on_run)


@locks_out("calibrate")  # a second calibrate on the same --out exits 4
def _measure(s: CalibrateSettings, *, generate, command: str, on_run: RunCallback | None) -> dict[str, Any]:
    """:func:`run_calibrate` once its settings are checked."""
    started = time.perf_counter()
    before = machine()
    with tempfile.TemporaryDirectory(prefix="streamjoin-calibrate-") as tmp:
        t0 = time.perf_counter()
        cases = _inputs(generate, Path(tmp), s)
        generate_s = time.perf_counter() - t0
        runs = [{"case": c, "window_us": w} for c in cases for w in WINDOWS_US]
        _timed_join(cases[0], WINDOWS_US[0])   # warm-up: first-call costs (imports, thread pools) are not timed
        total, done = len(runs) * s.runs, 0
        for round_no in range(s.runs):   # alternating: every input once per round, the order reversed every other
            for run in (runs if round_no % 2 == 0 else runs[::-1]):
                seconds, tuples, results, truth = _timed_join(run["case"], run["window_us"])
                run.setdefault("times_s", []).append(seconds)
                run.update(tuples=tuples, results=results, truth=truth)
                done += 1
                if on_run is not None:
                    on_run(done, total, f"{tuples:,} tuples, W {run['window_us'] // 1000}ms", seconds)
    inputs = [{"kind": "bench", "seed": SEED, "scale": r["case"]["scale"], "window_us": r["window_us"],
               "tuples": r["tuples"], "results": r["results"], "truth_results": r["truth"],
               "times_s": r["times_s"], "median_s": statistics.median(r["times_s"])} for r in runs]
    f = fit([i["tuples"] for i in inputs], [i["results"] for i in inputs], [i["median_s"] for i in inputs])
    option = capacity_option(f)
    after = machine()
    result: dict[str, Any] = {
        "kind": "calibrate", "tool_version": tool_version(), "command": command,
        "engine": s.engine, "policy": s.policy, "runs": s.runs, "scale": s.scale,
        "machine": before | {"load_average_end": after["load_average"]},
        "method": METHOD,
        "inputs": inputs,
        "fit": f.to_dict(),
        "capacity_option": f"--capacity {option}" if option else None,
        "problem": None if option else ("a fitted service time is negative: the measurements are too noisy "
                                        "to separate the terms; rerun with more --runs or a larger --scale"),
    }
    out = Path(s.out)
    with AtomicOutput(out, "calibrate") as staging:
        result["timings_s"] = {"generate": generate_s, "total": time.perf_counter() - started}
        result["outputs"] = {"calibrate": str(out / "calibrate.json")}
        (staging / "calibrate.json").write_text(json.dumps(json_safe(result), indent=2) + "\n")
    return result
