"""coiter's binary tensor files (``.npz``): a tensor's own arrays, in any format, as NumPy's
zip of ``.npy`` arrays, so that saving and loading copy no more than the bytes.

The archive holds ``vals``, one array per level array (``level<k>.<name>``), and ``meta``: a
JSON string with the format (:mod:`coiter.formats.codec`), shape, fill value and a version.
Nothing is unpickled when loading, and the loaded storage is validated like any
operand, so a damaged or hand-made file is a FormatError, never a crash.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import numpy as np

from ..errors import FormatError
from ..formats.codec import format_from_data, format_to_data
from ..formats.storage import Storage, check_fill
from ..tensor import Tensor

VERSION = 1


def save_npz(path: str | os.PathLike[str], tensor: Tensor, compressed: bool = False) -> None:
    """Write ``tensor`` (any format) to ``path``; ``compressed`` deflates the arrays."""
    s = tensor.storage
    fill = s.fill
    meta = {"coiter": VERSION, "format": format_to_data(s.format), "shape": list(s.shape),
            "fill": [fill.real, fill.imag] if isinstance(fill, complex) else fill}
    arrays = {"meta": np.array(json.dumps(meta)), "vals": s.vals}
    for k, level in enumerate(s.levels):
        for name, a in level.items():
            arrays[f"level{k}.{name}"] = a
    with open(path, "wb") as f:  # a file object: np.savez would append .npz to other names
        (np.savez_compressed if compressed else np.savez)(f, **arrays)


def load_npz(path: str | os.PathLike[str], name: str | None = None) -> Tensor:
    """The tensor :func:`save_npz` wrote to ``path``."""
    where = os.fspath(path)
    with open(path, "rb") as f:  # a missing file is the OSError any reader raises
        try:
            with np.load(f, allow_pickle=False) as z:
                files = {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise FormatError(f"{where}: not a coiter .npz file ({e})") from None
    try:
        meta = json.loads(str(files.pop("meta")))
        if meta.get("coiter") != VERSION:
            raise FormatError(f"{where}: coiter file version {meta.get('coiter')!r}, expected {VERSION}")
        fmt = format_from_data(meta["format"], where)
        shape = tuple(int(d) for d in meta["shape"])
        vals = files.pop("vals")
        levels: list[dict[str, np.ndarray]] = [{} for _ in fmt.levels]
        for key, a in files.items():
            k, _, array = key.removeprefix("level").partition(".")
            levels[int(k)][array] = a
        fill: Any = complex(*meta["fill"]) if isinstance(meta["fill"], list) else meta["fill"]
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise FormatError(f"{where}: unreadable coiter .npz file ({type(e).__name__}: {e})") from None
    storage = Storage(fmt, shape, tuple(levels), vals, check_fill(fill, vals.dtype))
    storage.validate(name or where)
    return Tensor._wrap(storage, name)
