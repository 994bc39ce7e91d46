"""Finite machines (issue 20): what an online join with bounded CPU and memory does.

The SPEC's operators (replay/) assume infinite capacity: a tuple is processed
the instant it arrives and no buffer ever fills.  This layer models the
machine under them -- processing queues, bounded buffers and load shedding
(seeds 000, 002), flow control (seed 001) -- as functions over the replay's
arrival order: column operations, except the sequential recursions (bounded
queue, state cap, and flow control's control law over control intervals),
which run as machine code built ahead of time once per machine (:mod:`.jit`).  It sits above
``replay`` (it may use its orders and facts) and below ``analysis`` (metrics
report what capacity cost).  ``run --capacity``: :mod:`.spec` (settings),
:mod:`.queueing`, :mod:`.shedding`, :mod:`.model`; :mod:`.reference` is the
per-arrival check.  ``run --flow-control``: :mod:`.flow` (seed 001; settings in
``config/flow_control.py``), checked by :mod:`.flow_reference`.
"""
