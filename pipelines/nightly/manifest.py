"""Partition manifests: what a published partition was made from, and whether it is stale.

Every published partition ``out/date=D/`` holds ``_manifest.json`` (the
leading underscore keeps Spark, pyarrow and Hive from reading it as data)::

    schema_version, tool_version, date, created_at,
    config_hash, config            -- the resolved config (minus --out)
    lookback_us,
    inputs: [{stream, day, role, path, size, mtime_ns, sha256}]
    files:  {results.parquet: {rows, bytes, sha256}, ...}
    counts, metrics, state_end, exactness

Staleness (:func:`compare`) is decided from the manifest alone:

* a different ``config_hash`` -> stale ("config changed");
* a different set of input files -> stale ("input added/removed");
* same size and mtime -> unchanged without reading the file; otherwise the
  file is hashed and compared with the recorded sha256, so a file that was
  only touched (``cp -p``, a re-sync) is not a change.

The tool version is recorded but not compared: upgrading streamjoin does not
by itself make every partition stale (``--force`` redoes one).

What is recorded is what was read: every input file is pinned (:func:`pin`:
size, mtime, ctime, inode) *before* the day is loaded, and
:func:`describe_inputs` hashes it after loading and checks that the pin still
holds and that the files read are the files pinned.  A file replaced,
rewritten, added or removed while the day was being read fails the day
(exit 2, nothing published): otherwise the manifest would record the new
file's hash over results computed from the old one, and every later run
would call the stale partition up to date.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..base.errors import InputError
from .partitions import InputFile

SCHEMA_VERSION = 1
NAME = "_manifest.json"
SUCCESS = "_SUCCESS"

#: config keys that do not change what a partition holds (``max_quarantine``
#: decides whether a day runs at all, not what it holds; a day replays on the
#: local engine whatever ``engine`` says)
_NOT_CONTENT = ("out", "write_results", "max_quarantine", "engine")
#: stream settings that do not change what a partition holds (an optional
#: stream's missing day would otherwise fail, not differ)
_NOT_CONTENT_STREAM = ("optional",)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def config_hash(config: dict[str, Any], lookback_us: int) -> str:
    """sha256 of the canonical JSON of everything that shapes the results."""
    content = {k: v for k, v in config.items() if k not in _NOT_CONTENT}
    content["streams"] = [{k: v for k, v in s.items() if k not in _NOT_CONTENT_STREAM}
                          for s in content.get("streams", [])]
    content["lookback_us"] = lookback_us
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


#: what :func:`pin` records of a file: any write, truncation, ``touch`` or
#: replacement (a new inode) changes one of them
Pin = tuple[int, int, int, int, int]


def _pin_of(path: Path) -> Pin:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def pin(files: list[InputFile]) -> dict[str, Pin]:
    """Each input file as it is before the day reads it (module docstring)."""
    return {str(f.path): _pin_of(f.path) for f in files}


def _changed(path: str, what: str) -> InputError:
    return InputError(f"{path}: input file {what} while the day was being read; nothing published for the day "
                      f"(its results would not match the inputs recorded); run it again")


def describe_inputs(files: list[InputFile], pinned: dict[str, Pin], read: list[Path]) -> list[dict[str, Any]]:
    """The manifest's ``inputs``: every file hashed, after checking it is what was read.

    ``pinned`` is :func:`pin` taken before loading, ``read`` the files the
    loader actually opened.  Raises :class:`InputError` if one of them was
    added, removed or changed since it was pinned.
    """
    listed = {str(f.path) for f in files}
    for path in sorted({str(p) for p in read} | listed):
        if path not in pinned:
            raise _changed(path, "appeared")
    for path in sorted(set(pinned) - listed):
        raise _changed(path, "disappeared")
    out = []
    for f in files:
        before = pinned[str(f.path)]
        try:
            digest = sha256_file(f.path)
            after = _pin_of(f.path)
        except FileNotFoundError:
            raise _changed(str(f.path), "disappeared") from None
        if after != before:
            raise _changed(str(f.path), "changed")
        out.append({
            "stream": f.stream, "day": f.day.isoformat(), "role": f.role, "path": str(f.path),
            "size": before[0], "mtime_ns": before[1], "sha256": digest,
        })
    return out


def read(partition: Path) -> dict[str, Any] | None:
    """The manifest of a *published* partition (``_SUCCESS`` present), else ``None``."""
    if not (partition / SUCCESS).is_file():
        return None
    try:
        return json.loads((partition / NAME).read_text())
    except (OSError, ValueError):
        return None


def compare(manifest: dict[str, Any] | None, files: list[InputFile], cfg_hash: str) -> tuple[str, str]:
    """``("missing"|"stale"|"up-to-date", reason)`` for a partition."""
    if manifest is None:
        return "missing", "no published partition"
    if manifest.get("config_hash") != cfg_hash:
        return "stale", "config changed"
    recorded = {(e["stream"], e["path"]): e for e in manifest.get("inputs", [])}
    current = {(f.stream, str(f.path)): f for f in files}
    added = sorted(set(current) - set(recorded))
    if added:
        return "stale", f"input added: {added[0][1]}"
    removed = sorted(set(recorded) - set(current))
    if removed:
        return "stale", f"input removed: {removed[0][1]}"
    for key, f in current.items():
        e = recorded[key]
        try:
            st = f.path.stat()
        except OSError:
            return "stale", f"input unreadable: {f.path}"
        if st.st_size == e["size"] and st.st_mtime_ns == e["mtime_ns"]:
            continue
        if st.st_size != e["size"] or e.get("sha256") is None or sha256_file(f.path) != e["sha256"]:
            return "stale", f"input changed: {f.path}"
    return "up-to-date", "same inputs and config"


def build(*, day: dt.date, tool_version: str, config: dict[str, Any], cfg_hash: str, lookback_us: int,
          inputs: list[dict[str, Any]], files: dict[str, Any], counts: dict[str, Any], metrics: dict[str, Any],
          state_end: dict[str, Any], exactness: dict[str, Any], command: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": tool_version,
        "command": command,
        "date": day.isoformat(),
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "config_hash": cfg_hash,
        "config": {k: v for k, v in config.items() if k != "out"},
        "lookback_us": lookback_us,
        "inputs": inputs,
        "files": files,
        "counts": counts,
        "metrics": metrics,
        "state_end": state_end,
        "exactness": exactness,
    }


def write(manifest: dict[str, Any], path: Path) -> None:
    with open(path, "w") as fh:
        json.dump(manifest, fh, indent=2, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
