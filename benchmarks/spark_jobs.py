"""Spark's own job times from an event log: which job of a run took the time.

    streamjoin run ... --spark-conf spark.eventLog.enabled=true \\
        --spark-conf spark.eventLog.dir=file://<dir> --spark-conf spark.eventLog.compress=false
    python benchmarks/spark_jobs.py <dir>/<application id>      # [--stages] [--sites]

Prints each job's wall time (submission to completion) with its call site --
the Python line that started it (``collect at native_progress.py:123``; a
``localCheckpoint`` / ``persist`` shows its JVM call site) -- and their sum.
A compressed log (``*.zstd``, Spark's default) is read through ``zstd -dc``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path


def events(path: Path):
    f = path if path.is_file() else next(p for p in sorted(path.iterdir()) if p.name.startswith("events"))
    text = (subprocess.run(["zstd", "-dc", str(f)], capture_output=True, text=True).stdout
            if f.suffix == ".zstd" else f.read_text())
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except ValueError:        # a log still being written ends mid-line
            continue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path, help="the event log's file or directory")
    ap.add_argument("--stages", action="store_true", help="also every stage: tasks and wall time")
    ap.add_argument("--sites", action="store_true", help="also the jobs' time summed per call site")
    args = ap.parse_args()
    jobs, stages = {}, []
    for e in events(args.log):
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            infos = e["Stage Infos"]
            jobs[e["Job ID"]] = {"start": e["Submission Time"], "end": None,
                                 "site": infos[-1]["Stage Name"] if infos else ""}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            s = e["Stage Info"]
            stages.append((s["Stage ID"], s["Stage Name"], s["Number of Tasks"],
                           (s.get("Completion Time", 0) - s.get("Submission Time", 0)) / 1000))
    total = 0.0
    for j, d in sorted(jobs.items()):
        dur = ((d["end"] or d["start"]) - d["start"]) / 1000
        total += dur
        print(f"job {j:4d} {dur:8.1f} s  {re.sub(r'at .*/', 'at ', d['site'])}")
    print(f"jobs: {len(jobs)}, {total:.1f} s in all")
    if args.sites:   # one line per call site, in first-seen order: AQE splits one action into several jobs
        per: dict[str, list] = {}
        for d in (jobs[j] for j in sorted(jobs)):
            site = re.sub(r"at .*/", "at ", d["site"])
            per.setdefault(site, []).append(((d["end"] or d["start"]) - d["start"]) / 1000)
        for site, durs in per.items():
            print(f"site {sum(durs):8.1f} s  {len(durs):3d} jobs  {site}")
    if args.stages:
        for sid, name, tasks, dur in stages:
            print(f"  stage {sid:4d} {dur:8.1f} s  {tasks:4d} tasks  {re.sub(r'at .*/', 'at ', name)}")


if __name__ == "__main__":
    main()
