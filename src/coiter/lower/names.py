"""C identifiers for the names users choose (tensors, index variables).

Generated code keeps TACO's readable naming (``A2_pos``, ``pB2``, ``i``), so a user's name
becomes part of many identifiers. A name is mangled whenever it could mean something else in
C: a keyword, a reserved identifier (``_Bool``, ``__func__``), a macro-looking name (``NAN``,
``INT32_MAX``), a library function kernels call (``free``), or a name that another tensor's
arrays take (an index variable ``A2_crd`` beside a tensor ``A``).
"""
from __future__ import annotations

import re

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while bool true false complex I NULL main "
    # C++ and CUDA names, for kernels nvcc compiles
    "new delete class this template typename namespace using private public protected virtual "
    "operator friend try catch throw explicit mutable nullptr export "
    "threadIdx blockIdx blockDim gridDim warpSize dim3".split()
)

# functions and types generated code and its headers use by name: a variable of that name
# would hide them
LIBRARY_NAMES = frozenset(
    "malloc calloc realloc free memset memcpy memmove qsort abort exit madvise sizeof "
    "abs labs llabs fabs fabsf sqrt sqrtf exp exp2 log log2 pow sin cos tan fmin fmax floor ceil "
    "isnan isinf signbit creal cimag conj cabs printf size_t ptrdiff_t intptr_t uintptr_t "
    "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t errno assert "
    "atomicAdd __syncthreads".split()
)

_RESERVED_PREFIXES = ("coiter", "COITER", "omp_", "__", "cuda")


def sanitize(name: str) -> str:
    """A C identifier derived from a user-chosen name (never the raw name): letters, digits
    and single underscores, starting with a letter, and none of the names C gives meaning."""
    s = re.sub(r"_{2,}", "_", re.sub(r"[^0-9A-Za-z_]", "_", name)) or "u"
    if s[0].isdigit() or s[0] == "_":
        s = ("T" if s[0].isdigit() else "u") + s
    if len(s) > 1 and not any(c.islower() for c in s):
        s += "_"  # macros are spelled in capitals (NAN, INT32_MAX, EOF)
    if s in C_KEYWORDS or s in LIBRARY_NAMES or s.startswith(_RESERVED_PREFIXES):
        s += "_"
    return s


class Namer:
    """Hands out distinct identifiers for one generated function.

    Tensor names are registered first (shorter first), each as the prefix of the arrays it
    owns (``A`` owns ``A2_pos``, ``A_vals``); no later name may look like an array of a
    registered tensor."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self._owners: list[str] = []
        self._owned: re.Pattern[str] | None = None

    def taken(self, name: str) -> bool:
        return name in self.used or name in C_KEYWORDS or name in LIBRARY_NAMES

    def unique(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``... for the first one not taken."""
        name, n = base, 1
        while self.taken(name):
            name = f"{base}_{n}"
            n += 1
        self.used.add(name)
        return name

    def user(self, name: str) -> str:
        """A distinct identifier for a user's (index variable) name: sanitized, and moved out
        of every registered tensor's namespace (an index variable ``A2_crd``)."""
        base = sanitize(name)
        while self._owned is not None and self._owned.fullmatch(base):
            base = f"v{base}"  # no longer that tensor's name followed by a level number
        return self.unique(base)

    def tensors(self, names: list[str]) -> dict[str, str]:
        """C names of tensors ``names``: each the prefix of the identifiers of its arrays
        (shorter names first, so a longer one is moved out of their namespaces)."""
        out: dict[str, str] = {}
        for t in sorted(names, key=len):
            out[t] = self.user(t)
            self._owners.append(out[t])
            prefixes = "|".join(re.escape(o) for o in self._owners)
            self._owned = re.compile(rf"(?:{prefixes})[0-9]*_\w*")
        return out
