"""``python -m coiter``: the ``coiter`` command line (:mod:`coiter.cli`)."""
import sys

from coiter.cli import main

sys.exit(main())
