"""Contraction planning for einsum: one fused kernel or a sequence of smaller contractions
with temporaries, chosen by a cost model over the operands' extents, nonzero counts and
storage kinds."""
from .einsum import Optimize, plan_einsum
from .model import Term
from .plan import EinsumPlan, Step
from .search import plan_contraction

__all__ = ["EinsumPlan", "Optimize", "Step", "Term", "plan_contraction", "plan_einsum"]
