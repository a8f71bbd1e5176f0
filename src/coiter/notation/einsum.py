"""Translate NumPy einsum subscripts (``"ij,jk->ik"``) into index notation.

Operands are named ``T0, T1, ...`` and the result ``out``; each subscript
letter becomes the index variable of that name. The right-hand side is the
product of all operands, so every letter not in the output is summed over the
whole product, as in NumPy; :func:`coiter.notation.reductions.insert_reductions`
makes those sums explicit.
"""
from __future__ import annotations

import functools
import string
from dataclasses import dataclass, field

from coiter.errors import ParseError
from coiter.notation.ast import Access, Assignment, Expr, IndexVar, Mul

__all__ = ["parse_einsum"]


@dataclass
class _Term:
    """The subscripts of one operand (or of the output), with 1-based columns."""

    start: int
    letters: list[tuple[str, int]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The term's letters as one string."""
        return "".join(c for c, _ in self.letters)

    @property
    def column(self) -> int:
        """Where an error about the whole term points: its first letter, if any."""
        return self.letters[0][1] if self.letters else self.start


@dataclass
class _Subscripts:
    """Scanned subscripts: input terms, the explicit output term (None in implicit mode)."""

    inputs: list[_Term]
    output: _Term | None
    inputs_end: int  # column just past the input terms, for "too few operands"


def parse_einsum(subscripts: str, n_operands: int, ranks: list[int]) -> Assignment:
    """Index notation for ``numpy.einsum(subscripts, *operands)``.

    ``ranks[k]`` is the number of dimensions of operand ``k``. Implicit mode
    (no ``->``) outputs the letters used exactly once, sorted, as NumPy does.
    A letter repeated within one operand reads its diagonal (``"ii->"`` is the trace,
    ``"ii->i"`` the diagonal). Raises :class:`ParseError` for malformed subscripts, a
    mismatch with the operands, and for ellipses, which coiter does not support.
    """
    if len(ranks) != n_operands:
        raise ValueError(f"got {len(ranks)} ranks for {n_operands} operands")
    return _parsed(subscripts, tuple(ranks))


@functools.lru_cache(maxsize=256)
def _parsed(subscripts: str, ranks: tuple[int, ...]) -> Assignment:
    # an einsum call per kernel call parses the same few strings: parse each once
    scanned = _scan(subscripts)
    _check_operands(subscripts, scanned, ranks)
    if scanned.output is None:
        out_letters = _implicit_output(scanned.inputs)
    else:
        out_letters = _checked_output(subscripts, scanned.output, scanned.inputs)
    operands = [
        Access(f"T{k}", tuple(IndexVar(c) for c in term.text)) for k, term in enumerate(scanned.inputs)
    ]
    rhs: Expr = functools.reduce(Mul, operands)
    return Assignment(Access("out", tuple(IndexVar(c) for c in out_letters)), rhs)


def _scan(text: str) -> _Subscripts:
    """Split ``text`` into terms at ',' and '->', rejecting anything but letters and blanks."""
    inputs = [_Term(1)]
    output: _Term | None = None
    inputs_end = len(text.rstrip()) + 1
    pos = 0
    while pos < len(text):
        c, column = text[pos], pos + 1
        current = inputs[-1] if output is None else output
        if c in string.ascii_letters:
            current.letters.append((c, column))
        elif text.startswith("->", pos):
            if output is not None:
                raise ParseError("einsum subscripts may contain only one '->'", text, column)
            output, inputs_end = _Term(column + 2), column
            pos += 1
        elif c == "," and output is None:
            inputs.append(_Term(column + 1))
        elif c == ",":
            raise ParseError("the output subscripts (after '->') cannot contain ','", text, column)
        elif text.startswith("...", pos):
            raise ParseError("ellipsis ('...') is not supported in einsum subscripts", text, column)
        elif not c.isspace():
            raise ParseError(f"invalid character {c!r} in einsum subscripts", text, column)
        pos += 1
    return _Subscripts(inputs, output, inputs_end)


def _check_operands(text: str, scanned: _Subscripts, ranks: list[int]) -> None:
    """Check the number of terms and each term's length (a letter may repeat in a term: a
    diagonal or trace, as NumPy's ``"ii->"``)."""
    terms = scanned.inputs
    if len(terms) != len(ranks):
        # Point at the first surplus term, or where the missing ones should have been.
        column = terms[len(ranks)].column if len(terms) > len(ranks) else scanned.inputs_end
        raise ParseError(
            f"einsum subscripts name {len(terms)} operand(s) but {len(ranks)} operand(s) were passed",
            text,
            column,
        )
    for k, (term, rank) in enumerate(zip(terms, ranks)):
        if len(term.letters) != rank:
            raise ParseError(
                f"operand {k} (T{k}) has {rank} dimension(s) but its subscripts "
                f"{term.text!r} name {len(term.letters)}",
                text,
                term.column,
            )


def _implicit_output(inputs: list[_Term]) -> list[str]:
    """NumPy's implicit output: the letters used exactly once, in sorted (ASCII) order."""
    counts: dict[str, int] = {}
    for term in inputs:
        for c, _ in term.letters:
            counts[c] = counts.get(c, 0) + 1
    return sorted(c for c, n in counts.items() if n == 1)


def _checked_output(text: str, output: _Term, inputs: list[_Term]) -> list[str]:
    """The explicit output letters, each used in some input and none repeated."""
    used = {c for term in inputs for c, _ in term.letters}
    seen: set[str] = set()
    for c, column in output.letters:
        if c in seen:
            raise ParseError(f"output subscript {c!r} is repeated", text, column)
        if c not in used:
            raise ParseError(f"output subscript {c!r} does not appear in any operand", text, column)
        seen.add(c)
    return [c for c, _ in output.letters]
