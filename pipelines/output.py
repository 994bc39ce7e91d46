"""Atomic output directories: a run publishes everything or nothing.

Files are written into a staging directory beside ``--out``
(``.<name>.staging-<id>``) and renamed into place only after every file is
complete.  A failure or Ctrl-C removes the staging directory; a previous
output stays untouched until the new one is complete, so readers see either
the old result or the new one, never a mix.  (The rename of a directory over
an existing one is two renames; the window between them is reported to
readers as "no output" rather than a partial one.)
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from .errors import InputError

#: a file every streamjoin output directory holds; its presence makes an
#: existing directory safe to replace
MARKER = "report.json"


class AtomicOutput:
    """Context manager yielding a staging directory published on success.

    Args:
        out: the final output directory.  It may not exist, be empty, or be a
            previous streamjoin output (holds ``report.json``); anything else
            is refused rather than overwritten.
    """

    def __init__(self, out: Path):
        self.out = Path(out)
        self.staging: Path | None = None

    def __enter__(self) -> Path:
        out = self.out
        if out.exists() and not out.is_dir():
            raise InputError(f"{out}: output path exists and is not a directory")
        if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
            raise InputError(f"{out}: output directory is not empty and is not a streamjoin output; choose another --out")
        parent = out.parent if str(out.parent) else Path(".")
        parent.mkdir(parents=True, exist_ok=True)
        self.staging = parent / f".{out.name}.staging-{uuid.uuid4().hex[:12]}"
        self.staging.mkdir()
        return self.staging

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self.staging is not None
        if exc_type is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            return False
        old = None
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.old-{uuid.uuid4().hex[:12]}"
            os.replace(self.out, old)
        os.replace(self.staging, self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return False
