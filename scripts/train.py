"""Snakemake entry point for stage clusterbench.train (see docs/ARCHITECTURE.md)."""

import sys

from clusterbench.train import main

sys.exit(main())
