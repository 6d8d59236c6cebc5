"""SGE (Son of Grid Engine, UGE): from submitting a job to starting its ranks.

- Reading the job (a pure parser, unit-tested): ``$PE_HOSTFILE``.
- :class:`SgeScheduler`: ``qrsh -inherit -nostdin -V <host> ...`` on the hosts of
  ``$PE_HOSTFILE`` (a parallel environment with ``control_slaves TRUE``); for Horovod elastic,
  the hosts of ``$PE_HOSTFILE`` less those where a rank failed.
- The train rule's SGE resources (:meth:`SgeScheduler.train_resources`), what a job with them
  asks SGE for (:meth:`SgeScheduler.job_request`), and the pre-flight check
  (:meth:`SgeScheduler.unavailable`: the GPU complex a run names exists (``qconf -sc``,
  :func:`parse_complexes`, :func:`complex_problem`), and ``qsub -w v`` of each training job as it
  would be submitted, :func:`verify_command`, :func:`verify_problem`).

The resource and pre-flight parts run when the Snakefile is parsed or its job graph built: this
module imports only the standard library.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clusterbench.core import preemption
from clusterbench.launch.schedulers._base import (
    SIGNAL_TIMEOUT_S,
    TOOL_TIMEOUT_S,
    Allocation,
    AllocationError,
    Host,
    JobRequest,
    LaunchError,
    PreflightContext,
    PreflightError,
    Scheduler,
    WorkerQueue,
    require_tools,
    resolve,
    run_tool,
)
from clusterbench.launch.schedulers._sge_grow import (
    SgeWorkerQueue,
    job_priority,
    parse_qstat_j,  # noqa: F401 - the status reads qstat -j with it (clusterbench.status.sge)
    worker_spec,
)


def parse_pe_hostfile(text: str) -> Allocation:
    """SGE ``$PE_HOSTFILE``: lines ``host slots queue processor-range``.

    A host listed twice (two queues) gets the sum of its slots, in first-seen order.
    """
    slots: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2 or not parts[1].isdigit():
            raise AllocationError(f"PE_HOSTFILE line {lineno} is not 'host slots ...': {line!r}")
        slots[parts[0]] = slots.get(parts[0], 0) + int(parts[1])
    if not slots:
        raise AllocationError("PE_HOSTFILE lists no hosts")
    return Allocation(scheduler="sge", hosts=tuple(Host(h, n) for h, n in slots.items()))


def _read_pe_hostfile(env: Mapping[str, str]) -> Allocation:
    path = env.get("PE_HOSTFILE")
    if not path:
        raise LaunchError("the sge scheduler needs PE_HOSTFILE (submit with `qsub -pe <pe> N`)")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LaunchError(f"cannot read PE_HOSTFILE {path}: {exc}") from exc
    return parse_pe_hostfile(text)


#: What a Grid Engine with resource maps (RSMAP: Univa/Altair Grid Engine, Open Cluster
#: Scheduler) exports with the ids of a map complex granted to the job: ``SGE_HGR_<complex>``.
GRANT_PREFIX = "SGE_HGR_"


def granted_gpus(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The GPU ids SGE granted the job on this host: ``SGE_HGR_<complex>`` (ids separated by
    spaces or commas; ``gpu3`` is GPU 3, a ``GPU-``/``MIG-`` UUID is kept), the one such
    variable or the one whose complex's name has ``gpu`` in it; None where there is none (the
    ranks then share what ``CUDA_VISIBLE_DEVICES`` holds, which a site's prolog or starter may
    set)."""
    grants = {k[len(GRANT_PREFIX) :]: v for k, v in env.items() if k.startswith(GRANT_PREFIX)}
    if len(grants) > 1:
        grants = {k: v for k, v in grants.items() if "gpu" in k.lower()}
    if len(grants) != 1:
        return None
    (value,) = grants.values()
    ids = value.replace(",", " ").split()
    return tuple(i if i.isdigit() or i.startswith(("GPU-", "MIG-")) else _index(i) for i in ids)


def _index(gpu_id: str) -> str:
    """``gpu3`` -> ``3`` (a map's ids named after the device); any other id as it is."""
    digits = len(gpu_id) - len(gpu_id.rstrip("0123456789"))
    return gpu_id[-digits:] if digits else gpu_id


def with_grant(alloc: Allocation, gpus: tuple[str, ...] | None) -> Allocation:
    """``alloc`` with the GPUs granted on this host (the master task's; None: none known) as
    that host's GPU list, which the launcher pins its ranks to (narrowed by an inherited
    ``CUDA_VISIBLE_DEVICES``). This host: the allocation's host of this machine's name, else
    its first (the master queue's)."""
    if gpus is None:
        return alloc
    here = socket.gethostname().split(".")[0]
    names = [h.name for h in alloc.hosts]
    mine = next((n for n in names if n.split(".")[0] == here), names[0])
    hosts = tuple(replace(h, gpus=gpus) if h.name == mine else h for h in alloc.hosts)
    return replace(alloc, hosts=hosts)


#: What the remote shell prints before the rank's pid (the scheduler takes it out of the output).
PID_MARK = "clusterbench-launch: rank pid "


class SgeScheduler(Scheduler):
    """``qrsh -inherit -nostdin -V <host>`` in the job's parallel environment.

    qrsh joins its arguments with spaces and the remote side parses them again with a shell,
    so the ``bash -c`` script is quoted twice. The remote shell starts in the home directory:
    change to the launcher's directory first. ``-V`` passes this environment on.

    SGE kills the whole job (this launcher included) when a ``qrsh -inherit`` client is killed
    or a task dies of a signal, and the client may even exit 0. So the remote bash runs the rank
    as its child, announces the child's pid on stderr and exits with ``128 + signal`` if the rank
    dies of one; ``signal_rank`` signals that pid: directly when the host is this machine, else
    through another ``qrsh -inherit``. The client then ends by itself with the rank's status.
    """

    name = "sge"
    detection_priority = 10
    how = "qrsh -inherit"
    remote = True
    cluster = True
    pins_single = True  # SGE_HGR_<complex>: a grant CUDA_VISIBLE_DEVICES may not reflect
    can_grow = True
    resource_keys = ("threads", "sge_pe", "sge_resources", "sge_priority", "sge_export_env")

    def __init__(self) -> None:
        super().__init__()
        self.pids: dict[int, int] = {}

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return bool(env.get("PE_HOSTFILE") and env.get("JOB_ID"))

    def allocation(self, env: Mapping[str, str]) -> Allocation:
        """The hosts and slots of ``$PE_HOSTFILE``; the GPUs SGE granted the job on this host
        (the master task's), where the site exports them (:func:`granted_gpus`)."""
        if not env.get("PE_HOSTFILE"):
            raise LaunchError("the sge scheduler needs PE_HOSTFILE (submit with `qsub -pe <pe> N`)")
        if not env.get("JOB_ID"):
            raise LaunchError("the sge scheduler needs JOB_ID in the environment (qrsh -inherit)")
        require_tools("sge", "qrsh")
        self.job_env = env
        self.alloc = with_grant(_read_pe_hostfile(env), granted_gpus(env))
        return self.alloc

    def site(self) -> str:
        """The SGE cell (``$SGE_CELL``, SGE's own default ``default``)."""
        return self.job_env.get("SGE_CELL") or "default"

    def allocated_hosts(self, env: Mapping[str, str]) -> dict[str, int]:
        """The hosts and slots of the job's parallel environment (``$PE_HOSTFILE``)."""
        return _read_pe_hostfile(env).host_slots()

    def qrsh(self, slot_info: Any) -> list[str]:
        """``qrsh -inherit ... <node>`` into the job the slot's rank runs in: a worker job's
        (its ``JOB_ID`` in the environment: SGE starts the task under that job), else this
        job's."""
        worker = self.worker_job(slot_info.hostname)
        into = ["env", f"JOB_ID={worker.job}"] if worker is not None else []
        return [*into, "qrsh", "-inherit", "-nostdin"]

    def shell_command(self, command: str, slot_info: Any) -> str:
        # (the remote shell ignores the preemption warnings: SGE's -notify reaches it too)
        remote = (
            f"{preemption.IGNORE_IN_SHELL}; cd {shlex.quote(self.cwd)} || exit 1; "
            f"{command} & echo {PID_MARK}$! >&2; wait $!"
        )
        node = self.node_of(slot_info.hostname)
        qrsh = [*self.qrsh(slot_info), "-V", node, "bash", "-c"]
        return f"{shlex.join(qrsh)} {shlex.quote(shlex.quote(remote))}"

    def observe(self, slot_info: Any, line: str) -> bool:
        _, mark, pid = line.partition(PID_MARK)
        if mark and pid.strip().isdigit():
            self.pids[slot_info.rank] = int(pid)
            return True
        return False

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        pid = self.pids.get(slot_info.rank)
        if pid is None:
            return False
        node = self.node_of(slot_info.hostname)
        if node in self.local_hosts:
            try:
                os.kill(pid, sig)
            except OSError:
                return False
            return True
        cmd = [*self.qrsh(slot_info), node, "kill", f"-{sig.name[3:]}"]
        proc = subprocess.run(
            [*cmd, str(pid)], check=False, capture_output=True, timeout=SIGNAL_TIMEOUT_S
        )
        return proc.returncode == 0

    # growing through worker jobs (clusterbench.launch.grow, ._sge_grow)

    def worker_queue(self, resources: Mapping[str, str], log_dir: Path | None) -> WorkerQueue:
        """Worker jobs of one slot with this job's per-slot requests and priority
        (``qstat -j``), in ``grow_resources``' queue where it names one."""
        job = self.job_env.get("JOB_ID", "")
        spec = worker_spec(job, run_tool(["qstat", "-j", job]), resources, SGE_MPI_PE)
        return SgeWorkerQueue(spec, os.environ, self.cwd, log_dir)

    def grow_addresses(self, resources: Mapping[str, str]) -> dict[str, str | None]:
        """The cell's execution hosts (``qconf -sel``) and their addresses."""
        try:
            names = run_tool(["qconf", "-sel"]).split()
        except LaunchError:
            return {}
        return {name: resolve(name) for name in names}

    # the workflow's side (snakemake-executor-plugin-sge 0.6.31)

    @classmethod
    def job_priority(cls, job: str) -> int | None:
        """The priority of ``job`` (``qstat -j``'s ``priority``: SGE's is clusterbench's)."""
        return job_priority(job)

    @classmethod
    def change_priority(cls, job: str, priority: int) -> bool:
        """``qalter -p <priority> <job>`` (above 0 needs an operator)."""
        try:
            run_tool(["qalter", "-p", str(priority), job])
        except LaunchError as exc:
            if re.search(r"does not exist", str(exc)):
                return False
            raise
        return True

    @classmethod
    def train_resources(cls, run: Mapping[str, Any], generic: Mapping[str, Any]) -> dict[str, Any]:
        """The SGE part of a training job's resources (``qsub``):

        ``threads``        slots: ``-pe <pe> N`` (the plugin ignores the rule's ``threads:``;
                           without a PE it would write ``-l slots=N``).
        ``sge_pe``         ``mpi`` for multi-worker jobs (a ``$fill_up`` PE with
                           ``control_slaves``, so the launcher can ``qrsh -inherit``); one-worker
                           jobs use the profile's ``sge-pe`` (``smp``).
        ``sge_resources``  ``h_vmem=INFINITY`` and ``tmem=<per slot>``: the plugin turns
                           ``mem_mb``/``mem_mb_per_cpu`` into ``-l h_vmem=`` per slot, enforced
                           like ``ulimit -v``, which kills PyTorch (it reserves far more address
                           space than it uses); ``sge_resources`` comes later on the command line
                           and wins. With a run's ``sge_gpu_complex`` C and ``gpus_per_node``
                           G > 0, also ``C=G`` (``-l C=G``: SGE has no standard GPU request; the
                           site's consumable complex is named in the config).
        ``sge_priority``   ``-p P`` for a run's ``priority`` P (-1023..1024; above 0 needs an
                           operator or manager).

        ``runtime`` (generic) becomes ``-l h_rt=``. The profile's ``sge_extra`` (``-w e
        -notify``) is left alone.
        """
        resources: dict[str, Any] = {}
        # a run that grows through jobs starts its ranks with qrsh -inherit even when its job
        # has one slot
        if generic["ranks"] > 1 or run.get("grow") == "jobs":
            slots = generic["ranks"]
            resources["sge_pe"] = SGE_MPI_PE
        else:
            slots = run["cpus_per_worker"]
        resources["threads"] = slots
        requests = [_sge_memory(generic["mem_mb"], slots)]
        if run["sge_gpu_complex"] and generic["gpus_per_node"]:
            found = find_complex(run["sge_gpu_complex"], cell_complexes() or {})
            requests.append(gpu_request(run, generic, slots, found)[0])
        resources["sge_resources"] = ",".join(requests)
        if run["priority"]:
            resources["sge_priority"] = run["priority"]
        # qsub -V: the environment Snakemake runs in reaches the job (CLUSTERBENCH_IFACE, ...:
        # README), whatever default-resources a command line gives
        resources["sge_export_env"] = True
        return resources

    @classmethod
    def unavailable(cls, context: PreflightContext) -> dict[str, str]:
        """Runs whose train job no queue could ever run: one whose GPU complex
        (``sge_gpu_complex``) the cell does not have (``qconf -sc``, asked once), else
        ``qsub -w v`` (verify, submit nothing) of a job with the resources it would be submitted
        with, in the executor's parallel environment for one-worker jobs (the profile's
        ``sge-pe``, else ``smp``): what the profile's ``qsub -w e`` would refuse."""
        default_pe = getattr(context.executor_settings, "pe", None) or "smp"
        complexes: dict[str, Complex] | None = None
        reasons = {}
        for name, run in context.runs.items():
            gpu_complex = run.get("sge_gpu_complex") if run.get("gpus_per_node") else None
            try:
                resources = context.resources(name, ("runtime", *VERIFY_KEYS))
                if gpu_complex:
                    complexes = sge_complexes() if complexes is None else complexes
                    problem = complex_problem(name, gpu_complex, complexes) or sizing_problem(
                        run, resources, find_complex(gpu_complex, complexes)
                    )
                    if problem:
                        reasons[name] = problem
                        continue
                problems = sge_problems(name, resources, default_pe)
            except LaunchError as exc:
                raise PreflightError(str(exc)) from None
            if problems:
                reasons[name] = "; ".join(problems)
        return reasons

    @classmethod
    def job_request(cls, resources: Mapping[str, Any], threads: int = 1) -> JobRequest:
        """What ``qsub`` is asked for: ``-pe <pe> <slots>`` with ``slots`` = the ``threads``
        resource; a job in a PE of its own (``sge_pe``: one slot per rank) runs that many
        ranks, any other one rank on all its slots. Nodes: the run's (SGE's PE allocation rule
        places the slots; nothing asks for nodes)."""
        slots = int(resources.get("threads") or 1)
        return JobRequest(
            nodes=int(resources.get("nodes") or 1),
            ranks=slots if resources.get("sge_pe") else 1,
            cpus=slots,
        )


# ------------------------------------------------------------------------------------------
# the train rule's resources

#: The SGE parallel environment multi-worker jobs run in (``$fill_up``, ``control_slaves TRUE``).
SGE_MPI_PE = "mpi"


def gpu_request(
    run: Mapping[str, Any], generic: Mapping[str, Any], slots: int, found: Complex | None
) -> tuple[str, str | None]:
    """``(the -l term of run's GPUs, why SGE cannot be asked for them rightly or None)``: its
    ``gpus_per_node`` G asked of its ``sge_gpu_complex`` C as the complex counts (``qconf
    -sc``'s consumable column, ``found``; None: the cell could not be asked):

    ``JOB``   counted once per job, on the master task's host: ``C=G``. The other hosts'
              GPUs are not reserved: a multi-node run cannot be asked rightly.
    ``HOST``  counted once per host: ``C=G``.
    ``YES``   counted per slot (SGE multiplies the request by the slots on each host): ``C=G/S``
              with S the job's slots per node (its ranks per node, or a one-rank job's CPUs);
              an INT complex takes only a whole number.
    """
    name, gpus = run["sge_gpu_complex"], int(generic["gpus_per_node"])
    nodes = max(1, int(generic["nodes"]))
    kind = found.consumable if found is not None else None
    where = f"run {run['name']!r}: gpus_per_node {gpus} of sge_gpu_complex {name!r}"
    if kind in (None, "JOB", "HOST", "NO"):
        problem = None
        if kind == "JOB" and nodes > 1:
            problem = (
                f"{where} (consumable JOB: counted once per job, on its master host only) "
                f"cannot reserve GPUs on each of its {nodes} nodes; ask your admins for a "
                "per-slot or per-host complex, or run on one node"
            )
        return f"{name}={gpus}", problem
    per_node = slots // nodes if slots % nodes == 0 else None
    if per_node is None:
        return f"{name}={gpus}", (
            f"{where} (consumable YES: counted per slot) cannot be sized: its {slots} slots do "
            f"not spread evenly over {nodes} nodes"
        )
    if gpus % per_node == 0:
        return f"{name}={gpus // per_node}", None
    if found.type == "DOUBLE":
        return f"{name}={gpus / per_node:.6g}", None
    return f"{name}={math.ceil(gpus / per_node)}", (
        f"{where} (consumable YES, INT: counted per slot) cannot be asked as a whole number per "
        f"slot for its {per_node} slot(s) per node; make gpus_per_node a multiple of them"
    )


def _sge_memory(mem_mb: int, slots: int) -> str:
    """``sge_resources`` that lift h_vmem and state the real memory per slot (``tmem``)."""
    return f"h_vmem=INFINITY,tmem={math.ceil(mem_mb / slots)}M"


def sizing_problem(
    run: Mapping[str, Any], resources: Mapping[str, Any], found: Complex | None
) -> str | None:
    """Why ``run``'s GPUs cannot be asked of its complex (``found``) rightly
    (:func:`gpu_request`), its job having ``resources`` (the slots: ``threads``)."""
    generic = {"gpus_per_node": run["gpus_per_node"], "nodes": run.get("nodes", 1)}
    slots = int(resources.get("threads") or 1)
    return gpu_request(run, generic, slots, found)[1]


# ------------------------------------------------------------------------------------------
# pre-flight: would SGE ever run the job? (`qsub -w v`: verify, submit nothing)

#: The resources :func:`sge_problems` reads from a train job (besides the generic ``runtime``).
VERIFY_KEYS = ("threads", "sge_pe", "sge_resources")


def verify_command(resources: Mapping[str, Any], default_pe: str) -> list[str]:
    """``qsub -w v`` of a job sized like the train job: its PE and slots, wall-clock limit and
    ``-l`` resources; SGE checks it against every queue and submits nothing."""
    pe = resources.get("sge_pe") or default_pe
    slots = int(resources.get("threads") or 1)
    cmd = ["qsub", "-w", "v", "-b", "y", "-N", "clusterbench-verify", "-pe", pe, str(slots)]
    runtime = resources.get("runtime")
    if runtime:
        cmd += ["-l", f"h_rt={int(runtime) // 60:02d}:{int(runtime) % 60:02d}:00"]
    if resources.get("sge_resources"):
        cmd += ["-l", str(resources["sge_resources"])]
    return [*cmd, "true"]


#: What ``qsub -w v`` says when no queue could ever run the job (anything else that fails is
#: SGE not answering, not a verdict on the job).
REFUSED = ("no suitable queues", "cannot run in PE", "cannot run in any queue")


def verify_problem(run: str, cmd: list[str], returncode: int, output: str) -> str | None:
    """Why ``qsub -w v`` (``cmd``) refuses ``run``'s job, None when it found a queue; a
    :class:`LaunchError` when qsub failed otherwise (no qmaster to ask, say)."""
    said = " ".join(line.strip() for line in output.splitlines() if line.strip())
    if returncode == 0 and "found suitable queue" in output:
        return None
    if not any(marker in output for marker in REFUSED):
        raise LaunchError(
            f"`{shlex.join(cmd)}` failed with exit code {returncode}: {said or 'no output'}"
        )
    pe_slots = " ".join(cmd[cmd.index("-pe") + 1 : cmd.index("-pe") + 3])
    return (
        f"run {run!r}: SGE would never run its job (-pe {pe_slots}): `qsub -w v` says: "
        f"{said or f'exit code {returncode}'}"
    )


def sge_problems(run: str, resources: Mapping[str, Any], default_pe: str) -> list[str]:
    """[why SGE refuses ``run``'s train job], or [] when some queue can run it."""
    require_tools("sge", "qsub")
    cmd = verify_command(resources, default_pe)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"`{shlex.join(cmd)}` could not run: {exc}") from exc
    problem = verify_problem(run, cmd, proc.returncode, proc.stdout + proc.stderr)
    return [problem] if problem else []


# ------------------------------------------------------------------------------------------
# pre-flight: the GPU complex a run names (`qconf -sc`)


@dataclass(frozen=True)
class Complex:
    """One complex (resource attribute) of the cell, a row of ``qconf -sc``."""

    name: str
    shortcut: str
    type: str  # INT, DOUBLE, MEMORY, BOOL, STRING, ...
    requestable: str  # YES, NO, FORCED
    consumable: str  # YES (per slot), JOB (per job), NO


def parse_complexes(text: str) -> dict[str, Complex]:
    """``qconf -sc`` (``#name shortcut type relop requestable consumable default urgency``
    rows, ``#`` lines are comments): complex by name."""
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or line.lstrip().startswith("#"):
            continue
        name, shortcut, kind, _relop, requestable, consumable = fields[:6]
        found[name] = Complex(name, shortcut, kind, requestable, consumable)
    return found


def sge_complexes() -> dict[str, Complex]:
    """The cell's complexes (``qconf -sc``); a :class:`LaunchError` when qconf fails."""
    require_tools("sge", "qconf")
    return parse_complexes(run_tool(["qconf", "-sc"]))


def cell_complexes() -> dict[str, Complex] | None:
    """The cell's complexes where this host is an SGE client (``qconf`` on ``PATH``,
    ``SGE_ROOT`` set), asked once per process and cell; None elsewhere or when qconf fails
    (the pre-flight, which asks again, says why). For the GPU request's size, while the train
    jobs' resources are made."""
    cell = tuple(os.environ.get(k) for k in ("SGE_ROOT", "SGE_CELL", "SGE_QMASTER_PORT"))
    if not cell[0] or not shutil.which("qconf"):
        return None
    return _complexes_of(cell)


@functools.lru_cache(maxsize=4)
def _complexes_of(cell: tuple[str | None, ...]) -> dict[str, Complex] | None:
    try:
        return sge_complexes()
    except LaunchError:
        return None


def find_complex(wanted: str, complexes: Mapping[str, Complex]) -> Complex | None:
    """The complex named ``wanted`` (or with that shortcut), None if there is none."""
    return complexes.get(wanted) or next(
        (c for c in complexes.values() if c.shortcut == wanted), None
    )


#: The complex types a GPU count can be requested as.
COUNT_TYPES = ("INT", "DOUBLE")


def complex_problem(run: str, wanted: str, complexes: Mapping[str, Complex]) -> str | None:
    """Why ``run``'s GPU complex ``wanted`` (its ``sge_gpu_complex``, by name or shortcut) cannot
    carry a GPU request in this cell, None when it can: it must exist, be requestable and hold a
    count."""
    found = find_complex(wanted, complexes)
    where = f"run {run!r}: sge_gpu_complex {wanted!r}"
    if found is None:
        counts = sorted(c.name for c in complexes.values() if c.consumable != "NO")
        return (
            f"{where} is no complex of this SGE cell (`qconf -sc`; its consumable ones: "
            f"{', '.join(counts) or 'none'}): name the complex your site requests GPUs with, "
            "or set gpus_per_node: 0"
        )
    if found.requestable == "NO" or found.type not in COUNT_TYPES:
        return (
            f"{where} cannot be requested as a GPU count (`qconf -sc`: type {found.type}, "
            f"requestable {found.requestable}); it needs requestable YES and type INT or DOUBLE"
        )
    return None


#: The scheduler of this module (the registry's plugin).
SCHEDULER = SgeScheduler
