"""The schedulers clusterbench knows, and which one the launcher runs under.

Each scheduler is one module of this package, named after it (``local.py``, ``slurm.py``,
``sge.py``, ``ssh.py``): a plugin of :data:`REGISTRY`, whose ``SCHEDULER`` is its
:class:`~clusterbench.launch.schedulers._base.Scheduler` subclass. Its name is that of the
Snakemake executor that submits to it: the workflow asks ``SCHEDULERS[executor]`` for its part
of the train rule's resources, its pre-flight check and what a job asks for. Modules whose name
starts with ``_`` are helpers (``_base``: the interface and what the schedulers share), not
schedulers. Adding a scheduler is adding its module here; nothing else is edited.

:data:`SCHEDULERS` holds every scheduler in detection order (highest ``detection_priority``
first, ties by name): the first whose ``detect(env)`` is true is the one the launcher runs in
(``local`` detects always: it comes last).

A scheduler that is no Snakemake executor of its own (``ssh``: the local executor runs its jobs)
says which executor runs them (``executor``); the workflow takes it when
``CLUSTERBENCH_SCHEDULER`` names it (:func:`of_executor`), as the jobs' launchers do.

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
    SUSPENDED,
    TAKEN_BACK,
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
    fill_ranks,
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


def requested_name(requested: str | None, env: Mapping[str, str]) -> str:
    """The scheduler ``--scheduler`` (``requested``) or ``CLUSTERBENCH_SCHEDULER`` names (its
    deprecated old name ``CLUSTERBENCH_LAUNCHER`` is still read, with a warning), lower case;
    ``auto`` when none does. An error naming an unknown one."""
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
    if name != "auto" and name not in SCHEDULERS:
        choices = ("auto", *SCHEDULERS)
        raise AllocationError(unknown_message("scheduler", name, choices))
    return name


def select(requested: str | None, env: Mapping[str, str]) -> type[Scheduler]:
    """``--scheduler`` (or ``CLUSTERBENCH_SCHEDULER``; its deprecated old name
    ``CLUSTERBENCH_LAUNCHER`` is still read, with a warning) if given and not ``auto``, else
    :func:`detect`."""
    name = requested_name(requested, env)
    return detect(env) if name == "auto" else SCHEDULERS[name]


def executors() -> list[str]:
    """The Snakemake executors clusterbench has a scheduler for (``local``, ``slurm``, ...)."""
    return list(dict.fromkeys(cls.snakemake_executor() for cls in SCHEDULERS.values()))


def of_executor(executor: str, env: Mapping[str, str]) -> type[Scheduler] | None:
    """The scheduler of a workflow whose jobs Snakemake's ``executor`` runs: the one
    ``CLUSTERBENCH_SCHEDULER`` names (not ``auto``), which must be one that executor runs
    (the ssh scheduler's jobs run under the local executor), else the scheduler of the
    executor's name; None for an executor clusterbench has no scheduler for. The launchers of
    the jobs inherit the variable: they start their ranks under the same one. An
    :class:`AllocationError` naming the variable when it names another executor's."""
    name = requested_name(None, env)
    if name == "auto":
        found = SCHEDULERS.get(executor)
        return found if found is not None and found.snakemake_executor() == executor else None
    found = SCHEDULERS[name]
    if found.snakemake_executor() != executor:
        raise AllocationError(
            f"environment variable {SCHEDULER_VAR}={name}: the {name} scheduler's jobs run "
            f"under Snakemake's {found.snakemake_executor()} executor, and this workflow runs "
            f"under the {executor} executor (use --profile profiles/{name}, or unset "
            f"{SCHEDULER_VAR})"
        )
    return found


__all__ = [
    "ENDED",
    "ENDING",
    "HOSTS_FILE_VAR",
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "TAKEN_BACK",
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
    "executors",
    "fill_ranks",
    "load",
    "of_executor",
    "node_devices",
    "parse_hosts_file",
    "rank_device",
    "read_hosts_file",
    "require_tools",
    "resolve",
    "run_tool",
    "requested_name",
    "select",
    "split_devices",
    "spread_ranks",
    "usable_hosts",
    "within_hosts_file",
]
