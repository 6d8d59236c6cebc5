"""Thin entry point: see clusterbench.best."""

import sys

from clusterbench.best import main

sys.exit(main())
