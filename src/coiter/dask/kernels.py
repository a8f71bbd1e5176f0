"""The common kernels over Dask arrays, each one assignment for :func:`coiter.dask.evaluate`.

The first operand drives the partitioning (rows of a matrix, the first mode of a tensor);
the others may be Dask arrays partitioned to match or in-memory operands broadcast to every
block. ``out_format`` overrides the result's format.
"""
from __future__ import annotations

from typing import Any

import dask.array as da

from ..errors import ArgumentError
from ..formats.format import FormatLike
from .compute import evaluate


def spmv(A: Any, x: Any, out_format: FormatLike = "d") -> da.Array:
    """``y(i) = A(i,j) * x(j)``."""
    return evaluate("y(i) = A(i,j) * x(j)", out_format, A=A, x=x)


def spmm(A: Any, B: Any, out_format: FormatLike = "dd") -> da.Array:
    """``C(i,j) = A(i,k) * B(k,j)`` with a dense ``B`` (dense result by default)."""
    return evaluate("C(i,j) = A(i,k) * B(k,j)", out_format, A=A, B=B)


def spgemm(A: Any, B: Any, out_format: FormatLike = "ds") -> da.Array:
    """``C(i,j) = A(i,k) * B(k,j)`` with both sparse: a CSR result whose row blocks follow
    ``A``'s. Where ``A``'s columns (and ``B``'s rows) are split too, the partial products are
    added sparsely."""
    return evaluate("C(i,j) = A(i,k) * B(k,j)", out_format, A=A, B=B)


def sddmm(S: Any, A: Any, B: Any, out_format: FormatLike = "ds") -> da.Array:
    """``C(i,j) = S(i,j) * A(i,k) * B(k,j)``: the products of dense ``A`` and ``B`` at the
    entries of sparse ``S`` only."""
    return evaluate("C(i,j) = S(i,j) * A(i,k) * B(k,j)", out_format, S=S, A=A, B=B)


def _elementwise(symbol: str, operands: tuple[Any, ...], out_format: FormatLike | None,
                 ) -> da.Array:
    if not operands:
        raise ArgumentError("give at least one operand")
    order = operands[0].ndim if hasattr(operands[0], "ndim") else len(operands[0].shape)
    subs = ",".join(f"i{m}" for m in range(order))
    names = [f"T{k}" for k in range(len(operands))]
    text = f"R({subs}) = " + f" {symbol} ".join(f"{n}({subs})" for n in names)
    return evaluate(text, out_format, **dict(zip(names, operands)))


def add(*operands: Any, out_format: FormatLike | None = None) -> da.Array:
    """The element-wise sum of any number of operands of one shape, in one kernel per block
    (sparse when every operand is)."""
    return _elementwise("+", operands, out_format)


def multiply(*operands: Any, out_format: FormatLike | None = None) -> da.Array:
    """The element-wise product of any number of operands of one shape, in one kernel per
    block (sparse when every operand is)."""
    return _elementwise("*", operands, out_format)


def ttv(B: Any, c: Any, out_format: FormatLike | None = None) -> da.Array:
    """Tensor-times-vector over the last mode: ``A(i,j) = B(i,j,k) * c(k)``."""
    return evaluate("A(i,j) = B(i,j,k) * c(k)", out_format, B=B, c=c)


def mttkrp(B: Any, C: Any, D: Any, out_format: FormatLike = "dd") -> da.Array:
    """Matricized tensor times Khatri-Rao product: ``A(i,l) = B(i,j,k) * C(j,l) * D(k,l)``."""
    return evaluate("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", out_format, B=B, C=C, D=D)
