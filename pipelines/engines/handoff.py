"""How the Spark engine's bulk numpy blocks travel between driver and tasks.

The Spark plane moves a few large records: each partition's tuples (columns
of millions of values) to its task, and each task's combinations (two int32
columns of millions of rows plus a bit mask) back.  In band, every such
record is pickled into the JVM, held there as a byte array, handed to the
Python worker, and on the way back pickled again, wrapped in a task result,
served from the driver JVM to the driver process::

    driver py --pickle--> driver JVM --socket--> worker py       (tuples)
    worker py --pickle--> JVM task result --> driver JVM --socket--> driver py
                                                               (combinations)

On the core benchmark (3M tuples, 8.1M combinations) the return trip alone
took 3.6 s against 0.85 s for the kernel that produced it
(docs/performance.md, "Spark engine vs local").

When every executor runs on the driver's host -- ``local``, ``local[n]``,
``local-cluster[...]`` -- a record can instead be written once to a file in a
directory the driver owns (``/dev/shm`` when it exists: memory, not disk), and
only its path travels through Spark.  That is the ``files`` mode; ``inline``
is the in-band path, the only one that works when executors are on other
hosts (``spark://``, YARN, Kubernetes).  ``auto`` picks ``files`` for local
masters and ``inline`` otherwise; ``spark.streamjoin.handoff`` (a Spark conf,
``--conf`` or ``[spark.conf]``) overrides it.

Guarantees: :meth:`Handoff.get` returns an object equal to the one given to
:meth:`Handoff.put` (pickle protocol 5); :meth:`Handoff.close` removes the
directory and anything left in it (a failed task's output), so an interrupted
run leaves no files behind unless the driver itself is killed.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any

MODES = ("auto", "files", "inline")
CONF_KEY = "spark.streamjoin.handoff"


def same_host(master: str) -> bool:
    """Whether every executor of ``master`` runs on the driver's machine."""
    return master.startswith("local")


#: /dev/shm is used only with at least this much free (containers often give it 64 MB)
SHM_MIN_FREE = 1 << 30


def _scratch_root() -> str | None:
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= SHM_MIN_FREE:
        return shm
    return None  # the platform's temporary directory


@dataclass(frozen=True)
class _File:
    """A token in files mode: where the record is."""

    path: str


@dataclass(frozen=True)
class Handoff:
    """A picklable handle: ``directory`` set = files mode, ``None`` = inline."""

    directory: str | None = None

    @classmethod
    def open(cls, mode: str, master: str) -> Handoff:
        if mode not in MODES:
            from ..errors import InputError

            raise InputError(f"{CONF_KEY} must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "inline" or (mode == "auto" and not same_host(master)):
            return cls(None)
        return cls(tempfile.mkdtemp(prefix="streamjoin-handoff-", dir=_scratch_root()))

    @property
    def mode(self) -> str:
        return "inline" if self.directory is None else "files"

    def put(self, obj: Any) -> Any:
        """A token for ``obj``: a file's name, or the object itself (inline mode,
        or when the file cannot be written: a full disk costs speed, not the run)."""
        if self.directory is None:
            return obj
        path = os.path.join(self.directory, uuid.uuid4().hex)
        try:
            with open(path + ".part", "wb") as f:
                pickle.dump(obj, f, protocol=5)
            os.replace(path + ".part", path)  # a reader never sees half a record
        except OSError:
            try:
                os.unlink(path + ".part")
            except OSError:
                pass
            return obj
        return _File(path)

    def get(self, token: Any, *, consume: bool = False) -> Any:
        """The object behind ``token``.  ``consume``: remove its file now (the
        driver, reading a result); tasks leave their inputs in place, since
        Spark may run a task again after a failure."""
        if not isinstance(token, _File):
            return token
        path = token.path
        with open(path, "rb") as f:
            obj = pickle.load(f)
        if consume:
            os.unlink(path)
        return obj

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
