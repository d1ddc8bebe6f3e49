"""The bytes written to the disk under the daemon's data directory, read by the bench on each sample.

Why: every job's witness is written to the journal there before its submit returns, and reaches
the disk then (``journal_fsync = true``) or unless its job ends within the delay (the default), so
at 2^20 and above the disk's write rate, not the GPU, can set the daemon's pace (GPU_NOTES,
sessions 9–10). The bench shows that rate beside the GPU's busy fraction so a run says
which of the two was the limit. Read from the kernel's per-device counters
(``/sys/dev/block/<major>:<minor>/stat``, sectors written, in 512-byte units whatever the
device's sector size); a directory on a filesystem without a block device of its own (tmpfs,
overlayfs) has none, and says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYS_BLOCK = Path("/sys/dev/block")
SECTOR_BYTES = 512  # the unit of the stat file's sector counts (Documentation/block/stat.rst)
WRITE_SECTORS_FIELD = 6  # read I/Os, read merges, read sectors, read ticks, write I/Os, write merges, write sectors, ...


@dataclass(frozen=True)
class DataDirDisk:
    """The block device (a partition, an LVM or dm volume: whatever the filesystem sits on) holding a directory."""

    name: str  # the kernel's name for it: "vda", "nvme0n1p2", "dm-0"
    stat_path: Path

    @classmethod
    def of(cls, directory: str | os.PathLike) -> DataDirDisk | str:
        """The device holding ``directory``, or why none can be read."""
        try:
            dev = os.stat(directory).st_dev
        except OSError as exc:
            return f"cannot stat {directory}: {exc.strerror}"
        node = SYS_BLOCK / f"{os.major(dev)}:{os.minor(dev)}"
        stat_path = node / "stat"
        if not stat_path.is_file():
            return f"{directory} is on a filesystem without a block device of its own (device {os.major(dev)}:{os.minor(dev)})"
        return cls(node.resolve().name, stat_path)

    def written_bytes(self) -> int | None:
        try:
            return int(self.stat_path.read_text().split()[WRITE_SECTORS_FIELD]) * SECTOR_BYTES
        except (OSError, IndexError, ValueError):
            return None
