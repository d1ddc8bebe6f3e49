"""The one error every reader in ``cuzk.formats`` raises for bad input."""

from __future__ import annotations

import os


class FormatError(ValueError):
    """A file (or JSON document) is not what it claims to be.

    The message names the file, the section (or JSON key) and what is wrong, so one line
    on a command line tells the user which input to fix.
    """

    def __init__(self, path: str | os.PathLike | None, problem: str, section: str | None = None):
        self.path = None if path is None else str(path)
        self.section = section
        self.problem = problem
        where = ": ".join(p for p in (self.path, section) if p)
        super().__init__(f"{where}: {problem}" if where else problem)
