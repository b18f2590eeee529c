"""The two ways a command gives up on purpose; main() prints each as one line."""

from __future__ import annotations


class UsageError(Exception):
    """Raised for bad command-line input; printed as one line, exit status 2."""


class CommandFailed(Exception):
    """Raised when a command cannot go on (a full disk, a dead fetcher loop); printed as one line, exit status 1."""
