"""Snakemake entry point for stage clusterbench.preprocess (see docs/ARCHITECTURE.md)."""

import sys

from clusterbench.preprocess import main

sys.exit(main())
