"""Sparse workspace policies (plugins) and the registry that names them."""
from __future__ import annotations

from .base import WorkspacePolicy, core_source, prelude, suffix
from .bucket import Bucket
from .coord import Coord
from .hash import Hash

# "dense" is not a policy object: it is the dense workspace the compiler has always had
# (a row workspace, or a dense result converted afterwards)
DENSE = "dense"
_POLICIES: dict[str, WorkspacePolicy] = {}


def register_policy(policy: WorkspacePolicy) -> None:
    """Make ``policy`` usable by name (the public plugin hook)."""
    if not policy.name.isidentifier() or policy.name == DENSE:
        raise ValueError(f"a workspace policy needs an identifier name other than {DENSE!r}, "
                         f"got {policy.name!r}")
    _POLICIES[policy.name] = policy


def policy(name: str) -> WorkspacePolicy:
    return _POLICIES[name]


def policy_names() -> tuple[str, ...]:
    """Every workspace choice: the sparse policies, then ``"dense"``."""
    return (*_POLICIES, DENSE)


for _p in (Coord(), Bucket(), Hash()):
    register_policy(_p)

__all__ = ["WorkspacePolicy", "core_source", "prelude", "suffix", "register_policy", "policy",
           "policy_names", "DENSE"]
