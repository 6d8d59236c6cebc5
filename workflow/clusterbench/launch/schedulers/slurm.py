"""Slurm: everything clusterbench knows about it, from submitting a job to starting its ranks.

- Reading the job (pure parsers, unit-tested on real ``scontrol``/``squeue`` output): Slurm
  hostlists, ``scontrol show job -d`` (nodes, slots, CPUs, memory, GPU indices), ``scontrol show
  node`` (addresses), ``squeue --steps``.
- :class:`SlurmScheduler`: one single-task step per rank inside the job's own allocation
  (``srun --jobid=<id> --nodes=1 --ntasks=1 --nodelist=<node> --exact ...``), found through
  ``scontrol show job -d <id>`` since Snakemake's jobstep executor strips every other
  ``SLURM_*`` variable.
- The train rule's Slurm resources (:func:`train_resources`), what a job with them asks Slurm
  for (:meth:`SlurmScheduler.job_request`), and the pre-flight check of each training job
  against the partitions ``sinfo`` reports (:meth:`SlurmScheduler.unavailable`,
  :func:`parse_sinfo`, :func:`slurm_problems`).

The resource and pre-flight parts run when the Snakefile is parsed or its job graph built: this
module imports only the standard library (and :mod:`clusterbench.launch.placement`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterbench.launch.placement import spread_ranks
from clusterbench.launch.schedulers.base import (
    SIGNAL_TIMEOUT_S,
    Allocation,
    AllocationError,
    Host,
    JobRequest,
    LaunchError,
    PreflightContext,
    PreflightError,
    Scheduler,
    require_tools,
    resolve,
    run_tool,
)
from clusterbench.preemption import WARNING_SIGNAL

log = logging.getLogger("clusterbench.launch")


def slurm_job_id(env: Mapping[str, str]) -> str | None:
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None


# ------------------------------------------------------------------------------------------
# hostlists


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist such as ``node[01-03,07],gpu-[1-2]-x`` into host names.

    Commas separate hosts except inside brackets; a host may hold several bracket groups
    (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2); ranges keep the zero padding of their lower
    bound (``[08-10]`` -> 08 09 10).
    """
    hosts: list[str] = []
    for item in _split_outside_brackets(expr.strip()):
        if item:
            hosts.extend(_expand_one(item))
    return hosts


def _split_outside_brackets(expr: str) -> list[str]:
    items, depth, current = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise AllocationError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise AllocationError(f"unbalanced '[' in hostlist {expr!r}")
    items.append("".join(current).strip())
    return items


def _expand_one(item: str) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", item)
    choices: list[list[str]] = []
    for part in parts:
        if part.startswith("["):
            choices.append(_expand_ranges(part[1:-1], item))
        elif part:
            choices.append([part])
    return ["".join(p) for p in itertools.product(*choices)]


def _expand_ranges(spec: str, context: str) -> list[str]:
    out: list[str] = []
    for piece in spec.split(","):
        piece = piece.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", piece)
        if not m:
            raise AllocationError(f"bad range {piece!r} in hostlist {context!r}")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise AllocationError(f"descending range {piece!r} in hostlist {context!r}")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def expand_ranges(spec: str) -> list[int]:
    """``0-3,6`` -> [0, 1, 2, 3, 6] (CPU_IDs and GRES IDX lists)."""
    return [int(x) for x in _expand_ranges(spec, spec)] if spec.strip() else []


# ------------------------------------------------------------------------------------------
# scontrol / squeue output


def _fields(line: str) -> dict[str, str]:
    """``Key=value`` tokens of one line of scontrol output (values without spaces)."""
    return dict(m.groups() for m in re.finditer(r"(?:^|\s)([\w/:]+)=(\S*)", line))


_GPU_IDX = re.compile(r"gpu[^,(]*\(IDX:([^)]*)\)")


def parse_scontrol_job(text: str) -> Allocation:
    """Slots per node from ``scontrol show job -d <id>``.

    Each node takes ``allocated CPUs // CPUs/Task`` ranks (``NtasksPerN`` caps it when set).
    The job's ``NumTasks`` caps the total. Per-node GPU indices come from ``GRES=gpu...(IDX:..)``.
    """
    records = [r for r in re.split(r"\n\s*\n", text.strip()) if r.strip()]
    if not records or "JobId=" not in records[0]:
        raise AllocationError("no job record in `scontrol show job -d` output")
    if len(records) > 1 or text.count("JobId=") > 1:
        raise AllocationError("several job records (heterogeneous job?): not supported")
    top: dict[str, str] = {}
    node_lines: list[dict[str, str]] = []
    for line in records[0].splitlines():
        if line.strip().startswith("Nodes="):
            node_lines.append(_fields(line))
        else:
            for key, value in _fields(line).items():
                top.setdefault(key, value)

    job_id = top.get("JobId")
    state = top.get("JobState", "")
    if state and state not in ("RUNNING", "COMPLETING"):
        raise AllocationError(f"Slurm job {job_id} is {state}, not RUNNING")
    cpus_per_task = _int(top.get("CPUs/Task")) or 1
    per_node_cap = _int(top.get("NtasksPerN:B:S:C", "").split(":")[0])
    num_tasks = _int(top.get("NumTasks"))
    if not node_lines:
        raise AllocationError(
            f"`scontrol show job -d {job_id}` has no per-node 'Nodes=... CPU_IDs=...' lines"
        )

    hosts: list[Host] = []
    for fields in node_lines:
        cpus = len(expand_ranges(fields.get("CPU_IDs", "")))
        mem = _int(fields.get("Mem"))
        gres = fields.get("GRES", "") + "," + fields.get("GRES_IDX", "")
        gpu_idx = [i for m in _GPU_IDX.finditer(gres) for i in expand_ranges(m.group(1))]
        slots = cpus // cpus_per_task
        if per_node_cap:
            slots = min(slots, per_node_cap)
        for name in expand_hostlist(fields["Nodes"]):
            gpus = tuple(str(i) for i in gpu_idx) if gpu_idx else None
            hosts.append(Host(name=name, slots=slots, cpus=cpus, mem_mb=mem, gpus=gpus))

    if num_tasks:
        hosts = _cap_total(hosts, num_tasks)
    return Allocation(
        scheduler="slurm",
        hosts=tuple(hosts),
        job_id=job_id,
        cpus_per_task=cpus_per_task,
    )


def _cap_total(hosts: list[Host], total: int) -> list[Host]:
    """Keep at most ``total`` slots, spread like Slurm's block distribution (see spread_ranks)."""
    capacities = [(h.name, h.slots) for h in hosts]
    counts = dict(spread_ranks(capacities, min(total, sum(c for _, c in capacities))))
    return [dataclasses.replace(h, slots=counts.get(h.name, 0)) for h in hosts]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_scontrol_nodes(text: str) -> dict[str, str]:
    """``NodeName -> NodeAddr`` from ``scontrol show node ...`` output."""
    addrs: dict[str, str] = {}
    for record in re.split(r"\n\s*\n", text.strip()):
        fields = _fields(" ".join(record.split()))
        if "NodeName" in fields:
            addrs[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return addrs


def running_steps(
    squeue_text: str,
    job_id: str | None,
    name: str | None = None,
    name_prefix: str | None = None,
) -> list[str]:
    """Step ids in ``squeue --steps --format='%i %j'`` output for ``job_id``, leaving out the
    batch and extern steps; only those called ``name`` / named ``name_prefix...`` when given."""
    steps = []
    for line in squeue_text.splitlines():
        parts = line.split()
        if not parts or "." not in parts[0]:
            continue
        job, _, step = parts[0].partition(".")
        if job != job_id or step in ("batch", "extern"):
            continue
        step_name = parts[1] if len(parts) > 1 else ""
        if name is not None and step_name != name:
            continue
        if name_prefix is not None and not step_name.startswith(name_prefix):
            continue
        steps.append(parts[0])
    return steps


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


def _job_id_or_error(env: Mapping[str, str]) -> str:
    job_id = slurm_job_id(env)
    if not job_id:
        raise LaunchError(
            "the slurm scheduler needs SLURM_JOB_ID (or SLURM_JOBID) in the environment"
        )
    return job_id


def parse_cluster_name(text: str) -> str | None:
    """``ClusterName`` from ``scontrol show config`` output (None if absent)."""
    m = re.search(r"^\s*ClusterName\s*=\s*(\S+)\s*$", text, re.M)
    return m.group(1) if m else None


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
    how = "srun steps"
    remote = True
    cluster = True

    def __init__(self) -> None:
        super().__init__()
        self.overlap = False
        self.start_env = {
            k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"
        }
        self.hosts: dict[str, Host] = {}

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
        names = ",".join(h.name for h in alloc.hosts)
        try:
            node_addr = parse_scontrol_nodes(run_tool(["scontrol", "show", "node", names]))
        except LaunchError as exc:
            log.warning("could not read node addresses (%s); resolving node names instead", exc)
            node_addr = {}
        return {h.name: resolve(node_addr.get(h.name, h.name)) for h in alloc.hosts}

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

    def shell_command(self, command: str, slot_info: Any) -> str:
        assert self.alloc is not None, "bind() first"
        host = self.hosts[slot_info.hostname]
        srun = [
            "srun",
            f"--jobid={self.alloc.job_id}",
            f"--job-name={self.step_name(slot_info)}",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={slot_info.hostname}",
            f"--cpus-per-task={self.alloc.cpus_per_task}",
            "--exact",
        ]
        if self.overlap:
            srun.append("--overlap")
        else:
            if host.mem_mb:
                srun.append(f"--mem={max(1, host.mem_mb // slot_info.local_size)}M")
            srun.append("--gres=gpu:1" if host.gpus else "--gres=none")
        srun += ["--input=none", "--export=ALL", f"--chdir={self.cwd}", "--quiet"]
        return shlex.join([*srun, "bash", "-c", command])

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        job_id = self.alloc.job_id if self.alloc else None
        steps = slurm_steps(job_id, name=self.step_name(slot_info))
        if steps:
            cmd = ["scancel", f"--signal={sig.name[3:]}", *steps]
            subprocess.run(cmd, check=False, capture_output=True, timeout=SIGNAL_TIMEOUT_S)
        return bool(steps)

    def cleanup(self) -> None:
        cancel_slurm_steps(self.alloc.job_id if self.alloc else None, self.tag)

    # the workflow's side

    @classmethod
    def unavailable(cls, context: PreflightContext) -> dict[str, str]:
        """Runs whose train job is larger than its partition (Slurm would accept it and leave it
        pending forever), with the resources the job would be submitted with; one ``sinfo``."""
        partitions = parse_sinfo(sinfo())
        reasons = {}
        for name in context.runs:
            problems = slurm_problems(
                name, context.resources(name, SLURM_RESOURCE_KEYS), partitions
            )
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


# ------------------------------------------------------------------------------------------
# the train rule's resources (snakemake-executor-plugin-slurm 2.8.0 + -slurm-jobstep 0.6.1)

#: The Slurm keys :func:`train_resources` may return.
TRAIN_RESOURCE_KEYS = ("mpi", "tasks", "cpus_per_task", "slurm_extra", "qos")


def train_resources(
    *,
    workers: int,
    nodes: int,
    gpus_per_node: int,
    cpus_per_worker: int,
    priority: int = 0,
    qos: str | None = None,
    warning_seconds: int = 0,
) -> dict[str, Any]:
    """The Slurm part of a training job's resources (the generic ``nodes``, ``mem_mb``,
    ``mem_mb_per_cpu`` and ``runtime`` come from :func:`clusterbench.resources.train_resources`).

    ``mpi``            present => the jobstep runs the rule's shell directly, not inside
                       ``srun -n1`` (which would hold every CPU and block the launcher's steps).
                       The plugin rejects ``mpi`` with a single task, so one worker is no MPI job.
    ``tasks``          ``--ntasks``. (Combined with ``tasks_per_node`` the plugin errors, and it
                       needs ``tasks_per_node`` > 1: the per-node geometry therefore goes into
                       ``slurm_extra`` as ``--ntasks-per-node``.)
    ``cpus_per_task``  ``--cpus-per-task`` (one rank's CPUs; overrides the rule's ``threads``).
    ``slurm_extra``    ``--gpus-per-node=G``, ``--ntasks-per-node=K``, ``--nice=-P`` for a run's
                       ``priority`` P (Slurm's nice is the opposite way round: a higher priority
                       is a lower nice; a negative nice needs an operator), and
                       ``--signal=B:USR1@N`` for a run's ``warning_seconds`` N: Slurm sends the
                       preemption warning to the batch script's process, which the Slurm
                       profile's precommand makes :mod:`.slurm_batch`, which passes it on to
                       the job (the launcher passes it on to every rank). GPUs are *not* asked
                       for with ``gpu=`` (that is ``--gpus`` per job, and it makes the plugin
                       add ``--ntasks-per-gpu=<tasks>``); ``slurm_extra`` may not repeat flags the
                       plugin sets (``--gres``, ``--gpus``, ``--ntasks``, ``--mem``, ``--qos`` ...).
    ``qos``            ``--qos`` (a run's ``qos``).
    Left to the profile: ``slurm_partition``, ``slurm_account``, ``constraint``.
    """
    resources: dict[str, Any] = {"cpus_per_task": cpus_per_worker}
    extra = []
    if gpus_per_node:
        extra.append(f"--gpus-per-node={gpus_per_node}")
    if workers > 1:
        resources.update(mpi="srun", tasks=workers)
        if nodes > 1 and workers % nodes == 0:
            extra.append(f"--ntasks-per-node={workers // nodes}")
    if priority:
        extra.append(f"--nice={-priority}")
    if warning_seconds:
        extra.append(f"--signal=B:{WARNING_SIGNAL.name.removeprefix('SIG')}@{warning_seconds}")
    if extra:
        resources["slurm_extra"] = " ".join(extra)
    if qos:
        resources["qos"] = qos
    return resources


# ------------------------------------------------------------------------------------------
# pre-flight: refuse a job larger than its partition
#
# Slurm accepts a job that asks for more than its partition has (unless the site sets
# ``EnforcePartLimits``) and leaves it pending forever with reason ``PartitionConfig``. Before
# the first job is submitted, the workflow asks the executor's scheduler
# (:meth:`SlurmScheduler.unavailable`, from rules/common.smk while the job graph is built) to
# compare each training job with the partition's nodes, CPUs and GPUs as ``sinfo`` reports
# them; a run it refuses is skipped (or stops the workflow) with a message naming the run and
# both sizes.

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


def check_slurm(jobs: Iterable[tuple[str, Mapping[str, Any]]], sinfo_text: str | None = None):
    """Raise :class:`PreflightError` if any ``(run, resources)`` could never start on Slurm."""
    partitions = parse_sinfo(sinfo() if sinfo_text is None else sinfo_text)
    problems = [p for run, resources in jobs for p in slurm_problems(run, resources, partitions)]
    if problems:
        raise PreflightError("\n".join(problems))
