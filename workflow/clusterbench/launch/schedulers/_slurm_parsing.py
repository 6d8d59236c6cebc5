"""Slurm's text, read (pure parsers: text in, data out; unit-tested on real Slurm 22.05 output).

Hostlists (``node[01-03,07]``), ``scontrol show job -d`` (a job's nodes, slots, CPUs, memory and
GPU indices), ``scontrol show node`` (addresses), ``squeue --steps`` and ``scontrol show config``
(the cluster's name). A helper of the Slurm scheduler (:mod:`.slurm`), which asks Slurm.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping

from clusterbench.launch.schedulers._base import Allocation, AllocationError, Host, spread_ranks


def slurm_job_id(env: Mapping[str, str]) -> str | None:
    """The job id in a Slurm job's environment (None outside one)."""
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


def parse_cluster_name(text: str) -> str | None:
    """``ClusterName`` from ``scontrol show config`` output (None if absent)."""
    m = re.search(r"^\s*ClusterName\s*=\s*(\S+)\s*$", text, re.M)
    return m.group(1) if m else None
