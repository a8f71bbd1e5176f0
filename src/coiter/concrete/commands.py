"""Scheduling commands: their TACO spelling and the command-string parser."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ScheduleError
from ..notation.ast import IndexVar

# the commands the scheduling language knows (coiter.concrete.schedule implements them)
NAMES = ("reorder", "split", "divide", "fuse", "pos", "coord", "precompute", "bound", "unroll",
         "mergeby", "parallelize")


@dataclass(frozen=True)
class Command:
    """One scheduling command, printed in TACO's syntax: ``split(i,i0,i1,16)``."""

    name: str
    args: tuple[Any, ...]

    @staticmethod
    def make(name: str, args: tuple[Any, ...]) -> Command:
        if name not in NAMES:
            raise ScheduleError(f"unknown scheduling command {name!r}; expected one of {sorted(NAMES)}")
        def plain(a: Any) -> Any:
            if isinstance(a, (tuple, list)):
                return tuple(plain(x) for x in a)
            return a.name if isinstance(a, IndexVar) else a

        args = tuple(plain(a) for a in args)
        if name != "precompute":  # only precompute takes sets ({i,j}); elsewhere they are lists
            args = tuple(x for a in args for x in (a if isinstance(a, tuple) else (a,)))
        return Command(name, args)

    def __str__(self) -> str:
        def text(a: Any) -> str:
            return "{" + ",".join(map(str, a)) + "}" if isinstance(a, tuple) else str(a)

        return f"{self.name}({','.join(text(a) for a in self.args if a != '')})"


def _split_args(text: str) -> list[str]:
    """Split ``text`` at commas outside parentheses and braces."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _arg(text: str) -> Any:
    """One argument: an integer, a set ``{i,j}`` (a tuple) or the text itself."""
    if text.startswith("{") and text.endswith("}"):
        return tuple(_arg(a) for a in _split_args(text[1:-1]))
    return int(text) if text.isdigit() else text


def parse_commands(text: str) -> tuple[Command, ...]:
    """TACO's command string, e.g. ``"split(i,i0,i1,16),reorder(i0,i1,j),
    parallelize(i0,CPUThread,NoRaces)"``, as commands."""
    commands: list[Command] = []
    rest = text.strip()
    while rest:
        m = re.match(r"([A-Za-z_]+)\s*\(", rest)
        if not m:
            raise ScheduleError(f"schedule {text!r}: expected a command such as split(...) at {rest!r}")
        depth, end = 0, None
        for n, ch in enumerate(rest[m.end() - 1:], m.end() - 1):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = n
                break
        if end is None:
            raise ScheduleError(f"schedule {text!r}: unbalanced parentheses in {rest!r}")
        args = [_arg(a) for a in _split_args(rest[m.end():end])]
        commands.append(Command.make(m.group(1), tuple(args)))
        rest = rest[end + 1:].strip()
        if rest.startswith(","):
            rest = rest[1:].strip()
        elif rest:
            raise ScheduleError(f"schedule {text!r}: expected ',' between commands at {rest!r}")
    return tuple(commands)
