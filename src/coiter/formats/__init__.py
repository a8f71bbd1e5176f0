"""Formats: level plugins, Format, layouts, storage and slicing."""
from .format import (
    Format, FormatLike, as_format, bcoo, bcsr, coo, coo_aos, csb, csc, csf, csr, csr_unordered, dcsc, dcsr, dense,
    dia, ell, hash_matrix, hash_vector, parse_format, sparse_vector,
)
from .layout import Layout, LevelCoord
from .levels import (
    Compressed, Dense, Hashed, Level, LevelNames, Offset, Packed, PaddedSingleton, ParentPos,
    Range, Singleton, register_level,
)

__all__ = [
    "Format", "FormatLike", "as_format", "parse_format", "coo", "csf", "csr", "csr_unordered", "csc", "dcsr",
    "dcsc", "dense", "dia", "ell", "bcsr", "bcoo", "csb", "hash_vector", "hash_matrix",
    "sparse_vector", "coo_aos", "Layout", "LevelCoord", "Level", "LevelNames", "ParentPos",
    "Packed", "Dense", "Compressed", "Singleton", "Hashed", "Range", "Offset", "PaddedSingleton",
    "register_level",
]
