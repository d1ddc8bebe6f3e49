"""How much memory this process really has: cgroup v2, cgroup v1 and /proc/meminfo.

A container's MemTotal is the host's (or a balloon's) figure, not the limit the OOM killer
enforces. The truth is the memory cgroup the process lives in *and every ancestor of it*:
the tightest limit on the way up to the hierarchy's root wins.

What "charged" means here: ``usage − inactive_file``. Both v1's ``memory.usage_in_bytes``
and v2's ``memory.current`` include page cache; the inactive part of the file cache is the
first thing reclaim takes before the OOM killer is ever called, so counting it would make a
machine that merely read a large key file look full. This is the same "working set" figure
kubelet and cAdvisor use for eviction. Active file pages are kept in the figure: they are
reclaimable too, but only after the inactive ones, so counting them errs on the safe side.

Every path is resolved under ``root`` (default ``/``) so the parsing can be exercised
against a directory tree laid out like /proc and /sys/fs/cgroup.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .units import format_size

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
# cgroup v1 writes PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 on x86-64) for "no limit".
_V1_UNLIMITED_FLOOR = 1 << 62


class CgroupError(OSError):
    """A memory cgroup could not be found, read, created or written; the message names the path."""


@dataclass(frozen=True)
class CgroupLocation:
    """Where this process's memory cgroup is, and how sure we are of it.

    ``resolution`` says how ``directory`` was found: "exact" (the path from /proc/<pid>/cgroup
    exists under the mount), "ancestor" (it does not, e.g. inside a container whose mount shows
    only part of the tree, so the deepest existing ancestor was used) or "mount-root".
    """

    version: int
    mount: Path
    proc_path: str
    directory: Path
    resolution: str

    def levels(self) -> list[Path]:
        """The directory, then each ancestor up to and including the mount root."""
        out = [self.directory]
        current = self.directory
        while current != self.mount and self.mount in current.parents:
            current = current.parent
            out.append(current)
        return out

    def relative_path(self, directory: Path | None = None) -> str:
        """A directory of this hierarchy (default: ours) as a cgroup path ("/a/b"), as /proc/<pid>/cgroup writes it."""
        rel = (self.directory if directory is None else directory).relative_to(self.mount).as_posix()
        return "/" if rel == "." else "/" + rel


@dataclass(frozen=True)
class CgroupLevel:
    """One directory on the way up: its own limits and counters."""

    path: str
    limit_bytes: int | None
    high_bytes: int | None
    usage_bytes: int | None


@dataclass(frozen=True)
class CgroupReading:
    """A snapshot of the memory cgroup: the tightest limits on the way up and the counters they apply to."""

    version: int
    mount: str
    path: str
    directory: str
    resolution: str
    limit_bytes: int | None
    limit_source: str | None
    high_bytes: int | None
    high_source: str | None
    usage_bytes: int | None
    inactive_file_bytes: int
    charged_bytes: int | None
    usage_source: str | None
    peak_bytes: int | None
    oom_events: int | None  # v2 memory.events "oom": times the limit was hit and reclaim failed
    oom_kills: int | None  # processes the OOM killer took in this cgroup (v2 memory.events, v1 memory.oom_control)
    swap_limit_bytes: int | None
    events: dict[str, int] = field(default_factory=dict)
    levels: list[CgroupLevel] = field(default_factory=list)

    @property
    def effective_limit_bytes(self) -> int | None:
        """The point past which the kernel throttles (v2 memory.high) or kills (the hard limit)."""
        candidates = [v for v in (self.limit_bytes, self.high_bytes) if v is not None]
        return min(candidates) if candidates else None

    @property
    def effective_limit_source(self) -> str | None:
        if self.high_bytes is not None and (self.limit_bytes is None or self.high_bytes < self.limit_bytes):
            return self.high_source
        return self.limit_source


@dataclass(frozen=True)
class Meminfo:
    total_bytes: int
    available_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int


@dataclass(frozen=True)
class MemoryLimits:
    """Everything ``read_limits`` found: the cgroup (None where no memory cgroup is visible) and meminfo."""

    meminfo: Meminfo
    cgroup: CgroupReading | None
    notes: list[str] = field(default_factory=list)

    @property
    def ceiling_bytes(self) -> int:
        """The smallest of the cgroup's effective limit and MemTotal."""
        limit = self.cgroup.effective_limit_bytes if self.cgroup else None
        return self.meminfo.total_bytes if limit is None else min(limit, self.meminfo.total_bytes)

    @property
    def ceiling_source(self) -> str:
        limit = self.cgroup.effective_limit_bytes if self.cgroup else None
        if limit is None or limit >= self.meminfo.total_bytes:
            return "MemTotal in /proc/meminfo"
        return f"cgroup v{self.cgroup.version} {self.cgroup.effective_limit_source}"

    def to_dict(self) -> dict:
        out = {"meminfo": asdict(self.meminfo), "cgroup": None, "ceiling_bytes": self.ceiling_bytes,
               "ceiling_source": self.ceiling_source, "notes": list(self.notes)}
        if self.cgroup is not None:
            out["cgroup"] = asdict(self.cgroup)
            out["cgroup"]["effective_limit_bytes"] = self.cgroup.effective_limit_bytes
        return out


# ---------------------------------------------------------------------------------------------
# small readers


def _under(root: Path, absolute: str | Path) -> Path:
    return root / str(absolute).lstrip("/")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError, PermissionError, ProcessLookupError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return None


def _read_limit(path: Path) -> int | None:
    """A limit file's value in bytes; None for "max" (v2), v1's huge "unlimited" value, or no file."""
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise CgroupError(f"{path}: expected a byte count or 'max', found {text!r}") from exc
    return None if value >= _V1_UNLIMITED_FLOOR else value


def _read_keyed(path: Path) -> dict[str, int]:
    """A flat "key value" file (memory.stat, memory.events, memory.oom_control)."""
    text = _read_text(path)
    out: dict[str, int] = {}
    if text is None:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def read_meminfo(root: Path = Path("/")) -> Meminfo:
    text = _read_text(_under(root, "/proc/meminfo"))
    if text is None:
        raise CgroupError(f"{_under(root, '/proc/meminfo')} is not readable")
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    if "MemTotal" not in values:
        raise CgroupError(f"{_under(root, '/proc/meminfo')} has no MemTotal line")
    total = values["MemTotal"]
    return Meminfo(total_bytes=total, available_bytes=values.get("MemAvailable", values.get("MemFree", 0)),
                   swap_total_bytes=values.get("SwapTotal", 0), swap_free_bytes=values.get("SwapFree", 0))


def read_status_bytes(*fields: str, pid: int | str = "self", root: Path = Path("/")) -> dict[str, int] | None:
    """The named kB fields of /proc/<pid>/status in bytes, from one read (so they describe one moment);
    None when the file is unreadable. A field the kernel does not report is absent."""
    text = _read_text(_under(root, f"/proc/{pid}/status"))
    if text is None:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in fields:
            out[name] = int(rest.split()[0]) * 1024
    return out


def read_rss_bytes(pid: int | str = "self", root: Path = Path("/")) -> int:
    """Resident set size of one process (VmRSS), the figure the OOM killer ranks processes by."""
    status = read_status_bytes("VmRSS", pid=pid, root=root)
    if status is None:
        raise CgroupError(f"/proc/{pid}/status is not readable (process gone?)")
    return status.get("VmRSS", 0)  # kernel threads and zombies have no VmRSS line


# ---------------------------------------------------------------------------------------------
# finding the cgroup


def _unescape_mount_path(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def _parse_mountinfo(text: str) -> list[tuple[str, str, str, list[str]]]:
    """(fstype, mount root, mount point, super options) for each mount."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mounts.append((tail[0], _unescape_mount_path(fields[3]), _unescape_mount_path(fields[4]), tail[2].split(",")))
    return mounts


def _parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """(v1 memory controller path, v2 unified path) from /proc/<pid>/cgroup."""
    v1_path = v2_path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    return v1_path, v2_path


def _resolve(version: int, mount_point: str, mount_root: str, proc_path: str, root: Path) -> CgroupLocation:
    mount = _under(root, mount_point)
    relative = None
    # The path in /proc/<pid>/cgroup is relative to the hierarchy's root; the mount may show only
    # a subtree of it (mount root "/docker/<id>"), and in a foreign cgroup namespace it reads "/../..".
    if mount_root == "/":
        relative = proc_path
    elif proc_path == mount_root or proc_path.startswith(mount_root.rstrip("/") + "/"):
        relative = proc_path[len(mount_root):]
    candidate = mount if relative is None or ".." in Path(relative).parts else mount / relative.lstrip("/")
    if candidate == mount:
        resolution = "exact" if relative is not None and relative.strip("/") == "" else "mount-root"
        return CgroupLocation(version, mount, proc_path, mount, resolution)
    if candidate.is_dir():
        return CgroupLocation(version, mount, proc_path, candidate, "exact")
    for ancestor in candidate.parents:
        if ancestor == mount or mount not in ancestor.parents:
            break
        if ancestor.is_dir():
            return CgroupLocation(version, mount, proc_path, ancestor, "ancestor")
    return CgroupLocation(version, mount, proc_path, mount, "mount-root")


def find_memory_cgroup(root: Path = Path("/"), pid: int | str = "self") -> CgroupLocation | None:
    """The memory cgroup of ``pid``, or None where no memory controller is mounted.

    A controller is attached to one hierarchy only, so a v1 hierarchy carrying "memory" (hybrid
    setups mount an empty cgroup2 beside it) takes precedence over the unified one.
    """
    root = Path(root)
    proc_text = _read_text(_under(root, f"/proc/{pid}/cgroup"))
    mount_text = _read_text(_under(root, f"/proc/{pid}/mountinfo"))
    if proc_text is None or mount_text is None:
        return None
    v1_path, v2_path = _parse_proc_cgroup(proc_text)
    mounts = _parse_mountinfo(mount_text)
    if v1_path is not None:
        for fstype, mount_root, mount_point, options in mounts:
            if fstype == "cgroup" and "memory" in options:
                return _resolve(1, mount_point, mount_root, v1_path, root)
    if v2_path is not None:
        for fstype, mount_root, mount_point, _options in mounts:
            if fstype == "cgroup2":
                controllers = _read_text(_under(root, mount_point) / "cgroup.controllers") or ""
                if "memory" in controllers.split():
                    return _resolve(2, mount_point, mount_root, v2_path, root)
    return None


# ---------------------------------------------------------------------------------------------
# reading it


def _read_level(version: int, directory: Path, location: CgroupLocation) -> CgroupLevel:
    rel = location.relative_path(directory)
    if version == 2:
        return CgroupLevel(rel, _read_limit(directory / "memory.max"), _read_limit(directory / "memory.high"),
                           _read_int(directory / "memory.current"))
    return CgroupLevel(rel, _read_limit(directory / "memory.limit_in_bytes"), None, _read_int(directory / "memory.usage_in_bytes"))


def read_cgroup(location: CgroupLocation) -> CgroupReading:
    """Limits of every level (the tightest wins) and the counters of the level that sets the limit."""
    version = location.version
    levels = [_read_level(version, d, location) for d in location.levels()]
    own_dir = location.directory
    limit_level = min((lv for lv in levels if lv.limit_bytes is not None), key=lambda lv: lv.limit_bytes, default=None)
    limit_bytes = limit_level.limit_bytes if limit_level else None
    limit_file = "memory.max" if version == 2 else "memory.limit_in_bytes"
    limit_source = f"{limit_file} at {limit_level.path}" if limit_level else None
    high_level = min((lv for lv in levels if lv.high_bytes is not None), key=lambda lv: lv.high_bytes, default=None)
    high_bytes = high_level.high_bytes if high_level else None
    high_source = f"memory.high at {high_level.path}" if high_level else None

    stat = _read_keyed(own_dir / "memory.stat")
    hidden_ancestor_binds = False
    if version == 1:
        # v1's hierarchical_memory_limit also covers ancestors the container's mount does not show.
        hierarchical = stat.get("hierarchical_memory_limit")
        if hierarchical is not None and hierarchical < _V1_UNLIMITED_FLOOR and (limit_bytes is None or hierarchical < limit_bytes):
            limit_bytes, limit_source = hierarchical, f"memory.stat hierarchical_memory_limit at {levels[0].path}"
            hidden_ancestor_binds = True

    # The counters that matter are those of the level whose limit (hard or high) binds first.
    def level_effective(lv: CgroupLevel) -> int | None:
        return min((v for v in (lv.limit_bytes, lv.high_bytes) if v is not None), default=None)

    binding = min((lv for lv in levels if level_effective(lv) is not None), key=level_effective, default=None)
    if hidden_ancestor_binds:
        binding = None  # the binding level is not visible: our own counters are the closest we have
    counter_rel = levels[0].path if binding is None else binding.path
    counter_dir = location.mount / counter_rel.lstrip("/")
    if counter_dir != own_dir:
        stat = _read_keyed(counter_dir / "memory.stat")
    usage_file = "memory.current" if version == 2 else "memory.usage_in_bytes"
    usage = _read_int(counter_dir / usage_file)
    inactive_file = stat.get("total_inactive_file" if version == 1 else "inactive_file", stat.get("inactive_file", 0))
    charged = None if usage is None else max(0, usage - inactive_file)

    if version == 2:
        events = _read_keyed(own_dir / "memory.events")
        peak = _read_int(counter_dir / "memory.peak")
        oom_events, oom_kills = events.get("oom"), events.get("oom_kill")
        swap_limit = _read_limit(own_dir / "memory.swap.max")
    else:
        events = _read_keyed(own_dir / "memory.oom_control")
        failcnt = _read_int(own_dir / "memory.failcnt")
        if failcnt is not None:
            events["failcnt"] = failcnt
        peak = _read_int(counter_dir / "memory.max_usage_in_bytes")
        oom_events, oom_kills = None, events.get("oom_kill")  # v1 has only the under_oom state, not a count
        swap_limit = _read_limit(own_dir / "memory.memsw.limit_in_bytes")
    return CgroupReading(
        version=version, mount=str(location.mount), path=levels[0].path, directory=str(own_dir), resolution=location.resolution,
        limit_bytes=limit_bytes, limit_source=limit_source, high_bytes=high_bytes, high_source=high_source, usage_bytes=usage,
        inactive_file_bytes=inactive_file, charged_bytes=charged, usage_source=f"{usage_file} at {counter_rel}",
        peak_bytes=peak, oom_events=oom_events, oom_kills=oom_kills, swap_limit_bytes=swap_limit,
        events=events, levels=levels)


def read_limits(root: Path = Path("/"), pid: int | str = "self") -> MemoryLimits:
    """The memory limits and usage of ``pid`` as the kernel sees them right now."""
    root = Path(root)
    meminfo = read_meminfo(root)
    location = find_memory_cgroup(root, pid)
    notes = []
    cgroup = None
    if location is None:
        notes.append("no memory cgroup is visible; the ceiling is MemTotal")
    else:
        cgroup = read_cgroup(location)
        if location.resolution != "exact":
            notes.append(f"cgroup path {location.proc_path!r} from /proc/{pid}/cgroup does not exist under {location.mount}; "
                         f"using the {location.resolution} {cgroup.path!r} instead")
        if cgroup.limit_bytes is None and cgroup.high_bytes is None:
            notes.append(f"cgroup v{cgroup.version} {cgroup.path} has no memory limit on the way up; the ceiling is MemTotal")
        if cgroup.limit_bytes is not None and cgroup.limit_bytes > meminfo.total_bytes:
            notes.append(f"cgroup limit {format_size(cgroup.limit_bytes)} exceeds MemTotal {format_size(meminfo.total_bytes)}")
    return MemoryLimits(meminfo=meminfo, cgroup=cgroup, notes=notes)
