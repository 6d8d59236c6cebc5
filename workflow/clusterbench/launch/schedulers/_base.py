"""What every scheduler implements (:class:`Scheduler`), and what they share.

A *scheduler* is the cluster system the launcher runs in: none (``local``), Slurm, SGE, or a
hosts file of machines reached over ssh (``ssh``). Each
is one module of this package (a plugin of :data:`clusterbench.launch.schedulers.REGISTRY`)
whose ``SCHEDULER`` is a subclass of :class:`Scheduler`. It says whether the launcher runs inside
one of its allocations (``detect``; the schedulers are asked in the order of their
``detection_priority``), which hosts, slots and GPUs that allocation has (``allocation``), how one
rank's command is started on its host (``shell_command``) and signalled (``signal_rank``), which
GPU a rank uses (``rank_device``) and which hosts the job could use now (``discover_hosts``, for
Horovod elastic).

The same classes answer the workflow's questions about a scheduler before any job is submitted,
as class methods (no allocation needed): its part of the train rule's resources
(``train_resources``, whose keys are its ``resource_keys``: :mod:`clusterbench.pipeline.resources`
merges
every scheduler's part), could it ever run a training job as asked (``unavailable``, the
pre-flight check; ``rules/common.smk`` asks the executor's scheduler), and what a training job
with these evaluated rule resources asks it for (``job_request``: nodes, ranks, CPUs;
:mod:`clusterbench.plan`).

The dataclasses and pure functions here (GPU lists, how ranks spread over hosts) and the
scheduler modules' parsers (text in, data out) need no scheduler to be unit-tested; the methods
that ask a scheduler run its tools (:func:`run_tool`). Standard library only: the Snakefile
imports it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from clusterbench.core import names

# every rank's `<launch tag>.<rank>`: how a local rank's process is found (re-exported)
from clusterbench.core.rank_env import RANK_ID_VAR  # noqa: F401

TOOL_TIMEOUT_S = 60  # scontrol / squeue / sinfo answering
SIGNAL_TIMEOUT_S = 15  # scancel --signal / qrsh -inherit kill answering


class LaunchError(RuntimeError):
    """The launch cannot start (or a scheduler's tool failed); the message says why."""


class AllocationError(ValueError):
    """The allocation (or what was asked of it) cannot be used; the message says why."""


class PreflightError(RuntimeError):
    """The pre-flight check refuses a job, or could not ask the scheduler (its tool failed or
    did not answer); the message names the run and sizes, or the tool and what it said."""


@dataclass(frozen=True)
class Host:
    """One node of an allocation: its scheduler name and how many ranks it can take."""

    name: str
    slots: int
    cpus: int | None = None  # CPUs allocated on the node (Slurm), if known
    mem_mb: int | None = None  # memory allocated on the node (Slurm), if known
    gpus: tuple[str, ...] | None = None  # GPU indices the scheduler gave the job on the node


@dataclass(frozen=True)
class Allocation:
    """The hosts of the allocation the launcher runs in, in the scheduler's order."""

    scheduler: str
    hosts: tuple[Host, ...]
    job_id: str | None = None
    cpus_per_task: int = 1

    @property
    def slots(self) -> int:
        return sum(h.slots for h in self.hosts)

    def host_slots(self) -> dict[str, int]:
        """Host name -> slots, in the scheduler's order."""
        return {h.name: h.slots for h in self.hosts}

    def describe(self) -> str:
        return ", ".join(f"{h.name}:{h.slots}" for h in self.hosts)


def usable_hosts(hosts: Mapping[str, int], failed: Iterable[str] = ()) -> dict[str, int]:
    """``hosts`` (name -> slots, in order) less those in ``failed`` (where a rank failed) and
    those without a slot: the hosts Horovod elastic may use now."""
    out = set(failed)
    return {name: slots for name, slots in hosts.items() if name not in out and slots > 0}


def spread_ranks(capacities: Sequence[tuple[str, int]], np: int) -> list[tuple[str, int]]:
    """How many of ``np`` ranks each host runs: one per host first (in order), then fill each
    host up to its capacity in order — Slurm's block distribution. Hosts given 0 are dropped."""
    total = sum(c for _, c in capacities)
    if np < 1:
        raise AllocationError(f"--np must be at least 1, got {np}")
    if np > total:
        desc = ", ".join(f"{h}:{c}" for h, c in capacities)
        raise AllocationError(
            f"--np {np} is more than the {total} slot(s) of the allocation ({desc})"
        )
    counts = [0] * len(capacities)
    left = np
    for i, (_, cap) in enumerate(capacities):
        if left and cap:
            counts[i], left = 1, left - 1
    for i, (_, cap) in enumerate(capacities):
        extra = min(cap - counts[i], left)
        counts[i] += extra
        left -= extra
    return [(h, n) for (h, _), n in zip(capacities, counts, strict=True) if n]


def fill_ranks(capacities: Sequence[tuple[str, int]], np: int) -> list[tuple[str, int]]:
    """How many of ``np`` ranks each host runs: every slot of the first host, then the next
    host's, in order (``mpirun -machinefile``'s and ``horovodrun -H``'s by-slot filling).
    Hosts given 0 are dropped."""
    total = sum(c for _, c in capacities)
    if np < 1:
        raise AllocationError(f"--np must be at least 1, got {np}")
    if np > total:
        desc = ", ".join(f"{h}:{c}" for h, c in capacities)
        raise AllocationError(f"--np {np} is more than the {total} slot(s) of the hosts ({desc})")
    used, left = [], np
    for host, cap in capacities:
        if left and cap:
            used.append((host, min(cap, left)))
            left -= used[-1][1]
    return used


#: The environment variable naming a hosts file: the hosts (and slots) a Horovod elastic launch
#: may use now (:meth:`Scheduler.discover_hosts`), edited while it trains.
HOSTS_FILE_VAR = "CLUSTERBENCH_HOSTS_FILE"


#: The most slots one host of a hosts file may have (a sane bound: the largest machines have a
#: few hundred cores).
MAX_HOST_SLOTS = 4096
#: A hosts file's line: ``host``, ``host:N`` (Horovod's), ``host slots=N [max_slots=M]``
#: (OpenMPI's and MPICH's machine files; ``max-slots`` as OpenMPI also spells it).
_HOST_LINE = re.compile(
    r"(?P<host>[^\s:,=#]+)(?:\s*:\s*(?P<n>\S+)|(?P<keys>(?:\s+[\w-]+\s*=\s*\S+)+))?"
)
_KEY = re.compile(r"([\w-]+)\s*=\s*(\S+)")
_FORMS = "'host', 'host:N', 'host slots=N' or 'host slots=N max_slots=M'"


def parse_hosts_file(text: str) -> dict[str, int]:
    """Hosts and their slots from a hosts file, one host per line: ``host`` (1 slot),
    ``host:N`` (Horovod's discovery format), ``host slots=N`` or ``host slots=N max_slots=M``
    (OpenMPI's machine file; ``max_slots``, how far OpenMPI may oversubscribe the host, is
    checked and not used: clusterbench runs one rank per slot). ``#`` starts a comment, blank
    lines are skipped, CRLF line ends and a byte-order mark at the start of the file are
    read as OpenMPI reads them; a host listed twice gets the sum. Slot counts are ASCII
    digits up to :data:`MAX_HOST_SLOTS`; a host name is taken in NFC and one with an invisible
    character is refused, naming it (:mod:`clusterbench.core.names`). Hosts with 0 slots are
    left out (a way to take a host out without deleting its line)."""
    hosts: dict[str, int] = {}
    for lineno, raw in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
        line = raw.removesuffix("\r").split("#", 1)[0].strip()
        if not line:
            continue
        host, slots = parse_host_line(line, f"hosts file line {lineno}")
        hosts[host] = hosts.get(host, 0) + slots
    return {h: n for h, n in hosts.items() if n > 0}


def parse_host_line(line: str, where: str) -> tuple[str, int]:
    """The host and slots of one hosts-file line (no comment, stripped); an
    :class:`AllocationError` naming ``where`` and what is wrong."""
    hidden = names.problem(line.replace("\t", " "))  # tabs separate, as spaces do
    if hidden:
        raise AllocationError(f"{where} {hidden}: {line!r} (retype it)")
    m = _HOST_LINE.fullmatch(names.normal(line))
    if not m:
        raise AllocationError(f"{where} is not {_FORMS}: {line!r}")
    host = m.group("host")
    if m.group("n") is not None:
        return host, slot_count(m.group("n"), "slots", where, line)
    keys: dict[str, str] = {}
    for key, value in _KEY.findall(m.group("keys") or ""):
        key = key.replace("-", "_")
        if key not in ("slots", "max_slots") or key in keys:
            said = "given twice" if key in keys else "not read by clusterbench"
            raise AllocationError(f"{where}: {key}= is {said} ({_FORMS}): {line!r}")
        keys[key] = value
    slots = slot_count(keys.get("slots", "1"), "slots", where, line)
    if "max_slots" in keys:
        most = slot_count(keys["max_slots"], "max_slots", where, line)
        if most < slots:
            raise AllocationError(f"{where}: max_slots={most} is less than slots={slots}: {line!r}")
    return host, slots


def slot_count(text: str, key: str, where: str, line: str) -> int:
    """A slot count: ASCII digits, at most :data:`MAX_HOST_SLOTS` (``str.isdigit`` takes
    ``²``, ``①`` and ``٣`` for digits)."""
    if not (text.isascii() and text.isdigit()):
        raise AllocationError(
            f"{where}: {key} {text!r} is not a whole number in ASCII digits: {line!r}"
        )
    if int(text) > MAX_HOST_SLOTS:
        raise AllocationError(
            f"{where}: {key} {int(text):,} is more than {MAX_HOST_SLOTS:,}, the most one host "
            f"may have: {line!r}"
        )
    return int(text)


def read_hosts_file(env: Mapping[str, str]) -> dict[str, int] | None:
    """The hosts file ``env`` names (:data:`HOSTS_FILE_VAR`), parsed; None when it names none."""
    path = env.get(HOSTS_FILE_VAR)
    if not path:
        return None
    try:
        return parse_hosts_file(hosts_file_text(path))
    except AllocationError as exc:
        raise AllocationError(f"the hosts file {path} ({HOSTS_FILE_VAR}): {exc}") from None


def hosts_file_text(path: str) -> str:
    """The text of the hosts file at ``path``; a :class:`LaunchError` naming it when it cannot
    be read or is no UTF-8 text."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise LaunchError(f"cannot read the hosts file {path} ({HOSTS_FILE_VAR}): {exc}") from None
    except UnicodeDecodeError as exc:
        raise LaunchError(
            f"the hosts file {path} ({HOSTS_FILE_VAR}) is not UTF-8 text (byte "
            f"{exc.object[exc.start]:#04x} at offset {exc.start})"
        ) from None


def within_hosts_file(hosts: Mapping[str, int], listed: Mapping[str, int] | None) -> dict[str, int]:
    """``hosts`` (an allocation's, name -> slots) limited to what the hosts file ``listed``
    offers (None: no hosts file): a host it leaves out, or lists with ``:0``, has no slot; one
    it lists with fewer slots has that many. It cannot add a host or a slot to the
    allocation."""
    if listed is None:
        return dict(hosts)
    return {name: min(slots, listed.get(name, 0)) for name, slots in hosts.items()}


# ------------------------------------------------------------------------------------------
# worker jobs of an elastic run that grows through jobs (`grow: jobs`, clusterbench.launch.grow)

#: The states of a worker job: queued, running (its rank may run), ending (the scheduler is
#: ending it: its rank leaves, it still holds its resources), ended.
PENDING, RUNNING, ENDING, ENDED = "pending", "running", "ending", "ended"
#: The scheduler stopped a running worker job to give its resources to another job (SGE
#: suspends the jobs of a subordinate queue): taken back. The launcher deletes it, so that its
#: rank dies at once, and queues a new one.
SUSPENDED = "suspended"
#: Why a worker job ended that the scheduler had suspended (:data:`SUSPENDED`).
TAKEN_BACK = "taken back (suspended)"


@dataclass(frozen=True)
class JobStatus:
    """What the scheduler says about one worker job now."""

    state: str  # PENDING, RUNNING, SUSPENDED, ENDING or ENDED
    node: str | None = None
    start: float | None = None  # seconds since the epoch (the scheduler's start time)
    end: float | None = None
    why: str | None = None  # why it ended, in words (ENDED, SUSPENDED)


class WorkerQueue(Protocol):
    """A scheduler's worker jobs of one run (:meth:`Scheduler.worker_queue`)."""

    #: How a worker job's rank is started, for the log.
    how: str

    def submit(self) -> str:
        """Submit one worker job; its id. A :class:`LaunchError` when refused."""
        ...

    def status(self, jobs: Sequence[str]) -> dict[str, JobStatus]:
        """What the scheduler says about ``jobs`` now; a job it no longer knows is left out. A
        :class:`LaunchError` when it could not be asked."""
        ...

    def cancel(self, jobs: Sequence[str]) -> None:
        """Cancel ``jobs`` (queued or running); quietly for those already gone."""
        ...


# ------------------------------------------------------------------------------------------
# the workflow's side: before any job is submitted


@dataclass(frozen=True)
class JobRequest:
    """What a training job asks the scheduler for (the wall-clock limit and the GPUs come from
    the scheduler-neutral resources ``runtime``, ``nodes`` and ``gpus_per_node``)."""

    nodes: int
    ranks: int
    cpus: int  # all ranks' CPUs (slots)


@dataclass(frozen=True)
class PreflightContext:
    """What the workflow knows when it asks a scheduler's pre-flight check
    (:meth:`Scheduler.unavailable`), while Snakemake builds the job graph."""

    #: The resolved runs of the config, by name.
    runs: Mapping[str, Mapping[str, Any]]
    #: ``resources(run, keys)``: the train job's rule resources named by ``keys`` as the job
    #: would be submitted (profile defaults and ``--set-resources`` included).
    resources: Callable[[str, Collection[str]], Mapping[str, Any]]
    #: The cores local jobs get (``--cores``); None when only planning (a dry run), where the
    #: machine's own count applies.
    cores: int | None = None
    #: The executor plugin's settings (SGE: ``pe``), None when unknown (a dry run).
    executor_settings: Any = None
    #: Each run's preprocessed data directory, as its train job reads it (an absolute path):
    #: a scheduler whose hosts share the file system checks they can read it.
    data_dirs: Mapping[str, str] = field(default_factory=dict)
    #: The working directory of the workflow (its jobs write their outputs under it).
    workdir: str = field(default_factory=os.getcwd)
    #: The config's ``staging.dir`` (None: the ranks read the data where it was preprocessed).
    staging: str | None = None
    #: The workflow's environment (the jobs inherit it: the scheduler's settings, its hosts).
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    #: Where a check that takes a while says what it does (one line each; default: stderr).
    say: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr))


# ------------------------------------------------------------------------------------------
# asking the scheduler


def require_tools(scheduler: str, *tools: str) -> None:
    """A :class:`LaunchError` naming the first of ``tools`` that is not on PATH."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise LaunchError(f"the {scheduler} scheduler needs `{tool}`, which is not on PATH")


def run_tool(cmd: list[str]) -> str:
    """The output of a scheduler tool; a :class:`LaunchError` when it fails or hangs."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"`{shlex.join(cmd)}` did not answer within {TOOL_TIMEOUT_S} s") from exc
    except OSError as exc:
        raise LaunchError(f"`{shlex.join(cmd)}` could not run: {exc}") from exc
    if proc.returncode != 0:
        raise LaunchError(
            f"`{shlex.join(cmd)}` failed with exit code {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout


def submit_job(cmd: list[str], script: str, env: Mapping[str, str], separator: str) -> str:
    """Submit a batch job (``sbatch --parsable``, ``qsub -terse``) with ``script`` on its stdin;
    its id: what the tool printed up to ``separator`` (Slurm's ``;cluster``, SGE's ``.task``).
    A :class:`LaunchError` naming the command when it fails or prints no id."""
    try:
        proc = subprocess.run(
            cmd, input=script, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"`{shlex.join(cmd)}` could not run: {exc}") from exc
    job = proc.stdout.strip().split(separator)[0]
    if proc.returncode != 0 or not job.isdigit():
        said = proc.stderr.strip() or proc.stdout.strip()
        raise LaunchError(f"`{shlex.join(cmd)}` failed ({proc.returncode}): {said}")
    return job


def resolve(name: str) -> str | None:
    """The IPv4 address ``name`` resolves to, None if it does not."""
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None


# ------------------------------------------------------------------------------------------
# GPUs


def split_devices(value: str | None) -> tuple[str, ...] | None:
    """``CUDA_VISIBLE_DEVICES`` as a tuple; None when unset, () when set but empty."""
    if value is None:
        return None
    return tuple(d.strip() for d in value.split(",") if d.strip())


def node_devices(
    scheduler_gpus: Sequence[str] | None, inherited: Sequence[str] | None
) -> tuple[str, ...] | None:
    """The GPUs ranks on a node may use: the scheduler's per-node list, narrowed (never widened)
    by a ``CUDA_VISIBLE_DEVICES`` the launcher inherited; either alone if only one is known."""
    if scheduler_gpus is None:
        return tuple(inherited) if inherited is not None else None
    if inherited is None:
        return tuple(scheduler_gpus)
    return tuple(d for d in scheduler_gpus if d in set(inherited))


def rank_device(devices: Sequence[str] | None, local_rank: int, local_size: int, host: str):
    """The ``CUDA_VISIBLE_DEVICES`` value of one rank: the ``local_rank``-th device, or None
    (leave it alone) when the node has no GPU list; "" keeps an empty list empty."""
    if devices is None:
        return None
    if not devices:
        return ""
    if len(devices) < local_size:
        raise AllocationError(
            f"{host} runs {local_size} rank(s) but has only {len(devices)} GPU(s) "
            f"({','.join(devices)}): one GPU per rank is needed"
        )
    return devices[local_rank]


# ------------------------------------------------------------------------------------------
# the interface


class Scheduler:
    """One scheduler: reading its allocation, and starting and signalling ranks in it.

    A launch makes one instance of the detected (or requested) scheduler and calls, in order:
    :meth:`allocation` and :meth:`addresses` (what the job has), :meth:`bind` (this launch's tag
    and which hosts are this machine), :meth:`rank_device` per rank, then, from the rank runner's
    threads, :meth:`shell_command`, :meth:`observe`, :meth:`signal_rank`, :meth:`rank_failed`,
    and :meth:`cleanup` at the end of a launch that was stopped.

    ``shell_command`` wraps Horovod's per-slot command (``env HOROVOD_RANK=... CMD``) for
    ``safe_shell_exec.execute``, which runs it with ``sh -c`` and, when told to stop, sends
    SIGTERM to the shell's children and SIGKILL after a grace period. When the rank runs
    elsewhere (``remote``: a scheduler's task, not a process below the launcher) that SIGTERM
    would only reach srun/qrsh, so the runner stops it with ``signal_rank`` first.
    """

    #: The name the registry, ``--scheduler`` and the ranks' ``CLUSTERBENCH_SCHEDULER`` use:
    #: the plugin's (its module's) name, and the name of the Snakemake executor that submits to
    #: it (the workflow asks the executor's scheduler).
    name: ClassVar[str] = ""
    #: Detection order: the scheduler with the highest is asked first whether the launcher runs
    #: in its allocation (``local``, which always says yes, has the lowest).
    detection_priority: ClassVar[int] = 0
    #: The rule resources :meth:`train_resources` may return (the train rule lists every
    #: scheduler's).
    resource_keys: ClassVar[tuple[str, ...]] = ()
    #: How ranks start, for the launcher's log ("srun steps").
    how: ClassVar[str] = ""
    #: The rank is not this host's process but a scheduler's task (srun step, qrsh -inherit):
    #: stopping it goes through ``signal_rank``; killing the local srun/qrsh is a last resort.
    remote: ClassVar[bool] = False
    #: Jobs run on other machines (compute nodes), which parse the workflow and its config
    #: again there.
    cluster: ClassVar[bool] = False
    #: A single rank is pinned to its host's GPU list too (the scheduler's grant, which the
    #: job's environment does not reflect), not left with the GPUs its environment has.
    pins_single: ClassVar[bool] = False
    #: The Snakemake executor that runs this scheduler's jobs; None: the executor of its own
    #: name. A scheduler that is no executor of its own (ssh: the local executor runs the
    #: jobs, the launcher starts the ranks elsewhere) is chosen for the workflow by
    #: ``CLUSTERBENCH_SCHEDULER`` (:func:`~clusterbench.launch.schedulers.of_executor`).
    executor: ClassVar[str | None] = None

    def __init__(self) -> None:
        #: The environment of the local process that starts a rank (None: the launcher's own).
        self.start_env: dict[str, str] | None = None
        #: The environment :meth:`allocation` read (where :meth:`discover_hosts` looks again).
        self.job_env: Mapping[str, str] = os.environ
        self.cwd = os.getcwd()
        self.alloc: Allocation | None = None
        self.tag = "cb"
        self.local_hosts: set[str] = set()
        #: Hosts on which a rank failed (:meth:`discover_hosts` leaves them out).
        self.failed_hosts: set[str] = set()
        #: The worker jobs of an elastic run that grows through jobs
        #: (:class:`clusterbench.launch.grow.Grower`; None: it does not).
        self.grower: Any = None

    @classmethod
    def snakemake_executor(cls) -> str:
        """The name of the Snakemake executor that runs this scheduler's jobs."""
        return cls.executor or cls.name

    # reading the allocation

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """Whether ``env`` is that of a job inside this scheduler's allocation."""
        raise NotImplementedError

    def allocation(self, env: Mapping[str, str]) -> Allocation:
        """The hosts, slots and GPUs of the allocation this launcher runs in."""
        raise NotImplementedError

    def addresses(self, alloc: Allocation) -> dict[str, str | None]:
        """Each host's IPv4 address (None: unresolved)."""
        return {h.name: resolve(h.name) for h in alloc.hosts}

    def allocated_hosts(self, env: Mapping[str, str]) -> dict[str, int]:
        """The hosts (and their slots) the job's allocation has now, asked again each time."""
        raise NotImplementedError

    def discover_hosts(self, env: Mapping[str, str] | None = None) -> dict[str, int]:
        """The hosts (and their slots) the job could run ranks on now, asked again each time:
        what Horovod elastic's host discovery needs: :meth:`allocated_hosts`, limited to the
        hosts file when ``CLUSTERBENCH_HOSTS_FILE`` names one (:func:`within_hosts_file`: a host
        taken out with ``:0`` leaves, put back it joins again), less the hosts where a rank
        failed (:meth:`rank_failed`), the same under every scheduler. ``env``: the job's
        environment (default: the one :meth:`allocation` read)."""
        env = self.job_env if env is None else env
        hosts = within_hosts_file(self.allocated_hosts(env), read_hosts_file(env))
        return usable_hosts(hosts, self.failed_hosts)

    def site(self) -> str:
        """The name of the cluster the job runs on, for results of several clusters: the
        scheduler's own name for it (Slurm's ClusterName, the SGE cell), else this host's
        short name."""
        return socket.gethostname().split(".")[0]

    def elastic_hosts(self) -> dict[str, int]:
        """Horovod elastic's host discovery (asked again about every second while an elastic
        launch runs): :meth:`discover_hosts`, and the running worker jobs of a run that grows
        through jobs, one host of one slot each (less those where a rank failed)."""
        hosts = self.discover_hosts()
        if self.grower is not None:
            hosts.update(usable_hosts(self.grower.hosts(), self.failed_hosts))
        return hosts

    def elastic_device(self, slot_info: Any, inherited: Sequence[str] | None) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` of an elastic launch's slot (a rank keeps its GPU across
        resets): :meth:`rank_device` on the slot's host of the allocation, or None (leave it
        alone) for a host the allocation does not list."""
        hosts = {h.name: h for h in self.alloc.hosts} if self.alloc else {}
        host = hosts.get(slot_info.hostname)
        if host is None:
            return None
        return self.rank_device(host, slot_info.local_rank, slot_info.local_size, inherited)

    # growing through worker jobs (`grow: jobs`, clusterbench.launch.grow)

    #: Whether a rank can be started in another job of the same user, a worker job: an elastic
    #: run may then grow through worker jobs (``grow: jobs``).
    can_grow: ClassVar[bool] = False

    @classmethod
    def grow_problem(cls) -> str | None:
        """Why an elastic run cannot grow through worker jobs under this scheduler (``grow:
        jobs``), None when it can: the workflow refuses such a run before any job."""
        if cls.can_grow:
            return None
        return f"the {cls.name} scheduler cannot start a rank in a job of its own"

    def worker_queue(self, resources: Mapping[str, str], log_dir: Path | None) -> WorkerQueue:
        """The worker jobs of the run this launcher runs (after :meth:`allocation`), each one
        worker of the run's job; ``resources``: the run's ``grow_resources``; ``log_dir``:
        where their logs go (None: nowhere)."""
        raise LaunchError(f"grow: jobs: {self.grow_problem()}")

    def grow_addresses(self, resources: Mapping[str, str]) -> dict[str, str | None]:
        """The nodes a worker job may run on and their addresses (None: unresolved), which
        decide the network interface the ranks talk on (after :meth:`worker_queue`)."""
        return {}

    def worker_job(self, host: str) -> Any:
        """The worker job Horovod knows as ``host`` (None: a host of the job's own
        allocation)."""
        return self.grower.job_of(host) if self.grower is not None else None

    def node_of(self, host: str) -> str:
        """The scheduler's name of the node Horovod's host ``host`` is on (a worker job's
        node; a local slot host's host), which the ranks record (``CLUSTERBENCH_NODE``)."""
        job = self.worker_job(host)
        return job.node if job is not None and job.node else host

    def worker_left(self, host: str) -> str | None:
        """Why the worker job offered as ``host`` is gone (its rank left: no failure), None
        when it still runs or ``host`` is no worker job's."""
        return self.grower.left(host) if self.grower is not None else None

    # a run's priority, changed while its jobs are queued or run (python -m clusterbench.priority)

    @classmethod
    def job_priority(cls, job: str) -> int | None:
        """Queued or running ``job``'s priority now, in clusterbench's terms (a run's
        ``priority``: higher goes first); None when the scheduler does not say."""
        return None

    @classmethod
    def change_priority(cls, job: str, priority: int) -> bool:
        """Give queued or running ``job`` the clusterbench ``priority``; False when the job is
        no longer in the queue (it ended). A :class:`LaunchError` with the scheduler's answer
        when it refuses (a higher priority than the user may give, say)."""
        raise LaunchError(
            f"the {cls.name} scheduler has no queue of jobs whose priority could change (a "
            "run's priority orders the jobs Snakemake starts here: set it in the config)"
        )

    # starting ranks

    def spread(self, capacities: Sequence[tuple[str, int]], np: int) -> list[tuple[str, int]]:
        """How many of ``np`` ranks each host (``(name, slots)``, in order) runs: one per host
        first, then each filled in order (:func:`spread_ranks`, Slurm's block distribution)."""
        return spread_ranks(capacities, np)

    def single_rank_here(self, host: str, local_hosts: set[str]) -> bool:
        """Whether a launch of a single rank, on ``host``, runs it as a local process of the
        launcher (``local_hosts``: the hosts whose address is this machine). In an allocation
        the launcher runs on its first node: a single rank runs right there, with no step of
        its own."""
        return True

    def bind(self, alloc: Allocation, np: int, tag: str, local_hosts: set[str]) -> None:
        """Get ready to start ``np`` ranks of ``alloc``: ``tag`` names this launch (Slurm step
        names), ``local_hosts`` are the hosts whose address is this machine."""
        self.alloc, self.tag, self.local_hosts = alloc, tag, set(local_hosts)

    def rank_device(
        self, host: Host, local_rank: int, local_size: int, inherited: Sequence[str] | None
    ) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` of the ``local_rank``-th rank on ``host`` (None: leave the
        rank's environment alone): the local rank's GPU of the node's list (the scheduler's,
        narrowed by an inherited ``CUDA_VISIBLE_DEVICES``)."""
        return rank_device(node_devices(host.gpus, inherited), local_rank, local_size, host.name)

    def gpu_note(self) -> str | None:
        """A line for the log when the scheduler itself gives each rank its GPU."""
        return None

    def shell_command(self, command: str, slot_info: Any) -> str:
        """The shell command that runs one rank's ``command`` on ``slot_info.hostname``."""
        return command

    def observe(self, slot_info: Any, line: str) -> bool:
        """Look at one line of the rank's output; True to drop it from the output."""
        return False

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        """Send ``sig`` to the rank itself (not to what started it); True when it was sent."""
        return False

    def rank_failed(self, slot_info: Any) -> None:
        """A rank exited non-zero on its own (not stopped by the launcher)."""
        self.failed_hosts.add(slot_info.hostname)

    def cleanup(self) -> None:
        """After a launch that was stopped or failed: end whatever of it the scheduler still
        runs (Slurm: leftover steps)."""

    # the workflow's side (class methods: no allocation, no launch)

    @classmethod
    def train_resources(cls, run: Mapping[str, Any], generic: Mapping[str, Any]) -> dict[str, Any]:
        """This scheduler's part of the train rule's resources for ``run`` (a resolved run of the
        config), beside the scheduler-neutral ``generic`` ones (``nodes``, ``ranks``,
        ``gpus_per_node``, ``mem_mb``, ``mem_mb_per_cpu``, ``runtime``:
        :func:`clusterbench.pipeline.resources.generic_resources`); only keys of
        :attr:`resource_keys`. Every executor gets every scheduler's keys and reads its own."""
        return {}

    @classmethod
    def unavailable(cls, context: PreflightContext) -> dict[str, str]:
        """Run -> why this scheduler could never run the run's training job as asked (the
        pre-flight check, before any job is submitted); runs it can run are left out. A
        :class:`PreflightError` when the scheduler could not be asked."""
        return {}

    @classmethod
    def job_request(cls, resources: Mapping[str, Any], threads: int = 1) -> JobRequest:
        """The nodes, ranks and CPUs a training job with these evaluated rule ``resources``
        (and the job's ``threads``) asks this scheduler for: what its executor submits."""
        raise NotImplementedError
