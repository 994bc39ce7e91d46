"""Errors a user can act on.

Every problem with the user's input (files, columns, types, durations,
options) is raised as :class:`InputError` with a one-line message that says
which file/column/option and what was expected.  The CLI prints it as
``error: <message>`` and exits with :data:`EXIT_USAGE`; nothing else is
printed and no partial output is left behind.

Input that is used, but not as the user asked (a ``--unit`` a Parquet
timestamp column overrides), gets a one-line ``warning: ...`` on stderr from
:func:`warn_once`.
"""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_TARGET_MISSED = 3
EXIT_LOCKED = 4
EXIT_INTERRUPTED = 130


class StreamjoinError(Exception):
    """Base class: a failure with a one-line, user-facing message."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str):
        # One line, always: multi-line messages break cron log parsing.
        super().__init__(" ".join(str(message).split()))


class InputError(StreamjoinError):
    """Bad input: missing file/column, wrong type, bad duration, bad option."""

    exit_code = EXIT_USAGE


_warned: set[str] = set()


def warn_once(message: str, prefix: str = "warning") -> None:
    """Print ``<prefix>: <message>`` (one line; ``note`` for what is not a problem) to
    stderr, once per process per message (a stream read row group by row group would
    otherwise repeat it)."""
    line = " ".join(str(message).split())
    if line in _warned:
        return
    _warned.add(line)
    sys.stderr.write(f"{prefix}: {line}\n")
    sys.stderr.flush()
