"""Iteration graphs and merge lattices."""
