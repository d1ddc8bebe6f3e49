"""The daemon a bench run talks to: one it starts (``cuzk daemon`` in a child process on its own
data directory, optionally inside a memory cgroup of its own) or one it attaches to.

Either way the bench needs three things from it: a gRPC address, the supervisor's record
(``supervisor.json``: deaths, OOM kills, learned budget — read from the data directory while
the engine is down, from the status document otherwise) and the kernel's view of the limit
and the charged memory where the bench can see it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..engine.supervisor import SupervisorState, read_json
from ..memory.limits import read_limits
from .workload import BenchCircuit

MARKER = ".cuzk-bench"  # a data directory the bench made, so it may wipe it for the next run
DAEMON_FILE = Path("run") / "daemon.json"
MAX_SOCKET_PATH = 100


class DaemonStartError(RuntimeError):
    """The daemon did not come up; the message carries the end of its log."""


def _toml_value(key: str, value: Any) -> str:
    """A JSON scalar, or a flat list of them (devices = [0, 1]), is also TOML."""
    scalars = value if isinstance(value, list) else [value]
    if any(isinstance(v, (dict, list)) or v is None for v in scalars):
        raise ValueError(f"--engine {key}: only numbers, booleans, strings and flat lists of them can be set here (got {value!r})")
    return json.dumps(value)


def fresh_data_dir(path: Path) -> Path:
    """Empty ``path`` for a new run if the bench made it; refuse a directory it did not make."""
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise ValueError(f"{path} exists and is not a bench data directory; give an empty --out or --data-dir")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("made by cuzk bench; emptied at the start of each run\n")
    return path


class StartedDaemon:
    """``cuzk daemon`` (supervisor + engine) in a child process, stopped with SIGTERM at the end of the run."""

    attached = False

    def __init__(self, data_dir: Path, circuits: list[BenchCircuit], log_path: Path, *, budget: str | None = None,
                 budget_over_limit: bool = False, engine: dict[str, Any] | None = None, memory_limit: int | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.log_path = log_path
        socket = self.data_dir / "cuzk.sock"
        self._socket_dir = None
        if len(str(socket)) > MAX_SOCKET_PATH:  # sun_path holds 107 bytes
            self._socket_dir = Path(tempfile.mkdtemp(prefix="cuzk-bench-"))
            socket = self._socket_dir / "cuzk.sock"
        self.address = f"unix:{socket}"
        lines = ["[keys]"] + [f"{json.dumps(c.name)} = {json.dumps(str(c.zkey))}" for c in circuits]
        lines += ["[engine]"] + [f"{k} = {_toml_value(k, v)}" for k, v in (engine or {}).items()]
        config = self.data_dir / "bench-daemon.toml"
        config.write_text("\n".join(lines) + "\n")
        self.argv = [sys.executable, "-m", "cuzk.cli", "daemon", "--config", str(config), "--data-dir", str(self.data_dir),
                     "--listen", self.address, "--http", "", "--log-level", "info"]
        if budget:
            self.argv += ["--budget", budget]
        if budget_over_limit:
            self.argv += ["--budget-over-limit"]
        self.cgroup = None
        if memory_limit is not None:
            from ..memory.cgroup import ChildCgroup

            self.cgroup = ChildCgroup.create(memory_limit, prefix="cuzk-bench-")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 300.0) -> StartedDaemon:
        popen = self.cgroup.popen if self.cgroup is not None else subprocess.Popen
        with open(self.log_path, "ab") as log:
            # Its own session: a Ctrl-C at the terminal reaches the bench, which stops the daemon in order.
            self.proc = popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            if self.proc.poll() is not None:
                raise DaemonStartError(f"the daemon exited with status {self.proc.returncode} before it listened:\n{self.log_tail()}")
            info = read_json(self.data_dir / DAEMON_FILE)
            if info and info.get("pid") == self.supervisor_state().get("engine_pid"):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise DaemonStartError(f"the daemon did not listen within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def supervisor_state(self, status: dict[str, Any] | None = None) -> dict[str, Any]:
        """Read from the data directory: it is there while the engine restarts, when no status answers."""
        state = SupervisorState.load(self.data_dir)
        return asdict(state) if state.supervisor_pid else {}

    def kernel_memory(self) -> tuple[int | None, int | None, str]:
        """(limit, charged, source) as the kernel enforces them on the daemon's processes."""
        if self.cgroup is not None:
            reading = self.cgroup.read()
            return reading.effective_limit_bytes, reading.charged_bytes, f"cgroup {self.cgroup.directory}"
        limits = read_limits()  # the daemon runs in the bench's own cgroup
        if limits.ceiling_source.startswith("cgroup"):
            return limits.ceiling_bytes, limits.cgroup.charged_bytes, limits.ceiling_source
        # MemTotal binds: what counts is what the whole machine uses, as the engine's reconciler reads it.
        return limits.ceiling_bytes, limits.meminfo.total_bytes - limits.meminfo.available_bytes, limits.ceiling_source

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 60.0) -> int | None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                engine = self.supervisor_state().get("engine_pid")
                for pid in (proc.pid, engine):
                    if pid:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                proc.wait()
        if self.cgroup is not None:
            self.cgroup.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        return None if proc is None else proc.returncode


class AttachedDaemon:
    """A daemon someone else runs (``--addr``): the bench reads its supervisor record from its status."""

    attached = True
    data_dir = None
    cgroup = None

    def __init__(self, address: str):
        self.address = address

    def alive(self) -> bool:
        return True

    @staticmethod
    def supervisor_state(status: dict[str, Any] | None = None) -> dict[str, Any]:
        return (status or {}).get("supervisor") or {}

    @staticmethod
    def kernel_memory() -> tuple[None, None, str]:
        return None, None, "the daemon's own reading (attached: the bench cannot see its cgroup)"

    def stop(self, timeout: float = 0.0) -> None:
        return None
