"""Issue 19, cluster hygiene: the package shipped to the executors (pipelines/engines/spark/ship.py).

The proof runs on ``local-cluster[2,1,1024]`` (separate executor JVMs and Python workers)
with the executors' Python unable to import streamjoin from its own environment: a wrapper
that runs this interpreter with ``-S`` (no ``site``: the editable install's ``.pth`` is not
processed) and only the third-party site-packages on its path.  With
``spark.streamjoin.ship=true`` the native path gives the local engine's numbers; with
``false`` the run fails with one line.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers.spark_runs import assert_same_run, cli_local_and_spark, write_inputs

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.ship import package_files, package_zip, ship_wanted

CLUSTER = "local-cluster[2,1,1024]"


@pytest.mark.parametrize("master,mode,wanted", [
    ("local[2]", "auto", False), (CLUSTER, "auto", False), ("spark://h:7077", "auto", True),
    ("yarn", "auto", True), ("local[2]", "true", True), ("yarn", "false", False),
])
def test_ship_wanted(master, mode, wanted):
    assert ship_wanted(master, [("spark.streamjoin.ship", mode)]) is wanted


def test_bad_ship_mode_is_one_line(tmp_path):
    cfg = write_inputs(tmp_path, 2, seed=1)
    with pytest.raises(InputError, match=r"spark.streamjoin.ship=yes: expected auto, true or false"):
        resolve(cfg, Flags(out=str(tmp_path / "o"), engine="spark", spark_conf=["spark.streamjoin.ship=yes"]))


def _no_streamjoin_python(tmp: Path) -> Path:
    """A Python that cannot import streamjoin: this interpreter, ``-S``, only site-packages on the path."""
    site = sysconfig.get_paths()["purelib"]
    w = tmp / "python-no-streamjoin"
    w.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -S "$@"\n')
    w.chmod(w.stat().st_mode | stat.S_IXUSR)
    return w


def test_zip_is_cached_whole_and_importable_alone(tmp_path):
    """Built once per content (a second call returns the same file untouched), by concurrent
    builders into one whole zip, holding every package file; a Python without streamjoin
    imports the package from it alone."""
    cache = tmp_path / "cache"
    cache.mkdir()
    code = f"from pathlib import Path; from streamjoin.pipelines.engines.spark.ship import package_zip; " \
           f"print(package_zip(Path({str(cache)!r})))"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    paths = {p.communicate()[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(paths) == 1
    z = Path(paths.pop())
    assert sorted(cache.iterdir()) == [z]   # no temporary left behind
    names = set(zipfile.ZipFile(z).namelist())
    assert {name for name, _ in package_files()} | {"streamjoin/__init__.py"} == names
    assert "streamjoin/pipelines/engines/spark/ship.py" in names and "streamjoin/cli/main.py" in names
    before = z.stat().st_mtime_ns
    assert package_zip(cache) == z and z.stat().st_mtime_ns == before

    py = _no_streamjoin_python(tmp_path)
    plain = subprocess.run([py, "-c", "import streamjoin"], capture_output=True, text=True)
    assert plain.returncode != 0 and "No module named 'streamjoin'" in plain.stderr
    shipped = subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {str(z)!r}); "
                                        f"import streamjoin.pipelines.engines.spark.native_metrics as m; "
                                        f"print(m.__file__)"], capture_output=True, text=True)
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.strip().startswith(str(z))


def test_unwritable_cache_builds_once_per_process_and_leaves_nothing(tmp_path):
    """Where ~/.cache cannot be written the zip goes to one temporary directory per process
    (a second call, as a run's second session makes, finds it there), removed at exit."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME="/proc/no-such-cache", TMPDIR=str(tmp))
    code = "from streamjoin.pipelines.engines.spark.ship import package_zip as z; a, b = z(), z(); " \
           "print(a == b, a.is_file(), a.parent.parent == __import__('pathlib').Path({!r}))".format(str(tmp))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split() == ["True", "True", "True"], p.stdout + p.stderr
    assert list(tmp.iterdir()) == []


def test_local_cluster_without_streamjoin_runs_only_when_shipped(tmp_path, monkeypatch):
    """Executors whose Python cannot import streamjoin: shipped (spark.streamjoin.ship=true),
    the native path equals the local engine; not shipped, one line, exit 2, nothing published."""
    py = _no_streamjoin_python(tmp_path)
    # the executors' environment is this one with PYSPARK_PYTHON: check that it really lacks streamjoin
    check = subprocess.run([py, "-c", "import pyspark, numpy, polars, pyarrow\nimport streamjoin"],
                           capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'streamjoin'" in check.stderr, check.stderr
    monkeypatch.setenv("PYSPARK_PYTHON", str(py))
    cfg = write_inputs(tmp_path, 3, seed=29)
    common = ["--policy", "mpkslack"]
    spark = ["--router", "atr", "--partitions", "3", "--master", CLUSTER,
             "--spark-conf", "spark.streamjoin.native=true"]
    ra, rb = cli_local_and_spark(tmp_path, cfg, common, spark + ["--spark-conf", "spark.streamjoin.ship=true"], "ship")
    assert rb["routing"]["native"] is True and rb["routing"]["master"] == CLUSTER
    assert ra["emitted_results"] > 0
    assert_same_run(tmp_path / "local", tmp_path / "ship", ra, rb, bytes_mean_exact=False)

    exe = str(Path(sys.executable).with_name("streamjoin"))
    off = subprocess.run([exe, "run", str(cfg), "--engine", "spark", *spark, "--spark-conf", "spark.streamjoin.ship=false",
                          "--out", str(tmp_path / "off"), *common],
                         env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert off.returncode == 2, off.stderr[-3000:]
    lines = [x for x in off.stderr.splitlines() if not x.startswith("streamjoin: stage ")]   # progress lines
    assert len(lines) == 1, off.stderr[-3000:]
    assert lines[0].startswith("error: the executors' Python cannot import streamjoin (spark.streamjoin.ship=false)")
    assert "java" not in off.stderr.lower() and "Traceback" not in off.stderr
    assert not (tmp_path / "off").exists()


def test_zip_is_hashed_once_per_process_while_the_files_are_unchanged(tmp_path, monkeypatch):
    """A run that opens its session twice (a Hadoop URI --out, then the join) asks for the zip
    twice: the package is read and hashed once; an edited file (its stat identity changes)
    is read again and makes another zip."""
    from streamjoin.pipelines.engines.spark import ship

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "b.py").write_text("B = 2\n")
    monkeypatch.setattr(ship, "package_files", lambda: [(f"streamjoin/pipelines/{f.name}", f)
                                                       for f in sorted(pkg.iterdir())])
    hashed = []
    real = ship.hashlib.sha256

    class Counting:
        @staticmethod
        def sha256(*a):
            hashed.append(1)
            return real(*a)

    monkeypatch.setattr(ship, "hashlib", Counting)
    cache = tmp_path / "cache"
    cache.mkdir()
    first = ship.package_zip(cache)
    assert ship.package_zip(cache) == first and len(hashed) == 1
    (pkg / "b.py").write_text("B = 3\n")
    second = ship.package_zip(cache)
    assert second != first and len(hashed) == 2
    assert zipfile.ZipFile(second).read("streamjoin/pipelines/b.py") == b"B = 3\n"
    assert ship.package_zip(cache) == second and len(hashed) == 2


def test_executor_import_failure_is_ships_line_in_warm_up_and_read(tmp_path):
    """One mapping (ship.executor_imports) for every job whose workers import streamjoin: the
    warm-up's and the native read's failures give the same line; other failures pass unchanged."""
    from streamjoin.pipelines.config.settings import StreamConfig
    from streamjoin.pipelines.engines.spark.read import read_streams
    from streamjoin.pipelines.engines.spark.session import warm_up
    import pyarrow as pa
    import pyarrow.parquet as pq

    class Failing:
        """A session whose every job fails the way a worker without streamjoin does."""
        conf = {"spark.streamjoin.ship": "false"}
        failure = RuntimeError("PythonException: ... ModuleNotFoundError: No module named 'streamjoin'")

        class sparkContext:
            defaultParallelism = 2
            master = "yarn"
            getConf = staticmethod(dict)

            @staticmethod
            def parallelize(*a):
                raise Failing.failure

        @property
        def read(self):
            raise Failing.failure

    pq.write_table(pa.table({"ts": pa.array([1, 2], pa.timestamp("us"))}), tmp_path / "a.parquet")
    lines = []
    for job in (lambda s: warm_up(s), lambda s: read_streams(s, [StreamConfig("a", str(tmp_path / "a.parquet"))],
                                                             quarantine_dir=tmp_path / "q")):
        with pytest.raises(InputError) as exc:
            job(Failing())
        lines.append(str(exc.value))
    assert lines[0] == lines[1]
    assert lines[0].startswith("the executors' Python cannot import streamjoin (spark.streamjoin.ship=false)")
    Failing.failure = RuntimeError("a Java failure")
    with pytest.raises(RuntimeError, match="a Java failure"):
        warm_up(Failing())


@pytest.mark.parametrize("master, cpus, task_cpus, slots", [
    ("local", 8, 1, 1), ("local[2]", 8, 1, 2), ("local[*]", 3, 1, 3), ("local[2,3]", 8, 1, 2),
    ("local[ 4 , 2 ]", 8, 1, 4), ("local[*, 5]", 6, 1, 6), ("local[4]", 8, 2, 2), ("local[1]", 8, 2, 1),
    ("local-cluster[2,1,1024]", 8, 1, None), ("yarn", 8, 1, None), ("spark://h:7077", 8, 1, None)])
def test_local_slots_from_the_master(master, cpus, task_cpus, slots):
    from streamjoin.pipelines.engines.spark.session import local_slots

    assert local_slots(master, lambda: cpus, task_cpus) == slots


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[ 4 , 2 ]", "local[2", "local[x]",
                                    "localhost:7077", "local-cluster[2,1,1024]", "yarn", "spark://h:7077"])
def test_is_local_agrees_with_local_slots(master):
    """The driver heap's sizing and the warm-up's barrier read one parser: a master is
    local (tasks in the driver's JVM) exactly where it has local slots."""
    from streamjoin.pipelines.engines.spark.session import local_slots
    from streamjoin.pipelines.engines.spark.sizing import is_local

    assert is_local(master) == (local_slots(master, lambda: 2) is not None)


def test_warm_up_is_one_barrier_task_per_local_slot_with_the_data_plane(tmp_path):
    """On local[2] the warm-up runs one task per core as a barrier stage: each core's
    Python worker is started and imports the data plane (docs/performance.md, "Whole
    process, eighth pass").  A probe module, imported by the warm-up after the plane,
    records in each worker its pid, whether the plane was there and whether its task
    was in a barrier stage (without the barrier it is not: the test fails).
    spark.default.parallelism=4 asks for more tasks than local[2] has slots: a barrier
    stage of 4 tasks fails there (SPARK-24819; one check, not 40 x 15 s, here)."""
    from streamjoin.pipelines.engines.spark.session import spark_session, warm_up

    plane = "streamjoin.pipelines.engines.spark.plane"
    name = f"warm_probe_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(
        "import os, sys\n"
        "from pyspark.taskcontext import BarrierTaskContext\n"
        "try:\n    BarrierTaskContext.get()\n    barrier = True\nexcept Exception:\n    barrier = False\n"
        f"with open({str(tmp_path / 'seen')!r}, 'a') as f:\n"
        f"    print(os.getpid(), {plane!r} in sys.modules, barrier, file=f)\n")
    conf = [("spark.default.parallelism", "4"), ("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")]
    with spark_session("local[2]", 2, conf) as spark:
        assert spark.sparkContext.defaultParallelism == 4
        spark.sparkContext.addPyFile(str(tmp_path / f"{name}.py"))
        warm_up(spark, (plane, name))
        # a module named for the warm-up that a worker cannot import: ship's one line
        with pytest.raises(InputError, match="cannot import streamjoin"):
            warm_up(spark, ("streamjoin.pipelines.engines.spark.no_such_module",))
    seen = [line.split() for line in (tmp_path / "seen").read_text().splitlines()]
    assert len(seen) == 2 and len({pid for pid, _, _ in seen}) == 2, seen
    assert all(imported == "True" and barrier == "True" for _, imported, barrier in seen), seen
