"""Byte sizes: parse what people and config files write ("4GiB", "512 MiB", "1.5G"), print them back.

Suffixes follow the kernel's and the cgroup files' own convention: a bare letter (K, M, G, T)
and the IEC forms (KiB, MiB, ...) are binary; only the explicit SI forms (kB, MB, GB, TB)
are decimal. A plain number is a count of bytes.
"""

from __future__ import annotations

import re

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_MULTIPLIERS = {
    "": 1, "b": 1,
    "k": KiB, "kib": KiB, "kb": 1000,
    "m": MiB, "mib": MiB, "mb": 1000**2,
    "g": GiB, "gib": GiB, "gb": 1000**3,
    "t": TiB, "tib": TiB, "tb": 1000**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


class SizeParseError(ValueError):
    """A byte size that could not be read; the message quotes the offending text."""


def parse_size(text: str | int) -> int:
    """Bytes in ``text`` ("4GiB", "512M", "1.5 GB", "1048576"); fractions round down to whole bytes."""
    if isinstance(text, bool):
        raise SizeParseError(f"not a byte size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise SizeParseError(f"byte size must not be negative: {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if match is None:
        raise SizeParseError(f"not a byte size: {text!r} (expected e.g. '4GiB', '512M', '1048576')")
    number, unit = match.groups()
    multiplier = _MULTIPLIERS.get(unit.lower())
    if multiplier is None:
        raise SizeParseError(f"unknown size unit {unit!r} in {text!r} (use B, KiB, MiB, GiB, TiB or kB, MB, GB, TB)")
    if "." in number:
        whole, _, frac = number.partition(".")
        # Exact decimal arithmetic: no float rounding for sizes like "0.1GB".
        scale = 10 ** len(frac)
        return (int(whole or 0) * scale + int(frac or 0)) * multiplier // scale
    return int(number) * multiplier


def format_size(nbytes: int | None) -> str:
    """Human-readable binary size with two decimals ("1.50 GiB"); None reads "unlimited"."""
    if nbytes is None:
        return "unlimited"
    sign = "-" if nbytes < 0 else ""
    value = abs(nbytes)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            return f"{sign}{value / size:.2f} {unit}"
    return f"{sign}{value} B"


def gib(nbytes: int | None) -> float | None:
    """Bytes as GiB rounded to 3 decimals, for JSON reports that people also read."""
    return None if nbytes is None else round(nbytes / GiB, 3)
