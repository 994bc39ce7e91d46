"""The route planners' cost on a year of data (``route_plan`` of a Spark run).

    python benchmarks/bench_route_plan.py ROUTER SEGMENT [ROWS]

Times ``engines/spark/routing.make_route_plans`` (histogram + ATR or CTR plan, the
driver's ``route_plan`` stage) in this process on the year of events of
``tests/engines/test_long_span.year_of_events`` (two streams, 1 h windows,
2 partitions); ``SEGMENT`` is ``--segment`` (``default``: the default T).  Prints
one JSON line: segments, wall and CPU (user + sys) seconds.  A/B: run it
alternately with two checkouts' interpreters, fresh processes (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "engines")]
from test_long_span import year_of_events  # noqa: E402

from streamjoin.pipelines.base.timeunits import parse_duration  # noqa: E402
from streamjoin.pipelines.engines.spark.routing import RouteSettings, make_route_plans  # noqa: E402


def main(router: str, segment: str, rows: int = 200_000) -> dict:
    frames = year_of_events(rows)
    ts = [np.asarray(f["ts"], dtype=np.int64) * 1_000_000 for f in frames.values()]
    W = [3_600_000_000, 3_600_000_000]
    seg = None if segment == "default" else parse_duration(segment)
    settings = RouteSettings(router, 2, seg)
    c0, t0 = os.times(), time.perf_counter()
    plans, T, _ = make_route_plans(ts, W, settings, [0, 1])
    wall = time.perf_counter() - t0
    c1 = os.times()
    p = plans[router][0]
    return {"router": router, "segment": segment, "T_us": int(T),
            "segments": int(len(p.start) if router == "atr" else p.slots), "wall_s": round(wall, 3),
            "cpu_s": round((c1.user - c0.user) + (c1.system - c0.system), 3)}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(a[0], a[1], int(a[2]) if len(a) > 2 else 200_000)))
