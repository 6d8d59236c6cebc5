"""No scheduler: ranks are subprocesses of the launcher on this host.

The allocation is this host with one slot per CPU this process may run on. For Horovod elastic,
:meth:`LocalScheduler.allocated_hosts` is the user-editable hosts file when
``CLUSTERBENCH_HOSTS_FILE`` names one (:func:`~._base.parse_hosts_file`: any host names, every
rank runs here), else this host's slots.
Horovod elastic blacklists the *host* of a rank that fails, which on one machine would end the
run: :meth:`LocalScheduler.elastic_hosts` makes each slot a host of its own
(:func:`slot_hosts`), so a failed rank takes only its slot out.

The pre-flight check of local jobs (:meth:`LocalScheduler.unavailable`): a run needing more
cores than local jobs get (:func:`local_problems`; its ranks would share cores, and its timing
would measure that), or GPUs where none is usable (:func:`local_gpus`: ``CUDA_VISIBLE_DEVICES``
and ``nvidia-smi -L``, no torch import).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from typing import Any

from clusterbench.launch.schedulers._base import (
    HOSTS_FILE_VAR,
    RANK_ID_VAR,
    Allocation,
    AllocationError,
    Host,
    JobRequest,
    PreflightContext,
    Scheduler,
    parse_hosts_file,
    read_hosts_file,
)


def local_allocation() -> Allocation:
    """This host, one slot per CPU this process may run on."""
    return Allocation("local", (Host(socket.gethostname(), len(os.sched_getaffinity(0))),))


#: How :func:`slot_hosts` names one slot of a host: ``<host>-slot<i>``.
SLOT_HOST = re.compile(r"(?P<host>.+)-slot(?P<index>\d+)")


def slot_hosts(hosts: Mapping[str, int]) -> dict[str, int]:
    """Every slot of ``hosts`` as a host of one slot, ``<host>-slot<i>`` (i from 0): adding a
    slot to the hosts file adds a host; a failed rank's slot alone is blacklisted."""
    return {f"{host}-slot{i}": 1 for host, n in hosts.items() for i in range(n)}


def slot_index(name: str) -> int | None:
    """The slot number of a :func:`slot_hosts` name, None for another name."""
    m = SLOT_HOST.fullmatch(name)
    return int(m.group("index")) if m else None


class LocalScheduler(Scheduler):
    """Ranks are subprocesses of this launcher (also the single rank of a one-rank job under
    any scheduler: it runs right where the launcher does)."""

    name = "local"
    detection_priority = 0  # the fallback: asked last, it always detects
    how = "local processes"

    def __init__(self) -> None:
        super().__init__()
        self._procs: dict[int, Any] = {}  # rank -> psutil.Process of the rank

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return True  # the fallback: no scheduler's allocation

    def allocation(self, env: Mapping[str, str]) -> Allocation:
        self.job_env = env
        return local_allocation()

    def addresses(self, alloc: Allocation) -> dict[str, str | None]:
        return {h.name: "127.0.0.1" for h in alloc.hosts}

    def allocated_hosts(self, env: Mapping[str, str]) -> dict[str, int]:
        """The hosts file's hosts (``CLUSTERBENCH_HOSTS_FILE``: locally, any hosts it lists,
        whose ranks all run here), else this host's slots."""
        listed = read_hosts_file(env)
        return local_allocation().host_slots() if listed is None else listed

    def elastic_hosts(self) -> dict[str, int]:
        """Each slot of :meth:`discover_hosts` as a host of its own (a failed rank is named by
        its slot host, which Horovod blacklists)."""
        return slot_hosts(self.discover_hosts())

    def node_of(self, host: str) -> str:
        """A slot host's host (``<host>-slot<i>`` -> ``<host>``)."""
        m = SLOT_HOST.fullmatch(host)
        return m.group("host") if m else host

    def elastic_device(self, slot_info: Any, inherited: Any) -> str | None:
        """The slot's GPU: the ``i``-th of the inherited ``CUDA_VISIBLE_DEVICES`` for slot
        ``i`` (every slot host has local rank 0); None (leave it alone) when none is set."""
        index = slot_index(slot_info.hostname)
        if inherited is None or index is None:
            return None
        if index >= len(inherited):
            raise AllocationError(
                f"slot {index} has no GPU: CUDA_VISIBLE_DEVICES lists {len(inherited)} "
                f"({','.join(inherited)}); one GPU per rank is needed"
            )
        return inherited[index]

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        """``sig`` to the rank's own process: the topmost process below this launcher whose
        environment holds this rank's :data:`RANK_ID_VAR` (not the shell
        between, which would die of a signal they do not handle)."""
        proc = self._rank_process(slot_info.rank)
        if proc is None:
            return False
        import psutil

        try:
            proc.send_signal(sig)  # psutil checks the pid still names the same process
        except psutil.Error:
            self._procs.pop(slot_info.rank, None)
            return False
        return True

    def _rank_process(self, rank: int) -> Any:
        import psutil

        known = self._procs.get(rank)
        if known is not None and known.is_running():
            return known
        wanted = f"{self.tag}.{rank}"

        def is_rank(proc: psutil.Process | None) -> bool:
            try:
                return proc is not None and proc.environ().get(RANK_ID_VAR) == wanted
            except psutil.Error:
                return False

        try:
            below = psutil.Process().children(recursive=True)
        except psutil.Error:
            return None
        for proc in below:
            try:
                parent = proc.parent()
            except psutil.Error:
                continue
            if is_rank(proc) and not is_rank(parent):
                self._procs[rank] = proc
                return proc
        return None

    # the workflow's side

    @classmethod
    def grow_problem(cls) -> str | None:
        """Locally there is nothing to grow into: the local profile runs one job at a time
        (its ``timing_slot``), so no cores free up while a run trains, and no job is there to
        start a rank in."""
        return (
            "locally one job runs at a time (the local profile's timing_slot), so no cores "
            "free up while a run trains and there is no job to start a further rank in: "
            "grow: jobs needs Slurm (--profile profiles/slurm) or SGE (--profile "
            "profiles/sge); locally use grow: none, which starts on as many of max_workers "
            "as the cores allow"
        )

    @classmethod
    def unavailable(cls, context: PreflightContext) -> dict[str, str]:
        """Runs needing more cores than local jobs get (``--cores``, at most the machine's; a
        dry run plans with the machine's), or GPUs ``nvidia-smi`` does not show here."""
        from clusterbench.config import allocated_workers  # the workflow's: not the launcher's

        cores = os.cpu_count() or 1
        if context.cores is not None:
            cores = min(context.cores, cores)
        wants_gpus = any(run["gpus_per_node"] for run in context.runs.values())
        gpus = local_gpus() if wants_gpus else 0
        reasons = {}
        for name, run in context.runs.items():
            problems = local_problems(
                name,
                allocated_workers(run),
                run["cpus_per_worker"],
                cores,
                gpus_per_node=run["gpus_per_node"],
                gpus=gpus,
            )
            if problems:
                reasons[name] = "; ".join(problems)
        return reasons

    @classmethod
    def job_request(cls, resources: Mapping[str, Any], threads: int = 1) -> JobRequest:
        """The job's ranks (the neutral ``ranks``) on the job's cores (its ``threads``, which
        the local executor gives it)."""
        return JobRequest(
            nodes=int(resources.get("nodes") or 1),
            ranks=int(resources.get("ranks") or 1),
            cpus=int(threads or 1),
        )


# ------------------------------------------------------------------------------------------
# pre-flight: can this machine run the job?


def count_gpus(cuda_visible_devices: str | None, listing: str | None) -> int:
    """GPUs a local job can use: ``nvidia-smi -L``'s ``listing`` (None: no nvidia-smi, or it
    failed: no usable GPU), limited by ``CUDA_VISIBLE_DEVICES`` when that is set (empty, or
    ``-1``: none)."""
    found = sum(1 for line in (listing or "").splitlines() if line.startswith("GPU "))
    if cuda_visible_devices is None:
        return found
    visible = [d for d in cuda_visible_devices.split(",") if d.strip()]
    if not visible or visible[0].strip().startswith("-"):
        return 0
    return min(found, len(visible))


def local_gpus(env: Mapping[str, str] | None = None) -> int:
    """The GPUs local jobs can use here (:func:`count_gpus`), asked of ``nvidia-smi -L``: cheap,
    and no torch import while the job graph is built."""
    env = os.environ if env is None else env
    tool = shutil.which("nvidia-smi")
    listing = None
    if tool:
        try:
            listing = subprocess.run(
                [tool, "-L"], capture_output=True, text=True, check=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError):
            listing = None
    return count_gpus(env.get("CUDA_VISIBLE_DEVICES"), listing)


def local_problems(
    run: str, workers: int, cpus_per_worker: int, cores: int, gpus_per_node: int = 0, gpus: int = 0
) -> list[str]:
    """A problem if a training run needs more cores than local jobs get (its ranks would share
    cores, and its timing would measure that rather than the machine), or more GPUs than this
    machine has usable (``gpus``; the local profile is one node)."""
    problems = []
    if gpus_per_node > gpus:
        have = (
            f"{gpus} usable" if gpus else "none usable (no nvidia-smi GPU, or CUDA_VISIBLE_DEVICES)"
        )
        problems.append(
            f"run {run!r} asks for {gpus_per_node} GPU(s) per node (gpus_per_node) and this "
            f"machine has {have}: run it where GPUs are (a cluster profile), or set "
            "gpus_per_node: 0 to train on the CPU"
        )
    needed = workers * cpus_per_worker
    if needed <= cores:
        return problems
    return problems + [
        f"run {run!r} needs {needed} cores ({workers} workers x cpus_per_worker="
        f"{cpus_per_worker}) but local jobs get {cores} here: its ranks would share cores and "
        "its time per epoch would measure that; lower workers or cpus_per_worker, or run it "
        "through a cluster profile (--profile profiles/slurm or profiles/sge)"
    ]


#: The scheduler of this module (the registry's plugin).
SCHEDULER = LocalScheduler

__all__ = ["HOSTS_FILE_VAR", "SCHEDULER", "LocalScheduler", "parse_hosts_file", "slot_hosts"]
