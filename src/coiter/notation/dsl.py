"""Helpers for the Python DSL (``A[i, j] = B[i, k] * C[k, j]``)."""
from __future__ import annotations

import re

from ..errors import ParseError
from .ast import IndexVar

_SEPARATORS = re.compile(r"[\s,]+")


def index_vars(*names: str) -> tuple[IndexVar, ...]:
    """Index variables named by whitespace- or comma-separated words.

    ``index_vars("i j k")``, ``index_vars("i, j, k")`` and ``index_vars("i", "j", "k")``
    all give ``(i, j, k)``. The result is always a tuple, also for one name:
    write ``i, = index_vars("i")`` (or ``(i,) = ...``).
    """
    words = [w for text in names for w in _SEPARATORS.split(_as_text(text)) if w]
    if not words:
        raise ValueError("index_vars needs at least one name")
    for w in words:
        if not w.isidentifier():
            raise ParseError(f"index variable name {w!r} is not an identifier")
    repeated = sorted({w for w in words if words.count(w) > 1})
    if repeated:
        raise ValueError(f"index variable name(s) repeated: {', '.join(repeated)}")
    return tuple(IndexVar(w) for w in words)


def _as_text(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"index variable names must be str, got {type(text).__name__}")
    return text
