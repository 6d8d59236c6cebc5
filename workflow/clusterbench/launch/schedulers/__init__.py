"""The schedulers clusterbench knows, and which one the launcher runs under.

Each scheduler is one module of this package, named after it (``local.py``, ``slurm.py``,
``sge.py``): a plugin of :data:`REGISTRY`, whose ``SCHEDULER`` is its
:class:`~clusterbench.launch.schedulers._base.Scheduler` subclass. Its name is that of the
Snakemake executor that submits to it: the workflow asks ``SCHEDULERS[executor]`` for its part
of the train rule's resources, its pre-flight check and what a job asks for. Modules whose name
starts with ``_`` are helpers (``_base``: the interface and what the schedulers share), not
schedulers. Adding a scheduler is adding its module here; nothing else is edited.

:data:`SCHEDULERS` holds every scheduler in detection order (highest ``detection_priority``
first, ties by name): the first whose ``detect(env)`` is true is the one the launcher runs in
(``local`` detects always: it comes last).

Standard library only (the Snakefile imports it, and with it every scheduler module).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from clusterbench.core.registry import Registry, unknown_message
from clusterbench.launch.schedulers._base import (
    ENDED,
    ENDING,
    HOSTS_FILE_VAR,
    PENDING,
    RANK_ID_VAR,
    RUNNING,
    Allocation,
    AllocationError,
    Host,
    JobRequest,
    JobStatus,
    LaunchError,
    PreflightContext,
    PreflightError,
    Scheduler,
    WorkerQueue,
    node_devices,
    parse_hosts_file,
    rank_device,
    read_hosts_file,
    require_tools,
    resolve,
    run_tool,
    split_devices,
    spread_ranks,
    usable_hosts,
    within_hosts_file,
)

#: The schedulers' extension point: the modules of this package.
REGISTRY = Registry("clusterbench.launch.schedulers", "scheduler")

#: The environment variable that forces a scheduler (``--scheduler`` wins).
SCHEDULER_VAR = "CLUSTERBENCH_SCHEDULER"
#: The site (cluster) label of a run: set by the workflow from the config's ``site``, else the
#: launcher sets it from the scheduler (:meth:`~._base.Scheduler.site`) for the ranks.
SITE_VAR = "CLUSTERBENCH_SITE"
#: :data:`SCHEDULER_VAR`'s old name: still read (deprecated), with a warning.
OLD_SCHEDULER_VAR = "CLUSTERBENCH_LAUNCHER"

log = logging.getLogger("clusterbench.launch")


def load(registry: Registry = REGISTRY) -> dict[str, type[Scheduler]]:
    """Every scheduler of ``registry``, by name, in detection order; an error naming a module
    whose ``SCHEDULER`` is no :class:`Scheduler` of the module's own name."""
    found = []
    for name in registry.names():
        cls = registry.get(name, "SCHEDULER")
        if not (isinstance(cls, type) and issubclass(cls, Scheduler)) or cls.name != name:
            module = registry.module(name).__name__
            raise TypeError(
                f"scheduler module {module}: SCHEDULER must be a Scheduler subclass whose name "
                f"is {name!r} (the module's), got {cls!r}"
            )
        found.append(cls)
    found.sort(key=lambda cls: (-cls.detection_priority, cls.name))
    return {cls.name: cls for cls in found}


#: Name -> scheduler class, in detection order.
SCHEDULERS: dict[str, type[Scheduler]] = load()


def detect(env: Mapping[str, str]) -> type[Scheduler]:
    """The scheduler whose allocation ``env`` is in: the first of :data:`SCHEDULERS` to say so
    (Slurm: ``SLURM_JOB_ID``/``SLURM_JOBID``; SGE: ``PE_HOSTFILE`` and ``JOB_ID``; else
    local)."""
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
        choices = ("auto", *SCHEDULERS)
        raise AllocationError(unknown_message("scheduler", name, choices))
    return SCHEDULERS[name]


__all__ = [
    "ENDED",
    "ENDING",
    "HOSTS_FILE_VAR",
    "PENDING",
    "RUNNING",
    "OLD_SCHEDULER_VAR",
    "RANK_ID_VAR",
    "REGISTRY",
    "SCHEDULERS",
    "SCHEDULER_VAR",
    "SITE_VAR",
    "Allocation",
    "AllocationError",
    "Host",
    "JobRequest",
    "JobStatus",
    "LaunchError",
    "PreflightContext",
    "PreflightError",
    "Scheduler",
    "WorkerQueue",
    "detect",
    "load",
    "node_devices",
    "parse_hosts_file",
    "rank_device",
    "read_hosts_file",
    "require_tools",
    "resolve",
    "run_tool",
    "select",
    "split_devices",
    "spread_ranks",
    "usable_hosts",
    "within_hosts_file",
]
