"""Suite-wide settings.

``STREAMJOIN_ENGINE=local``: `streamjoin run` defaults to the Spark engine;
tests that are not about Spark run the local whole-column engine (same
answer, no JVM start), in-process and in CLI subprocesses alike.  The Spark
tests (test_spark_engine.py, test_routing.py) pass ``--engine spark`` / call
the Spark engine explicitly.
"""

import os

os.environ.setdefault("STREAMJOIN_ENGINE", "local")
