"""Layer 6 -- numbers about a replay: recall, latency and memory metrics
(:mod:`.metrics`), the exact buffer tuning (:mod:`.tuning`) and ``calibrate``'s
least-squares fit of service times (:mod:`.calibration`)."""
