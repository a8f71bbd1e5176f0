"""The documentation site: it builds without a warning, every tutorial is in its table of
contents, and the tutorials' code runs (Python blocks in order, in one namespace per page,
with their own checks against NumPy/SciPy; ``coiter ...`` shell lines as commands)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def _blocks(page: Path, language: str) -> list[str]:
    return [code for lang, code in _BLOCK.findall(page.read_text()) if lang == language]


def test_there_are_tutorials_and_the_index_lists_each() -> None:
    names = {p.stem for p in TUTORIALS}
    assert {"getting-started", "formats", "schedules", "workspaces", "convolutions", "interop",
            "command-line"} <= names
    index = (DOCS / "index.md").read_text()
    for name in names:
        assert f"tutorials/{name}\n" in index, name


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    python, shell = _blocks(page, "python"), _blocks(page, "sh")
    assert python or shell, f"{page.name} has no code"
    namespace: dict[str, object] = {"__name__": f"tutorial_{page.stem.replace('-', '_')}"}
    for n, code in enumerate(python):
        exec(compile(code, f"{page.name} block {n + 1}", "exec"), namespace)  # noqa: S102
    for code in shell:
        for line in code.splitlines():
            if not line.strip():
                continue
            args = shlex.split(line.split("#", 1)[0])
            assert args[0] == "coiter", f"{page.name}: only coiter commands run here: {line}"
            done = subprocess.run([sys.executable, "-m", "coiter", *args[1:]], capture_output=True,
                                  text=True, timeout=300, env=os.environ.copy())
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            assert done.stdout.strip(), line


def test_site_builds_without_warnings(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(DOCS),
                           str(tmp_path / "html"), "-d", str(tmp_path / "doctrees")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("coiter.compile", "coiter.einsum_path", "coiter.Tensor", "coiter.nn.conv2d",
                 "coiter.plots.spy"):
        assert f'id="{name}"' in api, name
    assert (tmp_path / "html" / "tutorials" / "getting-started.html").exists()
