"""``python -m benchmarks run [--quick] ...``: see ``benchmarks/suite/cli.py``."""
import sys

from benchmarks.suite.cli import main

sys.exit(main())
