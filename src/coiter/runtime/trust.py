"""What coiter may load from disk: files only this user can have written.

A shared library in the kernel cache runs its constructors in the user's process as soon
as it is loaded, and a stored schedule decides what code runs; so both are taken only from
places no other user can write, and a library only when its digest matches the one
recorded beside it when it was built for its key (a truncated, damaged or swapped library
is built again instead of loaded).
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from ..errors import CacheError

# written by others than the owner: group or world write permission
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def private_dir(path: Path) -> Path:
    """``path`` created if needed (mode 0700 for new folders); CacheError if it is not a
    folder, or if users other than its owner may write it and it is not this user's."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as e:
        raise CacheError(f"cannot use {str(path)!r} as coiter's cache folder: {e.strerror or e}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"coiter's cache folder {str(path)!r} is not a folder")
    uid = _uid()
    if uid is not None and (st.st_uid != uid or st.st_mode & stat.S_IWOTH):
        raise CacheError(
            f"refusing coiter's cache folder {str(path)!r}: "
            + ("anyone may write it" if st.st_mode & stat.S_IWOTH else "another user owns it")
            + "; set COITER_CACHE_DIR to a folder of your own")
    return path


def owned_file(path: Path) -> bool:
    """Whether ``path`` is a regular file of this user that no one else may write."""
    try:
        st = path.lstat()
    except OSError:
        return False
    uid = _uid()
    return (stat.S_ISREG(st.st_mode) and not st.st_mode & _OTHERS_WRITE
            and (uid is None or st.st_uid == uid))


def _digest(key: str, path: Path) -> str:
    h = hashlib.sha256(key.encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _seal_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def seal(key: str, library: Path) -> None:
    """Record ``library``'s digest for ``key`` beside it (written atomically)."""
    seal_path = _seal_path(library)
    fd, tmp = tempfile.mkstemp(prefix=f".{library.name}.", suffix=".sha256.tmp", dir=library.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_digest(key, library))
        os.chmod(tmp, 0o644)
        os.replace(tmp, seal_path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def sealed(key: str, library: Path) -> bool:
    """Whether ``library`` is this user's, unchanged since :func:`seal` for ``key``."""
    seal_path = _seal_path(library)
    if not (owned_file(library) and owned_file(seal_path)):
        return False
    try:
        return seal_path.read_text() == _digest(key, library)
    except OSError:
        return False
