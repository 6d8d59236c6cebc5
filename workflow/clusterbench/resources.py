"""Rule resources that are right for the Slurm executor, the SGE executor and local runs at once.

Snakemake passes every rule resource to whichever executor runs the job; each executor plugin
reads its own keys and ignores the others, and the local executor only schedules on ``mem_mb``
(and ``_cores``). The keys were read off the plugins' source (snakemake-executor-plugin-slurm
2.8.0 + -slurm-jobstep 0.6.1, snakemake-executor-plugin-sge 0.6.31) and checked on real clusters.

This module holds what every executor shares and checks a run's fields; each scheduler's own
keys come from its module: :func:`clusterbench.launch.schedulers.slurm.train_resources` (``mpi``,
``tasks``, ``cpus_per_task``, ``slurm_extra``, ``qos``) and
:func:`clusterbench.launch.schedulers.sge.train_resources` (``threads``, ``sge_pe``,
``sge_resources``, ``sge_priority``), which document them.

Generic keys (the scheduler-neutral size of the job: what ``make plan`` reports, whatever
the executor):
    ``nodes``          the nodes the workers spread over (Slurm ``--nodes``).
    ``ranks``          the ranks the job is sized for (``workers``; an elastic run's
                       ``max_workers``). No executor reads it: Slurm's ``tasks`` and SGE's
                       slots say the same to their schedulers.
    ``gpus_per_node``  the GPUs each node is asked for: ``nodes x gpus_per_node`` GPUs in all.
                       No executor reads it: Slurm gets it as ``--gpus-per-node`` (in
                       ``slurm_extra``), and SGE has no standard GPU request (a site adds its
                       complex to ``sge_resources``). Change a run's GPUs in the config, not
                       with ``--set-resources``.
    ``mem_mb``         the whole job's memory (the local executor schedules on it).
    ``mem_mb_per_cpu`` Slurm's ``--mem-per-cpu``, chosen before ``mem_mb`` (``--mem`` is *per
                       node*, so a multi-node job would get ``nodes`` times the memory asked
                       for); SGE's ``h_vmem`` per slot (lifted again by ``sge_resources``).
    ``runtime``        minutes: Slurm ``-t``, SGE ``-l h_rt=``.

A run's ``priority`` and ``qos`` are scheduler settings too (Slurm ``--nice``/``--qos``, SGE
``-p``); locally the priority orders the train jobs through the rule's ``priority:``.

Imported by the Snakefile at parse time: nothing heavy (no torch, no horovod).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clusterbench.launch.schedulers import sge, slurm

#: Every key :func:`train_resources` may return (a rule can list them all with ``.get``:
#: Snakemake drops resources whose value is ``None``).
TRAIN_RESOURCE_KEYS = (
    "nodes",
    "ranks",
    "gpus_per_node",
    "mem_mb",
    "mem_mb_per_cpu",
    "runtime",
    *slurm.TRAIN_RESOURCE_KEYS,
    *sge.TRAIN_RESOURCE_KEYS,
)

#: The SGE parallel environment multi-worker jobs run in (see the SGE scheduler module).
SGE_MPI_PE = sge.SGE_MPI_PE

#: The bounds of a run's ``priority``: SGE's ``qsub -p`` range, which Slurm's ``--nice`` holds.
PRIORITY_RANGE = (-1023, 1024)


def _int_at_least(value: Any, what: str, minimum: int = 1) -> int:
    """``value`` if it is an integer >= ``minimum``, else a ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def train_resources(run: Mapping[str, Any]) -> dict[str, Any]:
    """The resources of one training run (``workers`` Horovod ranks on ``nodes`` nodes; an
    elastic run's job is sized for its ``max_workers``, the most ranks it may grow to).

    ``run`` needs ``workers``, ``nodes``, ``gpus_per_node``, ``cpus_per_worker``, ``mem_mb``
    (the whole job's memory) and ``runtime`` (minutes); ``priority``, ``qos`` and
    ``warning_seconds`` are optional.
    Returns only the keys that apply (a subset of :data:`TRAIN_RESOURCE_KEYS`); raises
    ``ValueError`` naming a bad field.
    """
    where = f"run {run.get('name', '?')!r}:"

    def field(key: str, minimum: int = 1) -> int:
        return _int_at_least(run.get(key), f"{where} {key}", minimum)

    workers, nodes, cpus = field("workers"), field("nodes"), field("cpus_per_worker")
    if run.get("max_workers") is not None:  # elastic: room for every rank that may join
        workers = max(workers, field("max_workers"))
    gpus_per_node = field("gpus_per_node", minimum=0)
    mem_mb, runtime = field("mem_mb"), field("runtime")
    if nodes > workers:
        raise ValueError(
            f"{where} nodes ({nodes}) > workers ({workers}): every node needs a worker"
        )
    priority = run.get("priority") or 0
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        raise ValueError(f"{where} priority must be an integer in {low}..{high}, got {priority!r}")
    qos = run.get("qos") or None
    warning_seconds = _int_at_least(run.get("warning_seconds", 0), f"{where} warning_seconds", 0)
    if qos is not None and not isinstance(qos, str):
        raise ValueError(f"{where} qos must be a string, got {qos!r}")

    return {
        "nodes": nodes,
        "ranks": workers,
        "gpus_per_node": gpus_per_node,
        "mem_mb": mem_mb,
        "mem_mb_per_cpu": math.ceil(mem_mb / (workers * cpus)),
        "runtime": runtime,
        **slurm.train_resources(
            workers=workers,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            cpus_per_worker=cpus,
            priority=priority,
            qos=qos,
            warning_seconds=warning_seconds,
        ),
        **sge.train_resources(
            workers=workers, cpus_per_worker=cpus, mem_mb=mem_mb, priority=priority
        ),
    }
