"""Example data bundled with coiter (see README.md in this folder for sources and licences)."""
from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

_SUFFIX = ".mtx.gz"


def example_path(name: str = "bcsstk16") -> Path:
    """Filesystem path of the bundled Matrix Market file ``<name>.mtx.gz``."""
    package = files(__name__)
    resource = package / f"{name}{_SUFFIX}"
    if not resource.is_file():
        available = sorted(
            entry.name.removesuffix(_SUFFIX)
            for entry in package.iterdir()
            if entry.name.endswith(_SUFFIX)
        )
        raise FileNotFoundError(f"no bundled example {name!r}; available: {', '.join(available)}")
    # Installed packages live on the filesystem; os.fspath fails loudly for a zip import
    # rather than returning a path that does not exist.
    return Path(os.fspath(resource))
