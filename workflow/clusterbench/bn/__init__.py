"""BatchNorm across workers: the ``bn`` modes, one plugin module each.

A mode decides how BatchNorm statistics cross the ranks of a data-parallel run. Each module of
this package is one mode (:mod:`clusterbench.core.registry`), named after it, and provides:

``DESCRIPTION``        one line, for the docs and messages;
``ELASTIC``            None if the mode works when the world size changes while a run trains
                       (Horovod elastic), else the reason it does not;
``prepare(model, runtime, device)``  the model as the mode needs it before it is wrapped
                       (``sync`` replaces its BatchNorm layers; the others return it);
``aggregator(model)``  what the optimiser's step feeds, once per step, in the same collective
                       as the gradients (``aggregate``: the running statistics), or None.

The modules import nothing heavy at import time: the config check reads ``ELASTIC`` while the
Snakefile is parsed. The building blocks are in :mod:`clusterbench.bn._blocks`.
"""

from __future__ import annotations

from types import ModuleType

from clusterbench.core.registry import Registry

#: The ``bn`` modes: the schema's choices of a run's ``bn``.
BN_MODES = Registry("clusterbench.bn", "bn mode")


def mode(name: str) -> ModuleType:
    """The module of ``bn`` mode ``name``."""
    return BN_MODES.module(name)
