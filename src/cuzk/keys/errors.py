"""What the key manager refuses, each error naming the key."""

from __future__ import annotations


class KeyManagerError(ValueError):
    """A request the key manager cannot honour; the message names the key."""


class UnknownKeyError(KeyManagerError):
    def __init__(self, name: str, known: list[str]):
        listing = ", ".join(known) if known else "none registered"
        super().__init__(f"unknown circuit key {name!r} (known: {listing})")
        self.name = name


class KeyInUseError(KeyManagerError):
    pass


class KeyLoadCancelled(Exception):
    """The caller's cancel check fired while waiting for room to load a key."""


class KeyFileChanged(KeyManagerError):
    """The key file no longer matches the header read at registration (truncated or rewritten since)."""
