"""Typed exceptions raised at coiter's Python boundary."""
from __future__ import annotations


class CoiterError(Exception):
    """Base class of every error coiter raises on purpose."""


class ParseError(CoiterError, ValueError):
    """Malformed index-notation text; ``column`` is 1-based (None when unknown)."""

    def __init__(self, message: str, text: str = "", column: int | None = None) -> None:
        self.text = text
        self.column = column
        where = f" at column {column}" if column is not None else ""
        caret = ""
        if text and column is not None:
            caret = f"\n  {text}\n  {' ' * (column - 1)}^"
        super().__init__(f"{message}{where}{caret}")


class ArgumentError(CoiterError, TypeError, ValueError):
    """An argument of the wrong kind or out of range (``threads=0``, ``schedule=42``, an
    operand that is no tensor); a TypeError and a ValueError for callers catching either."""


class ShapeError(CoiterError, ValueError):
    """Operand shapes disagree (names the index variable and both sizes)."""


class OutOfBoundsError(ShapeError, IndexError):
    """An index past the end of a mode (``A[10]`` of 10 rows); an IndexError too, as NumPy's,
    so Python's iteration and code catching IndexError see it."""


class FormatError(CoiterError, ValueError):
    """A format is malformed, or data does not match the format it claims."""


class DTypeError(CoiterError, TypeError):
    """An unsupported or inconsistent element type."""


class ScheduleError(CoiterError, ValueError):
    """A scheduling transformation whose preconditions do not hold."""


class CompileError(CoiterError, RuntimeError):
    """The C compiler rejected generated code; carries stderr and the C file's path."""

    def __init__(self, message: str, stderr: str = "", source_path: str | None = None) -> None:
        self.stderr = stderr
        self.source_path = source_path
        super().__init__(f"{message}\n  source: {source_path}\n{stderr}")


class KernelError(CoiterError, RuntimeError):
    """A generated kernel reported a run-time failure (out of memory, index overflow)."""


class DensifyError(CoiterError, RuntimeError):
    """A sparse tensor would densify implicitly (``np.asarray``, a NumPy function coiter does
    not implement) into more than ``COITER_DENSIFY_LIMIT`` bytes."""


class CacheError(CoiterError, RuntimeError):
    """The kernel cache folder cannot be used (not a folder, or writable by other users)."""


class PerformanceWarning(UserWarning):
    """coiter takes a correct but slower plan than the expression would normally get."""
