"""The machinery of ``make bench`` (benchmarks/bench.py): rows run one at a time
(:mod:`benchlib.rows`), figures as ratios of rows measured in the same round
(:mod:`benchlib.figures`), the tables and the results file (:mod:`benchlib.output`).

The sections themselves are plugins: one module each in ``benchmarks/sections/``
(:mod:`sections`)."""
