"""Suite-wide settings.

``STREAMJOIN_ENGINE=local``: `streamjoin run` defaults to the Spark engine;
tests that are not about Spark run the local whole-column engine (same
answer, no JVM start), in-process and in CLI subprocesses alike.  The Spark
tests (engines/test_spark_engine.py, route/test_routing.py) pass ``--engine spark`` / call
the Spark engine explicitly.

Test folders mirror the package (``tests/replay/`` for ``pipelines/replay/``,
...); helpers shared between them live in ``tests/helpers/`` and are
imported as ``helpers.<module>`` from any folder: this file puts ``tests/``
on ``sys.path``.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("STREAMJOIN_ENGINE", "local")
