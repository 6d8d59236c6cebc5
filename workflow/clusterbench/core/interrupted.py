"""A stage stopped by Ctrl-C says so in one line, instead of a traceback.

Ctrl-C in the terminal that runs Snakemake sends SIGINT to the whole foreground process group:
Snakemake and the stage it runs, whose Python raises ``KeyboardInterrupt`` wherever it is.
Snakemake then shows the failed job's log, and that was 33 lines of traceback of the indexing
loop the stage was in. :func:`one_line` wraps a stage's ``main``: a ``KeyboardInterrupt`` ends
it with one line naming the stage, and exit status 130 (128 + SIGINT, as a shell gives). The
stage's outputs are written atomically (:mod:`clusterbench.core.atomic`), so what it was
writing is not left half-written, and Snakemake marks its outputs incomplete.

Standard library only.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

#: The exit status of a stage stopped by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

Main = Callable[..., int]


def one_line(stage: str) -> Callable[[Main], Main]:
    """``main`` of the stage ``stage``, ending on ``KeyboardInterrupt`` with one line on
    stderr and :data:`EXIT_INTERRUPTED`."""

    def wrap(main: Main) -> Main:
        @functools.wraps(main)
        def run(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                print(
                    f"{stage}: interrupted (SIGINT, Ctrl-C): stopped", file=sys.stderr, flush=True
                )
                return EXIT_INTERRUPTED

        return run

    return wrap
