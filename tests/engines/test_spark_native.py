"""Issue 19: the native Spark path (spark.streamjoin.native, pipelines/engines/spark/native*.py)
equals the local engine -- results as a set, report.json's numbers exactly -- on real Spark.

One quiet ``local[2]`` session for the in-process runs (run_job reuses it); one CLI run on
``local-cluster[2,1,1024]``; one CLI run whose driver Python has a capped address space.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.spark_runs import with_null_ts
from helpers.spark_runs import assert_same_run as assert_same
from helpers.spark_runs import cli_local_and_spark, run, write_inputs

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.native import native_path
from streamjoin.pipelines.io.output import RESULTS_COMPRESSION
from streamjoin.pipelines.engines.spark.session import spark_session

NATIVE = "spark.streamjoin.native=true"


@pytest.fixture(scope="module")
def spark():
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g")]) as s:
        yield s


def assert_same_run(a, b, ra, rb):
    assert_same(a, b, ra, rb, bytes_mean_exact=False)


CASES = [
    # n, policy flags, router, partitions
    (2, {"policy": "mpkslack"}, "atr", 3),
    (3, {"policy": "kslack", "k": ["20ms"]}, "atr", 2),
    (3, {"policy": "static", "retention": ["15ms"]}, "atr", 3),
    (2, {"policy": "static", "retention": ["5ms"]}, "none", 1),
    (4, {"policy": "none"}, "atr", 3),
    (4, {"policy": "mpkslack"}, "none", 2),
]


@pytest.mark.parametrize("n,policy,router,partitions", CASES)
def test_native_equals_the_local_engine(spark, tmp_path, n, policy, router, partitions):
    cfg = write_inputs(tmp_path, n, seed=n * 10 + partitions)
    local = run(cfg, tmp_path / "local", engine="local", **policy)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=[NATIVE], **policy)
    assert nat["routing"]["native"] is True and nat["routing"]["router"] == router
    assert local["emitted_results"] > 0
    assert_same_run(tmp_path / "local", tmp_path / "nat", local, nat)
    d = tmp_path / "nat" / "results.parquet"
    assert (d / "_SUCCESS").exists() and any(p.name.startswith("part-") for p in d.iterdir())


def test_native_partitions_from_the_input_size(spark, tmp_path, monkeypatch, capsys):
    """No --partitions: P from the input's rows (engines/spark/sizing.py), used by the
    scans, the ATR plan and spark.sql.shuffle.partitions (restored after the run); the bound
    lowered to 150 tuples so 670 give ceil(670 / 150) = 5, rounded up to 6 on local[2]."""
    from streamjoin.pipelines.engines.spark import sizing

    monkeypatch.setattr(sizing, "TUPLES_PER_TASK", 150)
    cfg = write_inputs(tmp_path, 3, seed=7)
    policy = {"policy": "mpkslack"}
    local = run(cfg, tmp_path / "local", engine="local", **policy)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="atr", spark_conf=[NATIVE], **policy)
    assert nat["routing"]["partitions"] == 6 and len(set(nat["routing"]["atr"]["segment_partitions"])) > 2
    chosen = nat["routing"]["spark_partitions"]
    assert (chosen["partitions"], chosen["from"], chosen["tuples_per_task"]) == (6, "input", 112)
    assert "note: Spark partitions: 6 (from 670 input tuples" in capsys.readouterr().err
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    assert_same_run(tmp_path / "local", tmp_path / "nat", local, nat)


def test_native_prefixing_stream_names_and_a_remote_default_fs(spark, tmp_path):
    """Stream ``o`` prefixes ``o_eu``, stream ``rel``'s column ``us`` spells the facts'
    ``rel_us``, the payload schemas differ; fs.defaultFS names an unreachable HDFS: the
    results are written to the local --out (a file:// URI) and equal the local engine's."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(5)
    payloads = {"o": lambda m: {"val": rng.normal(size=m), "tag": [f"t{i % 5}" for i in range(m)]},
                "o_eu": lambda m: {"amount": rng.integers(0, 100, m)},
                "rel": lambda m: {"us": [f"u{i % 3}" for i in range(m)]}}
    for name, make in payloads.items():
        ts = np.sort(rng.integers(0, 1_000_000, 150))
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 30_000, 150), "key": rng.integers(0, 3, 150),
                      **make(150)}).write_parquet(tmp_path / f"{name}.parquet")
    cfg = tmp_path / "j.toml"
    cfg.write_text("\n".join(['[run]', 'period = "200ms"'] + [
        f'[[stream]]\nname = "{s}"\npath = "{s}.parquet"\nts = "ts"\narrival = "arrival"\nunit = "us"\n'
        f'keys = ["key"]\nwindow = "40ms"' for s in payloads]))
    policy = {"policy": "kslack", "k": ["10ms"]}
    local = run(cfg, tmp_path / "local", engine="local", **policy)
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    before = hconf.get("fs.defaultFS")
    hconf.set("fs.defaultFS", "hdfs://nohost.invalid:9000")
    try:
        nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="atr", partitions=2,
                  spark_conf=[NATIVE], **policy)
    finally:
        hconf.set("fs.defaultFS", before)
    assert nat["routing"]["native"] is True and local["emitted_results"] > 0
    assert_same_run(tmp_path / "local", tmp_path / "nat", local, nat)
    assert (tmp_path / "nat" / "results.parquet" / "_SUCCESS").exists()
    cols = pl.read_parquet(tmp_path / "nat" / "results.parquet").columns
    assert {"o_val", "o_tag", "o_eu_amount", "rel_us"} <= set(cols)
    import pyarrow.parquet as pq   # the project's results codec (io/output.RESULTS_COMPRESSION), not zstd

    part = next(p for p in (tmp_path / "nat" / "results.parquet").iterdir() if p.name.startswith("part-")
                and pq.ParquetFile(p).metadata.num_row_groups)
    assert pq.ParquetFile(part).metadata.row_group(0).column(0).compression == RESULTS_COMPRESSION.upper()


def test_native_mode_auto_true_false_and_refusals(tmp_path):
    cfg = write_inputs(tmp_path, 2, seed=3)

    def resolved(**flags):
        return resolve(cfg, Flags(out=str(tmp_path / "o"), engine="spark", **flags))

    assert native_path(resolved(master="spark://h:7077", policy="mpkslack"))          # auto: a cluster master
    assert not native_path(resolved(master="local[2]", policy="mpkslack"))            # auto: a local master
    assert native_path(resolved(master="local[2]", policy="kslack", k=["1ms"], spark_conf=[NATIVE]))
    assert not native_path(resolved(master="spark://h:7077", policy="none",
                                    spark_conf=["spark.streamjoin.native=false"]))
    # auto falls back to the current path for what the native path does not do ...
    assert not native_path(resolved(master="spark://h:7077", policy="flink", watermark=["10ms"]))
    assert native_path(resolved(master="spark://h:7077", policy="qjoin", recall=0.9))   # test_spark_native_adaptive
    # ... and an explicit true is refused in one line, before anything runs
    with pytest.raises(InputError, match=r"spark.streamjoin.native=true: not with policy flink"):
        native_path(resolved(master="local[2]", policy="flink", watermark=["10ms"], spark_conf=[NATIVE]))
    with pytest.raises(InputError, match=r"expected auto, true or false"):
        native_path(resolved(master="local[2]", policy="none", spark_conf=["spark.streamjoin.native=yes"]))
    # the native path's results are on the executors: an explicit results=driver is refused
    # with native=true, and auto falls back to the current path
    driver = "spark.streamjoin.results=driver"
    with pytest.raises(InputError, match=r"spark.streamjoin.native=true: not with spark.streamjoin.results=driver"):
        native_path(resolved(master="local[2]", policy="none", spark_conf=[NATIVE, driver]))
    assert not native_path(resolved(master="spark://h:7077", policy="none", spark_conf=[driver]))
    # run_job resolves spark.streamjoin.results on the native path too (before any Spark work)
    for conf, message in (([NATIVE, driver], r"not with spark.streamjoin.results=driver"),
                          ([NATIVE, "spark.streamjoin.results=bogus"], r"expected auto, driver or executors")):
        with pytest.raises(InputError, match=message):
            run(cfg, tmp_path / "o", engine="spark", master="local[2]", policy="none", spark_conf=conf)
    assert not (tmp_path / "o").exists()


def test_cli_native_on_local_cluster_equals_local_engine(tmp_path):
    """`streamjoin run --engine spark --master local-cluster[2,1,1024]` (separate executor JVMs
    and Python workers; spark.streamjoin.native=true -- auto keeps the current path on the
    driver's host): the local engine's results (as a set) and report numbers."""
    cfg = write_inputs(tmp_path, 3, seed=31)
    ra, rb = cli_local_and_spark(tmp_path, cfg, ["--policy", "mpkslack"],
                                 ["--router", "atr", "--partitions", "3", "--master", "local-cluster[2,1,1024]",
                                  "--spark-conf", NATIVE], "nat")
    assert rb["routing"]["native"] is True and rb["routing"]["master"] == "local-cluster[2,1,1024]"
    assert_same_run(tmp_path / "local", tmp_path / "nat", ra, rb)


#: RLIMIT_DATA budget for the capped driver: the cap is its VmData when the SparkSession is up
#: plus this, between the two paths' growth after that moment on the input below (1M tuples,
#: local[2], ATR, mpkslack, --no-results, the threads and arenas pinned as below, uncapped):
#: VmData +11 MB native (1571 -> 1582 MB), +322 MB current (1535 -> 1857 MB; VmHWM 399 against
#: 552 MB).  Relative, not absolute: the address space reserved before (thread stacks, malloc
#: arenas) scales with the cores and varies from run to run; nothing before the cap counts
DRIVER_BUDGET_MB = 160


def test_capped_driver_runs_native_not_current(tmp_path):
    """The driver Python's data segment capped at DRIVER_BUDGET_MB above its size when its
    SparkSession is up: the native path finishes (the local engine's numbers), the current
    path fails on an allocation after the cap was set -- where its combinations reach the
    driver: with results (a run without results counts them in its tasks, .counted, and
    holds no combination)."""
    import os
    import re
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name("streamjoin"))
    subprocess.run([exe, "generate", "bench", "--out", str(tmp_path / "d"), "--scale", "0.3333", "--duration", "100"],
                   check=True, stdout=subprocess.DEVNULL)
    cfg = tmp_path / "d" / "bench.toml"
    helper = Path(__file__).resolve().parents[1] / "helpers" / "capped_cli.py"
    # one malloc arena and pinned thread pools: the budget measures the paths, not the cores
    env = dict(os.environ, STREAMJOIN_ENGINE="local", MALLOC_ARENA_MAX="1", POLARS_MAX_THREADS="2",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    common = ["--policy", "mpkslack", "--no-results"]

    def capped(out: str, native: str, flags=common):
        return subprocess.run([sys.executable, str(helper), str(DRIVER_BUDGET_MB * 2**20), "run", str(cfg),
                               "--engine", "spark", "--master", "local[2]", "--router", "atr", "--partitions", "4",
                               "--spark-conf", f"spark.streamjoin.native={native}", "--out", str(tmp_path / out),
                               *flags], env=env, capture_output=True, text=True, timeout=1500)

    nat = capped("nat", "true")
    assert nat.returncode == 0, nat.stderr[-3000:]
    cur = capped("cur", "false", ["--policy", "mpkslack"])   # results.parquet: the combinations on the driver
    # after the cap (the session was up): Python's MemoryError, or an allocation in polars' /
    # Arrow's native code failing (abort)
    assert cur.returncode != 0 and "CAPPED AT VmData" in cur.stderr, cur.stderr[-3000:]
    after = cur.stderr.split("CAPPED AT VmData", 1)[1] + cur.stdout
    assert re.search(r"MemoryError|memory allocation of \d+ bytes failed|bad_alloc", after), cur.stderr[-3000:]
    assert not (tmp_path / "cur").exists()   # nothing published
    peak, start = (int(re.search(rf"{what} VmData (\d+) MB", nat.stderr).group(1)) for what in ("PEAK", "AT SESSION"))
    assert "CAPPED AT VmData" in nat.stderr and peak <= start + DRIVER_BUDGET_MB
    local = subprocess.run([exe, "run", str(cfg), "--engine", "local", "--out", str(tmp_path / "local"), *common],
                           env=env, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    ra = json.loads((tmp_path / "local" / "report.json").read_text())
    rb = json.loads((tmp_path / "nat" / "report.json").read_text())
    assert_same_run(tmp_path / "local", tmp_path / "nat", ra, rb)


POLICIES = [{"policy": "none"}, {"policy": "static", "retention": ["10ms"]}, {"policy": "kslack", "k": ["15ms"]},
            {"policy": "mpkslack"}]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 4), policy=st.sampled_from(POLICIES), router=st.sampled_from(["none", "atr", "ctr", "auto"]),
       partitions=st.integers(1, 4), seed=st.integers(0, 10**6), no_results=st.booleans())
def test_native_equals_the_local_engine_on_random_inputs(spark, tmp_path_factory, n, policy, router, partitions, seed,
                                                         no_results):
    tmp = tmp_path_factory.mktemp("prop")
    cfg = write_inputs(tmp, n, seed=seed, sizes=(120, 90, 70, 60))
    local = run(cfg, tmp / "local", engine="local", no_results=no_results, **policy)
    nat = run(cfg, tmp / "nat", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=[NATIVE], no_results=no_results, **policy)
    assert (tmp / "nat" / "results.parquet").exists() is not no_results
    assert_same_run(tmp / "local", tmp / "nat", local, nat)


@pytest.mark.parametrize("n,policy,router,partitions", [CASES[0], CASES[4], (3, CASES[2][1], "ctr", 3)])
def test_native_without_results_equals_the_local_engine(spark, tmp_path, n, policy, router, partitions):
    """--no-results: the groups return only what report.json's numbers read (members' rows,
    latency, emitted, required slack, period), the same numbers."""
    cfg = write_inputs(tmp_path, n, seed=n * 10 + partitions)
    local = run(cfg, tmp_path / "local", engine="local", no_results=True, **policy)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router=router, partitions=partitions,
              spark_conf=[NATIVE], no_results=True, **policy)
    assert local["emitted_results"] > 0 and not (tmp_path / "nat" / "results.parquet").exists()
    assert_same_run(tmp_path / "local", tmp_path / "nat", local, nat)


# --- the native path reads its inputs on the executors (engines/spark/read.py; no load_all) ---


def test_native_reads_on_the_executors_quarantine_published(spark, tmp_path, monkeypatch):
    """Quarantined rows in two streams, one of them a directory of two files: the native run
    never calls load_all; its report equals the local engine's (memory bytes included: the
    read's per-column row_bytes equal the local loader's); the executors' quarantine part
    files are published under quarantine/<stream>.parquet/ with the local engine's rows."""
    import polars as pl

    from streamjoin.pipelines.engines.spark.read import read_streams
    from streamjoin.pipelines.io import load
    from streamjoin.pipelines.jobs import run as run_module

    cfg = write_inputs(tmp_path, 3, seed=41)
    with_null_ts(tmp_path / "a.parquet", 0.2, 1)
    with_null_ts(tmp_path / "c.parquet", 0.1, 2)
    b = pl.read_parquet(tmp_path / "b.parquet")
    (tmp_path / "b").mkdir()
    b.head(100).write_parquet(tmp_path / "b" / "part-0.parquet")
    b.tail(b.height - 100).write_parquet(tmp_path / "b" / "part-1.parquet")
    (tmp_path / "b.parquet").unlink()
    cfg.write_text(cfg.read_text().replace('path = "b.parquet"', 'path = "b"'))
    policy = {"policy": "kslack", "k": ["10ms"]}
    local = run(cfg, tmp_path / "local", engine="local", **policy)

    def no_load(*a, **k):
        raise AssertionError("the native path called load_all")

    monkeypatch.setattr(run_module, "load_all", no_load)
    nat = run(cfg, tmp_path / "nat", engine="spark", master="local[2]", router="atr", partitions=2,
              spark_conf=[NATIVE], **policy)
    monkeypatch.undo()
    assert nat["routing"]["native"] is True
    assert [s["quarantined"] for s in local["streams"]] == [s["quarantined"] for s in nat["streams"]]
    assert local["streams"][0]["quarantined"] > 0 and local["streams"][1]["quarantined"] == 0
    assert_same_run(tmp_path / "local", tmp_path / "nat", local, nat)
    assert nat["memory_bytes"]["peak"] == local["memory_bytes"]["peak"] > 0
    for s in ("a", "c"):
        key = f"quarantine_{s}"
        assert nat["outputs"][key] == str(tmp_path / "nat" / "quarantine" / f"{s}.parquet")
        got, want = pl.read_parquet(nat["outputs"][key]), pl.read_parquet(local["outputs"][key])
        assert got.columns == want.columns and got.height == want.height > 0
        assert got.sort(got.columns).equals(want.sort(want.columns))
        assert (tmp_path / "nat" / "quarantine" / f"{s}.parquet" / "_SUCCESS").exists()
    assert "quarantine_b" not in nat["outputs"] and not (tmp_path / "nat" / "quarantine" / "b.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))  == []   # no staging left
    # the read's row_bytes is the local loader's, a single file and a directory alike
    from streamjoin.pipelines.config.settings import Flags, resolve

    streams = resolve(cfg, Flags(out=str(tmp_path / "x"))).streams
    facts = read_streams(spark, list(streams), quarantine_dir=tmp_path / "q").streams
    assert [f.row_bytes for f in facts] == [s.row_bytes for s in load.load_all(list(streams))]


def _local_error(cfg: Path, out: Path) -> str:
    with pytest.raises(InputError) as exc:
        run(cfg, out, engine="local", policy="mpkslack")
    return str(exc.value)


@pytest.mark.parametrize("case", ["bad file", "bad column", "mostly quarantined"])
def test_native_bad_input_is_the_local_engines_line(spark, tmp_path, monkeypatch, case):
    """Bad input on the native path: the local engine's one-line error, raised in the read
    (before the join; the bad file and column before any Spark job at all), nothing published."""
    from streamjoin.pipelines.engines.spark import native

    def no_join(*a, **k):
        raise AssertionError("the join started")

    monkeypatch.setattr(native, "native_join", no_join)
    cfg = write_inputs(tmp_path, 2, seed=43)
    if case == "bad file":
        (tmp_path / "b.parquet").write_bytes(b"not parquet at all" * 10)
    elif case == "bad column":
        cfg.write_text(cfg.read_text().replace('keys = ["key"]\nwindow = "30ms"', 'keys = ["kee"]\nwindow = "30ms"'))
    else:
        with_null_ts(tmp_path / "b.parquet", 0.7, 3)
    want = _local_error(cfg, tmp_path / "local")
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup())
    with pytest.raises(InputError) as exc:
        run(cfg, tmp_path / "nat", engine="spark", master="local[2]", policy="mpkslack", spark_conf=[NATIVE])
    assert str(exc.value) == want and "\n" not in want
    new = set(tracker.getJobIdsForGroup()) - jobs
    assert (not new) if case != "mostly quarantined" else new   # the share: the read's aggregations
    assert not (tmp_path / "nat").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".nat")]


def test_cli_native_bad_column_exit_2(tmp_path):
    """`streamjoin run --engine spark` on the native path: exit 2 with the local engine's line."""
    import os
    import subprocess
    import sys

    cfg = write_inputs(tmp_path, 2, seed=44)
    cfg.write_text(cfg.read_text().replace('ts = "ts"\narrival = "arrival"\nunit = "us"\nkeys = ["key"]\nwindow = "30ms"',
                                           'ts = "tss"\narrival = "arrival"\nunit = "us"\nkeys = ["key"]\nwindow = "30ms"'))
    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_ENGINE="local")
    local = subprocess.run([exe, "run", str(cfg), "--engine", "local", "--out", str(tmp_path / "l")],
                           env=env, capture_output=True, text=True)
    nat = subprocess.run([exe, "run", str(cfg), "--engine", "spark", "--master", "local[2]", "--spark-conf", NATIVE,
                          "--out", str(tmp_path / "n")], env=env, capture_output=True, text=True, timeout=600)
    assert local.returncode == nat.returncode == 2
    line = local.stderr.strip().splitlines()[-1]
    assert "tss" in line and nat.stderr.strip().splitlines()[-1] == line
    assert not (tmp_path / "n").exists()


def test_native_out_under_a_hive_style_directory(spark, tmp_path):
    """--out below a ``day=1`` directory: the executors' results and quarantine land in the
    run's staging directory there (a percent-encoded ``file://`` URI, ``day%3D1``, is another
    directory to Hadoop), and the run equals the local engine."""
    cfg = write_inputs(tmp_path, 2, seed=5)
    with_null_ts(tmp_path / "b.parquet", 0.1, 4)
    local = run(cfg, tmp_path / "local", engine="local", policy="mpkslack")
    (tmp_path / "day=1").mkdir()
    out = tmp_path / "day=1" / "out"
    nat = run(cfg, out, engine="spark", master="local[2]", router="atr", partitions=2, spark_conf=[NATIVE],
              policy="mpkslack")
    assert (out / "results.parquet" / "_SUCCESS").is_file()
    assert (out / "quarantine" / "b.parquet" / "_SUCCESS").is_file() and local["streams"][1]["quarantined"] > 0
    assert not (tmp_path / "day%3D1").exists()
    assert_same_run(tmp_path / "local", out, local, nat)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.lists(st.integers(-5, 40), max_size=30), min_size=1, max_size=3))
def test_delay_percentiles_are_the_nearest_rank_of_each_group(spark, groups):
    """native_metrics.delay_percentiles (running sums over value counts, in Spark) equals
    summary.nearest_rank_of_counts over each group's values (a group without values: absent)."""
    import numpy as np

    from streamjoin.pipelines.analysis.summary import nearest_rank_of_counts
    from streamjoin.pipelines.engines.spark.native_metrics import delay_percentiles

    qs = (("p50", 0.5), ("p95", 0.95), ("max", 1.0), ("p1", 0.01))
    rows = [(g, v) for g, vals in enumerate(groups) for v in vals]
    df = spark.createDataFrame(rows or [(0, 0)], "stream int, delay long")
    got = delay_percentiles(df if rows else df.limit(0), "stream", "delay", qs)
    want = {}
    for g, vals in enumerate(groups):
        if vals:
            v, c = np.unique(np.asarray(vals, np.int64), return_counts=True)
            want[g] = {name: nearest_rank_of_counts(v, np.cumsum(c), q) for name, q in qs}
    assert got == want


def test_a_running_jvms_heap_is_left_to_spark_submit(tmp_path):
    """Under ``spark-submit --driver-memory 1g`` the JVM (and its heap) exists before the
    session: spark_session must not set ``spark.driver.memory`` from the input size there --
    it cannot apply, and report.json's ``routing.spark_partitions.driver_memory`` (the
    context's conf) said ``9g`` beside a 1 GB heap."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "heap.py"
    script.write_text(
        "from streamjoin.pipelines.engines.spark.session import spark_session\n"
        "with spark_session('local[1]', 1, (), input_rows=48_000_000) as s:\n"
        "    print('CONF', s.sparkContext.getConf().get('spark.driver.memory'))\n")
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    got = subprocess.run([str(submit), "--driver-memory", "1g", "--master", "local[1]", str(script)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "CONF 1g" in got.stdout.splitlines()


def test_facts_recomputed_inside_a_union_stage_equal_the_cached_ones(spark):
    """A lost cached block of the facts frame is recomputed in whatever stage reads it; in a
    union's stage (the marked searches, the memory events) the task's partition id is the
    union's (P + i for the second child), not the replay order's i: the facts pass must take
    its partition from the frame it scans, not from TaskContext."""
    import numpy as np
    from pyspark.sql import functions as F

    from streamjoin.pipelines.engines.spark.native_progress import progress_frame
    from streamjoin.pipelines.policies import PolicySpec

    rng = np.random.default_rng(3)
    rows = [(k, i, int(t), int(t + (rng.integers(0, 150) if rng.random() < 0.3 else 0)))
            for k in range(2) for i, t in enumerate(np.sort(rng.integers(0, 400, 40)))]
    df = spark.createDataFrame(rows, "stream int, row long, ts long, arrival long")
    prog = progress_frame(spark, df, 2, (80, 80), PolicySpec("mpkslack"), 4)
    cols = ["a", "T", "R", "rel", "end"]
    want = sorted(tuple(r) for r in prog.facts.select(*cols).collect())
    try:
        # every cached frame dropped (public API): the next read recomputes the facts pass, and
        # through the union below it runs in the union's stage (task P + i for the second child)
        spark.catalog.clearCache()
        f = prog.facts.select(*cols)
        got = sorted(tuple(r) for r in f.filter(F.col("a") % 2 == 0).unionByName(f.filter(F.col("a") % 2 == 1))
                     .collect())
    finally:
        prog.release()
    assert len(want) == 80 and got == want


@pytest.mark.parametrize("fails, frames", [("carried", 1), ("element_at", 2)])
def test_a_failed_progress_frame_leaves_nothing_cached(spark, monkeypatch, fails, frames):
    """progress_frame: a step failing after it persisted frames (its range-partitioned
    copy; then the facts pass's cache) unpersists them, so nothing stays cached in a
    reused session."""
    import numpy as np
    from pyspark.sql import functions as F

    from streamjoin.pipelines.engines.spark import native_progress
    from streamjoin.pipelines.policies import PolicySpec

    rng = np.random.default_rng(4)
    rows = [(k, i, int(t), int(t + rng.integers(0, 50))) for k in range(2)
            for i, t in enumerate(np.sort(rng.integers(0, 400, 30)))]
    df = spark.createDataFrame(rows, "stream int, row long, ts long, arrival long")
    persisted, real_persist = [], type(df).persist   # the session's DataFrame class (classic or Connect)

    def persist(self, *a, **k):
        persisted.append(self)
        return real_persist(self, *a, **k)

    def boom(*a, **k):
        raise RuntimeError("step failed")

    monkeypatch.setattr(type(df), "persist", persist)
    monkeypatch.setattr(native_progress if fails == "carried" else F, fails, boom)
    with pytest.raises(RuntimeError, match="step failed"):
        native_progress.progress_frame(spark, df, 2, (80, 80), PolicySpec("mpkslack"), 3)
    assert len(persisted) == frames and not any(f.is_cached for f in persisted)
