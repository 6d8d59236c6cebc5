"""Rule resources that are right for the Slurm executor, the SGE executor and local runs at once.

Snakemake passes every rule resource to whichever executor runs the job; each executor plugin
reads its own keys and ignores the others, and the local executor only schedules on ``mem_mb``
(and ``_cores``). The keys below were read off the plugins' source (snakemake-executor-plugin-slurm
2.8.0 + -slurm-jobstep 0.6.1, snakemake-executor-plugin-sge 0.6.31) and checked on real clusters.

Slurm (``sbatch``)
    ``mpi``            present => the jobstep runs the rule's shell directly, not inside
                       ``srun -n1`` (which would hold every CPU and block the launcher's steps).
                       The plugin rejects ``mpi`` with a single task, so one worker is no MPI job.
    ``tasks``          ``--ntasks``. (Combined with ``tasks_per_node`` the plugin errors, and it
                       needs ``tasks_per_node`` > 1: the per-node geometry therefore goes into
                       ``slurm_extra`` as ``--ntasks-per-node``.)
    ``nodes``          ``--nodes``.
    ``cpus_per_task``  ``--cpus-per-task`` (one rank's CPUs; overrides the rule's ``threads``).
    ``mem_mb_per_cpu`` ``--mem-per-cpu``, chosen before ``mem_mb`` (``--mem`` is *per node*, so a
                       multi-node job would get ``nodes`` times the memory asked for).
    ``runtime``        ``-t`` (minutes).
    ``slurm_extra``    ``--gpus-per-node=G``, ``--ntasks-per-node=K``. GPUs are *not* asked
                       for with ``gpu=`` (that is ``--gpus`` per job, and it makes the plugin
                       add ``--ntasks-per-gpu=<tasks>``); ``slurm_extra`` may not repeat flags the
                       plugin sets (``--gres``, ``--gpus``, ``--ntasks``, ``--mem`` ...).
    Left to the profile: ``slurm_partition``, ``slurm_account``, ``qos``, ``constraint``.

SGE (``qsub``)
    ``threads``        slots: ``-pe <pe> N`` (the plugin ignores the rule's ``threads:``; without
                       a PE it would write ``-l slots=N``).
    ``sge_pe``         ``mpi`` for multi-worker jobs (a ``$fill_up`` PE with ``control_slaves``,
                       so the launcher can ``qrsh -inherit``); one-worker jobs use the
                       profile's ``sge-pe`` (``smp``).
    ``mem_mb``/``mem_mb_per_cpu`` become ``-l h_vmem=`` per slot, enforced like ``ulimit -v``,
                       which kills PyTorch (it reserves far more address space than it uses).
                       ``sge_resources`` comes later on the command line and wins:
                       ``h_vmem=INFINITY`` and ``tmem=<per slot>``.
    ``runtime``        ``-l h_rt=``. No GPU mapping exists; a site with a GPU complex adds it to
                       ``sge_resources`` in its profile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Every key :func:`train_resources` may return (a rule can list them all with ``.get``:
#: Snakemake drops resources whose value is ``None``).
TRAIN_RESOURCE_KEYS = (
    "mpi",
    "tasks",
    "nodes",
    "cpus_per_task",
    "mem_mb",
    "mem_mb_per_cpu",
    "runtime",
    "slurm_extra",
    "threads",
    "sge_pe",
    "sge_resources",
)

#: The SGE parallel environment multi-worker jobs run in (``$fill_up``, ``control_slaves TRUE``).
SGE_MPI_PE = "mpi"


def _int_at_least(value: Any, what: str, minimum: int = 1) -> int:
    """``value`` if it is an integer >= ``minimum``, else a ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _sge_memory(mem_mb: int, slots: int) -> str:
    """``sge_resources`` that lift h_vmem and state the real memory per slot (``tmem``)."""
    return f"h_vmem=INFINITY,tmem={math.ceil(mem_mb / slots)}M"


def train_resources(run: Mapping[str, Any]) -> dict[str, Any]:
    """The resources of one training run (``workers`` Horovod ranks on ``nodes`` nodes).

    ``run`` needs ``workers``, ``nodes``, ``gpus_per_node``, ``cpus_per_worker``, ``mem_mb``
    (the whole job's memory) and ``runtime`` (minutes). Returns only the keys that apply (a
    subset of :data:`TRAIN_RESOURCE_KEYS`); raises ``ValueError`` naming a bad field.
    """
    where = f"run {run.get('name', '?')!r}:"

    def field(key: str, minimum: int = 1) -> int:
        return _int_at_least(run.get(key), f"{where} {key}", minimum)

    workers, nodes, cpus = field("workers"), field("nodes"), field("cpus_per_worker")
    gpus_per_node = field("gpus_per_node", minimum=0)
    mem_mb, runtime = field("mem_mb"), field("runtime")
    if nodes > workers:
        raise ValueError(
            f"{where} nodes ({nodes}) > workers ({workers}): every node needs a worker"
        )

    resources: dict[str, Any] = {
        "nodes": nodes,
        "cpus_per_task": cpus,
        "mem_mb": mem_mb,
        "mem_mb_per_cpu": math.ceil(mem_mb / (workers * cpus)),
        "runtime": runtime,
    }
    extra = []
    if gpus_per_node:
        extra.append(f"--gpus-per-node={gpus_per_node}")
    if workers > 1:
        resources.update(mpi="srun", tasks=workers)
        if nodes > 1 and workers % nodes == 0:
            extra.append(f"--ntasks-per-node={workers // nodes}")
        slots = workers
        resources["sge_pe"] = SGE_MPI_PE
    else:
        slots = cpus
    if extra:
        resources["slurm_extra"] = " ".join(extra)
    resources["threads"] = slots
    resources["sge_resources"] = _sge_memory(mem_mb, slots)
    return resources
