"""Layer 5 -- the replay core (SPEC §2-§4): the coordination clock and the
policies' decisions (:mod:`.progress`, :mod:`.partitioned_progress`), candidate
enumeration (:mod:`.candidates`), join predicates (:mod:`.predicates`), the
probe order (:mod:`.probe_order`), emission (:mod:`.emit`), the rows of
``results.parquet`` (:mod:`.results`), duplicate counts (:mod:`.duplicates`) and the
tuple-at-a-time reference replay that every engine is tested against
(:mod:`.reference`)."""
