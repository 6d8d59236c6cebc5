"""Thin entry point: see clusterbench.report."""

import sys

from clusterbench.report import main

sys.exit(main())
