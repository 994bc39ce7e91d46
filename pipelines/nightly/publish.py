"""Publication of one output partition ``out/date=D/``.

Guarantee: **a run killed at any moment (even by SIGKILL) leaves either the
previous published partition or the new one, never a mix and never none**,
and the next run cleans up whatever the killed one left.  The protocol is the
one every streamjoin output uses (:mod:`streamjoin.pipelines.io.output`,
where the crash points are described); for a partition:

1. the caller holds the partition's lock ``out/.date=D.lock``
   (:mod:`streamjoin.pipelines.io.lock`) and runs :func:`clean_leftovers`:
   ``.date=D.staging-*`` / ``.date=D.trash-*`` of earlier, dead runs are
   removed (after a crash inside the fallback swap the previous partition is
   put back first);
2. files are written into ``out/.date=D.staging-<pid>-<id>/``;
3. the caller validates the staging directory, then :func:`commit` writes
   ``_SUCCESS`` last and puts the directory in place of ``date=D`` in one
   atomic exchange (two renames where the file system has no exchange).

A partition counts as published only if it holds ``_SUCCESS``; dot-prefixed
names (staging, trash, lock) are ignored by Spark, pyarrow and Hive readers.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..base.errors import InputError, StreamjoinError
from ..io import output
from ..io.lock import lock_of, remove_stale
from .manifest import SUCCESS

_PART_RE = re.compile(r"^\.?date=\d{4}-\d{2}-\d{2}(\.(lock|staging-.*|trash-.*))?$")


class PublishError(StreamjoinError):
    """The staged partition failed validation; nothing was published."""


def partition_dir(out: Path, day) -> Path:
    return Path(out) / f"date={day.isoformat()}"


def lock_path(out: Path, day) -> Path:
    return lock_of(partition_dir(out, day))


def check_root(out: Path) -> None:
    """``out`` must be new, empty, or hold only partitions (and their dot-files)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: output path exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if not _PART_RE.match(p.name))
        if foreign:
            raise InputError(f"{out}: not a partitioned streamjoin output (holds {foreign[0]!r}); choose another --out")


def remove_stale_locks(out: Path) -> list[str]:
    """Remove the ``.date=D.lock`` files of runs that died (no live holder); returns their names."""
    out = Path(out)
    if not out.is_dir():
        return []
    return [p.name for p in sorted(out.glob(".date=*.lock")) if remove_stale(p)]


def clean_leftovers(out: Path, day) -> list[str]:
    """Remove what dead runs left for this partition; returns what was done."""
    return output.recover(partition_dir(out, day), SUCCESS)


def new_staging(out: Path, day) -> Path:
    return output.new_staging(partition_dir(out, day))


def commit(staging: Path, out: Path, day) -> None:
    """Mark ``staging`` complete (``_SUCCESS``) and put it in place of ``out/date=D`` in one step."""
    (staging / SUCCESS).touch()
    output.commit(staging, partition_dir(out, day))


def abandon(staging: Path | None) -> None:
    output.abandon(staging)
