"""``python capped_cli.py CAP_BYTES streamjoin-args...``: the CLI with the driver
Python's data segment capped (``RLIMIT_DATA``) from the moment its SparkSession is
up -- the JVM and the Python workers it forks were started before and keep no cap.
Prints the process's peak ``VmData`` and ``VmHWM`` (MB) on stderr at exit."""

from __future__ import annotations

import atexit
import resource
import sys
import threading
import time

import streamjoin.pipelines.engines.spark.engine as engine

peak = {"VmData": 0, "VmHWM": 0}


def _sample() -> None:
    while True:
        with open("/proc/self/status") as f:
            for line in f:
                name = line.split(":")[0]
                if name in peak:
                    peak[name] = max(peak[name], int(line.split()[1]))
        time.sleep(0.1)


def main() -> None:
    cap = int(sys.argv[1])
    threading.Thread(target=_sample, daemon=True).start()
    warm_up = engine.warm_up

    def capped(spark):
        warm_up(spark)
        if cap:
            resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))

    engine.warm_up = capped
    atexit.register(lambda: print(f"PEAK VmData {peak['VmData'] // 1024} MB VmHWM {peak['VmHWM'] // 1024} MB",
                                  file=sys.stderr))
    from streamjoin.cli.main import main as cli

    sys.argv = ["streamjoin", *sys.argv[2:]]
    cli()


if __name__ == "__main__":
    main()
