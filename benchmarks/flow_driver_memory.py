"""Driver memory that ``--flow-control`` adds, in bytes per input tuple (issue 19 / 20).

    python benchmarks/flow_driver_memory.py [--tuples 400000] [--streams 2] [--policy max-flow|min-flow]

Flow control runs on the driver before the join, on either engine
(``capacity/flow.delay_arrivals``).  This measures, with tracemalloc over
numpy's buffers, (a) the peak of what the model allocates while it runs
(tracemalloc starts just before it, so the input arrays alive before are not
counted; the peak counts every traced allocation, numpy buffers and Python
objects alike), and (b) what stays alive afterwards (the
``FlowOutcome``'s arrays by ``nbytes``: the delayed arrivals per tuple, the
per-interval series), split into the per-tuple part and the per-interval
part.  The per-interval series are allocated by the compiled interval loop
(numba), which tracemalloc does not see; they are counted by size.  The input: two
(or ``--streams``) Poisson streams of equal rate over 100 s, disordered by up
to 20 ms, and units at 0.75x the offered rate (``buffer=1000``, default
interval 10 ms), so the buffers back up and most tuples are delayed.
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np

NUMPY_DOMAIN = 389047   # numpy's tracemalloc domain (NPY_TRACE_DOMAIN)


def numpy_bytes() -> int:
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, NUMPY_DOMAIN)])
    return sum(t.size for t in snap.traces)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuples", type=int, default=400_000)
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--policy", choices=["max-flow", "min-flow"], default="max-flow")
    args = ap.parse_args()
    from streamjoin.pipelines.capacity.flow import delay_arrivals
    from streamjoin.pipelines.config.flow_control import parse_flow_control

    span_us = 100_000_000
    rng = np.random.default_rng(7)
    per = args.tuples // args.streams
    arrivals = [np.sort(rng.integers(0, span_us, per)) + rng.integers(0, 20_000, per) for _ in range(args.streams)]
    N = per * args.streams
    rate = 0.75 * N / (span_us / 1e6)
    fc = parse_flow_control(f"buffer=1000,rate={rate:.0f},policy={args.policy}")
    delay_arrivals([a[:1000] for a in arrivals], fc)   # build / load the compiled kernel first
    tracemalloc.start()   # traces only what is allocated from here on: the model's own allocations
    flow = delay_arrivals(arrivals, fc)
    peak = tracemalloc.get_traced_memory()[1]
    kept = numpy_bytes()   # numpy arrays the model allocated that are still alive
    per_tuple = sum(a.nbytes for a in flow.arrival)
    per_interval = sum(x.nbytes for x in (flow.occupancy, flow.rate, flow.processing, flow.admitted))
    intervals = flow.rate.shape[0]
    delayed = sum(int(np.count_nonzero(d != a)) for d, a in zip(flow.arrival, arrivals))
    print(f"{args.policy}: tuples {N:,}, streams {args.streams}, intervals {intervals:,}, delayed {delayed / N:.1%}")
    print(f"retained after the model: {(per_tuple + per_interval) / N:.1f} B/tuple = delayed arrivals "
          f"{per_tuple / N:.1f} B/tuple + per-interval series {per_interval / intervals:.0f} B/interval "
          f"({per_interval / N:.1f} B/tuple here); numpy arrays it allocated still alive {kept / N:.1f} B/tuple "
          f"(the series are made by the compiled loop, outside numpy's tracing)")
    print(f"peak while the model runs: {peak / N:.1f} B/tuple of what it allocated (numpy arrays and Python "
          f"objects; the input's arrays not counted), plus the compiled loop's series (at most twice the retained "
          f"ones while they grow)")

if __name__ == "__main__":
    main()
