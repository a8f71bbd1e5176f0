"""Concrete index notation, concretization, schedules."""
