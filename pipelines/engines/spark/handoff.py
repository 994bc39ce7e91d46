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

A file holds the record's pickle (protocol 5) with its large buffers -- the
numpy columns -- *out of band*, each at a 64-byte aligned offset after it::

    | header | pickle stream | pad | buffer 0 | pad | buffer 1 | ...

and :meth:`Handoff.get` maps the file (private, copy-on-write) and rebuilds
the arrays *on* the mapped pages instead of copying them.  With the file in
``/dev/shm`` those pages are already in memory: a task reads its 150 MB of
tuples without touching any fresh memory, which on a VM whose fresh pages
are faulted in from the host is most of the cost (docs/performance.md).
An array is writable (a write copies only the page it touches).

Guarantees: :meth:`Handoff.get` returns an object equal to the one given to
:meth:`Handoff.put`; :meth:`Handoff.close` removes the directory and anything
left in it (a failed task's output), so an interrupted run leaves no files
behind unless the driver itself is killed.
"""

from __future__ import annotations

import mmap
import os
import pickle
import shutil
import struct
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any

from ...config.options import HANDOFF_CONF_KEY as CONF_KEY, HANDOFF_MODES as MODES, same_host


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
            from ...base.errors import InputError

            raise InputError(f"{CONF_KEY} must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "files" and not same_host(master):
            from ...base.errors import InputError

            raise InputError(f"{CONF_KEY}=files needs every executor on the driver's host (a local master), "
                             f"not --master {master}; use auto or inline")
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
                _write_record(f, obj)
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
        obj = _read_record(path)
        if consume:
            os.unlink(path)  # the mapping keeps the pages until the arrays are freed
        return obj

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


_MAGIC = b"SJH1"
_HEAD = struct.Struct("<4sQQ")        # magic, pickle length, buffer count
_ALIGN = 64


def _pad(offset: int) -> int:
    return -offset % _ALIGN


def _write_record(f, obj: Any) -> None:
    """``obj`` as header + pickle stream + its out-of-band buffers, each aligned."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
    f.write(_HEAD.pack(_MAGIC, len(data), len(raws)))
    f.write(sizes)
    f.write(data)
    offset = _HEAD.size + len(sizes) + len(data)
    for r in raws:
        f.write(b"\0" * _pad(offset))
        offset += _pad(offset)
        f.write(r)
        offset += r.nbytes


def _read_record(path: str) -> Any:
    """The object a file of :func:`_write_record` holds, its buffers on the mapped file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ValueError(f"empty hand-off record {path}")
        # private mapping: pages are shared with the file until written to
        mm = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    view = memoryview(mm)
    magic, length, count = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC:
        raise ValueError(f"not a hand-off record: {path}")
    sizes = struct.unpack_from(f"<{count}Q", view, _HEAD.size)
    offset = _HEAD.size + 8 * count
    data = view[offset:offset + length]
    offset += length
    buffers = []
    for n in sizes:
        offset += _pad(offset)
        buffers.append(view[offset:offset + n])
        offset += n
    return pickle.loads(data, buffers=buffers)
