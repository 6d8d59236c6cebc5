"""Slurm: everything clusterbench knows about it, from submitting a job to starting its ranks.

- :class:`SlurmScheduler`: one single-task step per rank inside the job's own allocation
  (``srun --jobid=<id> --nodes=1 --ntasks=1 --nodelist=<node> --exact ...``), found through
  ``scontrol show job -d <id>`` since Snakemake's jobstep executor strips every other
  ``SLURM_*`` variable; Slurm's text is read by the pure parsers of :mod:`._slurm_parsing`.
- The train rule's Slurm resources (:meth:`SlurmScheduler.train_resources`), what a job with them
  asks Slurm for (:meth:`SlurmScheduler.job_request`), and the pre-flight check of each training
  job against the partitions ``sinfo`` reports (:meth:`SlurmScheduler.unavailable`, with
  :mod:`._slurm_partitions`).

The resource and pre-flight parts run when the Snakefile is parsed or its job graph built: this
module imports only the standard library.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterbench.core.preemption import WARNING_SIGNAL
from clusterbench.launch.schedulers._base import (
    SIGNAL_TIMEOUT_S,
    Allocation,
    Host,
    JobRequest,
    LaunchError,
    PreflightContext,
    Scheduler,
    WorkerQueue,
    require_tools,
    resolve,
    run_tool,
)
from clusterbench.launch.schedulers._slurm_grow import SlurmWorkerQueue, job_nice, worker_spec
from clusterbench.launch.schedulers._slurm_parsing import (
    expand_hostlist,
    expand_ranges,
    parse_cluster_name,
    parse_scontrol_job,
    parse_scontrol_nodes,
    running_steps,
    slurm_job_id,
)
from clusterbench.launch.schedulers._slurm_partitions import (
    SINFO_FORMAT,
    SLURM_RESOURCE_KEYS,
    Partition,
    parse_sinfo,
    sinfo,
    slurm_option,
    slurm_problems,
)

log = logging.getLogger("clusterbench.launch")


# ------------------------------------------------------------------------------------------
# asking Slurm


def slurm_steps(
    job_id: str | None, name: str | None = None, name_prefix: str | None = None
) -> list[str]:
    """Running steps of the job (not batch/extern), optionally only those with that name."""
    try:
        out = run_tool(["squeue", "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %j"])
    except LaunchError as exc:
        log.warning("could not list the steps of job %s: %s", job_id, exc)
        return []
    return running_steps(out, job_id, name=name, name_prefix=name_prefix)


def cancel_slurm_steps(job_id: str | None, tag: str) -> None:
    """Kill any step of this launch still known to Slurm (a rank whose srun was killed)."""
    steps = slurm_steps(job_id, name_prefix=f"{tag}.")
    if steps:
        log.warning("cancelling leftover step(s) %s", " ".join(steps))
        subprocess.run(["scancel", "--signal=KILL", *steps], check=False, timeout=SIGNAL_TIMEOUT_S)


def node_addresses(names: Sequence[str]) -> dict[str, str | None]:
    """Each node's address (``NodeAddr`` of ``scontrol show node``), resolved (None:
    unresolved)."""
    try:
        node_addr = parse_scontrol_nodes(run_tool(["scontrol", "show", "node", ",".join(names)]))
    except LaunchError as exc:
        log.warning("could not read node addresses (%s); resolving node names instead", exc)
        node_addr = {}
    return {name: resolve(node_addr.get(name, name)) for name in names}


def _job_id_or_error(env: Mapping[str, str]) -> str:
    job_id = slurm_job_id(env)
    if not job_id:
        raise LaunchError(
            "the slurm scheduler needs SLURM_JOB_ID (or SLURM_JOBID) in the environment"
        )
    return job_id


class SlurmScheduler(Scheduler):
    """One single-task step per rank inside the job's allocation.

    Slurm 22.05 gives a step every CPU of its nodes unless ``--exact``; with ``--exact
    --cpus-per-task`` each step gets its own share, and concurrent steps on a node are bound to
    *different* CPUs. They must not wait for each other on memory or GRES either: each asks for
    its share of the node's memory (``--mem``) and for one GPU (``--gres=gpu:1``, Slurm then
    sets ``CUDA_VISIBLE_DEVICES``) or no GRES at all. ``--overlap`` would also stop steps from
    waiting, but it binds every overlapping step to the same first CPUs of the node, so it is
    used only when other steps already run in the job (this launcher inside a step, say), which
    the ranks could otherwise wait for forever.

    The environment is passed on without the launcher's own ``SLURM_*`` variables (a batch
    step's values would override srun's options), so srun behaves the same under sbatch and
    under Snakemake's jobstep executor, which strips them.

    srun answers SIGTERM by killing its step at once (SIGKILL), so ``signal_rank`` signals the
    step's task with ``scancel --signal`` (the task is the rank itself: ``bash -c`` of a single
    command execs it).
    """

    name = "slurm"
    detection_priority = 20
    how = "srun steps"
    remote = True
    cluster = True
    can_grow = True
    resource_keys = ("mpi", "tasks", "cpus_per_task", "slurm_extra", "qos")

    def __init__(self) -> None:
        super().__init__()
        self.overlap = False
        self.start_env = {
            k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"
        }
        self.hosts: dict[str, Host] = {}
        # worker jobs (worker_queue): whether they have a GPU, their partition
        self.grow_gpus, self.grow_partition = False, None

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return slurm_job_id(env) is not None

    def allocation(self, env: Mapping[str, str]) -> Allocation:
        """The job's nodes and slots from ``scontrol show job -d``."""
        job_id = _job_id_or_error(env)
        require_tools("slurm", "scontrol", "srun")
        self.job_env = env
        alloc = parse_scontrol_job(run_tool(["scontrol", "show", "job", "-d", job_id]))
        self.alloc, self.hosts = alloc, {h.name: h for h in alloc.hosts}
        return alloc

    def addresses(self, alloc: Allocation) -> dict[str, str | None]:
        """Each node's address (``NodeAddr`` of ``scontrol show node``), resolved."""
        return node_addresses([h.name for h in alloc.hosts])

    def allocated_hosts(self, env: Mapping[str, str]) -> dict[str, int]:
        """The job's nodes and slots now (``scontrol show job -d``)."""
        job_id = _job_id_or_error(env)
        return parse_scontrol_job(run_tool(["scontrol", "show", "job", "-d", job_id])).host_slots()

    def site(self) -> str:
        """Slurm's ``ClusterName`` (``scontrol show config``)."""
        try:
            name = parse_cluster_name(run_tool(["scontrol", "show", "config"]))
        except LaunchError:
            name = None
        return name or super().site()

    def bind(self, alloc: Allocation, np: int, tag: str, local_hosts: set[str]) -> None:
        super().bind(alloc, np, tag, local_hosts)
        self.hosts = {h.name: h for h in alloc.hosts}
        steps = slurm_steps(alloc.job_id)
        if steps:
            self.overlap = True
            log.warning(
                "steps %s already run in job %s: the ranks' steps use --overlap so they cannot "
                "wait for them (they may then share CPUs)",
                " ".join(steps),
                alloc.job_id,
            )

    def rank_device(
        self, host: Host, local_rank: int, local_size: int, inherited: Sequence[str] | None
    ) -> str | None:
        device = super().rank_device(host, local_rank, local_size, inherited)  # enough GPUs?
        # A step with --gres=gpu:1 gets its GPU (and CUDA_VISIBLE_DEVICES) from Slurm.
        return None if host.gpus and not self.overlap else device

    def gpu_note(self) -> str | None:
        if self.alloc is not None and not self.overlap and any(h.gpus for h in self.alloc.hosts):
            return "each rank's step gets one GPU from Slurm (--gres=gpu:1, CUDA_VISIBLE_DEVICES)"
        return None

    def step_name(self, slot_info: Any) -> str:
        return f"{self.tag}.{slot_info.rank}"

    def job_of_slot(self, slot_info: Any) -> str | None:
        """The job a slot's rank runs in: a worker job's, else the launcher's own."""
        worker = self.worker_job(slot_info.hostname)
        if worker is not None:
            return worker.job
        return self.alloc.job_id if self.alloc else None

    def shell_command(self, command: str, slot_info: Any) -> str:
        assert self.alloc is not None, "bind() first"
        srun = [
            "srun",
            f"--jobid={self.job_of_slot(slot_info)}",
            f"--job-name={self.step_name(slot_info)}",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={self.node_of(slot_info.hostname)}",
            f"--cpus-per-task={self.alloc.cpus_per_task}",
            "--exact",
        ]
        worker = self.worker_job(slot_info.hostname)
        if worker is not None:  # the worker job's one task: its CPUs, memory and GPU
            srun.append("--gres=gpu:1" if self.grow_gpus else "--gres=none")
        elif self.overlap:
            srun.append("--overlap")
        else:
            host = self.hosts[slot_info.hostname]
            if host.mem_mb:
                srun.append(f"--mem={max(1, host.mem_mb // slot_info.local_size)}M")
            srun.append("--gres=gpu:1" if host.gpus else "--gres=none")
        srun += ["--input=none", "--export=ALL", f"--chdir={self.cwd}", "--quiet"]
        return shlex.join([*srun, "bash", "-c", command])

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        job_id = self.job_of_slot(slot_info)
        steps = slurm_steps(job_id, name=self.step_name(slot_info))
        if steps:
            cmd = ["scancel", f"--signal={sig.name[3:]}", *steps]
            subprocess.run(cmd, check=False, capture_output=True, timeout=SIGNAL_TIMEOUT_S)
        return bool(steps)

    def cleanup(self) -> None:
        cancel_slurm_steps(self.alloc.job_id if self.alloc else None, self.tag)

    # growing through worker jobs (clusterbench.launch.grow, ._slurm_grow)

    def worker_queue(self, resources: Mapping[str, str], log_dir: Path | None) -> WorkerQueue:
        """Worker jobs sized like one worker of this job (``scontrol show job -d``), in
        ``grow_resources``' partition and QOS where it names them."""
        assert self.alloc is not None, "allocation() first"
        job_text = run_tool(["scontrol", "show", "job", "-d", str(self.alloc.job_id)])
        spec = worker_spec(job_text, resources, time.time())
        self.grow_gpus, self.grow_partition = spec.gpus > 0, spec.partition
        log.info(
            "grow: worker jobs of %d CPU(s)%s%s in partition %s%s, nice %d, time limit %s",
            spec.cpus_per_task,
            f", {spec.mem_mb} MB" if spec.mem_mb else "",
            ", 1 GPU" if spec.gpus else "",
            spec.partition or "(default)",
            f", QOS {spec.qos}" if spec.qos else "",
            spec.nice,
            f"{spec.minutes} min" if spec.minutes else "none",
        )
        return SlurmWorkerQueue(spec, self.start_env or os.environ, self.cwd, log_dir)

    def grow_addresses(self, resources: Mapping[str, str]) -> dict[str, str | None]:
        """The nodes of the partition worker jobs go to (``sinfo``; after
        :meth:`worker_queue`) and their addresses."""
        partition = resources.get("slurm_partition") or self.grow_partition
        cmd = ["sinfo", "--noheader", "--format=%N"]
        if partition:
            cmd.append(f"--partition={partition}")
        try:
            listed = run_tool(cmd)
        except LaunchError as exc:
            log.warning("could not list the nodes worker jobs may run on: %s", exc)
            return {}
        names = [n for line in listed.split() for n in expand_hostlist(line)]
        return node_addresses(names) if names else {}

    @classmethod
    def job_priority(cls, job: str) -> int | None:
        """The priority of ``job`` from its ``Nice`` (``scontrol show job``): ``-Nice``."""
        nice = job_nice(job)
        return None if nice is None else -nice

    @classmethod
    def change_priority(cls, job: str, priority: int) -> bool:
        """``scontrol update JobId=<job> Nice=<-priority>`` (a negative nice, a priority above
        0, needs an operator; Slurm reorders the pending jobs at its next pass)."""
        try:
            run_tool(["scontrol", "update", f"JobId={job}", f"Nice={-priority}"])
        except LaunchError as exc:
            if re.search(r"already finished|Invalid job id", str(exc), re.I):
                return False
            raise
        return True

    # the workflow's side (snakemake-executor-plugin-slurm 2.8.0 + -slurm-jobstep 0.6.1)

    @classmethod
    def train_resources(cls, run: Mapping[str, Any], generic: Mapping[str, Any]) -> dict[str, Any]:
        """The Slurm part of a training job's resources (``sbatch``), for ``generic["ranks"]``
        ranks on ``generic["nodes"]`` nodes:

        ``mpi``            present => the jobstep runs the rule's shell directly, not inside
                           ``srun -n1`` (which would hold every CPU and block the launcher's
                           steps). The plugin rejects ``mpi`` with a single task, so one worker
                           is no MPI job.
        ``tasks``          ``--ntasks``. (Combined with ``tasks_per_node`` the plugin errors, and
                           it needs ``tasks_per_node`` > 1: the per-node geometry therefore goes
                           into ``slurm_extra`` as ``--ntasks-per-node``.)
        ``cpus_per_task``  ``--cpus-per-task`` (one rank's CPUs; overrides the rule's
                           ``threads``).
        ``slurm_extra``    ``--gpus-per-node=G``, ``--ntasks-per-node=K``, ``--nice=-P`` for a
                           run's ``priority`` P (Slurm's nice is the opposite way round: a higher
                           priority is a lower nice; a negative nice needs an operator), and
                           ``--signal=B:USR1@N`` for a run's ``warning_seconds`` N: Slurm sends
                           the preemption warning to the batch script's process, which the Slurm
                           profile's precommand makes :mod:`clusterbench.launch.slurm_batch`,
                           which passes it on to the job (the launcher passes it on to every
                           rank). GPUs are *not* asked for with ``gpu=`` (that is ``--gpus`` per
                           job, and it makes the plugin add ``--ntasks-per-gpu=<tasks>``);
                           ``slurm_extra`` may not repeat flags the plugin sets (``--gres``,
                           ``--gpus``, ``--ntasks``, ``--mem``, ``--qos`` ...).
        ``qos``            ``--qos`` (a run's ``qos``).

        Left to the profile: ``slurm_partition``, ``slurm_account``, ``constraint``.
        """
        workers, nodes = generic["ranks"], generic["nodes"]
        resources: dict[str, Any] = {"cpus_per_task": run["cpus_per_worker"]}
        extra = []
        if generic["gpus_per_node"]:
            extra.append(f"--gpus-per-node={generic['gpus_per_node']}")
        if workers > 1:
            resources.update(mpi="srun", tasks=workers)
            if nodes > 1 and workers % nodes == 0:
                extra.append(f"--ntasks-per-node={workers // nodes}")
        if run["priority"]:
            extra.append(f"--nice={-run['priority']}")
        if run["warning_seconds"]:
            warning = WARNING_SIGNAL.name.removeprefix("SIG")
            extra.append(f"--signal=B:{warning}@{run['warning_seconds']}")
        if extra:
            resources["slurm_extra"] = " ".join(extra)
        if run["qos"]:
            resources["qos"] = run["qos"]
        return resources

    @classmethod
    def unavailable(cls, context: PreflightContext) -> dict[str, str]:
        """Runs whose train job is larger than its partition (Slurm would accept it and leave it
        pending forever), with the resources the job would be submitted with; one ``sinfo``."""
        partitions = parse_sinfo(sinfo())
        reasons = {}
        for name, run in context.runs.items():
            resources = context.resources(name, SLURM_RESOURCE_KEYS)
            problems = slurm_problems(name, resources, partitions)
            if run.get("grow") == "jobs":
                problems += worker_job_problems(name, run, resources, partitions)
            if problems:
                reasons[name] = "; ".join(problems)
        return reasons

    @classmethod
    def job_request(cls, resources: Mapping[str, Any], threads: int = 1) -> JobRequest:
        """What ``sbatch`` is asked for: ``--nodes``, ``--ntasks`` (``tasks``, else 1) and
        ``--cpus-per-task`` (``cpus_per_task``, else the job's threads) per task."""
        ranks = int(resources.get("tasks") or 1)
        return JobRequest(
            nodes=int(resources.get("nodes") or 1),
            ranks=ranks,
            cpus=ranks * int(resources.get("cpus_per_task") or threads or 1),
        )


def worker_job_problems(
    name: str,
    run: Mapping[str, Any],
    resources: Mapping[str, Any],
    partitions: Mapping[str, Partition],
) -> list[str]:
    """Why the worker jobs of ``run`` (``grow: jobs``: one task of the train job's CPUs per
    task, a GPU if it has GPUs, in ``grow_resources``' partition, else the train job's) could
    never start."""
    partition = (run.get("grow_resources") or {}).get("slurm_partition")
    worker = {
        "slurm_partition": partition or resources.get("slurm_partition"),
        "nodes": 1,
        "tasks": 1,
        "cpus_per_task": resources.get("cpus_per_task"),
        "slurm_extra": "--gpus-per-node=1" if run.get("gpus_per_node") else "",
    }
    return [
        f"its worker jobs (grow: jobs{', grow_resources.slurm_partition' if partition else ''})"
        f": {problem}"
        for problem in slurm_problems(name, worker, partitions)
    ]


#: The scheduler of this module (the registry's plugin).
SCHEDULER = SlurmScheduler

__all__ = [
    "SCHEDULER",
    "SINFO_FORMAT",
    "SLURM_RESOURCE_KEYS",
    "Partition",
    "SlurmScheduler",
    "cancel_slurm_steps",
    "expand_hostlist",
    "expand_ranges",
    "parse_cluster_name",
    "parse_scontrol_job",
    "parse_scontrol_nodes",
    "parse_sinfo",
    "running_steps",
    "sinfo",
    "slurm_job_id",
    "slurm_option",
    "slurm_problems",
    "slurm_steps",
]
