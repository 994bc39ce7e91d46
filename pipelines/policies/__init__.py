"""Disorder policies (SPEC §4): what each one decides, as a small config.

Two families:

* **symmetric** (``static``; ``qjoin`` later): every stream keeps a buffer, a
  tuple joins the moment it arrives; the retention ``d_i`` sets how far behind
  the frontier a stream's state horizon trails.
* **sorting** (``none``, ``kslack``, ``mpkslack``; ``qkslack`` later): tuples
  pass a K-slack sort buffer, a synchronising merge, then an in-order window
  join; ``K_i`` sets how long the sort buffer waits.

:class:`PolicySpec` is pure configuration -- the arrays a policy implies
(``K_i(a)``, ``d_i(a)``) are built by the policy modules beside this file and
consumed by :mod:`streamjoin.pipelines.progress`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

SORTING = "sorting"
SYMMETRIC = "symmetric"

FAMILY = {
    "none": SORTING,
    "kslack": SORTING,
    "mpkslack": SORTING,
    "static": SYMMETRIC,
}

POLICY_NAMES = tuple(FAMILY)


@dataclass(frozen=True)
class PolicySpec:
    """A resolved disorder policy.

    Args:
        name: one of :data:`POLICY_NAMES`.
        k: per-stream K in microseconds (``kslack`` only), one per stream.
        retention: per-stream retention ``d_i`` in microseconds (``static``
            only), one per stream.
    """

    name: str
    k: tuple[int, ...] | None = None
    retention: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.name not in FAMILY:
            raise InputError(f"unknown policy {self.name!r}: expected one of {', '.join(POLICY_NAMES)}")
        if self.name == "kslack" and self.k is None:
            raise InputError("policy kslack needs --k DURATION")
        if self.name == "static" and self.retention is None:
            raise InputError("policy static needs --retention DURATION")
        for label, values in (("k", self.k), ("retention", self.retention)):
            if values is not None and any(v < 0 for v in values):
                raise InputError(f"--{label} must be >= 0")

    @property
    def family(self) -> str:
        return FAMILY[self.name]


def slack_matrix(replay, policy: PolicySpec):
    """``K_i(a)`` for a sorting-family policy: shape ``(n, N)`` or ``(n, 1)``."""
    from . import kslack, mpkslack, none

    return {"none": none, "kslack": kslack, "mpkslack": mpkslack}[policy.name].slack(replay, policy)


def retention_matrix(replay, policy: PolicySpec):
    """``d_i(a)`` for a symmetric-family policy: shape ``(n, N)`` or ``(n, 1)``."""
    from . import static

    return {"static": static}[policy.name].retention(replay, policy)
