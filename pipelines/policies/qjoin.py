"""``qjoin``: symmetric join whose per-stream retention follows a recall target (seed 002).

Every ``L`` of replay time (and early, on a rate change or a burst of bad
rows) :class:`~.controller.QJoinController` re-decides ``d_i`` from the
recent past only: the lag distribution at granularity ``g``, partner
densities in basic windows ``b``, and rates; it keeps the fewest tuples for
which the estimated recall of the period still reaches the target.  Before
the first decision ``d_i`` is MP-K-slack's bound (running maximum delay).
``H_i(a) = max_{a'<=a}(T(a') - d_i(a'))`` takes the time-varying ``d``.
"""

from __future__ import annotations

from .controller import Schedule, schedule as _schedule


def schedule(replay, windows, policy, bad_arrivals=None, keys=None) -> Schedule:
    """The retention schedule ``d_i(a)`` (``(n, N)``) and its decision log."""
    return _schedule("qjoin", replay, windows, policy.target, bad_arrivals, keys)
