"""Where numba keeps the compiled kernels: under the data directory, one folder per cuzk build.

By default numba writes its cache beside the sources (inside site-packages, often read-only,
and shared by every copy of the package), and its index pickles the module path of each
type it saw, so an index left by another cuzk (an upgrade, a renamed module) fails to load
with ModuleNotFoundError instead of being recompiled. And numba checks only the source file of
each cached kernel, while a kernel holds the code it inlined from other files (the field
arithmetic's LLVM IR, the curve formulas): a changed ``ff/field.py`` would leave every other
module's kernels running the old arithmetic. The folder is therefore named after cuzk's
version and a digest of its modules' names, sizes and modification times (numba's own stamp
for one file, taken over all of them): a changed cuzk never reads another's cache.

numba reads ``NUMBA_CACHE_DIR`` once, when it is imported, so ``use_cache_dir`` runs before
that; a ``NUMBA_CACHE_DIR`` the user set wins.

Each build's folder holds 10-70 MB of kernels, and every upgrade or edit starts a new one, so a use stamps its folder
(``LAST_USED``) and removes the other builds' folders unused for ``RETIRE_AFTER_S``: another cuzk still in use on the
machine (a second venv, a daemon not yet upgraded) keeps its folder; one whose folder was removed compiles afresh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

CACHE_ENV = "NUMBA_CACHE_DIR"
LAST_USED = ".last-used"  # a build folder's stamp: its mtime is the folder's last use
RETIRE_AFTER_S = 14 * 86400.0
_PACKAGE = Path(__file__).resolve().parent


def build_key() -> str:
    """cuzk's version and a digest of its modules' names, sizes and modification times: what a cached kernel depends on."""
    from . import __version__

    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(_PACKAGE)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return f"{__version__}-{digest.hexdigest()[:12]}"


def cache_dir(data_dir: str | os.PathLike) -> Path:
    return Path(data_dir) / "numba-cache" / build_key()


def use_cache_dir(data_dir: str | os.PathLike) -> Path | None:
    """Point numba (in this process and its children) at ``cache_dir(data_dir)``; the folder in use, or None when
    numba was imported already (its cache stays where it is)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if "numba" in sys.modules:
        return None
    path = cache_dir(data_dir)
    os.environ[CACHE_ENV] = str(path)
    try:
        retire_other_builds(path)
    except OSError:  # a read-only or shared data directory: the kernels are still cached, only nothing is tidied
        pass
    return path


def retire_other_builds(path: Path, now: float | None = None) -> list[Path]:
    """Stamp ``path`` (a build's cache folder) as used now and remove its siblings unused for ``RETIRE_AFTER_S`` (their
    stamp's age, or the folder's for a build that predates stamps); the folders removed."""
    now = time.time() if now is None else now
    path.mkdir(parents=True, exist_ok=True)
    (path / LAST_USED).touch()
    retired = []
    for other in path.parent.iterdir():
        if other == path or not other.is_dir():
            continue
        stamp = other / LAST_USED
        if now - (stamp if stamp.exists() else other).stat().st_mtime > RETIRE_AFTER_S:
            shutil.rmtree(other, ignore_errors=True)
            retired.append(other)
    return retired
