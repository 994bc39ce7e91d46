"""Layer 12 -- synthetic data: ``streamjoin generate`` (:mod:`.generate`) and
the nightly sample (:mod:`.nightly_sample`)."""
