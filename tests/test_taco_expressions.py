"""The 21 expressions of the TACO lecture notes (notes/taco-core.md §3) vs numpy.einsum."""
from __future__ import annotations

import numpy as np
import pytest

import coiter
from helpers import random_array

# (index notation, einsum reference over the operands in order of first appearance, extra)
EXPRESSIONS = [
    ("a(i) = B(i,j) * c(j)", lambda B, c: np.einsum("ij,j->i", B, c)),
    ("a(i) = B(i,j) * c(j) + d(i)", lambda B, c, d: B @ c + d),
    ("a(i) = 2.5 * B(i,j) * c(j) + 1.5 * d(i)", lambda B, c, d: 2.5 * B @ c + 1.5 * d),
    ("A(i,j) = 0", None),
    ("A(i,j) = B(j,i)", lambda B: B.T),
    ("A(i,j) = 3.0 * B(i,j)", lambda B: 3.0 * B),
    ("A(i,j) = B(i,j) + C(i,j)", lambda B, C: B + C),
    ("A(i,j) = B(i,j) * C(i,k) * D(k,j)", lambda B, C, D: B * (C @ D)),
    ("A(i,j) = B(i,j) * C(i,j)", lambda B, C: B * C),
    ("a(i) = b(i) * c(i)", lambda b, c: b * c),
    ("A(i,j) = B(i,k) * C(k,j)", lambda B, C: B @ C),
    ("a(i) = B(i,j) * C(j,k) * d(k)", lambda B, C, d: B @ C @ d),
    ("a(i) = B(j,i) * B(j,k) * c(k)", lambda B, c: B.T @ B @ c),
    ("A(i,j) = B(i,k,l) * C(l,j) * D(k,j)", lambda B, C, D: np.einsum("ikl,lj,kj->ij", B, C, D)),
    ("A(i,j,k) = B(i,k,l) * C(l,j)", lambda B, C: np.einsum("ikl,lj->ijk", B, C)),
    ("A(k,j) = B(i,k,l) * C(l,j) * D(i,j)", lambda B, C, D: np.einsum("ikl,lj,ij->kj", B, C, D)),
    ("A(i,k) = B(i,j,k) * c(j)", lambda B, c: np.einsum("ijk,j->ik", B, c)),
    ("A(i,j) = B(i,j,k) * C(i,j,k) + D(i,j)", lambda B, C, D: np.einsum("ijk,ijk->ij", B, C) + D),
    ("tau = z(i) * (z(j) * T(i,j)) * (z(k) * T(i,k))",
     lambda z, T: np.einsum("i,ij,j,ik,k->", z, T, z, T, z)),
    ("c = M(i,j) * P(j,k) * M(l,k) * P(i,l)", lambda M, P: np.einsum("ij,jk,lk,il->", M, P, M, P)),
    ("a = M(i,j) * P(j,k) * M(k,l) * P(l,m) * M(n,m) * P(n,o) * M(p,o) * P(i,p)",
     lambda M, P: np.einsum("ij,jk,kl,lm,nm,no,po,ip->", M, P, M, P, M, P, M, P, optimize=True)),
]

STYLES = {
    "dense": {0: "", 1: "d", 2: "dd", 3: "ddd"},
    "sparse": {0: "", 1: "s", 2: "ds", 3: "sss"},
    "mixed": {0: "", 1: "d", 2: "ss:1,0", 3: "dsd"},
    "coo": {0: "", 1: "s", 2: "uq", 3: "ucq"},
}
RESULT = {"dense": {1: "d", 2: "dd", 3: "ddd"}, "sparse": {1: "s", 2: "ds", 3: "sss"},
          "mixed": {1: "d", 2: "ds:1,0", 3: "dss"}, "coo": {1: "s", 2: "uq", 3: "ucq"}}


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("text,ref", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_lecture_expression(text: str, ref, style: str) -> None:
    asg = coiter.parse(text)
    orders: dict[str, int] = {}
    for node in __import__("coiter.notation.ast", fromlist=["accesses"]).accesses(asg.rhs):
        orders.setdefault(node.tensor, len(node.indices))
    rng = np.random.default_rng(len(text) * 31 + len(style))
    size = 3 if len(orders) and "M(" in text else 5
    data = {n: random_array(rng, (size,) * k, 0.5) for n, k in orders.items()}
    operands = {n: coiter.Tensor.from_numpy(a, format=STYLES[style][a.ndim] or None)
                for n, a in data.items()}
    out_order = len(asg.lhs.indices)
    out_fmt = RESULT[style][out_order] if out_order else None
    if ref is None:  # zero fill: no operand sizes the result, so the shape is given
        got = coiter.evaluate(text, out_format=out_fmt, out_shape=(4, 6)).to_numpy()
        np.testing.assert_array_equal(got, np.zeros((4, 6)))
        return
    got = coiter.evaluate(text, out_format=out_fmt, **operands).to_numpy()
    np.testing.assert_allclose(got, ref(*data.values()), rtol=1e-9, atol=1e-9)
