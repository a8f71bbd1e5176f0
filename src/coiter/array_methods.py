"""The methods of SciPy's sparse arrays that Tensors and operator expressions share.

A user coming from ``scipy.sparse`` writes ``A.multiply(B)``, ``A.power(2)``,
``A.conj()``, ``A.toarray()``, ``A.count_nonzero()`` or ``A.trace()``, and hands matrices to
``scipy.sparse.linalg``'s solvers; each method is one of coiter's operators or NumPy
functions (so it fuses with the rest of an expression) or a conversion, defined once here
for :class:`coiter.Tensor` and :class:`coiter.lazy.Lazy`.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class ArrayMethods:
    """SciPy's names for what coiter's operators compute (mixed into Tensor and Lazy, which
    provide the operators, ``to_numpy`` and ``diagonal``)."""

    __slots__ = ()

    def toarray(self) -> np.ndarray:
        """The values as a dense NumPy array (SciPy's ``toarray``)."""
        return self.to_numpy()  # type: ignore[attr-defined]

    def todense(self) -> np.ndarray:
        """The values as a dense NumPy array, as ``todense`` of SciPy's sparse arrays
        (not ``np.matrix``)."""
        return self.to_numpy()  # type: ignore[attr-defined]

    def multiply(self, other: Any) -> Any:
        """The element-wise product ``self * other`` (SciPy's ``multiply``)."""
        return self * other  # type: ignore[operator]

    def power(self, exponent: Any) -> Any:
        """The element-wise power ``self ** exponent`` (SciPy's ``power``)."""
        return self ** exponent  # type: ignore[operator]

    def conj(self) -> Any:
        """The complex conjugate, element-wise; ``self`` when the values are real (as
        NumPy's method: ``np.conjugate`` of bools would make them int8)."""
        return np.conjugate(self) if self.dtype.kind == "c" else self  # type: ignore[attr-defined]

    conjugate = conj

    def count_nonzero(self) -> int:
        """How many entries are not zero (stored zeros and absent entries do not count)."""
        return int((self != 0).sum())  # type: ignore[attr-defined]

    # scipy.sparse.linalg takes any object with shape, dtype and matvec as a linear operator:
    # with these, cg, gmres, eigsh, svds... run on a coiter tensor (or expression) directly
    def matvec(self, x: Any) -> np.ndarray:
        """``self @ x`` as a NumPy array (a ``LinearOperator``'s product)."""
        return np.asarray(self @ x)  # type: ignore[operator]

    def matmat(self, x: Any) -> np.ndarray:
        """``self @ x`` of a matrix ``x``, as a NumPy array."""
        return np.asarray(self @ x)  # type: ignore[operator]

    def rmatvec(self, x: Any) -> np.ndarray:
        """The adjoint's product ``self.conj().T @ x``, as a NumPy array."""
        return np.asarray(self._adjoint() @ x)

    def rmatmat(self, x: Any) -> np.ndarray:
        """The adjoint's product ``self.conj().T @ x`` of a matrix ``x``, as a NumPy array."""
        return np.asarray(self._adjoint() @ x)

    def _adjoint(self) -> Any:
        return self.conj().T

    def trace(self, offset: int = 0) -> Any:
        """The sum of the diagonal ``offset`` (see ``diagonal``), as an expression of order 0."""
        return self.diagonal(offset).sum()  # type: ignore[attr-defined]
