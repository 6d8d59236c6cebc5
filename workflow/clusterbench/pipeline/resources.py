"""Rule resources that are right for every scheduler's executor at once (Slurm, SGE, local).

Snakemake passes every rule resource to whichever executor runs the job; each executor plugin
reads its own keys and ignores the others, and the local executor only schedules on ``mem_mb``
(and ``_cores``). So a training job's resources are the scheduler-neutral ones
(:func:`generic_resources`, computed once) and every scheduler's own part: each scheduler of the
registry (:data:`clusterbench.launch.schedulers.SCHEDULERS`) maps a run to its executor's keys
(:meth:`~clusterbench.launch.schedulers.Scheduler.train_resources`) and names them
(``resource_keys``); the Slurm and SGE modules document theirs. This module knows no scheduler
by name.

Generic keys (the scheduler-neutral size of the job: what ``make plan`` reports, whatever
the executor):
    ``nodes``          the nodes the workers spread over (Slurm ``--nodes``).
    ``ranks``          the ranks the job is sized for (``workers``; an elastic run's
                       ``max_workers``). No executor reads it: Slurm's ``tasks`` and SGE's
                       slots say the same to their schedulers.
    ``gpus_per_node``  the GPUs each node is asked for: ``nodes x gpus_per_node`` GPUs in all.
                       No executor reads it: Slurm gets it as ``--gpus-per-node`` (in
                       ``slurm_extra``), SGE as ``-l <sge_gpu_complex>=G`` (in
                       ``sge_resources``) where the run names its site's complex. Change a run's
                       GPUs in the config, not with ``--set-resources``.
    ``mem_mb``         the whole job's memory (the local executor schedules on it).
    ``mem_mb_per_cpu`` Slurm's ``--mem-per-cpu``, chosen before ``mem_mb`` (``--mem`` is *per
                       node*, so a multi-node job would get ``nodes`` times the memory asked
                       for); SGE's ``h_vmem`` per slot (lifted again by ``sge_resources``).
    ``runtime``        minutes: Slurm ``-t``, SGE ``-l h_rt=``.

A run's ``priority`` and ``qos`` are scheduler settings too (Slurm ``--nice``/``--qos``, SGE
``-p``); locally the priority orders the train jobs through the rule's ``priority:``.

The runs are the config's, validated (``clusterbench.config.validate``): nothing is checked
again here. A key a run leaves out takes the schema's default (:func:`resolved`: for callers
that build a run by hand, such as tests).

Imported by the Snakefile at parse time: nothing heavy (no torch, no horovod).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from clusterbench.config import allocated_workers, load_schema
from clusterbench.launch.schedulers import SCHEDULERS

#: The scheduler-neutral keys (:func:`generic_resources`).
GENERIC_KEYS = ("nodes", "ranks", "gpus_per_node", "mem_mb", "mem_mb_per_cpu", "runtime")

#: Every key :func:`train_resources` may return (a rule can list them all with ``.get``:
#: Snakemake drops resources whose value is ``None``): the generic ones, then each scheduler's.
TRAIN_RESOURCE_KEYS = tuple(
    dict.fromkeys(
        (*GENERIC_KEYS, *(key for cls in SCHEDULERS.values() for key in cls.resource_keys))
    )
)


@functools.cache
def run_defaults() -> dict[str, Any]:
    """Every run setting's default, from the config schema (``run_settings``)."""
    properties = load_schema()["$defs"]["run_settings"]["properties"]
    return {key: spec["default"] for key, spec in properties.items() if "default" in spec}


def resolved(run: Mapping[str, Any]) -> dict[str, Any]:
    """``run`` with the schema's default for every key it leaves out."""
    return {**run_defaults(), **run}


def generic_resources(run: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduler-neutral resources of a resolved run (see the module's docstring); an
    elastic run's job is sized for its ``max_workers``, the most ranks it may grow to."""
    ranks = allocated_workers(run)
    return {
        "nodes": run["nodes"],
        "ranks": ranks,
        "gpus_per_node": run["gpus_per_node"],
        "mem_mb": run["mem_mb"],
        "mem_mb_per_cpu": math.ceil(run["mem_mb"] / (ranks * run["cpus_per_worker"])),
        "runtime": run["runtime"],
    }


def train_resources(run: Mapping[str, Any]) -> dict[str, Any]:
    """The resources of one training run (``workers`` Horovod ranks on ``nodes`` nodes): the
    generic ones and every scheduler's part; only the keys that apply (a subset of
    :data:`TRAIN_RESOURCE_KEYS`)."""
    run = resolved(run)
    generic = generic_resources(run)
    resources = dict(generic)
    for scheduler in SCHEDULERS.values():
        resources.update(scheduler.train_resources(run, generic))
    return resources
