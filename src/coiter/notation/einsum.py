"""Translate NumPy einsum subscripts (``"ij,jk->ik"``) into index notation.

Operands are named ``T0, T1, ...`` and the result ``out``; each subscript
letter becomes the index variable of that name. An ellipsis (``"...ij,...j->...i"``) stands
for an operand's leading, trailing or middle dimensions that the letters do not name, as in
NumPy: letters no term uses name them, the ellipses of all operands aligned at their last
dimension. The right-hand side is the product of all operands, so every letter not in the
output is summed over the whole product, as in NumPy;
:func:`coiter.notation.reductions.insert_reductions` makes those sums explicit.
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
    """The subscripts of one operand (or of the output), with 1-based columns; ``ellipsis``
    is where its ``...`` stands among the letters (None without one)."""

    start: int
    letters: list[tuple[str, int]] = field(default_factory=list)
    ellipsis: int | None = None
    ellipsis_column: int = 0

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
    # the letters standing for the inputs' ellipsis dimensions, with the column of an
    # ellipsis (set by _expanded)
    inputs_ellipsis: list[tuple[str, int]] = field(default_factory=list)


def parse_einsum(subscripts: str, n_operands: int, ranks: list[int]) -> Assignment:
    """Index notation for ``numpy.einsum(subscripts, *operands)``.

    ``ranks[k]`` is the number of dimensions of operand ``k``. Implicit mode
    (no ``->``) outputs the ellipsis's dimensions, then the letters used exactly once,
    sorted, as NumPy does. A letter repeated within one operand reads its diagonal
    (``"ii->"`` is the trace, ``"ii->i"`` the diagonal). Raises :class:`ParseError` for
    malformed subscripts and a mismatch with the operands. An ellipsis's dimensions of
    length 1 do not broadcast against longer ones, as NumPy's do: their extents must agree.
    """
    if len(ranks) != n_operands:
        raise ValueError(f"got {len(ranks)} ranks for {n_operands} operands")
    return _parsed(subscripts, tuple(ranks))


@functools.lru_cache(maxsize=256)
def _parsed(subscripts: str, ranks: tuple[int, ...]) -> Assignment:
    # an einsum call per kernel call parses the same few strings: parse each once
    scanned = _expanded(subscripts, _scan(subscripts), ranks)
    _check_operands(subscripts, scanned, ranks)
    if scanned.output is None:
        broadcast = [c for c, _ in scanned.inputs_ellipsis]
        out_letters = broadcast + [c for c in _implicit_output(scanned.inputs) if c not in broadcast]
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
            if current.ellipsis is not None:
                raise ParseError("a term of einsum subscripts may contain one ellipsis ('...')",
                                 text, column)
            current.ellipsis, current.ellipsis_column = len(current.letters), column
            pos += 2
        elif not c.isspace():
            raise ParseError(f"invalid character {c!r} in einsum subscripts", text, column)
        pos += 1
    return _Subscripts(inputs, output, inputs_end)


def _expanded(text: str, scanned: _Subscripts, ranks: tuple[int, ...]) -> _Subscripts:
    """``scanned`` with each ellipsis replaced by letters no term uses, one per dimension it
    stands for, aligned at the operands' last dimensions (NumPy's broadcasting)."""
    terms = scanned.inputs + ([scanned.output] if scanned.output is not None else [])
    if all(t.ellipsis is None for t in terms):
        return scanned
    widths = [rank - len(term.letters) for term, rank in zip(scanned.inputs, ranks)
              if term.ellipsis is not None]
    width = max([w for w in widths if w > 0], default=0)
    used = {c for term in terms for c, _ in term.letters}
    free = [c for c in string.ascii_letters if c not in used]
    if width > len(free):
        column = next(t.ellipsis_column for t in terms if t.ellipsis is not None)
        raise ParseError(f"the ellipsis stands for {width} dimensions but only {len(free)} "
                         "letters are left to name them", text, column)
    names = free[:width]

    def expand(term: _Term, n: int) -> _Term:
        if term.ellipsis is None:
            return term
        n = max(n, 0)  # fewer dimensions than letters: _check_operands says so
        fill = [(c, term.ellipsis_column) for c in names[width - n:]]
        at = term.ellipsis
        return _Term(term.start, term.letters[:at] + fill + term.letters[at:])

    inputs = [expand(t, r - len(t.letters)) for t, r in zip(scanned.inputs, ranks)]
    inputs += scanned.inputs[len(ranks):]  # surplus terms: _check_operands says so
    column = next((t.ellipsis_column for t in scanned.inputs if t.ellipsis is not None), 0)
    output = scanned.output
    if output is not None:
        if output.ellipsis is None and width:
            raise ParseError(f"the inputs' ellipsis stands for {width} dimension(s) that the "
                             "output does not place: write '...' in it", text, column)
        output = expand(output, width)
    return _Subscripts(inputs, output, scanned.inputs_end, [(c, column) for c in names])


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
