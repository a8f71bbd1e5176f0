"""Seeded differential fuzzing of coiter against NumPy.

``cases.py`` draws a case from ``(seed, number)`` and runs it in-process; ``run.py`` runs
many cases in worker subprocesses (``python -m tests.fuzz.run --cases N --seed S``), so a
crash is reported with its case number; ``test_fuzz.py`` runs a CI-sized slice.
"""
