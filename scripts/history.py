"""Thin entry point: see clusterbench.history.stage."""

import sys

from clusterbench.history import main

sys.exit(main())
