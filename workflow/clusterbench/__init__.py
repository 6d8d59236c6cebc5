"""clusterbench: Horovod deep-learning benchmarks driven by Snakemake."""

__version__ = "0.2.0"
