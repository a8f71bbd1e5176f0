"""Byte counts read from environment variables (``512M``, ``2G``, ``1048576``)."""
from __future__ import annotations

import os

from ..errors import ArgumentError

_SCALES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def env_bytes(variable: str, error: type[Exception] = ArgumentError) -> int | None:
    """The byte count in ``$variable`` (a number, optionally with a K/M/G suffix), or None
    when it is unset or empty; ``error`` naming the variable when it is not one."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    scale = _SCALES.get(text[-1].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        value = int(float(digits) * scale)
    except ValueError:
        value = -1
    if value < 0:
        raise error(f"{variable} must be a byte count such as 512M, got {text!r}")
    return value


def physical_memory() -> int:
    """Bytes of memory the machine has."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
