"""The benchmarked systems, coiter first, each in its own module that imports its
library at the top, so a missing library shows as "not installed"."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..settings import Settings
from .base import NotApplicable, Peer, Prepared, TooSlow

# command-line name -> (module, distribution whose absence means "not installed")
SYSTEMS: dict[str, tuple[str, str]] = {
    "coiter": ("coiter_peer", "coiter"),
    "scipy": ("scipy_peer", "scipy"),
    "mkl": ("mkl_peer", "sparse-dot-mkl"),
    "graphblas": ("graphblas_peer", "python-graphblas"),
    "pydata": ("pydata_peer", "sparse"),
    "tensora": ("tensora_peer", "tensora"),
    "torch": ("torch_peer", "torch"),
    "numpy": ("numpy_peer", "numpy"),
}
LABELS = {"coiter": "coiter", "scipy": "scipy", "mkl": "MKL", "graphblas": "GraphBLAS",
          "pydata": "pydata", "tensora": "tensora", "torch": "torch", "numpy": "NumPy dense"}


@dataclass
class Unavailable:
    """A system that could not be loaded: ``status`` is "not installed" (its package, or a
    package it needs, is missing) or "unavailable" (it failed to load)."""

    name: str
    status: str
    reason: str


def load(key: str, settings: Settings) -> Peer | Unavailable:
    """The system ``key`` of :data:`SYSTEMS`, or why it cannot be used."""
    module_name, distribution = SYSTEMS[key]
    try:
        module = importlib.import_module(f".{module_name}", __name__)
        return module.make(settings)
    except ModuleNotFoundError as exc:
        return Unavailable(LABELS[key], "not installed",
                           f"pip install {distribution} (missing module {exc.name})")
    except Exception as exc:  # noqa: BLE001 - e.g. a shared library that fails to load
        return Unavailable(LABELS[key], "unavailable", f"{type(exc).__name__}: {exc}"[:200])


__all__ = ["LABELS", "NotApplicable", "Peer", "Prepared", "SYSTEMS", "TooSlow", "Unavailable", "load"]
