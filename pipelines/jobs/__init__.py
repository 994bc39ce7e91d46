"""Layer 10 -- one command end to end: ``run`` (:mod:`.run`, and
:mod:`.chunked` for the bounded-memory path) and ``inspect``
(:mod:`.inspect`)."""
