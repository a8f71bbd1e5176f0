"""Imperative IR: the immutable, target-neutral program that lowering produces.

Expressions and statements are frozen dataclasses; back ends (``coiter.codegen``)
print them. Types are C spellings (``double``, ``int32_t``...), since every
current target is C-like.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

# ---------------------------------------------------------------- expressions


class IRExpr:
    """Base of IR expressions."""


@dataclass(frozen=True)
class Var(IRExpr):
    name: str


@dataclass(frozen=True)
class Const(IRExpr):
    value: Union[int, float, complex, bool]


@dataclass(frozen=True)
class Load(IRExpr):
    array: str
    index: IRExpr


@dataclass(frozen=True)
class Bin(IRExpr):
    op: str  # + - * / % < <= > >= == != && ||
    a: IRExpr
    b: IRExpr


@dataclass(frozen=True)
class Un(IRExpr):
    op: str  # - !
    a: IRExpr


@dataclass(frozen=True)
class Min(IRExpr):
    args: tuple[IRExpr, ...]


@dataclass(frozen=True)
class Max(IRExpr):
    args: tuple[IRExpr, ...]


@dataclass(frozen=True)
class Select(IRExpr):
    """``cond ? a : b``."""

    cond: IRExpr
    a: IRExpr
    b: IRExpr


@dataclass(frozen=True)
class Call(IRExpr):
    fn: str
    args: tuple[IRExpr, ...]


@dataclass(frozen=True)
class Cast(IRExpr):
    ctype: str
    a: IRExpr


# ----------------------------------------------------------------- statements


class IRStmt:
    """Base of IR statements."""


@dataclass(frozen=True)
class Decl(IRStmt):
    ctype: str
    name: str
    init: IRExpr | None = None


@dataclass(frozen=True)
class Assign(IRStmt):
    target: Union[Var, Load]
    value: IRExpr
    op: str = "="  # "=" or a compound such as "+="


@dataclass(frozen=True)
class ExprStmt(IRStmt):
    expr: IRExpr


@dataclass(frozen=True)
class Block(IRStmt):
    stmts: tuple[IRStmt, ...]


@dataclass(frozen=True)
class Scoped(Block):
    """A Block that :func:`block` keeps whole: a C scope of its own, whose declarations
    end with it."""


@dataclass(frozen=True)
class For(IRStmt):
    """``for (ctype var = start; var < end; var++)``; ``start`` None continues an existing var."""

    var: str
    ctype: str
    start: IRExpr | None
    end: IRExpr
    body: Block
    pragma: str | None = None
    unroll: int = 0  # ask the C compiler to unroll by this factor (serial loops; 0: its choice)
    unit: str = ""  # GPU unit the CUDA back end maps this loop to (GPUBlock, GPUWarp, GPUThread)


@dataclass(frozen=True)
class While(IRStmt):
    cond: IRExpr
    body: Block


@dataclass(frozen=True)
class If(IRStmt):
    cond: IRExpr
    then: Block
    otherwise: IRStmt | None = None  # a Block, or an If for else-if chains


@dataclass(frozen=True)
class Break(IRStmt):
    """Leave the innermost loop (iteration guards of tiled loops)."""


@dataclass(frozen=True)
class Pragma(IRStmt):
    """``#pragma text`` applying to the statement that follows (``omp atomic``)."""

    text: str
    stmt: IRStmt


@dataclass(frozen=True)
class Region(IRStmt):
    """``#pragma text`` over a block: an OpenMP parallel region."""

    pragma: str
    body: Block


@dataclass(frozen=True)
class Goto(IRStmt):
    label: str


@dataclass(frozen=True)
class Label(IRStmt):
    name: str


@dataclass(frozen=True)
class Comment(IRStmt):
    text: str


@dataclass(frozen=True)
class Return(IRStmt):
    value: IRExpr


@dataclass(frozen=True)
class Param:
    ctype: str  # element type; pointers expressed by ``pointers``
    name: str
    pointers: int = 0
    const: bool = False
    restrict: bool = True  # pointers only: nothing else reaches their memory in the function


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    body: Block
    returns: str = "int"


# ------------------------------------------------------------------- helpers

# the condition choosing between a parallel loop (then) and its serial copy (else)
THREADS_BRANCH = Bin(">", Call("COITER_THREADS", ()), Const(1))
# the initializer of a zeroed local struct or array (``double acc[16] = {0};``)
ZEROED = Var("{0}")


def block(*items: IRStmt | Block | list | tuple | None) -> Block:
    """Flatten statements, nested lists and Blocks (not Scoped ones) into one Block
    (dropping Nones)."""
    out: list[IRStmt] = []

    def add(x: object) -> None:
        if x is None:
            return
        if isinstance(x, Block) and not isinstance(x, Scoped):
            out.extend(x.stmts)
        elif isinstance(x, (list, tuple)):
            for y in x:
                add(y)
        else:
            assert isinstance(x, IRStmt), x
            out.append(x)

    for it in items:
        add(it)
    return Block(tuple(out))


def add(a: IRExpr, b: IRExpr) -> IRExpr:
    """``a + b`` with constant folding of zeros."""
    if isinstance(b, Const) and b.value == 0:
        return a
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value + b.value)
    return Bin("+", a, b)


def mul(a: IRExpr, b: IRExpr) -> IRExpr:
    """``a * b`` with constant folding of ones and zeros."""
    if isinstance(a, Const) and a.value == 1:
        return b
    if isinstance(b, Const) and b.value == 1:
        return a
    if (isinstance(a, Const) and a.value == 0) or (isinstance(b, Const) and b.value == 0):
        return Const(0)
    return Bin("*", a, b)


def sub(a: IRExpr, b: IRExpr) -> IRExpr:
    """``a - b``, or ``a`` where ``b`` is zero."""
    return a if b == Const(0) else Bin("-", a, b)


def ceil_div(a: IRExpr, b: IRExpr) -> IRExpr:
    """``a / b`` rounded up, for a positive ``b``: ``(a + b - 1) / b`` (``a`` where ``b`` is 1)."""
    if isinstance(b, Const):
        return a if b.value == 1 else Bin("/", add(a, Const(b.value - 1)), b)
    return Bin("/", add(a, sub(b, Const(1))), b)


def fresh(name: str, taken: set[str]) -> str:
    """``name``, with underscores added until ``taken`` does not hold it; added to ``taken``."""
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def eq(a: IRExpr, b: IRExpr) -> IRExpr:
    return Bin("==", a, b)


def lt(a: IRExpr, b: IRExpr) -> IRExpr:
    return Bin("<", a, b)


def conj(terms: list[IRExpr]) -> IRExpr:
    """Logical and of ``terms`` (true when empty)."""
    if not terms:
        return Const(True)
    out = terms[0]
    for t in terms[1:]:
        out = Bin("&&", out, t)
    return out
