"""Snakemake entry point for stage clusterbench.download (see docs/ARCHITECTURE.md)."""

import sys

from clusterbench.download import main

sys.exit(main())
