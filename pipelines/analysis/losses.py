"""Why results were lost: each valid combination that a policy did not emit gets one cause.

The causes partition the lost combinations, so per policy they add up to
``truth - emitted`` (docs/semantics.md "Why results are lost" states them with
examples; ``streamjoin compare`` reports them).  Checked in this order:

* ``late`` -- a member was dropped as late: the sorting family's late drop
  (``ts < R(a - 1)``), ``spark-ss``'s watermark filter (``ts <= wm[j - 1]``),
  ``flink``'s (``ts < G``).  A dropped row never joins, so every combination
  it belongs to is lost.
* ``batch`` (``spark-ss`` only) -- no member was dropped, but the member Spark
  processes first (the one in the earlier micro-batch; the left one when both
  are in the same batch) left the join state at the end of its own batch: its
  batch's state watermark, set at the batch boundary, already reached it.  So
  a partner in a later batch found nothing: a loss of processing arrivals a
  batch at a time.  Under Spark's rules (every row of a batch is stored before
  the other side probes; the state watermark is the band solved against the
  watermark the next batch's late filter uses) such a partner is itself late,
  so this count -- and ``evicted`` -- stay 0 for ``spark-ss``: its losses are
  its late drops (property-tested).  The cause is kept so that the partition is
  complete whatever the rules.
* ``evicted`` -- no member was dropped, and (``spark-ss``) the first member
  stayed past its own batch, but some member had left the state (buffer) before the last one
  arrived and probed it: the symmetric family's horizon passed it, Spark's
  state watermark removed it at the end of an earlier batch, Flink's cleanup
  timer fired.

What cannot happen, and so needs no cause: the sorting family emits every
combination without a late member (SPEC §4.2), the symmetric family drops
nothing, and Flink buffers every record that is not late.
"""

from __future__ import annotations

import numpy as np

from ..policies import INTERVAL_JOIN, MICROBATCH, SORTING, SYMMETRIC

#: the causes, in report order
CAUSES = ("late", "evicted", "batch")
#: the causes each family can have (the others are always 0 for it)
FAMILY_CAUSES = {SORTING: ("late",), SYMMETRIC: ("evicted",), MICROBATCH: ("late", "evicted", "batch"),
                 INTERVAL_JOIN: ("late", "evicted")}
#: codes of :func:`loss_causes` (0: emitted)
EMITTED, LATE, EVICTED, BATCH = 0, 1, 2, 3


def loss_causes(members: list[np.ndarray], emitted: np.ndarray, decisions) -> np.ndarray:
    """Per combination: :data:`EMITTED`, or the cause of its loss (:data:`LATE`,
    :data:`EVICTED`, :data:`BATCH`; int8).

    ``members``: per stream, each combination's member arrival indexes;
    ``emitted``: the emission mask; ``decisions``: the policy's
    :class:`~streamjoin.pipelines.replay.progress.Decisions`.
    """
    C = len(emitted)
    out = np.zeros(C, np.int8)
    lost = ~np.asarray(emitted, bool)
    family = decisions.family
    if family == SYMMETRIC:
        out[lost] = EVICTED
        return out
    late = np.zeros(C, bool)
    for a in members:
        late |= decisions.dropped[a]
    late &= lost
    out[late] = LATE
    rest = lost & ~late
    if family == MICROBATCH:
        mb = decisions.batches
        left, right = members
        first = np.where(mb.batch[left] <= mb.batch[right], left, right)   # Spark processes it first
        own_batch_only = mb.removal[first] == mb.batch[first]
        out[rest & own_batch_only] = BATCH
        out[rest & ~own_batch_only] = EVICTED
    elif family == INTERVAL_JOIN:
        out[rest] = EVICTED
    elif np.any(rest):   # sorting: only late members lose combinations (SPEC §4.2)
        raise AssertionError("a sorting-family policy lost a combination without a late member")
    return out


def loss_counts(codes: np.ndarray) -> dict[str, int]:
    """``{cause: lost combinations}`` from :func:`loss_causes` codes."""
    counts = np.bincount(codes, minlength=4)
    return {"late": int(counts[LATE]), "evicted": int(counts[EVICTED]), "batch": int(counts[BATCH])}
