"""The cluster's registered keys as the front door sees them: headers read here, residency summed over the hosts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..formats.zkey import ZKeyHeader, read_zkey_header
from ..keys.errors import UnknownKeyError
from .status import merged_keys


class ClusterKeys:
    """The cluster's registered keys, with the ``KeyManager`` reads the gRPC service makes (names, status, header)."""

    def __init__(self, host_statuses: Callable[[], list[dict[str, Any]]]):
        self._host_statuses = host_statuses
        self._headers: dict[str, ZKeyHeader] = {}

    def add(self, name: str, path: str) -> None:
        self._headers[name] = read_zkey_header(path)

    def names(self) -> list[str]:
        return sorted(self._headers)

    def header(self, name: str) -> ZKeyHeader:
        if name not in self._headers:
            raise UnknownKeyError(name, self.names())
        return self._headers[name]

    def status(self) -> list[dict]:
        return merged_keys(self._host_statuses())
