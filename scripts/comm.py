"""Snakemake entry point for stage clusterbench.comm (see docs/ARCHITECTURE.md)."""

import sys

from clusterbench.comm import main

sys.exit(main())
