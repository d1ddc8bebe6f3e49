"""Create a memory-limited child cgroup, run processes inside it, read its OOM counter, remove it.

Tests, the bench and the supervisor use this to run a workload under a real kernel limit on
either cgroup version:
- v1: a directory under our own memory cgroup; ``memory.limit_in_bytes`` (and
  ``memory.memsw.limit_in_bytes`` where swap accounting exists, so the limit cannot be
  dodged by swapping).
- v2: a directory under the nearest cgroup (ours, then each ancestor) whose
  ``cgroup.subtree_control`` has or can be given "+memory" (v2 forbids enabling controllers
  for children of a cgroup that has processes of its own, except at the root);
  ``memory.max`` and ``memory.swap.max = 0``.
Processes start *inside* the cgroup (a shell writes its own pid to ``cgroup.procs`` and then
execs the command), so nothing they allocate is charged elsewhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from .limits import CgroupError, CgroupLocation, CgroupReading, find_memory_cgroup, read_cgroup

_ENTER_AND_EXEC = 'echo $$ > "$0" && exec "$@"'


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from exc


def _v2_parent(location: CgroupLocation) -> Path:
    """The nearest directory (ours, then ancestors) under which a child gets the memory controller."""
    reasons = []
    for directory in location.levels():
        control = directory / "cgroup.subtree_control"
        if "memory" in (control.read_text().split() if control.exists() else []):
            return directory
        try:
            control.write_text("+memory")
            return directory
        except OSError as exc:
            reasons.append(f"{directory}: {exc.strerror or exc}")
    raise CgroupError("no cgroup v2 directory on the way up can enable the memory controller for a child ("
                      + "; ".join(reasons) + ")")


class ChildCgroup:
    """A memory cgroup this process created; ``close()`` (or leaving the ``with`` block) removes it.

    Raises CgroupError from ``create`` where no memory cgroup is visible or it is not writable,
    so callers (tests) can skip cleanly with the reason.
    """

    def __init__(self, location: CgroupLocation, directory: Path):
        self.version = location.version
        self.mount = location.mount
        self.directory = directory
        self._location = CgroupLocation(location.version, location.mount, location.relative_path(directory), directory, "exact")

    @classmethod
    def create(cls, limit_bytes: int, prefix: str = "cuzk-") -> "ChildCgroup":
        if limit_bytes <= 0:
            raise ValueError(f"cgroup limit must be positive, got {limit_bytes}")
        location = find_memory_cgroup()
        if location is None:
            raise CgroupError("no memory cgroup is mounted (neither a v1 memory hierarchy nor cgroup v2 with the memory controller)")
        parent = location.directory if location.version == 1 else _v2_parent(location)
        directory = parent / f"{prefix}{uuid.uuid4().hex[:10]}"
        try:
            directory.mkdir()
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {directory}: {exc.strerror or exc}") from exc
        child = cls(location, directory)
        try:
            child.set_limit(limit_bytes)
        except CgroupError:
            child.close()
            raise
        return child

    def set_limit(self, limit_bytes: int) -> None:
        """Hard limit, with swap closed off so the limit means what it says."""
        if self.version == 2:
            _write(self.directory / "memory.max", str(limit_bytes))
            if (self.directory / "memory.swap.max").exists():
                _write(self.directory / "memory.swap.max", "0")
            return
        memsw = self.directory / "memory.memsw.limit_in_bytes"
        # memsw must stay >= the memory limit, so the order of the writes depends on the direction.
        current = int((self.directory / "memory.limit_in_bytes").read_text())
        if memsw.exists() and limit_bytes > current:
            _write(memsw, str(limit_bytes))
        _write(self.directory / "memory.limit_in_bytes", str(limit_bytes))
        if memsw.exists():
            _write(memsw, str(limit_bytes))

    # -- processes ---------------------------------------------------------------------------

    def popen(self, args: list[str], **kwargs) -> subprocess.Popen:
        """Start ``args`` already inside this cgroup (no allocation happens outside it)."""
        return subprocess.Popen(["/bin/sh", "-c", _ENTER_AND_EXEC, str(self.directory / "cgroup.procs"), *args], **kwargs)

    def run(self, args: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
        """Like ``subprocess.run`` (output captured as text) inside this cgroup; killed if it outlives ``timeout``."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        with self.popen(args, **kwargs) as proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def pids(self) -> list[int]:
        text = (self.directory / "cgroup.procs").read_text() if self.directory.exists() else ""
        return [int(line) for line in text.split()]

    # -- counters ----------------------------------------------------------------------------

    def read(self) -> CgroupReading:
        return read_cgroup(self._location)

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer took inside this cgroup so far."""
        kills = self.read().oom_kills
        if kills is None:
            raise CgroupError(f"{self.directory} exposes no OOM kill counter (kernel too old?)")
        return kills

    # -- cleanup -----------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Kill what is still inside (only processes this cgroup holds: ones we started) and remove it."""
        if not self.directory.exists():
            return
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            for pid in self.pids():
                if pid == os.getpid():
                    raise CgroupError(f"refusing to remove {self.directory}: this process itself is inside it")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.directory.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise CgroupError(f"cannot remove cgroup {self.directory}: {exc.strerror or exc} "
                                      f"(processes left: {self.pids()})") from exc
            # An exiting process leaves the cgroup a moment after SIGKILL; nothing to wait on but the directory.
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def __enter__(self) -> "ChildCgroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChildCgroup(v{self.version}, {self.directory})"
