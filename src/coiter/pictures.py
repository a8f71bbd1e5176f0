"""Pictures of a kernel: its iteration graph and its merge lattices as Graphviz DOT text,
rendered to SVG or PNG by Graphviz's ``dot`` program when it is installed (in a notebook a
:class:`Dot` shows as its SVG).

* The iteration graph has a node per index variable, in the kernel's loop order, and for
  every tensor a path through its variables in storage order (TACO's picture): a solid edge
  where the level reached must be iterated (compressed, singleton...), a dashed one where it
  locates (dense, hashed); the result's path is blue.
* A merge lattice (Kjolstad et al. 2017) has a node per lattice point of one index variable:
  the sparse levels walked together in that case, "every <var>" for the point where none
  is left and the loop covers the whole range; an edge goes from each point to the largest
  points below it.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .concrete.stmt import Forall, Stmt
from .errors import ArgumentError, CoiterError
from .formats.format import Format, dense
from .lattice.lattice import Iter, Point, build_lattice, locate_where_possible, sparse_iters
from .notation.ast import Access, IndexVar, accesses

if TYPE_CHECKING:
    from .kernel import Kernel


@dataclass(frozen=True)
class Dot:
    """A Graphviz DOT picture: ``str(dot)`` is its text; :meth:`render` and :meth:`save` draw
    it with Graphviz's ``dot`` program."""

    source: str

    def __str__(self) -> str:
        return self.source

    def render(self, fmt: str = "svg") -> bytes:
        """The picture drawn by ``dot -T<fmt>`` (svg, png, pdf...)."""
        program = shutil.which("dot")
        if program is None:
            raise CoiterError("drawing DOT needs Graphviz's dot program on PATH (apt install graphviz, "
                              "brew install graphviz); str() of the picture is its DOT text")
        done = subprocess.run([program, f"-T{fmt}"], input=self.source.encode(), capture_output=True,
                              timeout=60)
        if done.returncode != 0:
            raise CoiterError(f"dot -T{fmt} failed: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout

    def save(self, path: str | Path) -> None:
        """Write the picture to ``path``: DOT text for ``.dot``/``.gv``, else drawn in the
        format its suffix names (``.svg``, ``.png``, ``.pdf``)."""
        path = Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix in ("dot", "gv"):
            path.write_text(self.source)
        else:
            path.write_bytes(self.render(suffix or "svg"))

    def _repr_svg_(self) -> str | None:
        """The SVG a notebook shows; None (text shown instead) without Graphviz."""
        try:
            return self.render("svg").decode()
        except CoiterError:
            return None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _loop_order(kernel: Kernel) -> list[str]:
    """Index variables in the order the kernel's loops nest (first appearance, depth first)."""
    order: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, Forall) and str(node.var) not in order:
            order.append(str(node.var))
        if dataclasses.is_dataclass(node):
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                for v in value if isinstance(value, tuple) else (value,):
                    if isinstance(v, Stmt):
                        walk(v)
    walk(kernel.concrete.stmt)
    return order


def _format(kernel: Kernel, access: Access) -> Format:
    return kernel.formats.get(access.tensor) or dense(len(access.indices))


def iteration_graph(kernel: Kernel) -> Dot:
    """The kernel's iteration graph."""
    a = kernel.assignment
    order = _loop_order(kernel)
    tensors = [(x, False) for x in dict.fromkeys(accesses(a.rhs))] + [(a.lhs, True)]
    names = list(order) + [str(v) for x, _ in tensors for v in x.indices if str(v) not in order]
    lines = [f"digraph {_quote(f'iteration graph of {a}')} {{", "  node [shape=circle];"]
    lines += [f"  {_quote(v)};" for v in dict.fromkeys(names)]
    for x, is_result in tensors:
        fmt = _format(kernel, x)
        if fmt.layout is not None or any(not isinstance(v, IndexVar) for v in x.indices):
            continue  # blocked layouts and affine subscripts have no one-variable-per-level path
        path = [str(x.indices[m]) for m in fmt.ordering]
        for k in range(1, len(path)):
            level = fmt.levels[k]
            style = "dashed" if level.has_locate and not is_result else "solid"
            color = ', color="blue", fontcolor="blue"' if is_result else ""
            lines.append(f"  {_quote(path[k - 1])} -> {_quote(path[k])} "
                         f"[label={_quote(x.tensor)}, style={style}{color}];")
    return Dot("\n".join(lines + ["}"]) + "\n")


def merge_lattice(kernel: Kernel, var: str) -> Dot:
    """The merge lattice of index variable ``var``."""
    a = kernel.assignment
    ivar = IndexVar(var)
    if all(ivar not in x.indices for x in accesses(a.rhs)):
        raise ArgumentError(f"index variable {var!r} is not in {a} (its variables: "
                            f"{', '.join(sorted({str(v) for x in accesses(a.rhs) for v in x.indices}))})")

    def iter_of(x: Access) -> Iter | None:
        fmt = _format(kernel, x)
        if fmt.layout is not None or ivar not in x.indices:
            return None
        level = fmt.ordering.index(x.indices.index(ivar))
        return None if fmt.levels[level].full else Iter(x, level, ivar)  # full levels locate

    def locatable(it: Iter) -> bool:
        return _format(kernel, it.access).levels[it.level].has_locate

    lattice = locate_where_possible(build_lattice(a.rhs, iter_of), locatable)
    ids = {p: f"p{k}" for k, p in enumerate(lattice.points)}
    lines = [f"digraph {_quote(f'merge lattice of {var} in {a}')} {{", "  node [shape=box];"]
    for p, pid in ids.items():
        label = ", ".join(f"{it.access.tensor}{it.level + 1}" for it in sparse_iters(p)) or f"every {var}"
        lines.append(f"  {pid} [label={_quote(label)}];")
    for p in lattice.points:
        for q in _largest_below(p, lattice.points):
            lines.append(f"  {ids[p]} -> {ids[q]};")
    return Dot("\n".join(lines + ["}"]) + "\n")


def _largest_below(p: Point, points: tuple[Point, ...]) -> list[Point]:
    """The points strictly below ``p`` with no other point between."""
    below = [q for q in points if q < p]
    return [q for q in below if not any(q < r for r in below)]
