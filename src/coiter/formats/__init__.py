"""Formats: level plugins, Format, storage, conversion and file I/O."""
from .format import Format, FormatLike, as_format, coo, csc, csf, csr, dcsc, dcsr, dense, parse_format
from .levels import Compressed, Dense, Level, Singleton, register_level

__all__ = [
    "Format", "FormatLike", "as_format", "parse_format", "coo", "csf", "csr", "csc", "dcsr",
    "dcsc", "dense", "Level", "Dense", "Compressed", "Singleton", "register_level",
]
