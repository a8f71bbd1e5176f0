"""Pictures of kernels (coiter/pictures.py): the DOT text parses (pydot), its nodes and edges
are the iteration graph's and the merge lattice's, and drawing without Graphviz says so."""
from __future__ import annotations

from pathlib import Path

import pydot
import pytest

import coiter
from coiter import cli
from coiter.errors import ArgumentError, CoiterError


def _graph(dot: coiter.pictures.Dot) -> pydot.Dot:
    graphs = pydot.graph_from_dot_data(str(dot))
    assert graphs is not None and len(graphs) == 1
    return graphs[0]


def _edges(g: pydot.Dot) -> set[tuple[str, str, str]]:
    return {(e.get_source().strip('"'), e.get_destination().strip('"'), (e.get_label() or "").strip('"'))
            for e in g.get_edges()}


def _labels(g: pydot.Dot) -> dict[str, str]:
    return {n.get_name(): (n.get_label() or "").strip('"') for n in g.get_nodes() if n.get_name() not in ("node",)}


def test_iteration_graphs_follow_storage_order() -> None:
    k = coiter.compile("A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", formats={"B": "sss", "C": "dd", "D": "ds"})
    g = _graph(k.iteration_graph())
    assert _edges(g) == {("i", "j", "B"), ("j", "k", "B"), ("j", "l", "C"), ("k", "l", "D"), ("i", "l", "A")}
    styles = {(e.get_source().strip('"'), e.get_destination().strip('"')): e.get_style() for e in g.get_edges()}
    assert styles[("j", "l")] == "dashed" and styles[("k", "l")] == "solid"  # C dense, D compressed
    csc = coiter.compile("y(j) = A(i,j) * x(i)", formats={"A": "csc"})
    assert ("j", "i", "A") in _edges(_graph(csc.iteration_graph()))


@pytest.mark.parametrize("expr, formats, var, points, edges", [
    ("a(i) = b(i) + c(i)", {"b": "s", "c": "s"}, "i", {"b1, c1", "b1", "c1"}, 2),
    ("a(i) = b(i) * c(i)", {"b": "s", "c": "s"}, "i", {"b1, c1"}, 0),
    ("a(i) = b(i) + c(i) * d(i)", {"b": "s", "c": "s", "d": "s"}, "i", {"b1, c1, d1", "c1, d1", "b1"}, 2),
    ("a(i) = b(i) + c(i)", {"b": "s"}, "i", {"b1", "every i"}, 1),
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}, "j", {"A2"}, 0),
])
def test_merge_lattices(expr: str, formats: dict, var: str, points: set[str], edges: int) -> None:
    g = _graph(coiter.compile(expr, formats=formats).merge_lattice(var))
    assert set(_labels(g).values()) == points
    assert len(g.get_edges()) == edges


def test_errors_and_saving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = coiter.compile("a(i) = b(i) + c(i)", formats={"b": "s"})
    with pytest.raises(ArgumentError, match="'z' is not in"):
        k.merge_lattice("z")
    k.iteration_graph().save(tmp_path / "g.dot")
    assert _graph(coiter.pictures.Dot((tmp_path / "g.dot").read_text()))
    monkeypatch.setenv("PATH", str(tmp_path))  # no Graphviz
    with pytest.raises(CoiterError, match="Graphviz"):
        k.iteration_graph().save(tmp_path / "g.svg")
    assert k.iteration_graph()._repr_svg_() is None


def test_taco_cli_prints_pictures(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["a(i) = b(i) + c(i)", "-f=b:s", "-f=c:s", "-print-lattice=i"]) == 0
    assert set(_labels(_graph(coiter.pictures.Dot(capsys.readouterr().out))).values()) == {"b1, c1", "b1", "c1"}
    assert cli.main(["y(i) = A(i,j) * x(j)", "-f=A:ds", "-print-iteration-graph"]) == 0
    assert ("i", "j", "A") in _edges(_graph(coiter.pictures.Dot(capsys.readouterr().out)))
