"""Level formats (plugins) and the registry that maps format-string letters to them."""
from __future__ import annotations

from typing import Callable

from .base import Level, LevelNames, Packed, ParentPos
from .compressed import Compressed
from .dense import Dense
from .hashed import Hashed
from .offset import Offset
from .padded import PaddedSingleton
from .range import Range
from .singleton import Singleton

_LETTERS: dict[str, Callable[[], Level]] = {}


def register_level(letter: str, factory: Callable[[], Level]) -> None:
    """Make ``letter`` usable in format strings (the public plugin hook)."""
    if len(letter) != 1 or not letter.isalpha():
        raise ValueError(f"a level letter must be one ASCII letter, got {letter!r}")
    _LETTERS[letter] = factory


def level_for_letter(letter: str) -> Level | None:
    factory = _LETTERS.get(letter)
    return factory() if factory else None


register_level("d", Dense)
register_level("s", Compressed)
register_level("u", lambda: Compressed(unique=False))
register_level("n", lambda: Compressed(ordered=False))
register_level("q", Singleton)
register_level("c", lambda: Singleton(unique=False))
register_level("p", PaddedSingleton)
register_level("h", Hashed)

__all__ = [
    "Level", "LevelNames", "Packed", "ParentPos", "Dense", "Compressed", "Singleton", "Hashed",
    "Range", "Offset", "PaddedSingleton", "register_level", "level_for_letter",
]
