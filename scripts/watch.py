"""Thin entry point: see clusterbench.watch."""

import sys

from clusterbench.watch import main

sys.exit(main())
