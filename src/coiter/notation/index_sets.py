"""Index sets out of an assignment: ``b(i({1,3,5}))`` becomes ``b(i)`` over a gathered operand.

An index set picks coordinates of a mode by a list, NumPy's ``b[[1, 3, 5]]`` (TACO's
``IndexSet``). The set is data, not loop structure: :func:`split_index_sets` replaces each
access that has one by a plain access to an operand of its own, and records which mode of
which operand it gathers. When the kernel is called those operands are built by gathering the
selected entries (:func:`coiter.formats.slicing.gather_storage`), so the compiled loops are
the plain expression's and the same kernel serves every set.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from .ast import Access, Assignment, IndexSet, Subscript, accesses, map_accesses


@dataclass(frozen=True)
class Gather:
    """The operand ``source`` (its name in the assignment) with mode ``mode`` read at the
    coordinates of ``index_set`` for each ``(mode, index_set)`` of ``sets``."""

    source: str
    sets: tuple[tuple[int, IndexSet], ...]


def split_index_sets(a: Assignment) -> tuple[Assignment, dict[str, Gather]]:
    """``a`` with every index set replaced by its variable, and the gathers that make the
    operands those plain accesses read, by operand name.

    Accesses of one tensor through the same sets share an operand; other accesses of it
    (plain, or through other sets) get fresh names (``b_set2``). A set on the result is an
    ArgumentError: coiter computes new results."""
    sets_on_lhs = [str(s) for s in a.lhs.indices if isinstance(s, IndexSet)]
    if sets_on_lhs:
        raise ArgumentError(f"the result {a.lhs} has the index set {sets_on_lhs[0]}: coiter "
                            "computes new results, which have no other coordinates; apply the "
                            "set to the operands")
    if not any(isinstance(s, IndexSet) for x in accesses(a.rhs) for s in x.indices):
        return a, {}
    taken = {x.tensor for x in accesses(a.rhs)} | {a.lhs.tensor}
    plain_use = {x.tensor for x in accesses(a.rhs)
                 if not any(isinstance(s, IndexSet) for s in x.indices)}
    names: dict[tuple[str, tuple[tuple[int, IndexSet], ...]], str] = {}
    gathers: dict[str, Gather] = {}

    def strip(x: Access) -> Access:
        sets = tuple((m, s) for m, s in enumerate(x.indices) if isinstance(s, IndexSet))
        if not sets:
            return x
        key = (x.tensor, sets)
        if key not in names:
            name = x.tensor
            if x.tensor in plain_use or any(src == x.tensor for src, _ in names):
                n = 2
                while f"{x.tensor}_set{n}" in taken:
                    n += 1
                name = f"{x.tensor}_set{n}"
                taken.add(name)
            names[key] = name
            gathers[name] = Gather(x.tensor, sets)
        subs: tuple[Subscript, ...] = tuple(s.var if isinstance(s, IndexSet) else s
                                            for s in x.indices)
        return Access(names[key], subs, x.source)

    return Assignment(a.lhs, map_accesses(a.rhs, strip), a.accumulate), gathers
