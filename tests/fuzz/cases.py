"""Random cases for the differential fuzzer: generation, execution and the NumPy reference.

A case is drawn from ``numpy.random.default_rng([seed, number])`` alone (and ``[seed,
number, k]`` for its intrinsics, k = 1, divisions, 2, explicit reductions, 3, operands'
fill values, 4, comparisons, 5, any/all, 6, and casts, 7), so any case can be rebuilt from
its two numbers. It is
an index-notation assignment ``A(...) = ...`` over up to four operands ``B, C, D, E`` of
order 0-3 (sums, differences, products, negation, literals, implicit reductions, repeated
and transposed operands; in float64/float32, int64/int32 and complex cases intrinsics, true
division, explicit reductions (any/all too) and casts too, and comparisons as masks in real
ones: see FLOAT_CALLS, _with_division, _with_reduction, _with_casts and _with_masks), with
random operand and
result formats, value types, shapes (dimensions 0-5), densities, sometimes NaN/±inf and
sparse operands whose absent entries are not zeros (fill values: _with_fills),
run through one front end:

* ``evaluate``: ``coiter.evaluate(text, out_format=..., **operands)``, twice (the second
  call takes the C call path);
* ``compile``: ``coiter.compile(text, formats=...)`` then the kernel, twice; operands may
  come in another format than declared (the kernel converts them);
* ``assemble``: as ``compile``, then ``kernel.assemble(...)`` and ``kernel.compute(pattern, ...)``;
* ``dsl``: ``A[i, j] = B[i, k] * C[k, j]`` on ``coiter.Tensor``s;
* ``einsum``: ``coiter.einsum("ik,kj->ij", ...)`` (products only, NumPy's semantics).

Each case is Python code (:func:`program`) executed with the operands' arrays, so a failure's
reproduction (:func:`script`) is exactly what ran. About one case in ten is invalid by
design (an operand shape that disagrees, an unsupported dtype, a malformed format, or
``assemble`` of a result format coiter documents as computed through COO); coiter must
refuse those with the matching :class:`coiter.CoiterError` subclass.

The reference evaluates the same tree with NumPy (``numpy.einsum`` per node) on the dense
operands, in the type NumPy's promotion gives the whole expression (``numpy.result_type``
of the operands and literals; types coiter has no kernels for widen to float64/complex128,
as coiter documents), summing each index variable absent from the result at the innermost
sub-expression holding all its uses, as coiter's parser documents. In cases with NaN/inf
data only the entries where the reference is finite are compared: sparse formats drop
zeros, so a product with an unstored zero is zero where NumPy computes ``0 * inf = nan``,
and where a sum is placed changes ``inf`` into ``nan`` (``sum_k(x_k) * y`` against
``sum_k(x_k * y)`` with ``y = inf`` and some ``x_k = 0``; einsum sums over the whole product).
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np
import scipy.sparse

import coiter
from coiter.formats import as_format
from coiter.notation.functions import CASTS, FUNCTIONS

VARS = "ijkl"
NAMES = "BCDE"
FRONTS = ("evaluate", "compile", "assemble", "dsl", "einsum")
DTYPES = ("float64", "float32", "int64", "int32", "complex128", "bool", "float16", "int16", "int8",
          "uint64", "uint32", "uint8", "complex64")
SUPPORTED = tuple(np.dtype(d) for d in DTYPES)
UNSUPPORTED_DTYPES = ("longdouble", "timedelta64[s]", "object")
LITERALS: tuple[int | float | complex, ...] = (2.0, -1.5, 3, 0.5, -2, 2j)

# Outcome kinds; the last four are failures.
PASSED, REFUSED, EXCLUDED = "passed", "typed refusal", "excluded (known bug)"
MISMATCH, WRONG_REFUSAL, UNTYPED, CRASH = "mismatch", "wrong refusal", "untyped exception", "crash"
FAILURES = (MISMATCH, WRONG_REFUSAL, UNTYPED, CRASH)


# ----------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Acc:
    """``name(idx)``: one index letter per mode of the operand."""

    name: str
    idx: str


@dataclass(frozen=True)
class Lit:
    value: int | float | complex


@dataclass(frozen=True)
class Neg:
    x: Node


@dataclass(frozen=True)
class Bin:
    op: str  # "+", "-", "*" or "/"
    a: Node
    b: Node


@dataclass(frozen=True)
class Call:
    """An intrinsic (coiter.notation.functions) of one or two arguments."""

    fn: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Red:
    """``op(var, body)``: an explicit reduction (coiter.notation.reducers) over ``var``."""

    op: str
    var: str
    body: Node


Node = Union[Acc, Lit, Neg, Bin, Call, Red]

# Intrinsics drawn into float and integer cases (a separate random stream wraps parts of
# the tree, so the other cases stay as they were). Float cases: functions whose values on
# finite floats coiter and NumPy agree on, up to the non-finite entries check() leaves out
# (sqrt of a negative, pow of an absent zero: the lattices' x * 0 = 0 meets NaN and inf
# there); atan2 and copysign are left out: x * 0 folds to +0 where NumPy keeps -0, and they
# tell the two apart. Integer cases (int64/int32: no wrap between operations to tell max/min
# of wrapped values from NumPy's) draw the functions that keep integers integers.
FLOAT_CALLS = (("abs", "sqrt", "exp", "sin", "cos", "square", "tanh", "cbrt", "trunc"),
               ("max", "min", "hypot"), (2, 3, 0.5, -1, -2, 0))
INTEGER_CALLS = (("abs", "square"), ("max", "min"), (2, 3, 0))
# Complex cases (complex128/complex64): functions that keep complex values complex (abs,
# real and imag would make the result real) and are continuous where coiter's zeros may
# carry another sign than NumPy's (x * 0 is +0): sqrt's branch cut along the negative reals
# turns -1+0j and -1-0j into 1j and -1j (seed 34 case 8122).
COMPLEX_CALLS = (("exp", "sin", "cos", "square", "tanh", "conj"), (), (2, 3, -1, -2, 0))


def _calls_for(kinds: set[str], rhs: Node) -> tuple[tuple, tuple, tuple] | None:
    """The intrinsics drawn into a case whose operands have value types ``kinds`` (None:
    none, nor divisions: other mixes promote in ways the reference does not model)."""
    if kinds <= {"complex128", "complex64"}:
        return COMPLEX_CALLS
    if any(isinstance(x, Lit) and isinstance(x.value, complex) for x in leaves(rhs)):
        return None
    if kinds <= {"float64", "float32"}:
        return FLOAT_CALLS
    return INTEGER_CALLS if kinds <= {"int64", "int32"} else None


def _python_folded(e: Node) -> Node:
    """``e`` as the DSL receives it: Python evaluates operations on numbers first."""
    if isinstance(e, Neg):
        x = _python_folded(e.x)
        return Lit(-x.value) if isinstance(x, Lit) else Neg(x)
    if isinstance(e, Bin):
        a, b = _python_folded(e.a), _python_folded(e.b)
        if isinstance(a, Lit) and isinstance(b, Lit):
            # (a divisor always reads an operand: _with_division)
            return Lit({"+": a.value + b.value, "-": a.value - b.value, "*": a.value * b.value}[e.op])
        return Bin(e.op, a, b)
    if isinstance(e, Call):  # calls hold an access (_with_calls): nothing for Python to fold
        return Call(e.fn, tuple(_python_folded(x) for x in e.args))
    if isinstance(e, Red):
        return Red(e.op, e.var, _python_folded(e.body))
    return e


def _children(e: Node) -> list[Node]:
    if isinstance(e, Neg):
        return [e.x]
    if isinstance(e, Bin):
        return [e.a, e.b]
    if isinstance(e, Call):
        return list(e.args)
    if isinstance(e, Red):
        return [e.body]
    return []


def _rebuilt(e: Node, kids: list[Node]) -> Node:
    if isinstance(e, Neg):
        return Neg(kids[0])
    if isinstance(e, Bin):
        return Bin(e.op, kids[0], kids[1])
    if isinstance(e, Call):
        return Call(e.fn, tuple(kids))
    if isinstance(e, Red):
        return Red(e.op, e.var, kids[0])
    return e


def walk(e: Node) -> list[Node]:
    """``e``'s nodes, each before its children (so leaves come left to right)."""
    return [e] + [n for c in _children(e) for n in walk(c)]


def leaves(e: Node) -> list[Node]:
    """Accesses and literals, left to right."""
    return [n for n in walk(e) if isinstance(n, (Acc, Lit))]


def accesses(e: Node) -> list[Acc]:
    return [x for x in leaves(e) if isinstance(x, Acc)]


def text(e: Node, terse: bool) -> str:
    """Index-notation text; order-0 accesses as ``B`` or ``B()``."""
    if isinstance(e, Acc):
        return e.name if terse and not e.idx else f"{e.name}({','.join(e.idx)})"
    if isinstance(e, Lit):
        return repr(e.value)
    if isinstance(e, Neg):
        return f"-({text(e.x, terse)})"
    if isinstance(e, Call):  # max(B, ...) of a terse order-0 B would be a reduction over B
        return f"{e.fn}({', '.join(text(x, False) for x in e.args)})"
    if isinstance(e, Red):
        return f"{e.op}({e.var}, {text(e.body, False)})"
    return f"({text(e.a, terse)} {e.op} {text(e.b, terse)})"


def subscript(idx: str) -> str:
    """The DSL subscript of an access: ``i, j``, ``i`` or ``()``."""
    return ", ".join(idx) if idx else "()"


def dsl(e: Node) -> str:
    """Python DSL source over Tensors named as the operands."""
    if isinstance(e, Acc):
        return f"{e.name}[{subscript(e.idx)}]"
    if isinstance(e, Lit):
        return repr(e.value)
    if isinstance(e, Neg):
        return f"-({dsl(e.x)})"
    if isinstance(e, Call) and e.fn in CASTS:
        return f"({dsl(e.args[0])}).astype({e.fn!r})"
    if isinstance(e, Call):  # NumPy's ufuncs on DSL expressions build the intrinsic
        return f"np.{FUNCTIONS[e.fn].ufunc.__name__}({', '.join(dsl(x) for x in e.args)})"
    if isinstance(e, Red):
        return f"coiter.reduce({e.op!r}, {e.var}, {dsl(e.body)})"
    return f"({dsl(e.a)} {e.op} {dsl(e.b)})"


# ----------------------------------------------------------------------------- cases


@dataclass
class Operand:
    data: np.ndarray
    fmt: str  # Python source of the format it is built in (as container uses it)
    container: str  # Python source building it from "{d}" (its array) and "{f}" (fmt)
    declared: str  # Python source of its format in compile()'s formats (compile, assemble)
    fill: str = ""  # Python source of its fill value ("": none given, zero)


@dataclass
class Case:
    seed: int
    number: int
    front: str
    lhs: str  # the result's index letters
    rhs: Node
    operands: dict[str, Operand]
    out_fmt: str  # Python source of the result format ("None": the front end's default)
    dims: dict[str, int]
    result_shape: tuple[int, ...]  # the DSL's result Tensor
    terse: bool  # shorter spellings: bare order-0 names (B for B()), einsum's implicit output
    nonfinite: bool  # float data may hold NaN/inf
    invalid: str  # why coiter must refuse the case ("" when valid)
    expect: tuple[type[coiter.CoiterError], ...]  # the errors that refusal may raise
    excluded: str = ""  # the known bug (KNOWN_BUGS) the case falls under

    @property
    def text(self) -> str:
        lhs = "A" if self.terse and not self.lhs else f"A({','.join(self.lhs)})"
        return f"{lhs} = {text(self.rhs, self.terse)}"

    def describe(self) -> str:
        """One line: the case's numbers, front end, expression and operands."""
        ops = []
        for name, op in self.operands.items():
            tensor = op.container.startswith("coiter")
            fmt = op.fmt if tensor else op.container.format(d="ndarray", f="").replace("(ndarray)", "")
            if self.front in ("compile", "assemble"):
                fmt += f" declared {op.declared}"
            ops.append(f"{name}: {op.data.dtype}{op.data.shape} {fmt}")
        tail = f" [invalid: {self.invalid}]" if self.invalid else ""
        tail += " [nan/inf]" if self.nonfinite else ""
        return (f"--seed {self.seed} --show {self.number}: {self.front} {self.text!r} "
                f"out={self.out_fmt}; {'; '.join(ops)}{tail}")


# Python sources of named formats, by order (block sizes are drawn separately).
NAMED: dict[int, tuple[str, ...]] = {
    0: ("''", "coiter.dense(0)", "coiter.csf(0)"),
    1: ("coiter.sparse_vector()", "coiter.hash_vector()", "coiter.coo(1)", "coiter.coo_aos(1)",
        "coiter.csf(1)", "coiter.dense(1)", "'sparse_vector'", "'hash_vector'", "'coo'", "'dense'"),
    2: ("coiter.csr", "coiter.csc", "coiter.dcsr", "coiter.dcsc", "coiter.csr_unordered",
        "coiter.coo(2)", "coiter.coo(2, (1, 0))", "coiter.coo_aos(2)", "coiter.csf(2, (1, 0))",
        "coiter.dense(2, (1, 0))", "coiter.dia()", "coiter.ell()", "coiter.hash_matrix()",
        "coiter.hash_matrix((1, 0))", "'csr'", "'csc'", "'dcsr'", "'dcsc'", "'coo'", "'dia'",
        "'ell'", "'hash_matrix'", "'csr_unordered'", "'coo_aos'", "BLOCKED"),
    3: ("coiter.coo(3)", "coiter.coo(3, PERM)", "coiter.csf(3, PERM)", "coiter.dense(3, PERM)",
        "coiter.coo_aos(3)", "'coo'", "'csf'", "'coo_aos'", "'dense'"),
}

# Malformed formats (or formats for another order), by order: FormatError.
BAD_FORMATS: dict[int, tuple[str, ...]] = {
    0: ("'d'", "coiter.csr", "'x'"),
    1: ("'q'", "'c'", "'x'", "'ds'", "coiter.csr", "'s:1'", "'csr'", "coiter.dia()"),
    2: ("'ud'", "'uh'", "'qs'", "'ds:0,0'", "'ds:1,2'", "'ds:a,b'", "'dsd'", "'s'",
        "'hash_vector'", "coiter.coo(3)", "'dia:1,0'"),
    3: ("'uds'", "'duh'", "'huh'", "'dss:0,1,1'", "coiter.csr", "'dia'", "'hash_matrix'", "'qss'",
        "'ss'"),
}


def level_string(rng: np.random.Generator, order: int) -> str:
    """A valid TACO format string: a singleton (q, c) only right below a non-unique level
    (u, c), never dense or hashed below one; sometimes with a mode ordering."""
    s = ""
    for _ in range(order):
        if s and s[-1] in "uc":
            s += rng.choice(list("qqqqcccsun"))
        else:
            s += rng.choice(list("dddddsssssuunnh"))
    if order > 1 and rng.random() < 0.35:
        s += ":" + ",".join(str(m) for m in rng.permutation(order))
    return repr(s)


def random_format(rng: np.random.Generator, order: int) -> str:
    """Python source of a random valid format for an order-``order`` tensor."""
    if order and rng.random() < 0.5:
        return level_string(rng, order)
    src = str(rng.choice(NAMED[order]))
    if src == "BLOCKED":
        kind = rng.choice(["bcsr", "bcoo", "csb"])
        src = f"coiter.{kind}(({rng.integers(1, 4)}, {rng.integers(1, 4)}))"
    return src.replace("PERM", str(tuple(int(m) for m in rng.permutation(order))))


def random_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, density: float,
                nonfinite: bool) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "b":
        a: np.ndarray = rng.random(shape) < 0.6
    elif kind in "iu":
        a = rng.integers(-3, 4, shape) if kind == "i" else rng.integers(1, 4, shape)
    elif kind == "f":
        a = rng.standard_normal(shape)
    else:
        a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    a = np.asarray(a).astype(dtype)
    a[rng.random(shape) >= density] = 0
    if nonfinite and kind in "fc" and a.size:
        for _ in range(rng.integers(1, 3)):
            a[tuple(rng.integers(0, d) for d in shape)] = rng.choice([np.nan, np.inf, -np.inf])
    return a


def scipy_container(rng: np.random.Generator, shape: tuple[int, ...]) -> str:
    kind = str(rng.choice(["csr", "csc", "coo", "dia", "bsr"]))
    if kind != "bsr":
        return f"scipy.sparse.{kind}_array({{d}})"
    block = tuple(int(rng.choice([b for b in (1, 2, 3) if d % b == 0])) for d in shape)
    return f"scipy.sparse.bsr_array({{d}}, blocksize={block})"


def _tree(rng: np.random.Generator, tensors: dict[str, str], depth: int, plain: bool) -> Node:
    """A random expression; ``plain``: only + and * of accesses (bool operands)."""
    if depth == 0 or rng.random() < 0.35:
        if not plain and rng.random() < 0.12:
            return Lit(LITERALS[rng.integers(len(LITERALS))])
        name = str(rng.choice(sorted(tensors)))
        idx = tensors[name]
        if len(idx) > 1 and rng.random() < 0.1:  # the same operand, transposed
            idx = "".join(rng.permutation(list(idx)))
        return Acc(name, idx)
    if not plain and rng.random() < 0.1:
        return Neg(_tree(rng, tensors, depth - 1, plain))
    op = str(rng.choice(["*", "*", "+"] if plain else ["*", "*", "+", "-"]))
    return Bin(op, _tree(rng, tensors, depth - 1, plain), _tree(rng, tensors, depth - 1, plain))


def _with_calls(rng: np.random.Generator, e: Node, calls: tuple[tuple, tuple, tuple]) -> Node:
    """``e`` with some sub-expressions that read an operand put into intrinsics: a unary
    function or a power by a literal around them, a binary function instead of ``+``/``*``
    (``calls``: FLOAT_CALLS or INTEGER_CALLS)."""
    unary, binary, exponents = calls
    if isinstance(e, Neg):
        e = Neg(_with_calls(rng, e.x, calls))
    elif isinstance(e, Bin):
        a, b = _with_calls(rng, e.a, calls), _with_calls(rng, e.b, calls)
        call = binary and accesses(e) and rng.random() < 0.2  # a call of literals only would be typed
        e = Call(str(rng.choice(binary)), (a, b)) if call else Bin(e.op, a, b)
    if not accesses(e) or rng.random() >= 0.3:
        return e
    if rng.random() < 0.25:
        return Call("pow", (e, Lit(exponents[rng.integers(len(exponents))])))
    return Call(str(rng.choice(unary)), (e,))


def _with_division(rng: np.random.Generator, e: Node) -> Node:
    """``e`` with some products whose right factor reads an operand made quotients (never
    a division by literals alone, which Python would fold in the DSL and could divide by 0)."""
    e = _rebuilt(e, [_with_division(rng, c) for c in _children(e)])
    if isinstance(e, Bin) and e.op == "*" and accesses(e.b) and rng.random() < 0.4:
        return Bin("/", e.a, e.b)
    return e


COMPARISONS = ("gt", "gte", "lt", "lte", "eq", "neq")
MASK_LITERALS = {"float": (0.5, 0, -1.0), "int": (0, 1, -1)}


def _with_masks(rng: np.random.Generator, e: Node, literals: tuple) -> Node:
    """``e`` with the left factor ``x`` of some products made a comparison (a bool mask:
    ``(x > 0.5) * y``) of ``x`` with a literal or with the right factor ``y``, which reads an
    operand (the product then has ``y``'s type; a bool times a literal would be NumPy's
    default type for it, which result_dtype does not model)."""
    kids = [_with_masks(rng, c, literals) for c in _children(e)]
    e = _rebuilt(e, kids)
    if isinstance(e, Bin) and e.op == "*" and accesses(e.a) and accesses(e.b) and rng.random() < 0.5:
        other = e.b if rng.random() < 0.3 else Lit(literals[rng.integers(len(literals))])
        return Bin("*", Call(str(rng.choice(COMPARISONS)), (e.a, other)), e.b)
    return e


# Explicit reductions drawn (coiter.notation.reducers), by case kind: max and min have no
# complex meaning. any/all (bools, 0/1 in arithmetic) come from a stream of their own.
REDUCTIONS = {"real": ("max", "min", "prod", "sum"), "complex": ("prod", "sum")}
LOGICAL = ("any", "all")

# Casts drawn (a stream of their own: _with_casts), by the kind of values cast: not to
# complex in real cases (max, min and comparisons around would refuse it), not to uint64
# (arithmetic with a negative literal is an error for it, in NumPy as in coiter). To an integer
# only of _finite arguments in cases without NaN/inf: where the lattices' x * 0 = 0 (or a
# quotient's absent numerator, docs/language.md "Division") meets NaN or inf the reference
# is non-finite (and left unchecked), and a cast would make it a finite integer. any/all
# (which take NaN as true) reduce only _finite bodies of such cases too, and sit under no
# negation or difference. No casts to bool: NumPy has no negation or difference of bools
# (coiter computes them in the type around, or in bool inside a call: -true is true).
CASTS_OF = {"f": ("float32", "float64", "int64", "int32"), "c": ("complex128", "float64"),
            "i": ("int32", "int64", "float64", "float32")}
DISCRETE = ("int32", "int64")


def _paths_using(e: Node, v: str, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Paths (child numbers from the root) to the accesses of ``e`` that read ``v``."""
    if isinstance(e, Acc):
        return [path] if v in e.idx else []
    return [p for k, c in enumerate(_children(e)) for p in _paths_using(c, v, path + (k,))]


def _wrapped(e: Node, path: tuple[int, ...], wrap: Callable[[Node], Node]) -> Node:
    if not path:
        return wrap(e)
    kids = _children(e)
    kids[path[0]] = _wrapped(kids[path[0]], path[1:], wrap)
    return _rebuilt(e, kids)


def _with_reduction(rng: np.random.Generator, e: Node, lhs: str, dims: dict[str, int],
                    ops: tuple[str, ...]) -> Node:
    """``e`` with an explicit reduction over a variable the result does not have, around the
    innermost sub-expression holding all its uses (where its implicit sum would be). Not over
    an empty mode: NumPy's max of nothing is an error, coiter's the reduction's identity."""
    bound = {n.var for n in walk(e) if isinstance(n, Red)}
    free = sorted({v for a in accesses(e) for v in a.idx} - set(lhs) - bound)
    free = [v for v in free if dims[v] > 0]
    if not free:
        return e
    v = str(rng.choice(free))
    paths = _paths_using(e, v)
    common = paths[0]
    for p in paths[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    op = str(rng.choice(ops))
    return _wrapped(e, common, lambda body: Red(op, v, body))


def _with_casts(rng: np.random.Generator, e: Node, kind: str, finite: bool) -> Node:
    """``e`` with some sub-expressions that read an operand cast (``float32(...)``) to a
    type drawn from CASTS_OF[``kind``] (``finite``: the case holds no NaN/inf)."""
    e = _rebuilt(e, [_with_casts(rng, c, kind, finite) for c in _children(e)])
    if not accesses(e) or rng.random() >= 0.25:
        return e
    plain = finite and _finite(e)
    targets = [t for t in CASTS_OF[kind] if plain or t not in DISCRETE and (kind != "c" or t == "complex128")]
    return Call(str(rng.choice(targets)), (e,))


def _finite(e: Node) -> bool:
    """Whether ``e`` is finite wherever its operands are: no quotient, no function that
    may be NaN or inf at finite values (sqrt, a power of a negative or fractional
    exponent)."""
    def risky(n: Node) -> bool:
        if isinstance(n, Bin):
            return n.op == "/"
        if isinstance(n, Call) and n.fn == "pow":
            x = n.args[1]
            return not (isinstance(x, Lit) and float(np.real(x.value)).is_integer() and np.real(x.value) >= 0)
        return isinstance(n, Call) and n.fn == "sqrt"
    return not any(risky(n) for n in walk(e))


def _is_logical(n: Node) -> bool:
    return isinstance(n, Red) and n.op in LOGICAL


def _testable_logical(e: Node) -> bool:
    """Whether ``e``'s any/all reduce _finite bodies and sit under no negation or
    difference (see CASTS_OF)."""
    minus = [n for n in walk(e) if isinstance(n, Neg) or isinstance(n, Bin) and n.op == "-"]
    return all(_finite(n.body) for n in walk(e) if _is_logical(n)) and \
        not any(_is_logical(m) for n in minus for m in walk(n))


def _has_calls(e: Node) -> bool:
    return any(isinstance(n, Call) for n in walk(e))


def _has_division(e: Node) -> bool:
    return any(isinstance(n, Bin) and n.op == "/" for n in walk(e))


def _without_minus(e: Node) -> Node:
    """``e`` with differences made sums and negations dropped."""
    if isinstance(e, Neg):
        return _without_minus(e.x)
    if isinstance(e, Bin):
        return Bin("+" if e.op == "-" else e.op, _without_minus(e.a), _without_minus(e.b))
    return e


def make_case(seed: int, number: int, exclude_known_bugs: bool = True) -> Case:
    """The case ``number`` of ``seed`` (deterministic)."""
    rng = np.random.default_rng([seed, number])
    front = str(rng.choice(FRONTS, p=[0.3, 0.2, 0.15, 0.15, 0.2]))
    dims = {v: int(rng.choice(6, p=[0.06, 0.14, 0.25, 0.25, 0.15, 0.15])) for v in VARS}
    tensors = {n: "".join(rng.permutation(list(VARS))[: rng.choice(4, p=[0.1, 0.3, 0.35, 0.25])])
               for n in NAMES[: rng.integers(1, 5)]}
    one_type = rng.random() < 0.7
    dtypes = {n: str(rng.choice(DTYPES)) for n in tensors}
    if one_type:
        dtypes = dict.fromkeys(tensors, dtypes[NAMES[0]])
    plain = all(d == "bool" for d in dtypes.values())
    if front == "einsum":
        rhs: Node = _tree(rng, tensors, 0, True)
        for _ in range(rng.integers(0, 4)):
            rhs = Bin("*", rhs, _tree(rng, tensors, 0, True))
    else:
        rhs = _tree(rng, tensors, 3, plain)
        if not accesses(rhs):
            rhs = Bin("*", rhs, Acc(NAMES[0], tensors[NAMES[0]]))
    used = dict.fromkeys(a.name for a in accesses(rhs))
    if all(dtypes[n] == "bool" for n in used) and not any(isinstance(x, Lit) for x in leaves(rhs)):
        rhs = _without_minus(rhs)  # a bool result: NumPy has no bool subtraction or negation
    kinds = {dtypes[n] for n in used}
    table = _calls_for(kinds, rhs)
    if front != "einsum" and table is not None:
        calls = np.random.default_rng([seed, number, 1])  # its own stream: see FLOAT_CALLS
        if calls.random() < 0.5:
            rhs = _with_calls(calls, rhs, table)
        quotients = np.random.default_rng([seed, number, 2])  # another stream: as above
        if quotients.random() < 0.3:
            rhs = _with_division(quotients, rhs)
        masks = np.random.default_rng([seed, number, 5])  # (comparisons of complex values: no)
        if table is not COMPLEX_CALLS and masks.random() < 0.4:
            rhs = _with_masks(masks, rhs, MASK_LITERALS["float" if table is FLOAT_CALLS else "int"])
    transposed = {v for a in accesses(rhs) if a.idx != tensors[a.name] for v in a.idx}
    for v in transposed:  # a transposed access ties the extents of its modes
        dims[v] = dims[min(transposed)]
    letters = list(dict.fromkeys(v for a in accesses(rhs) for v in a.idx))
    lhs = "".join(rng.permutation(letters)[: rng.integers(0, min(3, len(letters)) + 1)]) if letters else ""
    if front != "einsum" and table is not None:
        reductions = np.random.default_rng([seed, number, 3])  # its own stream: see FLOAT_CALLS
        if reductions.random() < 0.25:
            rhs = _with_reduction(reductions, rhs, lhs, dims,
                                  REDUCTIONS["complex" if table is COMPLEX_CALLS else "real"])
    nonfinite = rng.random() < 0.1
    if front != "einsum" and table is not None:
        logical = np.random.default_rng([seed, number, 6])  # its own stream: see FLOAT_CALLS
        if logical.random() < 0.15 and not nonfinite:
            tested = _with_reduction(logical, rhs, lhs, dims, LOGICAL)
            if _testable_logical(tested):
                rhs = tested
        casts = np.random.default_rng([seed, number, 7])  # its own stream: see FLOAT_CALLS
        if casts.random() < 0.25:
            kind = "c" if table is COMPLEX_CALLS else "f" if table is FLOAT_CALLS else "i"
            rhs = _with_casts(casts, rhs, kind, not nonfinite)
    invalid, expect = "", ()
    shapes = {n: [dims[v] for v in tensors[n]] for n in used}
    result_shape = [dims[v] for v in lhs]
    roll = rng.random()
    shared = [(a.name, m) for a in accesses(rhs) for m, v in enumerate(a.idx)
              if any(v in b.idx for b in accesses(rhs) if b.name != a.name)]
    if roll < 0.04 and (shared or (front == "dsl" and lhs)):
        invalid, expect = "shape", (coiter.ShapeError,)
        if front == "dsl" and lhs and (not shared or rng.random() < 0.5):
            result_shape[rng.integers(len(lhs))] += 1
        else:
            n, m = shared[rng.integers(len(shared))]
            shapes[n][m] += 1
    elif 0.04 <= roll < 0.07:
        invalid, expect = "dtype", (coiter.DTypeError,)
        dtypes[str(rng.choice(list(used)))] = str(rng.choice(UNSUPPORTED_DTYPES))
    operands = {}
    for n in used:
        shape = tuple(shapes[n])
        data = random_data(rng, shape, dtypes[n], float(rng.choice([0, 0.2, 0.5, 0.8, 1, rng.random()])),
                           nonfinite)
        fmt = random_format(rng, len(shape))
        r = rng.random()
        if front != "dsl" and r < 0.15 and len(shape) == 2 and dtypes[n] in DTYPES and dtypes[n] != "float16":
            container = scipy_container(rng, shape)
        elif front != "dsl" and r < 0.3:
            container = "{d}"
        else:
            container = "coiter.Tensor.from_numpy({d}, format={f})"
        own = fmt if container.startswith("coiter") else "None"
        declared = own if rng.random() < 0.75 else random_format(rng, len(shape))
        operands[n] = Operand(data, fmt, container, declared)
    out_fmt = "None" if rng.random() < 0.15 else random_format(rng, len(lhs))
    if 0.07 <= roll < 0.1:
        invalid, expect = "format", (coiter.FormatError,)
        target = str(rng.choice(["A", *used]))
        bad = str(rng.choice(BAD_FORMATS[len(lhs) if target == "A" else len(tensors[target])]))
        if target == "A":
            out_fmt = bad
        else:
            operands[target] = Operand(operands[target].data, bad,
                                       "coiter.Tensor.from_numpy({d}, format={f})", bad)
    if front == "assemble" and not invalid and not assemblable(as_format(eval(out_fmt, {"coiter": coiter}),
                                                                         len(lhs))):
        invalid, expect = "assemble of a result computed through COO", (coiter.FormatError,)
    case = Case(seed, number, front, lhs, rhs, operands, out_fmt, dims, tuple(result_shape),
                bool(rng.random() < 0.3), nonfinite, invalid, expect)
    literals = leaves(_python_folded(rhs) if front == "dsl" else rhs)
    if not invalid and result_dtype(case).kind == "u" and \
            any(isinstance(x, Lit) and x.value < 0 for x in literals):
        # NumPy's rule for a Python int against an unsigned array (NEP 50): out of bounds
        case.invalid, case.expect = "negative literal in an unsigned kernel", (coiter.DTypeError,)
    if not case.invalid and front != "assemble":  # (assemble's pattern is checked for zeros)
        _with_fills(np.random.default_rng([seed, number, 4]), case)  # its own stream
    if exclude_known_bugs:
        case.excluded = next((name for name, applies in KNOWN_BUGS.items() if applies(case)), "")
    return case


# Fill values drawn for sparse operands, by value kind (Python sources)
FILLS = {"f": ("np.inf", "-np.inf", "1.0", "-1.5"), "i": ("1", "-1", "2"), "u": ("1", "2"),
         "b": ("True",), "c": ("1", "2j")}


def _with_fills(rng: np.random.Generator, case: Case) -> None:
    """Give some of ``case``'s sparse coiter operands a fill value: their absent entries
    become it, a few other entries zeros (stored, as they differ from the fill). An infinite
    fill counts as non-finite data (check() leaves NaN/inf entries of the reference out)."""
    if rng.random() >= 0.25:
        return
    for name, op in case.operands.items():
        fmt = as_format(eval(op.fmt, {"coiter": coiter}), op.data.ndim)
        if not op.container.startswith("coiter") or not op.data.ndim or fmt.is_dense or rng.random() < 0.4:
            continue
        choices = FILLS[op.data.dtype.kind]
        if any(isinstance(n, Call) and n.fn in DISCRETE or _is_logical(n)
               for n in walk(case.rhs)):
            choices = tuple(c for c in choices if "inf" not in c)  # (see CASTS_OF)
        fill = str(choices[rng.integers(len(choices))])
        data = op.data.copy()
        data[data == 0] = eval(fill, {"np": np})
        data[rng.random(data.shape) < 0.1] = 0
        container = op.container.replace("format={f})", f"format={{f}}, fill_value={fill})")
        # a format that cannot hold the fill (Format.pads) stores every entry, fill 0 (for
        # compile's fill_values: the tensor's, what a user would read from t.fill_value)
        case.operands[name] = Operand(data, op.fmt, container, op.declared, "" if fmt.pads else fill)
        case.nonfinite |= "inf" in fill


def assemblable(fmt: coiter.Format) -> bool:
    """Whether kernels build results in ``fmt`` directly (docs/formats.md, "Results in every
    format"): no layout and no hashed level. Others have no assemble/compute phases."""
    return fmt.layout is None and not any(isinstance(lv, coiter.Hashed) for lv in fmt.levels)


# ----------------------------------------------------------------------------- known bugs


# Bug classes found by this fuzzer and not fixed yet, by name, each with a predicate: the
# cases it may apply to are counted as excluded instead of run (``--include-known-bugs``
# runs them). None is open: the classes found so far (DIA/ELL operands into sparse
# results, dense result levels below shared ones, hashed levels below non-unique ones,
# hashed result formats with an inner dense level) are fixed, each with a regression test
# in tests/test_reliability.py.
KNOWN_BUGS: dict[str, Callable[[Case], bool]] = {}


# ----------------------------------------------------------------------------- running


def program(case: Case) -> list[str]:
    """The Python code of the case: binds ``results`` (and ``pattern`` for assemble)."""
    lines = [f"{n} = " + op.container.format(d=f"{n}_data", f=op.fmt) for n, op in case.operands.items()]
    kw = ", ".join(f"{n}={n}" for n in case.operands)
    if case.front == "evaluate":
        lines.append(f"results = [coiter.evaluate({case.text!r}, out_format={case.out_fmt}, {kw}) "
                     "for _ in range(2)]")
    elif case.front in ("compile", "assemble"):
        formats = [f"{n!r}: {op.declared}" for n, op in case.operands.items()]
        formats += [f"'A': {case.out_fmt}"] if case.out_fmt != "None" else []
        fills = [f"{n!r}: {op.fill}" for n, op in case.operands.items() if op.fill]
        given = f", fill_values={{{', '.join(fills)}}}" if fills else ""
        lines.append(f"kernel = coiter.compile({case.text!r}, formats={{{', '.join(formats)}}}{given})")
        if case.front == "compile":
            lines.append(f"results = [kernel({kw}) for _ in range(2)]")
        else:
            lines.append(f"pattern = kernel.assemble({kw})")
            lines.append(f"results = [kernel.compute(pattern, {kw}) for _ in range(2)]")
    elif case.front == "dsl":
        names = sorted({v for a in accesses(case.rhs) for v in a.idx})
        if names:
            lines.append(f"{', '.join(names)}, = coiter.index_vars({' '.join(names)!r})")
        lines.append(f"A = coiter.Tensor({case.result_shape}, format={case.out_fmt})")
        lines.append(f"A[{subscript(case.lhs)}] = {dsl(case.rhs)}")
        lines.append("results = [A]")
    else:
        terms = [a.idx for a in accesses(case.rhs)]
        implicit = "".join(sorted(v for v, c in Counter("".join(terms)).items() if c == 1))
        subs = ",".join(terms) + ("" if case.lhs == implicit and case.terse else f"->{case.lhs}")
        args = ", ".join(a.name for a in accesses(case.rhs))
        lines.append(f"results = [coiter.einsum({subs!r}, {args}, out_format={case.out_fmt}) "
                     "for _ in range(2)]")
    return lines


@dataclass
class Outcome:
    kind: str
    detail: str = ""


Observed = tuple[tuple[int, ...], np.dtype, coiter.Format, np.ndarray]


def _observe(t: object) -> Observed:
    if not isinstance(t, coiter.Tensor):
        raise AssertionError(f"a front end returned {type(t).__name__}, not a coiter.Tensor")
    return t.shape, t.dtype, t.format, np.array(t.to_numpy())


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]


def run_case(case: Case) -> Outcome:
    """Run the case in this process and classify what happened."""
    if case.excluded:
        return Outcome(EXCLUDED, case.excluded)
    ns: dict[str, object] = {"np": np, "scipy": scipy, "coiter": coiter}
    ns.update({f"{n}_data": op.data for n, op in case.operands.items()})
    try:
        with warnings.catch_warnings():  # slower plans (densified operands) are drawn on purpose
            warnings.simplefilter("ignore", coiter.PerformanceWarning)
            exec("\n".join(program(case)), ns)
        got = [_observe(t) for t in ns["results"]]  # type: ignore[attr-defined]
        pattern = _observe(ns["pattern"]) if "pattern" in ns else None
    except coiter.CoiterError as e:
        if isinstance(e, case.expect):
            return Outcome(REFUSED, type(e).__name__)
        wanted = " or ".join(x.__name__ for x in case.expect) or "a result (valid case)"
        return Outcome(WRONG_REFUSAL, f"{_first_line(e)} (expected {wanted})")
    except Exception as e:
        return Outcome(UNTYPED, _first_line(e))
    if case.expect:
        return Outcome(WRONG_REFUSAL, f"no error, expected {case.expect[0].__name__} ({case.invalid})")
    problem = check(case, got, pattern)
    return Outcome(MISMATCH, problem) if problem else Outcome(PASSED)


# ----------------------------------------------------------------------------- reference


# the type the reference computes each kind of values in
WIDE = {"b": np.int64, "i": np.int64, "u": np.int64, "f": np.float64, "c": np.complex128}


def _own_type(e: Node, case: Case) -> np.dtype | None:
    """The type of a node whose type is not that of its arguments together: a call's,
    NumPy's output type for them (a comparison's bool, a cast's target, square of bools
    int8, cbrt of them float16), and any/all's (bool)."""
    if _is_logical(e):
        return np.dtype(np.bool_)
    if not isinstance(e, Call):
        return None
    zeros = np.zeros(1, _argument_type(e, case))
    with np.errstate(all="ignore"):
        return FUNCTIONS[e.fn](*(zeros for _ in e.args)).dtype


def _typed_nodes(e: Node) -> list[Node]:
    """The nodes whose types the expression's type comes from: not those inside a call or
    any/all (_own_type)."""
    if isinstance(e, Call) or _is_logical(e):
        return [e]
    return [e] + [x for c in _children(e) for x in _typed_nodes(c)]


def _argument_type(e: Node, case: Case) -> np.dtype:
    """The type a call or any/all takes its arguments in: NumPy's for them together."""
    return _expression_type(e, case, _children(e))


def _expression_type(e: Node, case: Case, parts: list[Node] | None = None) -> np.dtype:
    """NumPy's type for ``e`` (of ``parts`` together where given), widened as coiter
    documents where it has no kernels for it. (Divisions are drawn into float64/float32
    and int64/int32 cases only, where a quotient of integers, float64, makes the whole
    expression float64.)"""
    typed = [n for c in ([e] if parts is None else parts) for n in _typed_nodes(c)]
    lits = [x.value for x in typed if isinstance(x, Lit)]
    names = {x.name for x in typed if isinstance(x, Acc)}
    own = [t for t in (_own_type(n, case) for n in typed) if t is not None]
    rt = np.result_type(*(op.data.dtype for n, op in case.operands.items() if n in names), *own, *lits)
    if any(isinstance(x, Bin) and x.op == "/" for x in typed) and rt.kind in "iu":
        rt = np.dtype(np.float64)
    if rt not in SUPPORTED:
        rt = np.dtype(np.complex128 if rt.kind == "c" else np.float64)
    return rt


def result_dtype(case: Case) -> np.dtype:
    """NumPy's type for the whole expression, widened as coiter documents when it has no
    kernels for it."""
    return _expression_type(case.rhs, case)


def reference(case: Case, signed_zeros: bool = False) -> np.ndarray:
    """The expected result, computed in int64/float64/complex128 (bool for bool results;
    integers wrap as the result type's when converted at the end). Products go through
    ``numpy.einsum``, which adds them to a zeroed result, so ``-0.3 * 0.0`` is +0 as in
    coiter's lattices (``x * 0`` is +0); ``signed_zeros`` multiplies element-wise
    and negates instead (-0.0: ``1 / (abs(x) * trunc(x))`` is -inf for x = -0.3, as NumPy and
    coiter compute it on stored values)."""
    rt = result_dtype(case)
    wide = WIDE[rt.kind]
    total = Counter(v for a in accesses(case.rhs) for v in a.idx)

    def spread(x: np.ndarray, labels: str, out: str) -> np.ndarray:
        x = np.einsum(f"{labels}->{''.join(v for v in out if v in labels)}", x)
        x = x.reshape([case.dims[v] if v in labels else 1 for v in out])
        return np.broadcast_to(x, [case.dims[v] for v in out])

    def ev(e: Node, inside_call: bool = False, bound: str = "",
           w: type = wide) -> tuple[np.ndarray, str, Counter[str]]:
        """``e``'s values (computed in ``w``) over its labels, and the uses of each variable
        in it. ``bound``: variables of enclosing explicit reductions (never summed
        implicitly)."""
        if isinstance(e, Lit):
            return np.array(e.value, dtype=w), "", Counter()
        if isinstance(e, Acc):
            x, labels, uses = case.operands[e.name].data.astype(w), e.idx, Counter(e.idx)
        elif isinstance(e, Neg):
            x, labels, uses = ev(e.x, inside_call, bound, w)
            # (+0 beside einsum's +0 products; -0.0, NumPy's and coiter's negated zero, in
            # the signed-zero variant: entries where the two differ are not compared)
            x = -x if signed_zeros else 0 - x
        elif isinstance(e, Red):
            # any/all reduce their body in its own type (nonzero is true, NaN too)
            inner = WIDE[_argument_type(e, case).kind] if e.op in LOGICAL else w
            x, labels, uses = ev(e.body, inside_call, bound + e.var, inner)
            fold = {"max": np.max, "min": np.min, "prod": np.prod, "sum": np.sum, "any": np.any,
                    "all": np.all}[e.op]
            x, labels = fold(x, axis=labels.index(e.var)).astype(w), labels.replace(e.var, "")
        elif isinstance(e, Call):
            # a call takes its arguments in their promoted type (a comparison of an int64
            # b(i) + 0.5 compares floats; a cast converts int32 values that wrapped; exp of
            # a bool is float16), and bools count as 0/1 in what follows, summed as np.sum
            # does (einsum would or them), as kernels compute them in the result's type
            at = _argument_type(e, case)
            args = [ev(arg, True, bound, WIDE[at.kind]) for arg in e.args]
            labels = "".join(dict.fromkeys(v for _, la, _ in args for v in la))
            uses = sum((u for _, _, u in args), Counter())
            x = FUNCTIONS[e.fn](*(spread(a, la, labels).astype(at) for a, la, _ in args)).astype(w)
        else:
            a, la, ua = ev(e.a, inside_call, bound, w)
            b, lb, ub = ev(e.b, inside_call, bound, w)
            labels, uses = la + "".join(v for v in lb if v not in la), ua + ub
            if e.op == "*" and signed_zeros:
                x = spread(a, la, labels) * spread(b, lb, labels)
            elif e.op == "*":
                x = np.einsum(f"{la},{lb}->{labels}", a, b)
            elif e.op == "/":
                x = spread(a, la, labels) / spread(b, lb, labels)
            else:
                x = spread(a, la, labels) + (1 if e.op == "+" else -1) * spread(b, lb, labels)
        if inside_call:  # an implicit sum never enters a function (docs/language.md)
            return x, labels, uses
        # sum each variable not in the result where all its uses are inside e
        keep = "".join(v for v in labels if v in case.lhs or v in bound or uses[v] < total[v])
        return (np.einsum(f"{labels}->{keep}", x) if keep != labels else x), keep, uses

    with np.errstate(all="ignore"):
        out, labels, _ = ev(case.rhs)
        out = np.einsum(f"{labels}->{case.lhs}", out)
    if rt.kind == "b":
        return out != 0
    return out.astype(rt) if rt.kind in "iu" else out


def expected_format(case: Case, operand_formats: dict[str, coiter.Format]) -> coiter.Format:
    """The result's format: the one asked for, else the front end's documented default
    (compile and the DSL: dense; evaluate: coiter.default_result_format's rule; einsum: the
    same, except that a matrix or tensor result is sparse where a sparse operand's indices
    are all result indices, so that it bounds the result)."""
    order = len(case.lhs)
    spec = eval(case.out_fmt, {"coiter": coiter})
    if spec is not None or case.front in ("compile", "assemble", "dsl"):
        return as_format(spec, order)
    if order == 0:
        return coiter.Format([])
    sparse = coiter.csr if order == 2 else coiter.csf(order)
    if case.front == "einsum" and order >= 2 and any(
            not operand_formats[x.name].is_dense and set(x.idx) <= set(case.lhs) for x in accesses(case.rhs)):
        return sparse
    tensors = [f for f in operand_formats.values() if f.order > 0]
    if order == 1 or not tensors or any(f.is_dense for f in tensors):
        return coiter.dense(order)
    return sparse


def operand_format(op: Operand) -> coiter.Format:
    """The format an operand arrives in (SciPy kinds keep theirs, BSR becomes BCSR)."""
    if op.container.startswith("coiter"):
        return as_format(eval(op.fmt, {"coiter": coiter}), op.data.ndim)
    if op.container == "{d}":
        return coiter.dense(op.data.ndim)
    kind = op.container.split(".")[2][:3]
    if kind == "bsr":
        return coiter.bcsr(eval(op.container.split("blocksize=")[1][:-1]))
    return {"csr": coiter.csr, "csc": coiter.csc, "coo": coiter.coo(2), "dia": coiter.dia()}[kind]


def same_format(case: Case, got: coiter.Format, want: coiter.Format) -> bool:
    """``got`` is the expected format; einsum's default dense result may be in any mode order
    (it keeps the memory order NumPy's result has: a transpose is a view, as in NumPy)."""
    if case.front == "einsum" and case.out_fmt == "None" and want.is_dense:
        return got.is_dense and got.order == want.order
    return got == want


def check(case: Case, got: list[Observed], pattern: Observed | None) -> str:
    """What is wrong with the results ("" when nothing)."""
    want = reference(case)
    rt = result_dtype(case)
    fmt = expected_format(case, {n: operand_format(op) for n, op in case.operands.items()})
    exact = rt.kind in "biu"
    half = rt == np.float16 or any(op.data.dtype == np.float16 for op in case.operands.values())
    loose = any(op.data.dtype in (np.float32, np.complex64) for op in case.operands.values()) or \
        any(isinstance(n, Call) and n.fn == "float32" for n in walk(case.rhs))
    # float16 sums round once per term in NumPy and once per kernel store: a few units in
    # the last place of a 10-bit mantissa; float32 functions amplify rounding where they are
    # ill-conditioned (pow(x, -2) of a cos near its zero: 4.4066e7, float64's 4.4034e7), as
    # quotients by small denominators do
    fragile = _has_calls(case.rhs) or _has_division(case.rhs)
    loose_calls = loose and fragile
    tol = ((0.0, 0.0) if exact else (1e-2, 1e-2) if half or loose_calls else (1e-4, 1e-3) if loose
           else (1e-9, 1e-9))
    # entries NumPy computes non-finite: the lattices' algebra (x * 0 = 0 for every x) gives
    # numbers there where an absent zero meets inf or NaN, from the data, a function or a
    # division by an absent zero (docs/language.md, "Division")
    unchecked = (~np.isfinite(want) if case.nonfinite or fragile
                 else np.zeros(want.shape, dtype=bool))
    if fragile:  # and entries that a zero's sign decides (a function of +-inf, min/max)
        unchecked |= ~np.isclose(want, reference(case, signed_zeros=True), rtol=tol[0], atol=tol[1],
                                 equal_nan=True)
    want = np.where(unchecked, 0, want)
    for k, (shape, dtype, f, arr) in enumerate(got):
        if (shape, dtype) != (want.shape, rt) or not same_format(case, f, fmt):
            return f"result {k}: shape/dtype/format {shape} {dtype} {f}, expected {want.shape} {rt} {fmt}"
        arr = np.where(unchecked, 0, arr)
        try:
            np.testing.assert_allclose(arr, want, rtol=tol[0], atol=tol[1], equal_nan=True)
        except AssertionError:
            bad = ~np.isclose(arr, want, rtol=tol[0], atol=tol[1], equal_nan=True)
            at = tuple(int(x) for x in np.argwhere(bad)[0])
            return (f"result {k}: {int(bad.sum())} of {bad.size} values differ; at {at} got "
                    f"{arr[at]!r}, expected {want[at]!r}")
    if pattern is not None:
        shape, _, f, arr = pattern
        if (shape, f) != (want.shape, fmt) or arr.any():
            return f"pattern: shape {shape}, format {f}, nonzero values {int(np.count_nonzero(arr))}"
    return ""


def _literal(a: np.ndarray) -> str:
    """Python source of array ``a`` (complex ones as (real, imag) pairs: ``repr`` of a
    complex with a NaN or infinite part is not Python)."""
    if a.size == 0:
        return f"np.zeros({a.shape}, dtype={a.dtype.name!r})"
    if a.dtype.kind == "c":
        pairs = np.stack([a.real, a.imag], -1).tolist()
        return f"np.array({pairs!r}, dtype={a.real.dtype.name!r}).view({a.dtype.name!r}).reshape({a.shape})"
    return f"np.array({a.tolist()!r}, dtype={a.dtype.name!r})"


def script(case: Case) -> str:
    """A standalone Python reproduction of the case."""
    lines = ["import numpy as np", "import scipy.sparse", "import coiter", "from numpy import inf, nan", ""]
    lines += [f"{n}_data = {_literal(op.data)}" for n, op in case.operands.items()]
    lines += program(case)
    if not case.expect:
        lines += [f"expected = {_literal(reference(case))}",
                  "for r in results:", "    print(r.to_numpy())", "print(expected)"]
    return "\n".join(lines) + "\n"
