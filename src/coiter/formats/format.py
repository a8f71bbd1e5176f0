"""Formats: a sequence of level formats plus a mode ordering."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from ..errors import FormatError
from .levels import Compressed, Dense, Level, Singleton, level_for_letter


@dataclass(frozen=True)
class Format:
    """Storage format of an order-n tensor.

    ``levels[k]`` stores mode ``ordering[k]``; ``ordering`` defaults to the identity.
    """

    levels: tuple[Level, ...]
    ordering: tuple[int, ...]

    def __init__(self, levels: Sequence[Level | str], ordering: Sequence[int] | None = None) -> None:
        lv: list[Level] = []
        for x in levels:
            if isinstance(x, Level):
                lv.append(x)
            elif isinstance(x, str) and len(x) == 1 and level_for_letter(x) is not None:
                lv.append(level_for_letter(x))  # type: ignore[arg-type]
            else:
                raise FormatError(f"not a level format: {x!r}")
        order = tuple(range(len(lv))) if ordering is None else tuple(int(o) for o in ordering)
        if sorted(order) != list(range(len(lv))):
            raise FormatError(
                f"mode ordering {order} is not a permutation of 0..{len(lv) - 1}"
            )
        for k, level in enumerate(lv):
            parent_unique = k == 0 or lv[k - 1].unique
            if isinstance(level, Dense) and not parent_unique:
                raise FormatError(f"level {k + 1} is dense below a non-unique level")
            if level.branchless and k == 0:
                raise FormatError("a singleton level cannot be the first level")
        object.__setattr__(self, "levels", tuple(lv))
        object.__setattr__(self, "ordering", order)

    @property
    def order(self) -> int:
        return len(self.levels)

    @property
    def is_dense(self) -> bool:
        return all(isinstance(lv, Dense) for lv in self.levels)

    @property
    def is_identity_ordered(self) -> bool:
        return self.ordering == tuple(range(self.order))

    def permuted(self, ordering: Sequence[int]) -> Format:
        """Same level types with another mode ordering."""
        return Format(self.levels, ordering)

    def to_string(self) -> str:
        """TACO format string, e.g. ``"ds:1,0"``."""
        s = "".join(lv.format_letter() for lv in self.levels)
        if not self.is_identity_ordered:
            s += ":" + ",".join(str(o) for o in self.ordering)
        return s

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return f"Format({self.to_string()!r})"


FormatLike = Union[Format, str]


def parse_format(spec: str) -> Format:
    """Parse TACO's format strings: ``"ds"`` (CSR), ``"ds:1,0"`` (CSC), ``"uq"`` (COO)."""
    if not isinstance(spec, str):
        raise FormatError(f"format must be a Format or a string, got {type(spec).__name__}")
    letters, _, order = spec.partition(":")
    levels: list[Level] = []
    for pos, ch in enumerate(letters):
        level = level_for_letter(ch)
        if level is None:
            raise FormatError(f"unknown level letter {ch!r} at position {pos} of format {spec!r}")
        levels.append(level)
    ordering = None
    if order:
        try:
            ordering = [int(x) for x in order.split(",")]
        except ValueError:
            raise FormatError(f"bad mode ordering {order!r} in format {spec!r}") from None
        if len(ordering) != len(levels):
            raise FormatError(f"format {spec!r} has {len(levels)} levels but {len(ordering)} modes")
    return Format(levels, ordering)


def as_format(fmt: FormatLike | None, order: int, default: Format | None = None) -> Format:
    """Coerce ``fmt`` to a Format for an order-``order`` tensor (None → ``default`` or dense)."""
    if fmt is None:
        fmt = default if default is not None else dense(order)
    if isinstance(fmt, str):
        fmt = parse_format(fmt)
    if not isinstance(fmt, Format):
        raise FormatError(f"not a format: {fmt!r}")
    if fmt.order != order:
        raise FormatError(f"format {fmt} has {fmt.order} levels for an order-{order} tensor")
    return fmt


# ---------------------------------------------------------------- named formats


def dense(order: int = 2, ordering: Sequence[int] | None = None) -> Format:
    """All levels dense (row-major by default)."""
    return Format([Dense()] * order, ordering)


def coo(order: int = 2, ordering: Sequence[int] | None = None) -> Format:
    """Coordinate list: a non-unique compressed level over singleton levels."""
    if order < 1:
        raise FormatError("coo needs order >= 1")
    if order == 1:
        return Format([Compressed()], ordering)
    levels: list[Level] = [Compressed(unique=False)]
    levels += [Singleton(unique=False)] * (order - 2)
    levels.append(Singleton())
    return Format(levels, ordering)


def csf(order: int = 3, ordering: Sequence[int] | None = None) -> Format:
    """Compressed sparse fiber: every level compressed."""
    return Format([Compressed()] * order, ordering)


csr = Format([Dense(), Compressed()])
csc = Format([Dense(), Compressed()], (1, 0))
dcsr = Format([Compressed(), Compressed()])
dcsc = Format([Compressed(), Compressed()], (1, 0))
