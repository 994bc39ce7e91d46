"""``python capped_cli.py BUDGET_BYTES streamjoin-args...``: the CLI with the driver
Python's data segment capped (``RLIMIT_DATA``) from the moment its SparkSession is
up, at the ``VmData`` of that moment plus ``BUDGET_BYTES`` (0: no cap) -- relative, so
what the process reserved before (thread stacks, arenas: they scale with the cores)
does not count against the budget; the JVM and the Python workers it forks were
started before and keep no cap.  Prints ``CAPPED AT VmData <MB> MB`` on stderr when
the cap is set, and the process's peak ``VmData`` and ``VmHWM`` (MB) at exit."""

from __future__ import annotations

import atexit
import resource
import sys
import threading
import time

import streamjoin.pipelines.engines.spark.engine as engine

peak = {"VmData": 0, "VmHWM": 0}
at_cap = {"VmData": 0}


def _status() -> dict[str, int]:
    """This process's ``VmData`` and ``VmHWM`` in kB."""
    with open("/proc/self/status") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f if line.split(":")[0] in peak}


def _sample() -> None:
    while True:
        for name, kb in _status().items():
            peak[name] = max(peak[name], kb)
        time.sleep(0.1)


def main() -> None:
    budget = int(sys.argv[1])
    threading.Thread(target=_sample, daemon=True).start()
    warm_up = engine.warm_up

    def capped(spark, *modules):
        warm_up(spark, *modules)
        at_cap["VmData"] = _status()["VmData"]
        if budget:
            cap = at_cap["VmData"] * 1024 + budget
            resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
            print(f"CAPPED AT VmData {at_cap['VmData'] // 1024} MB", file=sys.stderr, flush=True)

    engine.warm_up = capped
    atexit.register(lambda: print(f"PEAK VmData {peak['VmData'] // 1024} MB VmHWM {peak['VmHWM'] // 1024} MB "
                                  f"AT SESSION VmData {at_cap['VmData'] // 1024} MB", file=sys.stderr))
    from streamjoin.cli.main import main as cli

    sys.argv = ["streamjoin", *sys.argv[2:]]
    cli()


if __name__ == "__main__":
    main()
