"""The schedulers clusterbench knows, and which one the launcher runs under.

:data:`SCHEDULERS` is the registry, in detection order: the first whose ``detect(env)`` is true
is the one (``local`` detects always: it comes last). Its names are those of the Snakemake
executors that submit to each scheduler (``local``, ``slurm``, ``sge``): the workflow asks
``SCHEDULERS[executor]`` its pre-flight check and what a job asks for. Adding a scheduler is
adding a :class:`~clusterbench.launch.schedulers.base.Scheduler` subclass here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from clusterbench.launch.schedulers.base import AllocationError, Scheduler
from clusterbench.launch.schedulers.local import LocalScheduler
from clusterbench.launch.schedulers.sge import SgeScheduler
from clusterbench.launch.schedulers.slurm import SlurmScheduler

#: Name -> scheduler class, in detection order.
SCHEDULERS: dict[str, type[Scheduler]] = {
    cls.name: cls for cls in (SlurmScheduler, SgeScheduler, LocalScheduler)
}

#: The environment variable that forces a scheduler (``--scheduler`` wins).
SCHEDULER_VAR = "CLUSTERBENCH_SCHEDULER"
#: The site (cluster) label of a run: set by the workflow from the config's ``site``, else the
#: launcher sets it from the scheduler (:meth:`~.base.Scheduler.site`) for the ranks.
SITE_VAR = "CLUSTERBENCH_SITE"
#: :data:`SCHEDULER_VAR`'s old name: still read (deprecated), with a warning.
OLD_SCHEDULER_VAR = "CLUSTERBENCH_LAUNCHER"

log = logging.getLogger("clusterbench.launch")


def detect(env: Mapping[str, str]) -> type[Scheduler]:
    """The scheduler whose allocation ``env`` is in: the first of :data:`SCHEDULERS` to say so.

    Slurm: ``SLURM_JOB_ID``/``SLURM_JOBID``; SGE: ``PE_HOSTFILE`` and ``JOB_ID``; else local.
    """
    return next(cls for cls in SCHEDULERS.values() if cls.detect(env))


def select(requested: str | None, env: Mapping[str, str]) -> type[Scheduler]:
    """``--scheduler`` (or ``CLUSTERBENCH_SCHEDULER``; its deprecated old name
    ``CLUSTERBENCH_LAUNCHER`` is still read, with a warning) if given and not ``auto``, else
    :func:`detect`."""
    old = env.get(OLD_SCHEDULER_VAR)
    if old and not requested and not env.get(SCHEDULER_VAR):
        log.warning(
            "%s is deprecated (the launcher is the program, the scheduler what it runs "
            "under): set %s=%s instead",
            OLD_SCHEDULER_VAR,
            SCHEDULER_VAR,
            old,
        )
    name = (requested or env.get(SCHEDULER_VAR) or old or "auto").strip().lower()
    if name == "auto":
        return detect(env)
    if name not in SCHEDULERS:
        raise AllocationError(
            f"unknown scheduler {name!r}: choose one of auto, {', '.join(SCHEDULERS)}"
        )
    return SCHEDULERS[name]


__all__ = ["SCHEDULERS", "LocalScheduler", "Scheduler", "SgeScheduler", "SlurmScheduler"]
