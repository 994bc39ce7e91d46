"""``qjoin``: symmetric join whose per-stream retention follows a recall target (seed 002).

Every ``L`` of replay time (and early, on a rate change or a burst of bad
rows) :class:`~.controller.QJoinController` re-decides ``d_i`` from the
recent past only: the lag distribution at granularity ``g``, partner
densities in basic windows ``b``, and rates; it keeps the fewest tuples for
which the estimated recall of the period still reaches the target.  Before
the first decision ``d_i`` is MP-K-slack's bound (running maximum delay).
``H_i(a) = max_{a'<=a}(T(a') - d_i(a'))`` takes the time-varying ``d``.

The model (qjoin; seed 002 §1.4, completed)
-------------------------------------------
A tuple ``y`` of stream ``i`` arriving at index ``a`` has lag ``l = T(a) -
y.ts``.  A partner ``x`` of stream ``j`` with offset ``o = x.ts - y.ts`` in
``y``'s owned span ``[-W_j, U_j]`` (``U_j = min(W_i, M_j(a) - y.ts)``:
partners that have not arrived are not ``y``'s to produce) is still buffered
iff ``o >= l - d_j - W_j``.  With partners spread evenly over the span (the
basic-window counters give their density around ``y.ts``), the share of
``y``'s results kept is a *ramp* in ``d_j``: 0 up to ``s = l - W_j - U_j - 1``,
then ``(d_j - s) / span``, 1 from ``d_j = l`` on (exactly the integer count
of kept offsets).  ``y`` weighs its expected result count, the cross count
``span * density`` of seed 002 (6)-(7); the selectivity is common to both
sides and cancels in the ratio.  The estimated recall of a set of tuples
under ``d`` is the weighted mean of their kept shares.

Two streams: the kept weight is ``A_1(d_0) + A_0(d_1)`` (stream 0's tuples
depend on ``d_1`` only and vice versa), each a sum of ramps evaluated exactly
at every candidate with sorted breakpoints and prefix sums; the cheapest pair
(memory ``sum_i (d_i + W_i) V_i``, seed 002 (2)) meeting the goal is found by
walking ``d_0``'s candidates and searching ``d_1``'s (both sides monotone),
``O(C log C)``.  More streams: coordinate descent -- each stream in turn takes
the smallest candidate that keeps the goal, until none moves (a Pareto-minimal
vector), each step a binary search.

Candidates for ``d_j``: ``0``, the ramp breakpoints of the tuples probing
``j`` (all of them when few, else 256 quantiles, denser in the top tail where
a high target decides), and the largest delay seen; rounded up to ``g``.
"""

from __future__ import annotations

from .controller import Schedule, schedule as _schedule


def schedule(replay, windows, policy, bad_arrivals=None, keys=None) -> Schedule:
    """The retention schedule ``d_i(a)`` (``(n, N)``) and its decision log."""
    return _schedule("qjoin", replay, windows, policy.target, bad_arrivals, keys)
