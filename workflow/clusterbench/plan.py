"""The plan of a workflow run, before anything is submitted (``make plan``).

Every training job with its nodes, ranks, CPUs, GPUs and wall-clock limit as the train rule's
resources (:func:`clusterbench.resources.train_resources`) ask the scheduler for them, the
CPU-hours and GPU-hours requested in all, the jobs of each rule, and the runs skipped (and why).

Pure: :func:`make_plan` takes the resolved runs, their train resources and the skipped runs
(run -> reason); :func:`format_plan` writes it as text. ``rules/common.smk`` prints it in a dry
run with ``CLUSTERBENCH_PLAN=1`` (what ``make plan`` runs), once the skips are decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterbench.launch.schedulers.slurm import slurm_option


@dataclass(frozen=True)
class TrainJob:
    """One training job as the scheduler is asked for it."""

    run: str
    nodes: int
    ranks: int
    cpus: int  # all ranks' CPUs (ranks x cpus per rank)
    gpus: int  # nodes x GPUs per node
    runtime: int  # the wall-clock limit, minutes

    @property
    def cpu_hours(self) -> float:
        return self.cpus * self.runtime / 60

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.runtime / 60


@dataclass
class Plan:
    jobs: list[TrainJob]
    skipped: dict[str, str]  # run -> reason
    jobs_per_rule: dict[str, int] = field(default_factory=dict)

    @property
    def cpu_hours(self) -> float:
        return sum(job.cpu_hours for job in self.jobs)

    @property
    def gpu_hours(self) -> float:
        return sum(job.gpu_hours for job in self.jobs)


def train_job(run: str, resources: Mapping[str, Any]) -> TrainJob:
    """The training job of ``run`` from its train rule ``resources``: what Slurm is asked for
    (``--nodes``, ``--ntasks``, ``--cpus-per-task``, ``--gpus-per-node``, ``-t``)."""
    nodes = int(resources.get("nodes") or 1)
    ranks = int(resources.get("tasks") or 1)
    cpus_per_rank = int(resources.get("cpus_per_task") or 1)
    gpus_per_node = slurm_option(str(resources.get("slurm_extra") or ""), "gpus-per-node") or 0
    return TrainJob(
        run=run,
        nodes=nodes,
        ranks=ranks,
        cpus=ranks * cpus_per_rank,
        gpus=nodes * gpus_per_node,
        runtime=int(resources["runtime"]),
    )


def make_plan(
    runs: Sequence[Mapping[str, Any]],
    resources: Mapping[str, Mapping[str, Any]],
    skipped: Mapping[str, str],
) -> Plan:
    """The plan of ``runs`` (resolved), their train ``resources`` (run -> resources) and the
    ``skipped`` runs (run -> reason), which get no job (nor do their datasets, when no other
    run uses them)."""
    kept = [run for run in runs if run["name"] not in skipped]
    datasets = {run["dataset"] for run in kept}
    jobs = [train_job(run["name"], resources[run["name"]]) for run in kept]
    per_rule = {
        "download": len(datasets),
        "preprocess": len(datasets),
        "train": len(kept),
        "evaluate": len(kept),
        "report": 1 if kept else 0,
        "all": 1,
    }
    return Plan(
        jobs=jobs,
        skipped={run["name"]: skipped[run["name"]] for run in runs if run["name"] in skipped},
        jobs_per_rule=per_rule,
    )


def format_plan(plan: Plan, executor: str) -> str:
    """The plan as text: one line per training job, the totals, the jobs per rule, the skips."""
    width = max([len("run"), *(len(job.run) for job in plan.jobs)])
    lines = [
        f"clusterbench plan ({executor} executor): every training job as it will be asked for",
        f"  {'run':<{width}}  nodes  ranks  CPUs  GPUs  runtime",
    ]
    for job in plan.jobs:
        lines.append(
            f"  {job.run:<{width}}  {job.nodes:>5}  {job.ranks:>5}  {job.cpus:>4}  "
            f"{job.gpus:>4}  {job.runtime:>4} min"
        )
    lines.append(
        f"  requested in all: {plan.cpu_hours:.2f} CPU-hours, {plan.gpu_hours:.2f} GPU-hours "
        f"({len(plan.jobs)} training job(s), at their wall-clock limits)"
    )
    per_rule = ", ".join(f"{rule} {count}" for rule, count in plan.jobs_per_rule.items())
    lines.append(
        f"  jobs per rule (the whole workflow; Snakemake's job stats show what is out of date): "
        f"{per_rule}"
    )
    if plan.skipped:
        lines.append(f"  skipped ({len(plan.skipped)}):")
        lines += [f"    {run}: {reason}" for run, reason in plan.skipped.items()]
    else:
        lines.append("  skipped: none")
    return "\n".join(lines)
