"""The sections of ``make bench``: one module each (:mod:`clusterbench.core.registry`).

A section module defines:

``ORDER``     its place in a round (lower first);
``TITLE``     one line for ``--help`` and the results;
``OPTIONS``   its size settings: ``{name: (type, default, quick default, help)}``, each a flag
              ``--<name>`` of bench.py (``--digits-epochs``);
``NEEDS``     the sections whose cases it uses too (their data is made when it runs alone);
``GPU``       True when it runs only where CUDA is;
``cases(args, work) -> {name: Case}``   its data and settings, made under ``work``;
``run(runner, args) -> [Figure]``       one round: its rows (``runner.get(Spec(...))``: a row
              runs at most once per round, whichever section asks first) and its figures.

A new section is one new module here; bench.py finds it.
"""

from __future__ import annotations

from types import ModuleType

from clusterbench.core.registry import Registry

SECTIONS = Registry("sections", "bench section", underscores=True)


def ordered() -> list[tuple[str, ModuleType]]:
    """Every section, in its ``ORDER``."""
    return sorted(SECTIONS.modules().items(), key=lambda item: item[1].ORDER)
