"""Parse TACO-style index-notation text such as ``y(i) = A(i,j) * x(j)``.

Grammar (whitespace is allowed between any two tokens)::

    assignment := access ('=' | '+=') expr
    access     := NAME [ '(' [ subscript (',' subscript)* ] ')' ]
    subscript  := window | indexset | ['-'] sterm (('+' | '-') sterm)*  an affine sum: i, i+k, 2*i+k-1
    window     := NAME '(' INT ',' INT [',' INT] ')'  coordinates lo, lo+step... below hi
    indexset   := NAME '(' ('{' INT (',' INT)* '}' | '[' INT (',' INT)* ']') ')'  coordinates listed
    sterm      := INT ['*' NAME] | NAME ['*' INT]
    expr       := conj ('||' conj)*                 left associative
    conj       := comparison ('&&' comparison)*     left associative
    comparison := sum [('<' | '<=' | '>' | '>=' | '==' | '!=') sum]   not chained
    sum        := term (('+' | '-') term)*          left associative
    term       := unary (('*' | '/') unary)*        left associative
    unary      := ('-' | '+' | '!') unary | primary
    primary    := reduction | call | access | NUMBER | '(' expr ')'
    reduction  := (REDUCER | OPERATOR) '(' NAME ',' expr ')'
    call       := (FUNCTION | OPERATOR) '(' expr (',' expr)* ')'

A bare ``NAME`` is an order-0 (scalar) tensor access, unless an access in the assignment
(the result's too) has an index variable of that name: then it is the variable's
coordinate, an int64 value (``a(i,j) = b(i,j) * (i*4 + j)``). ``FUNCTION`` is the name of an
intrinsic (``sqrt``, ``max``..., :mod:`coiter.notation.functions`) followed by ``(``: those
names are reserved for calls (a scalar tensor may still be called ``max``); ``OPERATOR`` is
the name of an operator :func:`coiter.define` made, whose body replaces the call. ``REDUCER`` is
``sum``, ``prod``, ``min``, ``max``, ``any`` or ``all`` (:mod:`coiter.notation.reducers`):
``min(j, A(i,j) + x(j))`` reduces over ``j``, an index variable the result does not have
(``min(b(i), c(i))`` and ``min(i, b(i))`` with ``i`` a result index stay elementwise); an
operator defined with an identity reduces the same way (``xor(j, A(i,j))``). Numbers are ints (``3``),
floats (``2.5``, ``.5``, ``1e-3``) or imaginary (``2j``). Every syntax or
consistency error raises :class:`~coiter.errors.ParseError` with the 1-based
column of the offending character.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from coiter.errors import ParseError
from coiter.notation.ast import (
    Access,
    Add,
    Assignment,
    BinaryExpr,
    Call,
    Coordinate,
    Div,
    Expr,
    IndexVar,
    Literal,
    Subscript,
    affine,
    subscript_vars,
    window,
    index_set,
    Mul,
    Neg,
    Number,
    Reduction,
    Sub,
    accesses,
    index_vars_of,
    map_accesses,
)

from coiter.notation.functions import FUNCTIONS
from coiter.notation.operators import OPERATORS
from coiter.notation.reducers import DEFINED, REDUCERS

__all__ = ["parse"]

_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[jJ]?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>\+=|==|!=|<=|>=|&&|\|\||[-+*/=(),<>!{}\[\]])
    """,
    re.VERBOSE,
)

_BINARY_NODES: dict[str, type[BinaryExpr]] = {"+": Add, "-": Sub, "*": Mul, "/": Div}
# operators that are intrinsics (coiter.notation.functions)
_COMPARISONS = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte", "==": "eq", "!=": "neq"}


@dataclass(frozen=True)
class _Token:
    """One lexeme: ``kind`` is name, number, op, bad (an invalid character) or end."""

    kind: str
    text: str
    column: int

    def describe(self) -> str:
        """How an error message names this token after "found"."""
        if self.kind == "end":
            return "end of input"
        if self.kind == "bad":
            return f"invalid character {self.text!r}"
        return repr(self.text)

    def is_op(self, *symbols: str) -> bool:
        """Whether this is one of the operator/punctuation ``symbols``."""
        return self.kind == "op" and self.text in symbols


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens, ending with an ``end`` token.

    Invalid characters become ``bad`` tokens rather than errors so that the
    parser reports the leftmost problem in the text, whatever its kind.
    """
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            tokens.append(_Token("bad", text[pos], pos + 1))
            pos += 1
            continue
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append(_Token(kind, match.group(), pos + 1))
        pos = match.end()
    # Point just past the last visible character, so trailing blanks don't push the caret away.
    tokens.append(_Token("end", "", len(text.rstrip()) + 1))
    return tokens


def _number_value(text: str) -> Number:
    """The Python value of a NUMBER token: int, float, or complex for a ``j`` suffix."""
    if text[-1] in "jJ":
        return complex(text)
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)


def _plural_indices(n: int) -> str:
    """``"1 index"`` or ``"n indices"``."""
    return f"{n} index" if n == 1 else f"{n} indices"


class _Parser:
    """Recursive-descent parser over the token list of one assignment."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0
        # Order of every tensor seen so far, to reject one name used with different orders.
        self.orders: dict[str, int] = {}
        self.result_names: set[str] = set()  # the result's index variables, once parsed

    # -- token helpers -------------------------------------------------------

    @property
    def peek(self) -> _Token:
        """The current, not yet consumed, token."""
        return self.tokens[self.pos]

    def ahead(self, n: int) -> _Token:
        """The token ``n`` places after the current one (the end token past the end)."""
        return self.tokens[min(self.pos + n, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        """Consume and return the current token (the end token is never consumed)."""
        token = self.tokens[self.pos]
        if token.kind != "end":
            self.pos += 1
        return token

    def error(self, message: str, column: int) -> ParseError:
        """A ParseError about this parser's text at ``column``."""
        return ParseError(message, self.text, column)

    def expected(self, what: str) -> ParseError:
        """An error saying ``what`` was expected where the current token stands."""
        token = self.peek
        return self.error(f"expected {what}, found {token.describe()}", token.column)

    # -- grammar -------------------------------------------------------------

    def assignment(self) -> Assignment:
        if self.peek.kind != "name":
            raise self.expected("the result tensor name")
        lhs, lhs_index_tokens = self.access(self.advance(), result=True)
        self.result_names = {v.name for v in lhs.index_vars}
        if not self.peek.is_op("=", "+="):
            raise self.expected(f"'=' or '+=' after the result access {lhs}")
        accumulate = self.advance().text == "+="
        rhs = self.expr()
        if self.peek.is_op(")"):
            raise self.error("unmatched ')'", self.peek.column)
        if self.peek.kind != "end":
            raise self.expected("an operator or end of input")
        rhs = _coordinates(rhs, set(lhs.index_vars))
        self.check_result_indices(lhs, lhs_index_tokens, rhs)
        return Assignment(lhs, rhs, accumulate)

    def expr(self) -> Expr:
        return self.logical("||", "or", self.conj)

    def conj(self) -> Expr:
        return self.logical("&&", "and", self.comparison)

    def logical(self, symbol: str, fn: str, operand: Callable[[], Expr]) -> Expr:
        """``operand (symbol operand)*``, left associative, as calls of ``fn``."""
        node = operand()
        while self.peek.is_op(symbol):
            self.advance()
            node = Call(fn, (node, operand()))
        return node

    def comparison(self) -> Expr:
        node = self.sum()
        if self.peek.is_op(*_COMPARISONS):
            node = Call(_COMPARISONS[self.advance().text], (node, self.sum()))
            if self.peek.is_op(*_COMPARISONS):
                raise self.error("comparisons do not chain; join them with '&&'", self.peek.column)
        return node

    def sum(self) -> Expr:
        node = self.term()
        while self.peek.is_op("+", "-"):
            node = _BINARY_NODES[self.advance().text](node, self.term())
        return node

    def term(self) -> Expr:
        node = self.unary()
        while self.peek.is_op("*", "/"):
            node = _BINARY_NODES[self.advance().text](node, self.unary())
        return node

    def unary(self) -> Expr:
        if self.peek.is_op("-"):
            self.advance()
            if self.peek.kind == "number":
                # a negative number is one literal (-2**63 fits int64, its magnitude does not)
                return Literal(-_number_value(self.advance().text))
            return Neg(self.unary())
        if self.peek.is_op("+"):
            # Unary plus is the identity, exactly as Expr.__pos__ treats it.
            self.advance()
            return self.unary()
        if self.peek.is_op("!"):
            self.advance()
            return Call("not", (self.unary(),))
        return self.primary()

    def primary(self) -> Expr:
        token = self.peek
        if token.kind == "name" and token.text in REDUCERS and self.ahead(1).is_op("("):
            if token.text not in FUNCTIONS or self.reduces_here():
                return self.reduction(self.advance())
        if token.kind == "name" and token.text in FUNCTIONS and self.tokens[self.pos + 1].is_op("("):
            return self.call(self.advance())
        if token.kind == "name" and token.text in OPERATORS and self.ahead(1).is_op("("):
            if token.text in DEFINED and self.reduces_here():
                return self.reduction(self.advance())
            return self.user_call(self.advance())
        if token.kind == "name":
            return self.access(self.advance())[0]
        if token.kind == "number":
            return Literal(_number_value(self.advance().text))
        if token.is_op("("):
            self.advance()
            inner = self.expr()
            if not self.peek.is_op(")"):
                raise self.expected(f"')' to close the '(' at column {token.column}")
            self.advance()
            return inner
        raise self.expected("a tensor access, a number or '('")

    def reduces_here(self) -> bool:
        """Whether ``min(`` / ``max(`` at the current token opens a reduction: its first
        argument is a bare name that the result does not have (``min(j, A(i,j))``), not
        an operand of the elementwise function (``min(b(i), c(i))``, ``max(i, b(i))``)."""
        first, after = self.ahead(2), self.ahead(3)
        return first.kind == "name" and after.is_op(",") and first.text not in self.result_names

    def reduction(self, name: _Token) -> Reduction:
        """Parse ``op(var, body)`` after the reduction's name."""
        self.advance()  # the '('
        var = self.peek
        if var.kind != "name" or not self.ahead(1).is_op(","):
            raise self.expected(f"the index variable {name.text} reduces over, then ','")
        if var.text in self.result_names:
            raise self.error(f"{name.text} reduces over {var.text}, an index variable of the result",
                             var.column)
        self.advance()
        self.advance()  # the ','
        body = self.expr()
        if not self.peek.is_op(")"):
            raise self.expected(f"')' to close {name.text}(")
        self.advance()
        if IndexVar(var.text) not in {v for a in accesses(body) for v in a.index_vars}:
            raise self.error(f"{name.text} reduces over {var.text}, which no tensor in its body "
                             f"is indexed by (for the element-wise {name.text} of a tensor "
                             f"{var.text} of order 0, write {var.text}())", var.column)
        return Reduction(IndexVar(var.text), body, name.text)

    def call(self, name: _Token) -> Call:
        """Parse the argument list after an intrinsic's name."""
        args = self.arguments(name)
        arity = FUNCTIONS[name.text].arity
        if len(args) != arity:
            raise self.error(f"{name.text} takes {arity} argument{'s' if arity > 1 else ''}, "
                             f"got {len(args)}", name.column)
        return Call(name.text, tuple(args))

    def user_call(self, name: _Token) -> Expr:
        """Parse the arguments of a user-defined operator and expand its body over them."""
        args = self.arguments(name)
        op = OPERATORS[name.text]
        if len(args) != len(op.params):
            raise self.error(f"{name.text} takes {len(op.params)} argument(s), got {len(args)}", name.column)
        return op.expand(args)

    def arguments(self, name: _Token) -> list[Expr]:
        """``'(' expr (',' expr)* ')'`` after the name of a function or operator."""
        self.advance()  # the '('
        args = [self.expr()]
        while self.peek.is_op(","):
            self.advance()
            args.append(self.expr())
        if not self.peek.is_op(")"):
            raise self.expected(f"',' or ')' in the arguments of {name.text}")
        self.advance()
        return args

    def access(self, name: _Token, result: bool = False) -> tuple[Access, list[_Token]]:
        """Parse the optional index list after ``name``; also return the token starting
        each subscript. An operand may repeat an index variable (a diagonal, ``A(i,i)``);
        the ``result`` may not."""
        subs = self.index_list(name.text, result) if self.peek.is_op("(") else []
        self.check_order(name, len(subs))
        return Access(name.text, tuple(s for _, s in subs)), [t for t, _ in subs]

    def index_list(self, tensor: str, result: bool = False) -> list[tuple[_Token, Subscript]]:
        """Parse ``'(' [subscript (',' subscript)*] ')'``, rejecting an index variable the
        ``result`` repeats."""
        self.advance()  # the '('
        subs: list[tuple[_Token, Subscript]] = []
        if self.peek.is_op(")"):
            self.advance()
            return subs
        while True:
            token = self.peek
            sub = self.subscript(tensor)
            if result and isinstance(sub, IndexVar) and any(s == sub for _, s in subs):
                raise self.error(f"repeated index variable {sub} in the result {tensor}: a "
                                 "result cannot be written on its diagonal", token.column)
            subs.append((token, sub))
            if self.peek.is_op(")"):
                self.advance()
                return subs
            if not self.peek.is_op(","):
                raise self.expected(f"',' or ')' in the index list of {tensor}")
            self.advance()

    def subscript(self, tensor: str) -> Subscript:
        """Parse one subscript: an index variable, an affine sum of them, a window or an
        index set."""
        start = self.peek
        if start.kind == "name" and self.ahead(1).is_op("("):
            return self.window(tensor)
        terms: list[tuple[int, IndexVar]] = []
        const = 0
        sign = 1
        if self.peek.is_op("-"):
            self.advance()
            sign = -1
        while True:
            coef, var = self.subscript_term(tensor)
            if var is None:
                const += sign * coef
            else:
                terms.append((sign * coef, var))
            if not self.peek.is_op("+", "-"):
                break
            sign = 1 if self.advance().text == "+" else -1
        try:
            return affine(terms, const)
        except ValueError:
            raise self.error(f"subscript of {tensor} has no index variable", start.column) from None

    def window(self, tensor: str) -> Subscript:
        """``NAME '(' lo ',' hi [',' step] ')'``: TACO's window of a mode, a whole subscript
        (or an index set, ``NAME '(' '{' c0, c1... '}' ')'``)."""
        name = self.advance()
        self.advance()  # the '('
        if self.peek.is_op("{", "["):
            return self.index_set(name, tensor)
        bounds = [self.subscript_int(tensor)]
        while self.peek.is_op(",") and len(bounds) < 3:
            self.advance()
            bounds.append(self.subscript_int(tensor))
        if len(bounds) < 2 or not self.peek.is_op(")"):
            raise self.expected(f"the window {name.text}(lo,hi) or {name.text}(lo,hi,step) in the "
                                f"subscript of {tensor}")
        self.advance()
        if not self.peek.is_op(",", ")"):
            raise self.expected(f"',' or ')' after the window {name.text}(...) of {tensor}: a window "
                                "is a whole subscript")
        try:
            return window(IndexVar(name.text), *bounds)
        except ValueError as exc:
            raise self.error(str(exc), name.column) from None

    def index_set(self, name: _Token, tensor: str) -> Subscript:
        """The rest of ``NAME '(' '{' c0, c1... '}' ')'`` (or with ``[ ]``): TACO's index set."""
        close = "}" if self.advance().text == "{" else "]"
        coords = [self.subscript_int(tensor)]
        while self.peek.is_op(","):
            self.advance()
            coords.append(self.subscript_int(tensor))
        if not self.peek.is_op(close):
            raise self.expected(f"',' or '{close}' in the index set of {name.text} in the "
                                f"subscript of {tensor}")
        self.advance()
        if not self.peek.is_op(")"):
            raise self.expected(f"')' after the index set of {name.text} in the subscript of {tensor}")
        self.advance()
        if not self.peek.is_op(",", ")"):
            raise self.expected(f"',' or ')' after the index set {name.text}(...) of {tensor}: an "
                                "index set is a whole subscript")
        return index_set(IndexVar(name.text), coords)

    def subscript_term(self, tensor: str) -> tuple[int, IndexVar | None]:
        """``INT ['*' NAME]`` or ``NAME ['*' INT]``: a coefficient and its variable."""
        if self.peek.kind == "name":
            var = IndexVar(self.advance().text)
            if not self.peek.is_op("*"):
                return 1, var
            self.advance()
            return self.subscript_int(tensor), var
        coef = self.subscript_int(tensor)
        if not self.peek.is_op("*"):
            return coef, None
        self.advance()
        if self.peek.kind != "name":
            raise self.expected(f"an index variable name in the subscript of {tensor}")
        return coef, IndexVar(self.advance().text)

    def subscript_int(self, tensor: str) -> int:
        token = self.peek
        if token.kind != "number" or not token.text.isdigit():
            raise self.expected(f"an index variable name or an integer in the subscript of {tensor}")
        self.advance()
        return int(token.text)

    # -- consistency checks --------------------------------------------------

    def check_order(self, name: _Token, order: int) -> None:
        """Reject a tensor accessed with a different number of indices than before."""
        previous = self.orders.setdefault(name.text, order)
        if previous != order:
            raise self.error(
                f"tensor {name.text} is accessed with {_plural_indices(order)} here "
                f"but with {_plural_indices(previous)} earlier",
                name.column,
            )

    def check_result_indices(self, lhs: Access, lhs_index_tokens: list[_Token], rhs: Expr) -> None:
        """Every result index must be used on the right, unless the right is tensor-free.

        A tensor-free right-hand side (``A(i,j) = 0``) is a fill: its value is
        broadcast over the result, so the result's indices need no source.
        """
        if not accesses(rhs):
            return
        used = set(index_vars_of(rhs))
        for token, sub in zip(lhs_index_tokens, lhs.indices):
            for v in subscript_vars(sub):
                if v not in used:
                    raise self.error(
                        f"index variable {v} of the result does not appear on the right-hand side",
                        token.column,
                    )


def _coordinates(e: Expr, more: set[IndexVar]) -> Expr:
    """``e`` with every bare name that is an index variable of an access (or in ``more``,
    the result's) read as that variable's coordinate: ``b(i,j) * (i*4 + j)``."""
    variables = more | {v for a in accesses(e) for v in a.index_vars}
    names = {v.name for v in variables}

    def value(a: Access) -> Expr:
        return Coordinate(IndexVar(a.tensor)) if not a.indices and a.tensor in names else a

    return map_accesses(e, value)


def parse(text: str) -> Assignment:
    """Parse one index-notation assignment such as ``y(i) = A(i,j) * x(j)``.

    Index variables summed over (``j`` above) are left implicit; see
    :func:`coiter.notation.reductions.insert_reductions`. ``+=`` sets
    ``Assignment.accumulate``. Raises :class:`ParseError` on malformed text.
    """
    return _Parser(text).assignment()


def parse_expr(text: str, scalars: Iterable[str] = ()) -> Expr:
    """Parse an index-notation expression such as ``A(i,j) * x(j)`` (no assignment).
    ``scalars`` are names that stand for scalar operands and never for a variable to reduce
    over (an operator's parameters: ``max(y, 0)`` is elementwise)."""
    p = _Parser(text)
    p.result_names.update(scalars)
    e = p.expr()
    if p.peek.kind != "end":
        raise p.expected("an operator or end of input")
    return _coordinates(e, set())
