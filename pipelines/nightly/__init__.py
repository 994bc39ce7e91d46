"""Layer 11 -- nightly runs over day partitions: partition discovery
(:mod:`.partitions`), one day's join (:mod:`.daily`), the backfill driver
(:mod:`.backfill`), the per-day manifest, lock and atomic publish, and the
run log."""
