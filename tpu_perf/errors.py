"""Errors a user can hit. Each carries a one-line message that names the file or flag and what to do.

The CLI maps them to exit codes, one meaning each: usage errors exit 2, data errors exit 3.
"""

from __future__ import annotations


class TpuPerfError(Exception):
    """Base class for errors shown to the user as one line, without a traceback."""

    exit_code = 1


class UsageError(TpuPerfError):
    """A flag, argument or script path is wrong: fix the command line."""

    exit_code = 2


class DataError(TpuPerfError):
    """A run folder, table or trace cannot be read: the file is named in the message."""

    exit_code = 3


class RunNotFoundError(DataError):
    """No run matches the id, prefix or path that was given."""
