"""Builds coiter's optional C call path (``coiter.runtime._fastcall``).

Everything else is declared in pyproject.toml. The extension is optional: when it cannot be
built (no Python headers, no compiler at install time) coiter calls kernels through ctypes.
"""
import numpy
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "coiter.runtime._fastcall",
            ["src/coiter/runtime/_fastcall.c", "src/coiter/runtime/_pool.c", "src/coiter/runtime/_load.c"],
            # rebuilt when they change, and in the sdist
            depends=["src/coiter/runtime/_pool.h", "src/coiter/runtime/_load.h"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        )
    ]
)
