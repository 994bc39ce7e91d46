"""Issue 19: ``run --engine spark --out URI`` written through Hadoop's FileSystem API
(pipelines/engines/spark/hadoop_out.py).

The URI has a genuinely non-``file`` scheme that Hadoop serves locally: ``viewfs://sjtest/data/...``,
a ViewFileSystem mount table whose ``/data`` links to a local temporary directory
(``fs.<scheme>.impl=RawLocalFileSystem`` under another scheme is refused by Hadoop itself:
"Wrong FS ..., expected: file:///").  The tests open the files under the mount and compare
them with a local-path run of the local engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.spark_runs import assert_same_run, run, with_null_ts, write_inputs

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.options import OutURI, is_uri
from streamjoin.pipelines.config.settings import Flags, resolve
from streamjoin.pipelines.engines.spark.session import spark_session

NATIVE = "spark.streamjoin.native=true"


def mount_conf(root: Path) -> str:
    return f"spark.hadoop.fs.viewfs.mounttable.sjtest.link./data={root.resolve().as_uri()}"


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    root = tmp_path_factory.mktemp("mnt")
    key, _, value = mount_conf(root).partition("=")
    with spark_session("local[2]", 3, [("spark.sql.shuffle.partitions", "3"), ("spark.driver.memory", "1g"),
                                       (key, value)]):
        yield root


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_native_and_driver_paths_publish_through_hadoop(mounted, tmp_path):
    """The native path (results written by the executors into the URI's staging directory)
    and the driver path (results written locally, copied in) publish the local engine's
    report numbers and results at the URI; the second run replaces the first; nothing is
    left beside it (no staging, trash, lock or .crc files)."""
    cfg = write_inputs(tmp_path, 3, seed=41)
    local = run(cfg, tmp_path / "local", engine="local", policy="mpkslack")
    uri = "viewfs://sjtest/data/run"
    nat = run(cfg, uri, engine="spark", master="local[2]", router="atr", partitions=3, policy="mpkslack",
              spark_conf=[NATIVE])
    assert nat["routing"]["native"] is True and local["emitted_results"] > 0
    assert nat["outputs"]["report"] == f"{uri}/report.json" and nat["outputs"]["results"] == f"{uri}/results.parquet"
    out = mounted / "run"
    assert_same_run(tmp_path / "local", out, local, nat, bytes_mean_exact=False)
    assert json.loads((out / "report.json").read_text())["outputs"] == nat["outputs"]
    assert (out / "report.html").is_file() and (out / "results.parquet" / "_SUCCESS").is_file()
    assert not [p for p in out.rglob("*.crc")]

    drv = run(cfg, uri, engine="spark", master="local[2]", router="atr", partitions=3, policy="mpkslack",
              spark_conf=["spark.streamjoin.native=false", "spark.streamjoin.results=driver"])
    assert "native" not in drv["routing"] and drv["routing"]["results"] == "driver"
    assert_same_run(tmp_path / "local", out, local, drv)
    assert (out / "results.parquet").is_file()   # the driver's single file replaced the directory
    assert leftovers(mounted) == [] and not [p for p in out.rglob("*.crc")]


def test_native_quarantine_is_written_into_the_uris_staging(mounted, tmp_path):
    """The native path reads on the executors, which write a stream's quarantine: with a URI
    --out it goes into the URI's staging directory (the executors' shared filesystem, not the
    driver's local one) and is published with the rest, the local engine's rows."""
    import polars as pl

    cfg = write_inputs(tmp_path, 2, seed=47)
    with_null_ts(tmp_path / "b.parquet", 0.15, 3)
    local = run(cfg, tmp_path / "local", engine="local", policy="static", retention=["15ms"])
    uri = "viewfs://sjtest/data/quarantined"
    nat = run(cfg, uri, engine="spark", master="local[2]", router="atr", partitions=2, policy="static",
              retention=["15ms"], spark_conf=[NATIVE])
    out = mounted / "quarantined"
    assert_same_run(tmp_path / "local", out, local, nat, bytes_mean_exact=False)
    q = out / "quarantine" / "b.parquet"
    assert nat["outputs"]["quarantine_b"] == f"{uri}/quarantine/b.parquet" and (q / "_SUCCESS").is_file()
    mine = pl.read_parquet(q / "*.parquet")
    theirs = pl.read_parquet(tmp_path / "local" / "quarantine" / "b.parquet").select(mine.columns)
    assert mine.height == theirs.height > 0 and mine.sort(mine.columns).equals(theirs.sort(mine.columns))
    assert leftovers(mounted) == [] and not [p for p in out.rglob("*.crc")]


def test_failure_before_and_inside_the_publish_leaves_no_partial_output(mounted, tmp_path, monkeypatch):
    """A failure at the last step before the publishing rename leaves nothing at the URI and
    nothing beside it; one between the two renames of a replace leaves the previous version
    in a trash directory, which the next run puts back before it publishes its own."""
    cfg = write_inputs(tmp_path, 2, seed=43)
    uri = "viewfs://sjtest/data/fail"
    flags = dict(engine="spark", master="local[2]", router="atr", partitions=2, policy="kslack", k=["20ms"],
                 spark_conf=[NATIVE])
    monkeypatch.setenv("STREAMJOIN_TEST_FAIL_AT", "staged")
    with pytest.raises(RuntimeError, match="injected failure at staged"):
        run(cfg, uri, **flags)
    assert not (mounted / "fail").exists() and leftovers(mounted) == []

    monkeypatch.delenv("STREAMJOIN_TEST_FAIL_AT")
    first = run(cfg, uri, **flags)
    monkeypatch.setenv("STREAMJOIN_TEST_FAIL_AT", "trashed")
    with pytest.raises(RuntimeError, match="injected failure at trashed"):
        run(cfg, uri, **dict(flags, k=["5ms"]))
    assert not (mounted / "fail").exists()
    trash = leftovers(mounted)
    assert len(trash) == 1 and trash[0].startswith(".fail.trash-")
    assert json.loads((mounted / trash[0] / "report.json").read_text())["emitted_results"] == first["emitted_results"]

    monkeypatch.delenv("STREAMJOIN_TEST_FAIL_AT")
    second = run(cfg, uri, **dict(flags, k=["5ms"]))
    assert json.loads((mounted / "fail" / "report.json").read_text())["emitted_results"] == second["emitted_results"]
    assert second["emitted_results"] < first["emitted_results"]   # a smaller K drops more: the new version
    assert leftovers(mounted) == []


def test_lock_where_the_local_file_system_serves_the_uri_is_a_local_out_s(mounted, tmp_path):
    """Under a viewfs mount of a local directory, and at a file:// URI, the lock is a local
    --out's flock: while the URI's writer holds it another process's local-path lock on the
    same directory is refused (Hadoop's local create(overwrite=false) is no exclusive create,
    and a lock file without flock would let it in); released, no lock file is left."""
    from pyspark.sql import SparkSession

    from streamjoin.pipelines.engines.spark.hadoop_out import HadoopOutput

    spark = SparkSession.getActiveSession()
    probe = ("import sys; from streamjoin.pipelines.io.lock import LockedError, OutputLock, lock_of\n"
             "out = sys.argv[1]\n"
             "try:\n    OutputLock(lock_of(out), out).__enter__(); print('taken')\n"
             "except LockedError:\n    print('locked')\n")
    for uri, out in (("viewfs://sjtest/data/held", mounted / "held"), ((tmp_path / "held").as_uri(), tmp_path / "held")):
        with pytest.raises(RuntimeError, match="stop"):
            with HadoopOutput(spark, uri):
                other = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True)
                assert other.stdout.strip() == "locked", other.stderr
                raise RuntimeError("stop")
        assert not (out.parent / f".{out.name}.lock").exists() and not out.exists()


def test_uri_out_refused_off_spark_run(tmp_path):
    """A URI --out on the local engine, or for another command, is one line before any work;
    a local path is untouched by the URI rule."""
    cfg = write_inputs(tmp_path, 2, seed=45)
    with pytest.raises(InputError, match=r"--out hdfs://nn/out: a Hadoop file system URI is written by "
                                         r"`run --engine spark` only \(this is run on the local engine\)"):
        resolve(cfg, Flags(out="hdfs://nn/out", engine="local"))
    with pytest.raises(InputError, match=r"only \(this is tune-buffer on the spark engine\)"):
        resolve(cfg, Flags(out="s3a://b/out", engine="spark"), output_kind="tune-buffer")
    c = resolve(cfg, Flags(out="abfs://c@a.dfs.core.windows.net/x/out/", engine="spark"))
    assert isinstance(c.out, OutURI) and c.out / "report.json" == "abfs://c@a.dfs.core.windows.net/x/out/report.json"
    assert c.out.name == "out" and c.out.parent == "abfs://c@a.dfs.core.windows.net/x"
    exe = str(Path(sys.executable).with_name("streamjoin"))
    p = subprocess.run([exe, "run", str(cfg), "--engine", "local", "--out", "hdfs://nn/out"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: --out hdfs://nn/out")
    assert not any(tmp_path.parent.glob("hdfs:*")) and not Path("hdfs:").exists()


@pytest.mark.parametrize("out,uri", [
    ("hdfs:/jobs/out", True), ("file:/data/out", True), ("s3a://b/out", True),   # Hadoop's forms
    ("a:b/out", False), ("C:/data/out", False), ("C://data/out", False), (r"C:\out", False), ("out:x", False),
])
def test_which_out_is_a_uri(tmp_path, out, uri):
    """``scheme:/p`` (no authority: fs.defaultFS's, or file:/p as Spark prints paths) is a URI
    too -- on the local engine refused, not written to a local directory named ``hdfs:``; a
    colon elsewhere, or a one-letter scheme (a drive), is a local path."""
    cfg = write_inputs(tmp_path, 2, seed=45)
    if uri:
        with pytest.raises(InputError, match=r"a Hadoop file system URI is written by `run --engine spark` only"):
            resolve(cfg, Flags(out=out, engine="local"))
        assert isinstance(resolve(cfg, Flags(out=out, engine="spark")).out, OutURI)
    else:
        assert not is_uri(out)
        c = resolve(cfg, Flags(out=str(tmp_path / out), engine="local"))
        assert isinstance(c.out, Path) and c.out == tmp_path / out


def test_cli_interrupted_before_publish_leaves_nothing_at_the_uri(tmp_path):
    """`streamjoin run --engine spark --out viewfs://...` stopped at the publishing step and
    sent SIGINT: exit 130, one line, no output at the URI and nothing beside it."""
    cfg = write_inputs(tmp_path, 2, seed=47)
    root = tmp_path / "mnt"
    root.mkdir()
    exe = str(Path(sys.executable).with_name("streamjoin"))
    env = dict(os.environ, STREAMJOIN_TEST_PAUSE_AT="staged")
    p = subprocess.Popen([exe, "run", str(cfg), "--engine", "spark", "--master", "local[2]", "--policy", "mpkslack",
                          "--router", "atr", "--partitions", "2", "--spark-conf", NATIVE,
                          "--spark-conf", mount_conf(root), "--out", "viewfs://sjtest/data/out"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            if "test pause at staged" in line:
                break
        staged = [x for x in leftovers(root) if x.startswith(".out.staging-")]
        assert len(staged) == 1 and (root / staged[0] / "report.json").is_file()   # complete, not published
        assert not (root / "out").exists()
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGCONT)
        rest = p.stderr.read()
        assert p.wait(timeout=300) == 130, rest
    finally:
        if p.poll() is None:
            p.kill()
    errors = [x for x in rest.splitlines() if x.startswith("error")]
    assert errors == ["error: interrupted; nothing was published"], rest
    assert not (root / "out").exists() and leftovers(root) == []
