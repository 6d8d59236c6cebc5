"""Thin entry point: see clusterbench.evaluate."""

import sys

from clusterbench.evaluate import main

sys.exit(main())
