"""Imperative IR produced by lowering."""
