"""The history: every workflow run's runs, kept in one SQLite file across workflow runs,
checkouts and users (``history.path``), so that a cluster's throughput can be followed over
time and a regression seen.

- :mod:`~clusterbench.history.store`: the SQLite file (schema and its version, safe concurrent
  appends, the check before any job that the path can be written). Standard library only: the
  Snakefile imports it.
- :mod:`~clusterbench.history.entries`: one entry per run from its ``run.json``,
  ``metrics.jsonl`` and evaluation.
- :mod:`~clusterbench.history.regression`: the series, their points and the regression rule
  (pandas).
- :mod:`~clusterbench.history.stage`: the workflow's ``history`` step (append, then the
  series of this workflow's runs for the report).
- :mod:`~clusterbench.history.cli`: ``clusterbench-history [PATH]``.

Nothing heavy is imported here: ``from clusterbench.history import store`` stays standard
library.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The workflow's history step (:func:`clusterbench.history.stage.main`)."""
    from clusterbench.history.stage import main as stage_main

    return stage_main(argv)
