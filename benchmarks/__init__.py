"""coiter's benchmarks: ``python -m benchmarks run`` is the benchmark suite (see
``benchmarks/suite``); ``core.py`` and ``formats.py`` are standalone scripts."""
