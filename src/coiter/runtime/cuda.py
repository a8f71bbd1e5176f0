"""Build CUDA translation units with nvcc, cached and loaded like the C libraries, and
find out whether a GPU is there to run them.

``$NVCC`` names the compiler (default ``nvcc``) and ``$NVCCFLAGS`` its optimisation
flags (default ``-O3``); ``-shared -Xcompiler -fPIC`` are always added. nvcc links the
CUDA runtime statically, so a built library loads on machines without a GPU driver; its
calls then fail, and :func:`gpu_available` says why.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import shlex
import shutil
from pathlib import Path

from ..errors import CompileError
from .compiler import Toolchain, build_cached, compiler_version, load_cached

DEFAULT_NVCC = "nvcc"
DEFAULT_NVCCFLAGS = "-O3"


def nvcc_command() -> tuple[str, ...] | None:
    """``$NVCC`` (or ``nvcc``) resolved on the PATH; None when it is not installed."""
    words = shlex.split(os.environ.get("NVCC") or DEFAULT_NVCC)
    executable = shutil.which(words[0]) if words else None
    return (executable, *words[1:]) if executable else None


def compile_cuda_library(source: str) -> Path:
    """Compile CUDA ``source`` into a shared library (cached on disk); its path."""
    command = nvcc_command()
    if command is None:
        raise CompileError(f"CUDA compiler {os.environ.get('NVCC') or DEFAULT_NVCC!r} not found; "
                           "install the CUDA toolkit or set NVCC to nvcc's path")
    flags = (*shlex.split(os.environ.get("NVCCFLAGS", DEFAULT_NVCCFLAGS)), "-shared", "-Xcompiler", "-fPIC")
    toolchain = Toolchain(command=command, flags=flags, version=compiler_version(command))
    return build_cached(source, toolchain, ".cu", (), "CUDA")


def load_cuda_library(source: str) -> ctypes.CDLL:
    """The loaded library for CUDA ``source``, compiled on a cache miss."""
    key = hashlib.sha256(f"cuda\0{source}".encode()).hexdigest()
    return load_cached(key, lambda: compile_cuda_library(source))


@functools.cache
def gpu_available() -> tuple[bool, str]:
    """(True, what was found) when the CUDA runtime sees a device; else (False, why not)."""
    runtime = _cudart()
    if runtime is None:
        return False, "the CUDA runtime library (libcudart) was not found"
    count = ctypes.c_int(0)
    status = runtime.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0:
        runtime.cudaGetErrorString.restype = ctypes.c_char_p
        return False, f"no usable GPU: {runtime.cudaGetErrorString(status).decode()}"
    if count.value == 0:
        return False, "no CUDA device"
    return True, f"{count.value} CUDA device(s)"


def _cudart() -> ctypes.CDLL | None:
    """libcudart from the loader's path, else beside nvcc (``<cuda>/bin/nvcc``)."""
    candidates = [ctypes.util.find_library("cudart")]
    command = nvcc_command()
    if command is not None:
        lib = Path(command[0]).resolve().parent.parent / "lib64"
        candidates += sorted(str(p) for p in lib.glob("libcudart.so*"))
    for name in filter(None, candidates):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None
