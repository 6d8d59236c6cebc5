"""Slurm's pre-flight: refuse a training job larger than its partition.

Slurm accepts a job that asks for more than its partition has (unless the site sets
``EnforcePartLimits``) and leaves it pending forever with reason ``PartitionConfig``. Before the
first job is submitted, the workflow asks the executor's scheduler
(:meth:`~clusterbench.launch.schedulers.slurm.SlurmScheduler.unavailable`, from
rules/common.smk while the job graph is built) to compare each training job with the
partition's nodes, CPUs and GPUs as ``sinfo`` reports them (:func:`parse_sinfo`,
:func:`slurm_problems`); a run it refuses is skipped (or stops the workflow) with a message
naming the run and both sizes. A helper of the Slurm scheduler (:mod:`.slurm`).
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusterbench.launch.schedulers._base import PreflightError

#: ``sinfo`` format: partition (``*`` marks the default), node count, CPUs per node, GRES.
SINFO_FORMAT = "%P|%D|%c|%G"

#: The rule resources :func:`slurm_problems` reads.
SLURM_RESOURCE_KEYS = ("slurm_partition", "nodes", "tasks", "cpus_per_task", "slurm_extra")


@dataclass
class Partition:
    name: str
    default: bool = False
    nodes: int = 0
    cpus: int = 0
    max_cpus_per_node: int = 0
    max_gpus_per_node: int = 0


def _gpus(gres: str) -> int:
    """GPUs per node in a GRES string such as ``gpu:a100:4(S:0-1),shard:8`` or ``(null)``."""
    total = 0
    for item in gres.split(","):
        fields = re.sub(r"\(.*?\)", "", item).split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Partitions from ``sinfo -h -o '%P|%D|%c|%G'`` (one line per node group of a partition)."""
    parts: dict[str, Partition] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, nodes, cpus, gres = (field.strip() for field in line.split("|"))
        default = name.endswith("*")
        name = name.rstrip("*")
        part = parts.setdefault(name, Partition(name))
        part.default |= default
        count, per_node = int(nodes), int(cpus.rstrip("+"))
        part.nodes += count
        part.cpus += count * per_node
        part.max_cpus_per_node = max(part.max_cpus_per_node, per_node)
        part.max_gpus_per_node = max(part.max_gpus_per_node, _gpus(gres))
    return parts


def slurm_option(extra: str, name: str) -> int | None:
    """The integer value of ``--name=N`` / ``--name N`` in an sbatch option string."""
    args = shlex.split(extra or "")
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            return int(arg.split("=", 1)[1])
        if arg == f"--{name}" and i + 1 < len(args):
            return int(args[i + 1])
    return None


def slurm_problems(
    run: str, resources: Mapping[str, Any], partitions: Mapping[str, Partition]
) -> list[str]:
    """Why the Slurm job of ``run`` with these rule ``resources`` could never start, if it can't."""
    wanted = resources.get("slurm_partition") or next(
        (p.name for p in partitions.values() if p.default), None
    )
    if wanted is None or wanted not in partitions:
        known = ", ".join(sorted(partitions)) or "none"
        return [f"run {run!r}: partition {wanted!r} does not exist (partitions: {known})"]
    part = partitions[wanted]
    nodes = int(resources.get("nodes") or 1)
    tasks = int(resources.get("tasks") or 1)
    cpus = int(resources.get("cpus_per_task") or 1)
    extra = str(resources.get("slurm_extra") or "")
    per_node = slurm_option(extra, "ntasks-per-node") or math.ceil(tasks / nodes)
    gpus = slurm_option(extra, "gpus-per-node") or 0
    where = f"partition {part.name!r} ({part.nodes} node(s), {part.cpus} CPUs"
    where += f", at most {part.max_cpus_per_node} per node"
    where += f", {part.max_gpus_per_node} GPU(s) per node)"
    problems = []
    if nodes > part.nodes:
        problems.append(f"{nodes} nodes")
    if tasks * cpus > part.cpus:
        problems.append(f"{tasks} workers x {cpus} CPU(s) = {tasks * cpus} CPUs")
    elif per_node * cpus > part.max_cpus_per_node:
        problems.append(f"{per_node} workers x {cpus} CPU(s) on one node")
    if gpus > part.max_gpus_per_node:
        problems.append(f"{gpus} GPU(s) per node")
    if not problems:
        return []
    return [
        f"run {run!r} asks for {' and '.join(problems)}, more than {where} can ever give: "
        "it would wait in the queue forever. Lower workers/nodes/cpus_per_worker/gpus_per_node "
        "or choose another partition (slurm_partition)."
    ]


def sinfo() -> str:
    """``sinfo -h -o SINFO_FORMAT``: the partitions as this host's Slurm reports them."""
    try:
        return subprocess.run(
            ["sinfo", "-h", "-o", SINFO_FORMAT],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise PreflightError(f"cannot ask Slurm for its partitions (sinfo): {exc}") from exc
