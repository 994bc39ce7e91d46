"""Layer 6 -- numbers about a replay: recall, latency and memory metrics
(:mod:`.metrics`) and the exact buffer tuning (:mod:`.tuning`)."""
