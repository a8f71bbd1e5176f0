"""A size limit for the kernel cache: the least recently used kernels go first.

Every kernel in the cache is a group of files in its shard folder named after its key
(``<key>.so``, its source ``<key>.c``/``.cpp``/``.cu`` and its digest ``<key>.so.sha256``).
A cache hit touches the library, so its modification time says when it was last used.
After each build, when the cache holds more than ``COITER_CACHE_SIZE`` bytes (a number, or
with a K/M/G suffix; default ``DEFAULT_LIMIT``; 0: no limit), whole groups are deleted,
least recently used first, down to ``KEEP_SHARE`` of the limit. A process looks at the
cache's size at its first build and then at most every ``CHECK_SECONDS``.

Groups used in the last ``GRACE_SECONDS`` are never deleted: another process may be between
finding a library and loading it. A library deleted after this process loaded it stays
usable (the loader keeps it mapped); a later process builds it again. One process evicts
at a time (a lock file); the others skip eviction meanwhile.
"""
from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

from .settings import env_bytes

# Cache subdirectories are named by the first two hex digits of the key; clearing and
# eviction only touch entries of this shape, so a COITER_CACHE_DIR shared with other files
# is not emptied.
SHARD_NAME = re.compile(r"[0-9a-f]{2}")
DEFAULT_LIMIT = 1 << 30
KEEP_SHARE = 0.8
GRACE_SECONDS = 60.0
CHECK_SECONDS = 10.0
LOCK_NAME = ".evict.lock"

_next_check = 0.0  # when this process looks at the cache's size again


def cache_limit() -> int:
    """Bytes the kernel cache may hold (0: unlimited), from ``COITER_CACHE_SIZE``."""
    from_env = env_bytes("COITER_CACHE_SIZE")
    return DEFAULT_LIMIT if from_env is None else from_env


def touch(library: Path) -> None:
    """Record a use of ``library`` (its modification time), ignoring a vanished file."""
    try:
        os.utime(library)
    except OSError:
        pass


def _groups(root: Path) -> dict[Path, tuple[float, int, list[Path]]]:
    """Each kernel's (last use, bytes, files), keyed by its shard and key. Dot files (builds
    in progress, the lock) belong to no group."""
    groups: dict[Path, tuple[float, int, list[Path]]] = {}
    for shard in root.iterdir():
        if not shard.is_dir() or not SHARD_NAME.fullmatch(shard.name):
            continue
        for f in shard.iterdir():
            if f.name.startswith("."):
                continue
            try:
                st = f.stat()
            except OSError:
                continue
            key = shard / f.name.split(".", 1)[0]
            used, size, files = groups.get(key, (0.0, 0, []))
            groups[key] = (max(used, st.st_mtime), size + st.st_size, [*files, f])
    return groups


def after_build(root: Path) -> None:
    """Keep the cache under its limit after a build (at most every CHECK_SECONDS)."""
    global _next_check
    now = time.monotonic()
    if now < _next_check:
        return
    _next_check = now + CHECK_SECONDS
    enforce_limit(root)


def enforce_limit(root: Path, limit: int | None = None) -> None:
    """Delete the least recently used kernels under ``root`` while it holds more than
    ``limit`` bytes (default :func:`cache_limit`), down to KEEP_SHARE of it."""
    limit = cache_limit() if limit is None else limit
    if limit <= 0 or not root.is_dir():
        return
    with open(root / LOCK_NAME, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # another process is evicting
        groups = _groups(root)
        total = sum(size for _, size, _ in groups.values())
        if total <= limit:
            return
        recent = time.time() - GRACE_SECONDS
        for used, size, files in sorted(groups.values(), key=lambda g: g[0]):
            if total <= limit * KEEP_SHARE or used > recent:
                break
            for f in files:
                f.unlink(missing_ok=True)
            total -= size
