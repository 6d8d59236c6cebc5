"""The comm stage's jobs, from the config's runs: one per environment and backend.

An *environment* is where a run trains: its ranks (``workers``), the nodes they spread over
and the GPUs per node (which make its device, the CPU for 0). Every multi-worker run's
environment and backend is measured once, however many runs share it (a sweep of 20 runs on
2 workers is one job); a 1-worker environment exchanges nothing and has no job. Runs that ask
for a network interface (``iface``) are measured over it, a job per interface. Each job has a
readable name, its wildcard and folder (``results/comm/<name>/``):
``<workers>w-<nodes>n-<cpu|<G>gpu>-<backend>[-<iface>]``, e.g. ``2w-1n-cpu-horovod``,
``8w-2n-4gpu-ddp-ib0``.

A job is sized and submitted as a train job of its size (:func:`job_run` for
:func:`clusterbench.pipeline.resources.train_resources`): the same ranks, nodes, GPUs and scheduler
settings (``cpus_per_worker``, ``qos``, ...) as the first run of its environment and backend,
with the memory the largest messages need and no preemption warning (a comm job has no
checkpoint to write).

Imported by the Snakefile at parse time: the standard library only (and the config module).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clusterbench.config import comm_slice

#: A comm rank's own memory beside its buffers (torch, the backend, its fusion buffer), MB.
RANK_BASE_MB = 700


@dataclass(frozen=True)
class CommJob:
    """One comm job: the environment and backend it measures, and the runs that use them (in
    the config's order; the first sizes the job)."""

    name: str
    workers: int
    nodes: int
    gpus_per_node: int
    backend: str
    runs: tuple[str, ...]
    #: The interface its runs talk over (their ``iface``; None: the launcher's choice) and the
    #: log level of its first run.
    iface: str | None = None
    log_level: str | None = None

    @property
    def device(self) -> str:
        return "cuda" if self.gpus_per_node else "cpu"

    @property
    def environment(self) -> tuple[int, int, int]:
        """(workers, nodes, gpus_per_node): what the job's ranks are placed on."""
        return (self.workers, self.nodes, self.gpus_per_node)


def job_name(
    workers: int, nodes: int, gpus_per_node: int, backend: str, iface: str | None = None
) -> str:
    """The readable name of the job of an environment and backend (the module docstring), and
    of the interface its runs ask for (``iface``; none: nothing added)."""
    device = f"{gpus_per_node}gpu" if gpus_per_node else "cpu"
    return f"{workers}w-{nodes}n-{device}-{backend}" + (f"-{iface}" if iface else "")


def jobs(runs: Iterable[Mapping[str, Any]]) -> dict[str, CommJob]:
    """Name -> :class:`CommJob` of every multi-worker environment and backend of the resolved
    ``runs``, each once, in the order of their first run."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        if run["workers"] < 2:
            continue
        where = (run["workers"], run["nodes"], run["gpus_per_node"], run["backend"])
        found.setdefault(job_name(*where, run.get("iface")), []).append(run)
    return {
        name: CommJob(
            name,
            members[0]["workers"],
            members[0]["nodes"],
            members[0]["gpus_per_node"],
            members[0]["backend"],
            tuple(run["name"] for run in members),
            members[0].get("iface"),
            members[0].get("log_level"),
        )
        for name, members in found.items()
    }


def config_jobs(config: Mapping[str, Any]) -> dict[str, CommJob]:
    """The comm jobs of a resolved config: none when ``comm.enabled`` is false."""
    return jobs(config["runs"]) if config["comm"]["enabled"] else {}


def jobs_of_runs(all_jobs: Mapping[str, CommJob], names: Iterable[str]) -> list[str]:
    """The jobs measuring for at least one of the runs ``names`` (the runs trained here), in
    job order."""
    wanted = set(names)
    return [name for name, job in all_jobs.items() if wanted & set(job.runs)]


def job_params(job: CommJob, comm: Mapping[str, Any]) -> dict[str, Any]:
    """The comm job's ``--params`` (its rerun trigger): its environment and backend and the
    ``comm`` settings that change what it measures (:func:`clusterbench.config.comm_slice`)."""
    return {
        "name": job.name,
        "workers": job.workers,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "backend": job.backend,
        **({"iface": job.iface} if job.iface else {}),
        **comm_slice(comm),
    }


def memory_mb(workers: int, max_bytes: int) -> int:
    """The memory a job's ranks need at most, MB: each holds an allgather's input and output
    (up to twice the largest message) beside :data:`RANK_BASE_MB`."""
    return workers * (RANK_BASE_MB + math.ceil(2 * max_bytes / 2**20))


def threads(job: CommJob, runs: Mapping[str, Mapping[str, Any]]) -> int:
    """The job's threads (the local executor's cores), as a train job's: its ranks times the
    ``cpus_per_worker`` of its first run (``runs``: the config's runs by name)."""
    return job.workers * runs[job.runs[0]]["cpus_per_worker"]


def job_run(job: CommJob, first: Mapping[str, Any], comm: Mapping[str, Any]) -> dict[str, Any]:
    """The run a comm job is sized as, for the train jobs' resources: ``first``, the first run
    of its environment and backend (its scheduler settings: ``cpus_per_worker``, ``qos``,
    ``priority``, ``runtime``, ...), placed as the job, not elastic, with at least the memory
    of :func:`memory_mb` and no preemption warning."""
    return {
        **first,
        "name": f"comm {job.name}",
        "workers": job.workers,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "min_workers": None,
        "max_workers": None,
        "mem_mb": max(first["mem_mb"], memory_mb(job.workers, comm["max_bytes"])),
        "warning_seconds": 0,
    }
