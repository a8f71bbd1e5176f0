"""Sphinx configuration of coiter's documentation site.

Build it with ``sphinx-build -b html docs docs/_build/html`` (after ``pip install -e ".[docs]"``).
The pages are the Markdown files of this folder (MyST); the API reference comes from the
docstrings. The tutorials' code runs in the test suite (tests/test_docs.py).
"""
from __future__ import annotations

import coiter

project = "coiter"
author = "the coiter developers"
copyright = "2026, the coiter developers"  # noqa: A001 - Sphinx's name
release = coiter.__version__ if hasattr(coiter, "__version__") else "0.1.0"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to sections of other pages (formats.md#dense-levels)
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
# links from the guides to files outside the site (the benchmark's results.json, the
# sources) and a few in-page anchors MyST cannot resolve are not errors of the site
suppress_warnings = ["myst.xref_missing", "myst.header"]
html_theme = "alabaster"
html_title = "coiter"
