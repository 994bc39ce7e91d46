"""Layer 4 -- files in and out: loading and normalising Parquet streams
(:mod:`.load`), arrival-time chunks for the bounded-memory engine
(:mod:`.chunks`) and the all-or-nothing output directory (:mod:`.output`)."""
