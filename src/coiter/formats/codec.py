"""Formats as JSON-able data and back, for files that store tensors.

A format is its levels, mode ordering and layout, all frozen dataclasses; each is written as
its class (``module:name``) and its constructor fields. Reading rebuilds only level and
layout classes of modules already imported (coiter's own, or a plugin's the program
imported): a file never makes coiter import code or build anything else.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any

from ..errors import FormatError
from .format import Format
from .layout import Layout, LevelCoord
from .levels.base import Level, LevelNames, Packed, ParentPos

_BUILDABLE = (Level, Layout, LevelCoord, LevelNames, Packed, ParentPos)


def format_to_data(fmt: Format) -> dict[str, Any]:
    """``fmt`` as plain data (dicts, lists, strings, numbers)."""
    return {"levels": [_encode(lv) for lv in fmt.levels],
            "ordering": None if fmt.layout is not None else list(fmt.ordering),
            "layout": None if fmt.layout is None else _encode(fmt.layout)}


def format_from_data(data: Any, where: str) -> Format:
    """The format :func:`format_to_data` wrote; FormatError naming ``where`` otherwise."""
    try:
        levels = [_decode(x, where) for x in data["levels"]]
        layout = None if data["layout"] is None else _decode(data["layout"], where)
        return Format(levels, data["ordering"], layout)
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{where}: unreadable format description ({type(e).__name__}: {e})") from None


def _encode(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        cls = type(x)
        return {"class": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: _encode(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}}
    if isinstance(x, tuple):
        return {"tuple": [_encode(v) for v in x]}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise FormatError(f"cannot store a format holding {type(x).__name__} {x!r}")


def _decode(x: Any, where: str) -> Any:
    if isinstance(x, dict) and "tuple" in x:
        return tuple(_decode(v, where) for v in x["tuple"])
    if isinstance(x, dict):
        module, _, name = str(x["class"]).partition(":")
        cls = getattr(sys.modules.get(module), name, None)
        if not (isinstance(cls, type) and issubclass(cls, _BUILDABLE) and dataclasses.is_dataclass(cls)):
            raise FormatError(f"{where}: the format uses {x['class']!r}, which is not a level or layout "
                              "class of a loaded module (import the plugin that defines it first)")
        return cls(**{k: _decode(v, where) for k, v in x["fields"].items()})
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise FormatError(f"{where}: unreadable format value {x!r}")
