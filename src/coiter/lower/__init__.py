"""Lowering concrete index notation to imperative IR."""
