"""Layer 10 -- one command end to end: ``run`` (:mod:`.run`, and
:mod:`.chunked` for the bounded-memory path), ``inspect``
(:mod:`.inspect`) and ``calibrate`` (:mod:`.calibrate`: the capacity model's
service times measured on this machine)."""
