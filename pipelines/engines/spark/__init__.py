"""The Spark engine (:mod:`.engine`) and its record hand-off between the
driver and the Python workers (:mod:`.handoff`)."""
