"""Issue 19: the native read alone (``read.read_streams``) on a benchmark input, local[2]:

    python benchmarks/native_read.py benchmarks/data/scale3/bench.toml

prints the read's wall time, its CPU time (this process plus its descendants: the JVM
and the Python workers, from /proc after the warm-up and after the read) and row_bytes."""
import os, sys, time, json
from pathlib import Path

def tree_cpu(root: int) -> float:
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                f = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            rest = f[f.rindex(")") + 2:].split()
            kids.setdefault(int(rest[1]), []).append((int(p), rest))
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            rest = open(f"/proc/{pid}/stat").read()
            rest = rest[rest.rindex(")") + 2:].split()
        except OSError:
            continue
        total += sum(int(x) for x in rest[11:15]) / tick
        todo += [c for c, _ in kids.get(pid, [])]
    return total

from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.session import spark_session, warm_up
from streamjoin.pipelines.engines.spark.read import read_streams
import tempfile
cfg = resolve(Path(sys.argv[1]), Flags(out=tempfile.mkdtemp() + "/o", engine="spark", master="local[2]"))
with spark_session("local[2]", 4, [("spark.streamjoin.native", "true")]) as spark:
    warm_up(spark)
    c0, t0 = tree_cpu(os.getpid()), time.perf_counter()
    got = read_streams(spark, list(cfg.streams), quarantine_dir=Path(tempfile.mkdtemp()))
    t1, c1 = time.perf_counter(), tree_cpu(os.getpid())
    print(json.dumps({"read_wall_s": round(t1 - t0, 2), "read_cpu_s": round(c1 - c0, 2),
                      "row_bytes": [s.row_bytes for s in got.streams]}))
    got.release()
