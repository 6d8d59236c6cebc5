"""What the launcher reads from the scheduler, as pure functions: text in, data out.

Everything here is free of subprocesses and sockets so it can be unit-tested with sample text:
Slurm hostlists and ``scontrol show job -d`` / ``scontrol show node`` output, SGE's
``$PE_HOSTFILE``, the spread of ranks over the allocation's hosts, GPU lists and the choice of the
network interface Gloo uses. :mod:`clusterbench.launch` does the I/O around it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LAUNCHERS = ("local", "slurm", "sge")


class AllocationError(ValueError):
    """The allocation (or what was asked of it) cannot be used; the message says why."""


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

    launcher: str
    hosts: tuple[Host, ...]
    job_id: str | None = None
    cpus_per_task: int = 1

    @property
    def slots(self) -> int:
        return sum(h.slots for h in self.hosts)

    def describe(self) -> str:
        return ", ".join(f"{h.name}:{h.slots}" for h in self.hosts)


# ------------------------------------------------------------------------------------------
# launcher selection


def select_launcher(requested: str | None, env: Mapping[str, str]) -> str:
    """``--launcher`` (or ``CLUSTERBENCH_LAUNCHER``) if given and not ``auto``, else detect.

    Detection: ``SLURM_JOB_ID``/``SLURM_JOBID`` -> slurm; ``PE_HOSTFILE`` and ``JOB_ID`` -> sge;
    otherwise local.
    """
    name = (requested or env.get("CLUSTERBENCH_LAUNCHER") or "auto").strip().lower()
    if name == "auto":
        if slurm_job_id(env):
            return "slurm"
        if env.get("PE_HOSTFILE") and env.get("JOB_ID"):
            return "sge"
        return "local"
    if name not in LAUNCHERS:
        raise AllocationError(
            f"unknown launcher {name!r}: choose one of auto, {', '.join(LAUNCHERS)}"
        )
    return name


def slurm_job_id(env: Mapping[str, str]) -> str | None:
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None


# ------------------------------------------------------------------------------------------
# Slurm


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
        launcher="slurm",
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


# ------------------------------------------------------------------------------------------
# SGE


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
    return Allocation(launcher="sge", hosts=tuple(Host(h, n) for h, n in slots.items()))


# ------------------------------------------------------------------------------------------
# ranks on hosts


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


def horovod_hosts(allocation: Allocation, np: int) -> str:
    """Horovod's ``host:slots,...`` string for ``np`` ranks of ``allocation``."""
    for h in allocation.hosts:
        if ":" in h.name or "," in h.name:
            raise AllocationError(f"host name {h.name!r} contains ':' or ','")
    used = spread_ranks([(h.name, h.slots) for h in allocation.hosts], np)
    return ",".join(f"{h}:{n}" for h, n in used)


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
# network interface


def local_nodes(
    node_addresses: Mapping[str, str | None], local_ifaces: Mapping[str, Sequence[str]]
) -> set[str]:
    """The nodes whose address is on this machine (one of its addresses, or loopback)."""
    local_ips = {a for addrs in local_ifaces.values() for a in addrs}
    return {n for n, a in node_addresses.items() if a and (a in local_ips or _is_loopback(a))}


@dataclass(frozen=True)
class IfaceChoice:
    iface: str
    address: str  # this host's IPv4 address on it: the rendezvous server address
    reason: str


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def choose_iface(
    node_addresses: Mapping[str, str | None],
    local_ifaces: Mapping[str, Sequence[str]],
    host_name: str,
    host_address: str | None,
    requested: str | None = None,
) -> IfaceChoice:
    """The interface Gloo binds to and the rendezvous address on it.

    ``requested`` (``--iface``/``CLUSTERBENCH_IFACE``) wins. Otherwise the loopback interface
    when every node's address is on this machine, else the interface carrying the address
    ``host_name`` resolves to (``host_address``).

    :param node_addresses: node name -> its resolved IPv4 address (None: unresolved)
    :param local_ifaces: interface -> its IPv4 addresses (this machine)
    """
    local_ips = {a: i for i, addrs in local_ifaces.items() for a in addrs}
    if requested:
        addrs = local_ifaces.get(requested)
        if not addrs:
            known = ", ".join(sorted(local_ifaces)) or "none"
            raise AllocationError(
                f"network interface {requested!r} has no IPv4 address on this machine "
                f"(interfaces with one: {known})"
            )
        return IfaceChoice(requested, addrs[0], "requested with --iface / CLUSTERBENCH_IFACE")

    here = local_nodes(node_addresses, local_ifaces)
    remote = {n: a for n, a in node_addresses.items() if n not in here}
    if not remote:
        loop = next(
            (i for i, addrs in local_ifaces.items() if any(_is_loopback(a) for a in addrs)), None
        )
        if loop is None:
            raise AllocationError("no loopback interface with an IPv4 address; pass --iface")
        where = ", ".join(f"{n}={a}" for n, a in node_addresses.items())
        addr = next(a for a in local_ifaces[loop] if _is_loopback(a))
        return IfaceChoice(loop, addr, f"every node address is on this machine ({where})")

    where = ", ".join(f"{n}={a or 'unresolved'}" for n, a in remote.items())
    if host_address and not _is_loopback(host_address) and host_address in local_ips:
        iface = local_ips[host_address]
        return IfaceChoice(
            iface,
            host_address,
            f"nodes {where} are not on this machine; this host's name {host_name!r} resolves "
            f"to {host_address}, carried by {iface}",
        )
    raise AllocationError(
        f"cannot choose a network interface: nodes {where} are not on this machine and this "
        f"host's name {host_name!r} resolves to {host_address or 'nothing'}, "
        "which no non-loopback interface carries; pass --iface or set CLUSTERBENCH_IFACE"
    )


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
