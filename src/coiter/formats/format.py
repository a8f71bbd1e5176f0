"""Formats: a sequence of level formats plus a mode ordering."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence, Union

from ..errors import FormatError
from .layout import DiagonalLayout, InterleavedLayout, Layout, LevelCoord, SlotLayout, block_layout
from .levels.aos import AosCompressed, AosSingleton
from .levels import Compressed, Dense, Level, Singleton, level_for_letter
from .levels.hashed import Hashed
from .levels.offset import Offset
from .levels.padded import PaddedSingleton
from .levels.range import Range


@dataclass(frozen=True)
class Format:
    """Storage format of an order-n tensor.

    ``levels[k]`` stores mode ``ordering[k]``; ``ordering`` defaults to the identity.
    With a ``layout`` (blocked, DIA, ELL formats) the levels are not one per mode: the
    layout says which coordinate each level stores, and ``ordering`` is the identity
    over the levels.
    """

    levels: tuple[Level, ...]
    ordering: tuple[int, ...]
    layout: Layout | None

    def __init__(self, levels: Sequence[Level | str], ordering: Sequence[int] | None = None,
                 layout: Layout | None = None) -> None:
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
            if isinstance(level, Hashed) and not parent_unique:
                # a hash table per parent position: repeated parents would split a coordinate
                raise FormatError(f"level {k + 1} is hashed below a non-unique level")
            if level.branchless and k == 0:
                raise FormatError(f"a {level.kind} level cannot be the first level")
        if layout is not None and (len(layout.coords) != len(lv) or ordering is not None):
            raise FormatError(f"layout {layout.name} describes {len(layout.coords)} levels, "
                              f"the format has {len(lv)} (and no mode ordering)")
        object.__setattr__(self, "levels", tuple(lv))
        object.__setattr__(self, "ordering", order)
        object.__setattr__(self, "layout", layout)

    @property
    def order(self) -> int:
        """Order of the tensors this format stores."""
        return self.layout.order if self.layout is not None else len(self.levels)

    # a format never changes: what the call path asks of it every call is computed once
    # (cached_property writes the instance's __dict__, which frozen dataclasses allow)
    @functools.cached_property
    def is_dense(self) -> bool:
        return self.layout is None and all(isinstance(lv, Dense) for lv in self.levels)

    @functools.cached_property
    def pads(self) -> bool:
        """Whether it cannot leave out entries other than zeros, so that a tensor in it has
        fill 0 (kernels, conversions and constructors store the entries of another fill):
        its dense levels below sparse ones hold zeros where no entry was written (an ``sd``
        row's other columns), or its layout's padding reads as absent entries, so that a
        stored zero would too (ELL's empty slots, DIA's diagonals, a block's other entries)."""
        if self.layout is not None and self.layout.reshapes:
            return True
        below_sparse = False
        for lv in self.levels:
            if not lv.full:
                below_sparse = True
            elif below_sparse:
                return True
        return False

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.levels, self.ordering, self.layout))

    def __hash__(self) -> int:
        return self._hash

    @property
    def physical(self) -> Format:
        """The levels alone, one per level coordinate (what kernels iterate)."""
        return Format(self.levels)

    @property
    def assemblable(self) -> bool:
        """Whether kernels can build this format directly: every level appends or is full
        and inserts (dense), and no layout is involved. Other result formats are computed
        in :meth:`assembly_format` and converted."""
        return self.layout is None and all(
            lv.has_append or (lv.has_insert and lv.full) for lv in self.levels)

    def assembly_format(self) -> Format:
        """The format a result in this format is first computed in: itself when
        :attr:`assemblable`, else COO over the same modes."""
        if self.assemblable:
            return self
        return coo(self.order) if self.order else self

    @property
    def is_identity_ordered(self) -> bool:
        return self.ordering == tuple(range(self.order))

    def permuted(self, ordering: Sequence[int]) -> Format:
        """Same level types with another mode ordering."""
        return Format(self.levels, ordering)

    def to_string(self) -> str:
        """TACO format string, e.g. ``"ds:1,0"`` (the layout's name for DIA, ELL, BCSR...)."""
        return self._string

    @functools.cached_property
    def _string(self) -> str:
        if self.layout is not None:
            return self.layout.name
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
    """Coerce ``fmt`` to a Format for an order-``order`` tensor (None → ``default`` or dense).

    Strings are TACO format strings (``"ds"``) or format names (``"csr"``, ``"dia"``,
    ``"coo"``...; see :data:`NAMED`), the latter built for ``order``.
    """
    if fmt is None:
        fmt = default if default is not None else dense(order)
    if isinstance(fmt, str):
        fmt = NAMED[fmt](order) if fmt in NAMED else parse_format(fmt)
    if not isinstance(fmt, Format):
        raise FormatError(f"not a format: {fmt!r}")
    if fmt.order != order:
        raise FormatError(f"format {fmt} is for order-{fmt.order} tensors, not order {order}")
    return fmt


# ---------------------------------------------------------------- named formats


def dense(order: int = 2, ordering: Sequence[int] | None = None) -> Format:
    """All levels dense (row-major by default)."""
    if ordering is None:
        return _row_major(order)
    return Format([Dense()] * order, ordering)


@functools.lru_cache(maxsize=None)
def _row_major(order: int) -> Format:
    # every ndarray operand asks for one: built once per order (formats are immutable)
    return Format([Dense()] * order)


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
# CSR whose rows may hold their columns in any order (as scipy's SpGEMM leaves them):
# results in it skip sorting
csr_unordered = Format([Dense(), Compressed(ordered=False)])
csc = Format([Dense(), Compressed()], (1, 0))
dcsr = Format([Compressed(), Compressed()])
dcsc = Format([Compressed(), Compressed()], (1, 0))


def sparse_vector() -> Format:
    """A vector as one compressed level (sorted coordinates and values)."""
    return Format([Compressed()])


def hash_vector() -> Format:
    """A vector as one hash table (linear probing; unordered)."""
    return Format([Hashed()])


def hash_matrix(ordering: Sequence[int] | None = None) -> Format:
    """Dense rows, each a hash table of its columns."""
    return Format([Dense(), Hashed()], ordering)


def ell() -> Format:
    """ELLPACK: every row stores the same number of slots; unused slots are padding.

    Levels: dense rows, dense slots (hidden), padded-singleton columns.
    """
    layout = SlotLayout("ell", (LevelCoord(0), LevelCoord(None), LevelCoord(1)), 2)
    return Format([Dense(), Dense(), PaddedSingleton()], layout=layout)


def dia() -> Format:
    """Diagonal storage in SciPy's layout: ``vals[d, j]`` holds ``A[j - offset[d], j]``.

    Levels: dense diagonals (hidden), a range level over columns and an offset level
    deriving the row; SciPy ``dia_array`` data with full-width rows is shared zero-copy.
    """
    layout = DiagonalLayout("dia", (LevelCoord(None), LevelCoord(1), LevelCoord(0)), 2)
    return Format([Dense(), Range(sign=-1), Offset(sign=-1)], layout=layout)


def bcsr(block: Sequence[int] = (2, 2)) -> Format:
    """Block CSR: a CSR matrix of dense ``block[0] × block[1]`` blocks (SciPy's BSR)."""
    layout = block_layout("bcsr", [(0, False), (1, False), (0, True), (1, True)], tuple(block))
    bi, bj = (int(b) for b in block)
    return Format([Dense(), Compressed(), Dense(extent=bi), Dense(extent=bj)], layout=layout)


def bcoo(block: Sequence[int] = (2, 2)) -> Format:
    """Block COO: a coordinate list of dense blocks."""
    layout = block_layout("bcoo", [(0, False), (1, False), (0, True), (1, True)], tuple(block))
    bi, bj = (int(b) for b in block)
    levels = [Compressed(unique=False), Singleton(), Dense(extent=bi), Dense(extent=bj)]
    return Format(levels, layout=layout)


def csb(block: Sequence[int] = (2, 2)) -> Format:
    """Compressed sparse blocks: a dense grid of blocks, each a coordinate list."""
    layout = block_layout("csb", [(0, False), (1, False), (0, True), (1, True)], tuple(block))
    return Format([Dense(), Dense(), Compressed(unique=False), Singleton()], layout=layout)


def coo_aos(order: int = 2) -> Format:
    """Coordinate list in array-of-structs layout: one interleaved coordinate array
    (``idx[p * order + k]``), as TensorFlow stores sparse tensors."""
    if order < 1:
        raise FormatError("coo_aos needs order >= 1")
    levels: list[Level] = [AosCompressed(stride=order, field=0)]
    levels += [AosSingleton(stride=order, field=k, unique=k == order - 1) for k in range(1, order)]
    layout = InterleavedLayout("coo_aos", tuple(LevelCoord(k) for k in range(order)), order)
    return Format(levels, layout=layout)


# Format names accepted wherever a format is (``formats={"A": "dia"}``), built for the order.
NAMED: dict[str, Callable[[int], Format]] = {
    "dense": dense, "coo": coo, "coo_aos": coo_aos, "csf": csf,
    "csr": lambda order: csr, "csr_unordered": lambda order: csr_unordered, "csc": lambda order: csc, "dcsr": lambda order: dcsr,
    "dcsc": lambda order: dcsc, "dia": lambda order: dia(), "ell": lambda order: ell(),
    "hash_vector": lambda order: hash_vector(), "hash_matrix": lambda order: hash_matrix(),
    "sparse_vector": lambda order: sparse_vector(),
}
