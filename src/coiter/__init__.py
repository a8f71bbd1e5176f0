"""coiter: a sparse tensor algebra compiler for Python.

Write a tensor expression in index notation, pick a storage format per tensor,
and coiter generates specialised C, compiles it at run time, caches it and runs
it on NumPy/SciPy data.
"""
from . import lazy as _lazy
from .api import compile, default_result_format, einsum, einsum_path, evaluate, run_assignment as _run_assignment
from .errors import (
    ArgumentError, CacheError, CoiterError, CompileError, DensifyError, DTypeError, FormatError, KernelError,
    ParseError, OutOfBoundsError, PerformanceWarning, ScheduleError, ShapeError,
)
from .formats import (
    Compressed, Dense, Format, Hashed, Layout, Level, LevelCoord, LevelNames, Offset, Packed,
    PaddedSingleton, ParentPos, Range, Singleton, bcoo, bcsr, coo, coo_aos, csb, csc, csf, csr, csr_unordered,
    dcsc, dcsr, dense, dia, ell, hash_matrix, hash_vector, parse_format, register_level,
    sparse_vector,
)
from .interop.io import read, write
from .interop.pydata import from_pydata, to_pydata
from .interop.torch_interop import from_torch, to_torch
from .notation.ast import Assignment, IndexVar
from .notation.dsl import index_vars
from .notation.parser import parse
from .notation.operators import Operator, define
from .notation.reducers import reduce
from .plots import spy
from .kernel import Kernel
from .tensor import Frontend as _Frontend, Tensor

# Tensor's DSL and operators compute through the layers above it (see coiter.tensor).
Tensor.frontend = _Frontend(_run_assignment, _lazy.Lazy.leaf, _lazy.matmul, _lazy.array_ufunc, _lazy.array_function)

__version__ = "0.1.0"

__all__ = [
    "reduce", "spy", "define", "Operator",
    "compile", "evaluate", "einsum", "einsum_path", "default_result_format", "parse", "Kernel", "Tensor",
    "index_vars", "IndexVar", "Assignment", "read", "write", "from_pydata", "to_pydata", "from_torch", "to_torch", "Format", "Level", "LevelNames",
    "ParentPos", "Packed", "Layout", "LevelCoord", "Dense", "Compressed", "Singleton", "Hashed",
    "Range", "Offset", "PaddedSingleton", "register_level", "parse_format", "coo", "csc", "csf",
    "csr", "csr_unordered", "dcsc", "dcsr", "dense", "dia", "ell", "bcsr", "bcoo", "csb", "hash_vector",
    "hash_matrix", "sparse_vector", "coo_aos", "ArgumentError", "CacheError", "CoiterError", "CompileError", "DensifyError", "DTypeError",
    "FormatError", "KernelError", "OutOfBoundsError", "ParseError", "PerformanceWarning", "ScheduleError", "ShapeError",
]
