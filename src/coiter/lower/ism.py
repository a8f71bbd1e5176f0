"""Lowering of sparse workspaces: the insert-sort-merge template around a producer.

Mixin of :class:`coiter.lower.lower.Lowerer`. A sparse workspace ``w`` over modes
``(i, j, ...)`` (the result's storage order) is a ``coiter_ws_<type>`` structure from
:mod:`coiter.formats.workspaces`. The producer's assignment ``w(i,j) += e`` becomes an
insert of the component ``(key, e)``, the key packing ``i, j, ...`` (``w_shift``,
``w_mask``). After the producer the accumulation array is flushed into the sorted
``all`` array and decoded into a coordinate list (``w1_pos``, ``w1_crd``, ``w2_crd``,
``w_vals``, the workspace's COO format), which the consumer copies into the result like
any operand: the template's compress step is ordinary generated code.
"""
from __future__ import annotations

from ..concrete.stmt import TensorDecl
from ..errors import FormatError
from ..formats import workspaces
from ..ir.nodes import (
    ZEROED, Assign as IRAssign, Bin, Call, Cast, Const, Decl, ExprStmt, If, IRExpr, IRStmt, Load,
    Return, Un, Var, block,
)

WORKSPACE_KEY_ERROR = 5  # kernel return code: a workspace's coordinates need more than 63 bits


class SparseWorkspaces:
    """Allocation, insert, flush, reset and free of sparse (ISM) workspaces."""

    ism_vars: dict[str, tuple[str, str, str, str]]  # set by the Lowerer: workspace -> C names
    ism_inserting: dict[str, IRExpr]  # set by the Lowerer: workspace -> the structure inserts go to

    def _ism(self, name: str) -> tuple[str, workspaces.WorkspacePolicy, str]:
        """The structure's variable, the policy and the value type's suffix of ``name``."""
        policy = workspaces.policy(self.decls[name].policy)
        return self._ism_names(name)[0], policy, workspaces.suffix(self.vtype[name])

    def _ism_support(self, name: str) -> None:
        """Check that ``name`` can be compiled here and record the C support it needs."""
        decl: TensorDecl = self.decls[name]
        if self.target != "c":
            raise FormatError(f"sparse workspace {name} ({decl.policy}): only the C back end has "
                              "sparse workspaces; use workspace='dense'")
        if decl.order > workspaces.base.MAX_ORDER:
            raise FormatError(f"sparse workspace {name} has {decl.order} modes, at most "
                              f"{workspaces.base.MAX_ORDER} are supported")
        ctype = self.vtype[name]
        source = workspaces.policy(decl.policy).c_source()
        for text in (workspaces.prelude(), workspaces.core_source(ctype),
                     source.format(T=ctype, N=workspaces.suffix(ctype))):
            self.support.setdefault(text, None)

    def _ism_names(self, name: str) -> tuple[str, str, str, str]:
        """The C names of ``name``'s structure, key shifts, key masks and key width."""
        if name not in self.ism_vars:
            cn = self.cn[name]
            self.ism_vars[name] = tuple(self._unique(f"{cn}_{x}") for x in ("ws", "shift", "mask", "bits"))
        return self.ism_vars[name]

    def _ism_arrays(self, name: str) -> tuple[str, str, str]:
        return self._ism_names(name)[1:]

    def ism_alloc(self, name: str, decl: TensorDecl) -> list[IRStmt]:
        """Declare the structure, the key layout (checked to fit 63 bits) and the
        coordinate-list arrays the consumer reads, and allocate the accumulation array."""
        self._ism_support(name)
        ws, policy, n = self._ism(name)
        shift, mask, bits = self._ism_arrays(name)
        order = decl.order
        self.used.add(self.vals(name))
        dims = [self.names(name, k).dimension.name for k in range(order)]
        self.used.update(dims)
        out: list[IRStmt] = [Decl(f"coiter_ws_{n}", ws, ZEROED)]
        out += [Decl("int64_t", d, self.extent_of(v)) for d, v in zip(dims, decl.modes)]
        out += [Decl("int", f"{shift}[{order}]"), Decl("uint64_t", f"{mask}[{order}]")]
        # the last mode takes the lowest bits, so keys sort as the result stores them
        for k in reversed(range(order)):
            width = Call("coiter_ws_bits", (Var(dims[k]),))
            below = Const(0) if k == order - 1 else Bin("+", Load(shift, Const(k + 1)), Call(
                "coiter_ws_bits", (Var(dims[k + 1]),)))
            out.append(IRAssign(Load(shift, Const(k)), below))
            out.append(IRAssign(Load(mask, Const(k)), Bin("-", Bin("<<", Var("UINT64_C(1)"), width),
                                                          Const(1))))
        out.append(Decl("int", bits, Bin("+", Load(shift, Const(0)), Call("coiter_ws_bits", (Var(dims[0]),)))))
        out.append(If(Bin(">", Var(bits), Const(63)), block(ExprStmt(Call(f"coiter_ws_free_{n}", (
            Un("&", Var(ws)),))), Return(Const(WORKSPACE_KEY_ERROR)))))
        # the result's first capacity (the operands' stored values) sizes the first acc
        hint = Var(f"{self.cn[self.result]}_cap_hint") if self.result_allocated and \
            self.mode != "compute" else Const(0)
        init = Call(f"coiter_ws_init_{n}", (Un("&", Var(ws)), hint,
                                            Const(int(policy.fills))))
        out.append(If(init, block(ExprStmt(Call(f"coiter_ws_free_{n}", (Un("&", Var(ws)),))),
                                  Return(Const(1)))))
        itype = self.itype[name]
        for k, level in enumerate(decl.format.levels):
            names = self.names(name, k)
            for arr in level.arrays:
                self.used.add(names.array(arr))
                out.append(Decl(itype, f"{names.array(arr)}[2]", ZEROED) if arr == "pos"
                           else Decl(f"{itype}*", names.array(arr), Const(0)))
        out.append(Decl(f"{self.vtype[name]}*", self.vals(name), Const(0)))
        return out

    def ism_insert(self, name: str, coords: list[IRExpr], value: IRExpr) -> list[IRStmt]:
        """Insert the component at ``coords`` (the workspace's modes) with ``value``."""
        ws, policy, n = self._ism(name)
        shift, _, bits = self._ism_arrays(name)
        key: IRExpr | None = None
        for k, c in enumerate(coords):
            part = Bin("<<", Cast("uint64_t", c), Load(shift, Const(k)))
            key = part if key is None else Bin("|", key, part)
        assert key is not None
        # inside a parallel scatter each thread inserts into its own workspace
        target = self.ism_inserting.get(name, Un("&", Var(ws)))
        call = Call(policy.insert_fn(n), (target, key, value, Var(bits)))
        return [If(call, block(Return(Const(1))))]

    def ism_finish(self, name: str) -> list[IRStmt]:
        """Flush the accumulation array into ``all`` and point the coordinate list at it."""
        ws, policy, n = self._ism(name)
        shift, mask, bits = self._ism_arrays(name)
        decl = self.decls[name]
        wsv = Var(ws)
        out: list[IRStmt] = [
            If(Call(policy.flush_fn(n), (Un("&", wsv), Var(bits))), block(Return(Const(1)))),
            If(Call(f"coiter_ws_decode_{n}", (Un("&", wsv), Const(decl.order), Var(shift), Var(mask))),
               block(Return(Const(1)))),
        ]
        for k, level in enumerate(decl.format.levels):
            names = self.names(name, k)
            for arr in level.arrays:
                if arr == "pos":
                    out.append(IRAssign(Load(names.array(arr), Const(1)), Var(f"{ws}.all_n")))
                else:
                    out.append(IRAssign(Var(names.array(arr)), Var(f"{ws}.crd[{k}]")))
        out.append(IRAssign(Var(self.vals(name)), Var(f"{ws}.all_val")))
        return out

    def ism_reset(self, name: str) -> list[IRStmt]:
        """Empty ``all`` for the workspace's next use (the flush emptied ``acc``)."""
        ws, _, _ = self._ism(name)
        return [IRAssign(Var(f"{ws}.all_n"), Const(0))]

    def ism_free(self, name: str) -> list[IRStmt]:
        ws, _, n = self._ism(name)
        return [ExprStmt(Call(f"coiter_ws_free_{n}", (Un("&", Var(ws)),)))]

