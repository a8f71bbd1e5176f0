"""Rutherford-Boeing (``.rb``) matrices, the format of TACO's I/O tests and of the
SuiteSparse collection's ``RB`` downloads (Duff, Grimes and Lewis, "The Rutherford-Boeing
sparse matrix collection", 1997).

Four header lines (title and key; the line counts of the sections; the type, rows,
columns and entries; the Fortran formats of the sections), then the column pointers, row
indices and values, each a run of fixed-width fields. The type is three letters: values
real, complex, integer or pattern (``r c i p``, ``q`` pattern with values elsewhere);
symmetry unsymmetric, symmetric, Hermitian, skew-symmetric or rectangular (``u s h z r``;
only the lower triangle is stored for the three symmetric ones, expanded on reading);
assembled (``a``; elemental ``e`` files are refused).
"""
from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp

from ..errors import FormatError

_FIELD = re.compile(r"(\d*)\s*[IEDFG](\d+)", re.IGNORECASE)


def _width(fmt: str, where: str) -> int:
    """The field width of a Fortran format such as ``(10I8)`` or ``(1P,3E26.16)``."""
    m = _FIELD.search(fmt)
    if m is None:
        raise FormatError(f"{where}: unreadable Fortran format {fmt.strip()!r}")
    return int(m.group(2))


def _fields(lines: list[str], width: int, count: int, where: str, what: str) -> list[str]:
    """The first ``count`` fixed-width fields of ``lines``."""
    out: list[str] = []
    for line in lines:
        line = line.rstrip("\r\n")
        out += [f for f in (line[k:k + width].strip() for k in range(0, len(line), width)) if f]
        if len(out) >= count:
            return out[:count]
    raise FormatError(f"{where}: {what}: {count} numbers expected, {len(out)} found")


def read_rb(text: str, where: str) -> sp.csc_array:
    """The matrix an ``.rb`` file holds, symmetric kinds expanded; FormatError naming the
    file for anything malformed or unsupported."""
    lines = text.splitlines()
    if len(lines) < 4:
        raise FormatError(f"{where}: a Rutherford-Boeing file starts with four header lines")
    try:
        counts = [int(x) for x in lines[1].split()[:4]]
        mxtype = lines[2][:3].lower()
        nrow, ncol, nnz = (int(x) for x in lines[2][3:].split()[:3])
    except ValueError:
        raise FormatError(f"{where}: header lines 2 and 3 must hold the section sizes, the "
                          "matrix type and its rows, columns and entries") from None
    if len(counts) < 3 or len(mxtype) < 3 or mxtype[0] not in "rcipq" or mxtype[1] not in "suhzr":
        raise FormatError(f"{where}: unknown matrix type {mxtype!r}")
    if mxtype[2] != "a":
        raise FormatError(f"{where}: elemental matrices ({mxtype!r}) are not supported; assemble it first")
    ptrfmt, indfmt, valfmt = lines[3][:16], lines[3][16:32], lines[3][32:52]
    ptrcrd, indcrd = counts[1], counts[2]
    body = lines[4:]
    ptr = np.array(_fields(body[:ptrcrd], _width(ptrfmt, where), ncol + 1, where, "column pointers"),
                   dtype=np.int64) - 1
    ind = np.array(_fields(body[ptrcrd:ptrcrd + indcrd], _width(indfmt, where), nnz, where, "row indices"),
                   dtype=np.int64) - 1
    if ptr[0] != 0 or ptr[-1] != nnz or np.any(np.diff(ptr) < 0) or \
            (nnz and (ind.min() < 0 or ind.max() >= nrow)):
        raise FormatError(f"{where}: column pointers or row indices out of range")
    if mxtype[0] in "pq":
        vals = np.ones(nnz)
    else:
        n = 2 * nnz if mxtype[0] == "c" else nnz
        raw = _fields(body[ptrcrd + indcrd:], _width(valfmt, where), n, where, "values")
        try:
            nums = np.array([float(v.replace("D", "E").replace("d", "e")) for v in raw])
        except ValueError:
            raise FormatError(f"{where}: unreadable values") from None
        vals = nums[0::2] + 1j * nums[1::2] if mxtype[0] == "c" else (
            nums.astype(np.int64) if mxtype[0] == "i" else nums)
    m = sp.csc_array((vals, ind, ptr), shape=(nrow, ncol))
    if mxtype[1] in "shz":  # the lower triangle is stored: add the mirrored strict part
        strict = sp.csc_array(sp.tril(m, k=-1))
        mirror = {"s": strict.T, "h": strict.T.conj(), "z": -strict.T}[mxtype[1]]
        m = sp.csc_array(m + mirror)
    m.sum_duplicates()
    return m
