"""``--out`` as a Hadoop file system URI on the Spark engine (issue 19): ``hdfs://``,
``s3a://``, ``abfs://``, ``viewfs://``, ``file://`` -- whatever the session's Hadoop
configuration serves.

The same protocol as a local ``--out`` (:mod:`streamjoin.pipelines.io.output`,
SPEC §8), through Hadoop's ``FileSystem`` API in the driver's JVM
(``spark._jvm.org.apache.hadoop.fs``).  For an output ``P/NAME``:

* ``P/.NAME.lock`` -- created exclusively (``create(path, overwrite=false)``)
  for the whole job, holding ``host pid``; a second run finds it and exits 4.
  Hadoop has no lock that dies with its process: a lock whose holder ran on
  this host and is gone is removed as stale; one left by a run killed on
  another host must be deleted by hand (the message names it).  Where the
  local file system serves ``P`` (``file://``, a ``viewfs://`` mount of a
  local directory) the lock is a local ``--out``'s instead
  (:class:`~streamjoin.pipelines.io.lock.OutputLock`, ``flock``): the local
  file system's ``create`` is not exclusive (a check, then an open), and a
  local-path run on the same directory must see the lock;
* ``P/.NAME.staging-<pid>-<id>/`` -- the new version: ``results.parquet/`` is
  written there by the executors (Spark's writer and file commit protocol, on
  the native path); what the driver writes (``report.json``, ``report.html``,
  ``quarantine/``, a driver-written ``results.parquet``) goes to a local
  temporary directory first and is copied in (``copyFromLocalFile``) when the
  run is complete; Hadoop's ``.<file>.crc`` side files are removed;
* publishing is ``rename(staging, NAME)`` when ``NAME`` does not exist, else
  ``NAME -> P/.NAME.trash-<id>``, ``staging -> NAME``, the trash deleted (no
  exchange in Hadoop's API: a reader may find no ``NAME`` between the two
  renames, never a mix).  The next writer, holding the lock, removes a dead
  writer's staging directory and puts a complete trash back when ``NAME`` is
  missing, as :func:`~streamjoin.pipelines.io.output.recover` does locally.

An interrupt (Ctrl-C, SIGTERM) or a failure before the publishing rename
removes the staging directory and publishes nothing
(:func:`~streamjoin.pipelines.io.output.publishing`); the final URI is never
written except by the rename.

Atomic where the file system's directory rename is (HDFS, ABFS with a
hierarchical namespace, the local file system, ``viewfs`` over them).  On
object stores whose rename copies each object (S3A, GCS) the publishing
rename is not atomic: a reader can see part of the new version while it runs,
and a kill during it leaves a partial ``NAME``; the exclusive lock create is
not atomic there either (docs/semantics.md, "--out as a Hadoop URI").
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path

from ...base.errors import InputError
from ...config.options import MARKERS, OutURI, check_listing, is_uri
from ...io.lock import LockedError, OutputLock, lock_of
from ...io.output import act_on_held, fault_point, interrupts_held, publishing

_LEFTOVERS = ("staging-", "trash-", "old-")


class HadoopFS:
    """The Hadoop ``FileSystem`` of a URI, through the session's JVM (the calls this module uses)."""

    def __init__(self, spark, uri: str):
        self.jvm = spark._jvm
        self.fs = self.path(uri).getFileSystem(spark._jsc.hadoopConfiguration())

    def path(self, uri: str):
        return self.jvm.org.apache.hadoop.fs.Path(str(uri))

    def exists(self, uri: str) -> bool:
        return bool(self.fs.exists(self.path(uri)))

    def is_dir(self, uri: str) -> bool:
        p = self.path(uri)
        return bool(self.fs.exists(p) and self.fs.getFileStatus(p).isDirectory())

    def names(self, uri: str) -> list[str]:
        return [s.getPath().getName() for s in self.fs.listStatus(self.path(uri))]

    def mkdirs(self, uri: str) -> None:
        if not self.fs.mkdirs(self.path(uri)):
            raise OSError(f"{uri}: Hadoop could not create the directory")

    def rename(self, src: str, dst: str) -> None:
        if not self.fs.rename(self.path(src), self.path(dst)):
            raise OSError(f"{src} -> {dst}: Hadoop's rename failed")

    def delete(self, uri: str) -> None:
        self.fs.delete(self.path(uri), True)

    def create_new(self, uri: str, data: bytes) -> bool:
        """Write a new file; False if it exists (``create(path, overwrite=false)``)."""
        try:
            stream = self.fs.create(self.path(uri), False)
        except Exception as exc:  # noqa: BLE001 - py4j's error wraps Hadoop's
            if "FileAlreadyExistsException" in str(exc) or self.exists(uri):
                return False
            raise
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        return True

    def read_text(self, uri: str) -> str:
        stream = self.fs.open(self.path(uri))
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def local_file(self, uri: str) -> Path | None:
        """The local path an existing ``uri`` names where the local file system serves it
        (``file://``, a ``viewfs://`` mount of a local directory), else None."""
        p = self.fs.resolvePath(self.path(uri)).toUri()   # follows viewfs mount points
        return Path(str(p.getPath())) if str(p.getScheme()) == "file" else None

    def put(self, local: Path, uri: str) -> None:
        """Copy a local file or directory tree to ``uri``."""
        self.fs.copyFromLocalFile(False, True, self.path(file_uri(local)), self.path(uri))

    def drop_checksums(self, uri: str) -> None:
        """Remove the ``.<file>.crc`` side files that local-backed file systems write
        beside each file under ``uri`` (their listings hide them; polars and DuckDB
        would read every file of a results directory).  HDFS and object stores have none."""
        for s in self.fs.listStatus(self.path(uri)):
            p = s.getPath()
            if s.isDirectory():
                self.drop_checksums(p.toString())
                continue
            crc = self.jvm.org.apache.hadoop.fs.Path(p.getParent(), f".{p.getName()}.crc")
            if self.fs.exists(crc):
                self.fs.delete(crc, False)


def file_uri(path) -> str:
    """A local path as a ``file://`` URI for Hadoop: absolute, symlinks kept, and not
    percent-encoded (``Path.as_uri`` writes a hive ``day=1`` as ``day%3D1``, which Hadoop's
    ``Path`` takes literally: another directory); a Hadoop URI as it is."""
    if is_uri(path):
        return str(path)
    return "file://" + os.path.abspath(path)


def check_written(spark, target) -> None:
    """After Spark's writer wrote the directory ``target`` (a local path, or a Hadoop URI):
    its ``_SUCCESS`` must be there (else the files went elsewhere, an internal error:
    nothing is published), and the ``.<file>.crc`` side files that local-backed file
    systems leave beside each file go (polars and DuckDB read a directory's every file)."""
    if is_uri(target):
        fs = HadoopFS(spark, str(target))
        if not fs.exists(f"{str(target).rstrip('/')}/_SUCCESS"):
            raise RuntimeError(f"{target}: Spark's writer left no _SUCCESS there (nothing published)")
        fs.drop_checksums(str(target))
        return
    directory = Path(target)
    if not (directory / "_SUCCESS").is_file():
        raise RuntimeError(f"{target}: Spark's writer left no _SUCCESS there (nothing published)")
    for f in directory.glob(".*.crc"):
        f.unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class HadoopOutput:
    """:class:`~streamjoin.pipelines.io.output.AtomicOutput` for a Hadoop URI (module
    docstring): entering checks ``out``, takes its lock, recovers leftovers and
    makes the staging directory; it yields the *local* directory the driver writes
    into, and :attr:`staging` is the URI the executors write into.  Leaving
    without an exception copies the local files in and publishes; with one,
    removes both and publishes nothing."""

    def __init__(self, spark, out: str, kind: str = "run"):
        self.out = OutURI(str(out).rstrip("/"))
        self.kind = kind
        self.fs = HadoopFS(spark, self.out)
        self.lock = self.out.parent / f".{self.out.name}.lock"
        self.staging: OutURI | None = None
        self.local: Path | None = None
        self._stack = ExitStack()

    # -- the lock ------------------------------------------------------------

    def _take_lock(self) -> None:
        me = f"{socket.gethostname()} {os.getpid()}\n".encode()
        self.fs.mkdirs(self.out.parent)
        parent = self.fs.local_file(self.out.parent)
        if parent is not None:   # the local file system: its create is no exclusive one, flock is
            self._stack.enter_context(OutputLock(lock_of(parent / self.out.name), str(self.out)))
            return
        for _ in range(2):
            if self.fs.create_new(self.lock, me):
                self._stack.callback(self.fs.delete, self.lock)
                return
            try:
                host, pid = self.fs.read_text(self.lock).split()
            except Exception:  # noqa: BLE001 - gone meanwhile, or not ours to parse
                host, pid = "?", "0"
            if host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid)):
                self.fs.delete(self.lock)   # stale: its run died on this host
                continue
            holder = f"pid {pid} on {host}" if host != "?" else "another run"
            raise LockedError(f"{self.out}: being written by {holder} (lock {self.lock}; delete it "
                              f"if that run is dead)")
        raise LockedError(f"{self.out}: lock {self.lock} keeps being taken")

    # -- recovery ------------------------------------------------------------

    def _recover(self) -> list[str]:
        prefix = f".{self.out.name}."
        left = sorted(n for n in self.fs.names(self.out.parent)
                      if n.startswith(prefix) and n[len(prefix):].startswith(_LEFTOVERS))
        done = []
        if not self.fs.exists(self.out):
            for n in left:
                p = self.out.parent / n
                if n[len(prefix):].startswith(("trash-", "old-")) and self.fs.exists(p / MARKERS[self.kind]):
                    self.fs.rename(p, self.out)
                    left.remove(n)
                    done.append(f"restored {self.out.name} from {n}")
                    break
        for n in left:
            self.fs.delete(self.out.parent / n)
            done.append(f"removed {n}")
        return done

    # -- the context manager -------------------------------------------------

    def __enter__(self) -> Path:
        import sys

        is_dir = self.fs.is_dir(self.out)
        check_listing(self.out, self.kind, is_file=self.fs.exists(self.out) and not is_dir,
                      names=self.fs.names(self.out) if is_dir else None)
        try:
            self._take_lock()
            for note in self._recover():
                sys.stderr.write(f"streamjoin: {note} (left by an interrupted run)\n")
            with interrupts_held() as pending:
                self.staging = self.out.parent / f".{self.out.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                self.fs.mkdirs(self.staging)
                self._stack.callback(self._drop_staging)
                self.local = Path(tempfile.mkdtemp(prefix="streamjoin-out-"))
                self._stack.callback(shutil.rmtree, self.local, True)
            act_on_held(pending)  # a signal meanwhile: both are made, so both are removed
        except BaseException:
            self._stack.close()
            raise
        return self.local

    def _drop_staging(self) -> None:
        if self.staging is not None:
            with interrupts_held() as pending:   # a second signal must not stop the clean-up
                self.fs.delete(self.staging)
            act_on_held(pending)  # ... nor be lost

    def _publish(self) -> None:
        for f in sorted(self.local.iterdir()):
            self.fs.put(f, self.staging / f.name)
        self.fs.drop_checksums(self.staging)
        with publishing():
            if self.fs.exists(self.out):
                trash = self.out.parent / f".{self.out.name}.trash-{uuid.uuid4().hex[:8]}"
                self.fs.rename(self.out, trash)
                fault_point("trashed")
                try:
                    self.fs.rename(self.staging, self.out)
                except BaseException:
                    self.fs.rename(trash, self.out)   # put the previous version back
                    raise
                self.staging = None
                self.fs.delete(trash)
            else:
                self.fs.rename(self.staging, self.out)
                self.staging = None

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._publish()
        finally:
            self._stack.close()   # staging (if not published), the local files, the lock
        return False


def open_uri_output(publish: ExitStack, cfg, executors: bool, native: bool):
    """``run --engine spark --out URI``: the run's SparkSession (the join reuses it) and
    its :class:`HadoopOutput`, entered on ``publish``.  Returns the local directory the
    driver writes into and the URI of ``results.parquet`` for the executors (None: the
    driver writes the results)."""
    from ...config.options import RESULTS_CONF_KEY
    from .session import spark_session
    from .sizing import input_rows_of

    if executors and not native:
        raise InputError(f"--out {cfg.out}: {RESULTS_CONF_KEY}=executors off the native path writes local part "
                         f"files; with a Hadoop URI use spark.streamjoin.native=true or {RESULTS_CONF_KEY}=driver")
    # the run's first session: a local master's heap is sized from the inputs here (the join reuses it)
    spark = publish.enter_context(spark_session(cfg.master, cfg.partitions or 4, cfg.spark_conf,
                                                input_rows=input_rows_of(cfg.streams)))
    out = HadoopOutput(spark, cfg.out)
    local = publish.enter_context(out)
    return local, (out.staging / "results.parquet") if executors else None

