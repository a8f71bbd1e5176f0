"""The package's import structure, read from the source: imports point down the pipeline only
(no two parts of coiter import each other), and the compiler's middle stages reach level
formats through the level interface, never a concrete level type."""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import coiter

PACKAGE = Path(coiter.__file__).parent
# Stages that ask levels for capabilities and properties: they must not name a level type.
# (coiter.concrete may: it chooses the formats of the workspaces it inserts.)
FORMAT_BLIND = ("lattice", "lower", "ir", "codegen")


def _module(path: Path) -> str:
    parts = ["coiter", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements anywhere in ``tree`` (functions included), except under ``if
    TYPE_CHECKING:``, which only type checkers run."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The coiter modules (or names in them) ``node`` imports, as absolute dotted names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("coiter")]
    if node.level == 0:
        base = node.module or ""
    else:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    if not base.startswith("coiter"):
        return []
    return [f"{base}.{a.name}" for a in node.names]


def _imports() -> dict[str, set[str]]:
    """Module name -> the coiter names its source imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module] = {t for node in _runtime_imports(tree)
                         for t in _targets(module, path.name == "__init__.py", node)}
    return graph


def _part(name: str) -> str:
    """``coiter.formats.levels.dense`` -> ``formats``; ``coiter`` itself -> ``coiter``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "coiter"


def _part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    parts = {_part(m) for m in graph}
    edges: dict[str, set[str]] = {p: set() for p in parts}
    for module, targets in graph.items():
        for target in targets:
            a, b = _part(module), _part(target)
            if a != b and b in parts and a != "coiter":  # the package's __init__ re-exports every part
                edges[a].add(b)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path that returns to its start, or None."""
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as err:
        return err.args[1]
    return None


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"coiter.a.x": {"coiter.b.y"}, "coiter.b.y": {"coiter.c"}, "coiter.c": {"coiter.a.x.f"},
             "coiter.d": {"coiter.a.x"}}
    cycle = _cycle(_part_graph(graph))
    assert cycle is not None and cycle[0] == cycle[-1] and sorted(cycle[1:]) == ["a", "b", "c"]
    graph["coiter.c"] = set()
    assert _cycle(_part_graph(graph)) is None


def test_relative_imports_resolve() -> None:
    tree = ast.parse("from ..formats.format import csr\nfrom . import lazy\nfrom .kernel import K\n")
    nodes = _runtime_imports(tree)
    assert _targets("coiter.runtime.convert", False, nodes[0]) == ["coiter.formats.format.csr"]
    assert _targets("coiter", True, nodes[1]) == ["coiter.lazy"]
    assert _targets("coiter.runtime", True, nodes[2]) == ["coiter.runtime.kernel.K"]


def test_parts_of_the_package_import_each_other_in_one_direction() -> None:
    edges = _part_graph(_imports())
    assert {"formats", "tensor", "runtime", "api", "interop"} <= set(edges)
    cycle = _cycle(edges)
    assert cycle is None, f"import cycle between parts of coiter: {' -> '.join(cycle or [])}"


def test_middle_stages_name_no_level_type() -> None:
    level_modules = {f"coiter.formats.levels.{p.stem}" for p in (PACKAGE / "formats" / "levels").glob("*.py")
                     if p.stem not in ("__init__", "base")}
    level_types = {name for name in dir(coiter.formats.levels) if isinstance(getattr(coiter.formats.levels, name), type)
                   and name not in ("Level", "LevelNames", "ParentPos", "Packed")}
    assert {"Dense", "Compressed", "Singleton"} <= level_types
    offenders = []
    for module, targets in _imports().items():
        if _part(module) in FORMAT_BLIND:
            for target in targets:
                owner, _, name = target.rpartition(".")
                if target in level_modules or owner in level_modules or (
                        owner.startswith("coiter.formats") and name in level_types):
                    offenders.append(f"{module} imports {target}")
    assert offenders == []
