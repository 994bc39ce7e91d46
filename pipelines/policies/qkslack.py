"""``qkslack``: K-slack whose per-stream K follows a recall target.

Quality-driven disorder handling (Ji et al., ICDE 2016, "Quality-driven
disorder handling for m-way sliding window stream joins"): every ``L`` (and
early, on a rate change or a burst of bad rows)
:class:`~.controller.QKSlackController` picks the smallest sort buffers
``K_i`` whose estimated recall -- the product over streams of the
productivity-weighted share of recent tuples with delay ``<= K_i`` -- keeps
the period's recall at the target.  Before the first decision ``K_i`` is
exactly MP-K-slack's.

The model (qkslack; Ji et al., ICDE 2016)
-----------------------------------------
A tuple survives iff its own delay ``delta(x) <= K_i``; a result survives iff
all its members do, so the estimated recall is ``prod_i F_i(K_i)`` with
``F_i`` the productivity-weighted share of stream ``i``'s tuples with
``delta <= K_i``.  ``K`` minimises the sort buffer ``sum_i K_i V_i`` under
the same goal; candidates are ``0``, delay quantiles and the largest delay.
"""

from __future__ import annotations

from .controller import Schedule, schedule as _schedule


def schedule(replay, windows, policy, bad_arrivals=None, keys=None) -> Schedule:
    """The slack schedule ``K_i(a)`` (``(n, N)``) and its decision log."""
    return _schedule("qkslack", replay, windows, policy.target, bad_arrivals, keys)
