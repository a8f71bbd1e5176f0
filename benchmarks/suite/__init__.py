"""The benchmark suite behind ``python -m benchmarks run``.

Modules: ``settings`` (what a run measures), ``data`` (inputs, cached conversion,
generators), ``kernels`` (the ten kernels, operands, references, byte counts),
``peers`` (coiter and each peer library), ``check`` (result comparison), ``timing``,
``stream`` (STREAM triad bound), ``compile_probe`` (compile and first-call times in a
fresh process), ``worker`` (one thread count's measurements), ``analysis``, ``targets``,
``report`` and ``plots`` (output), ``cli`` (the entry point).
"""
