"""Layer 1 -- primitives with no knowledge of runs: errors and exit codes,
time units and durations, column sorting, nearest-rank percentiles, the streaming tally, the memory
allocator settings."""
