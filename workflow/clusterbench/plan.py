"""The plan of a workflow run, before anything is submitted (``make plan``).

    python -m clusterbench.plan [--profile DIR] [--train-rule NAME] [-- SNAKEMAKE ARGS...]

runs Snakemake's own dry run (``snakemake --profile DIR --dry-run ARGS``, planning for the
profile's executor: ``CLUSTERBENCH_EXECUTOR``), prints its output, then the plan made from it:

- every training job the dry run would run (a finished one is not), with its nodes, ranks,
  CPUs, GPUs and wall-clock limit, from the job's resources as Snakemake evaluated them
  (the profile's ``default-resources`` and ``--set-resources`` included) and read the way the
  executor's scheduler reads them (the registry's scheduler of that name:
  :meth:`~clusterbench.launch.schedulers.Scheduler.job_request`: Slurm ``--nodes``/``--ntasks``/
  ``--cpus-per-task``, SGE's slots); GPUs from the scheduler-neutral ``nodes`` x
  ``gpus_per_node``; the wall-clock limit is ``runtime``;
- the CPU-hours and GPU-hours requested in all (at the wall-clock limits);
- the jobs of each rule: Snakemake's own job stats;
- the runs the workflow skips, and why: its ``skipping run ...`` warnings.

:func:`parse_dry_run` (text in, data out), :func:`make_plan` and :func:`format_plan` are pure;
``tests/test_plan.py`` checks them on Snakemake's real output, against the executor plugins'
own submit-command builders, and through ``make plan`` itself.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterbench.launch.schedulers import AllocationError, Scheduler, executors, of_executor

#: The environment variable naming the executor a dry run plans for (read by rules/common.smk).
EXECUTOR_VAR = "CLUSTERBENCH_EXECUTOR"


class PlanError(ValueError):
    """The dry run's output cannot be made into a plan; the message says what is missing."""


# ------------------------------------------------------------------------------------------
# Snakemake's dry run, as text


@dataclass(frozen=True)
class DryRunJob:
    """One job block of a dry run: ``rule NAME:`` and its indented fields."""

    rule: str
    wildcards: dict[str, str]
    threads: int  # Snakemake omits the line when it is 1
    resources: dict[str, Any]  # evaluated; None where Snakemake shows <TBD>
    #: Why Snakemake runs it (its ``reason:`` line); not part of the job's identity
    reason: str = field(default="", compare=False)


@dataclass
class DryRun:
    jobs: list[DryRunJob]
    #: Snakemake's job stats: rule -> jobs to run (``total`` left out); empty: nothing to do.
    stats: dict[str, int]
    #: The runs the workflow skips (run -> reason), in the order it warned about them.
    skipped: dict[str, str]
    #: Why the executor's limits could not be checked (the workflow's warning), if they weren't.
    unchecked: list[str] = field(default_factory=list)


_JOB = re.compile(r"(?:local)?(?:rule|checkpoint) (?P<rule>\S+):")
_FIELD = re.compile(r" {4}(?P<key>\w+): (?P<value>.*)")
_STAT = re.compile(r"(?P<rule>\S+)\s+(?P<count>\d+)")
_SKIP = re.compile(r"skipping run (?P<run>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"): (?P<why>.*)")
_UNCHECKED = re.compile(r"the plan cannot check the \S+ limits: .*")
#: ``key=value, key=value``: Snakemake's format of wildcards and resources (a value may hold
#: commas and ``=``, so a pair starts only where ``, name=`` follows).
_PAIR_SEPARATOR = re.compile(r", (?=[A-Za-z_]\w*=)")


def parse_pairs(text: str) -> dict[str, str]:
    """``a=1, b=x,y=z`` -> {"a": "1", "b": "x,y=z"} (Snakemake's ``format_dict``)."""
    pairs = {}
    for item in _PAIR_SEPARATOR.split(text.strip()) if text.strip() else []:
        key, sep, value = item.partition("=")
        if not sep:
            raise PlanError(f"not 'name=value' in a dry run's job block: {item!r}")
        pairs[key] = value
    return pairs


def resource_value(text: str) -> Any:
    """A resource as Snakemake printed it: an int, None for ``<TBD>`` (depends on input
    sizes not known yet), else the text."""
    if text == "<TBD>":
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def parse_dry_run(text: str) -> DryRun:
    """The jobs, job stats, skipped runs and unchecked limits of a dry run's output
    (``snakemake --dry-run``, Snakemake 9's default log format)."""
    jobs: list[DryRunJob] = []
    stats: dict[str, int] = {}
    skipped: dict[str, str] = {}
    unchecked: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if m := _JOB.fullmatch(line):
            fields = {}
            while i < len(lines) and (f := _FIELD.fullmatch(lines[i])):
                fields[f["key"]] = f["value"]
                i += 1
            jobs.append(
                DryRunJob(
                    rule=m["rule"],
                    wildcards=parse_pairs(fields.get("wildcards", "")),
                    threads=int(fields.get("threads", 1)),
                    resources={
                        k: resource_value(v)
                        for k, v in parse_pairs(fields.get("resources", "")).items()
                    },
                    reason=fields.get("reason", ""),
                )
            )
        elif line == "Job stats:" and not stats:
            while i < len(lines) and lines[i].strip() and not lines[i].startswith("total "):
                if s := _STAT.fullmatch(lines[i].strip()):
                    stats[s["rule"]] = int(s["count"])
                i += 1
        elif m := _SKIP.fullmatch(line):
            skipped[ast.literal_eval(m["run"])] = m["why"]
        elif _UNCHECKED.fullmatch(line):
            unchecked.append(line)
    return DryRun(jobs, stats, skipped, unchecked)


# ------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class TrainJob:
    """One training job as the scheduler is asked for it."""

    run: str
    nodes: int
    ranks: int
    cpus: int  # all ranks' CPUs (SGE: slots)
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
    unchecked: list[str] = field(default_factory=list)

    @property
    def cpu_hours(self) -> float:
        return sum(job.cpu_hours for job in self.jobs)

    @property
    def gpu_hours(self) -> float:
        return sum(job.gpu_hours for job in self.jobs)


def scheduler_of(executor: str, env: Mapping[str, str] | None = None) -> type[Scheduler]:
    """The scheduler Snakemake's ``executor`` submits to (or, where ``CLUSTERBENCH_SCHEDULER``
    names one that executor runs, that one: ``ssh`` under ``local``)."""
    try:
        found = of_executor(executor, os.environ if env is None else env)
    except AllocationError as exc:
        raise PlanError(str(exc)) from None
    if found is None:
        raise PlanError(
            f"no plan for the {executor!r} executor: clusterbench knows the schedulers of "
            f"{', '.join(executors())} ({EXECUTOR_VAR}, or the profile's `executor:`)"
        )
    return found


def train_job(job: DryRunJob, scheduler: type[Scheduler]) -> TrainJob:
    """The training job of a train rule's job block: what ``scheduler`` is asked for."""
    run = job.wildcards.get("run")
    if run is None:
        raise PlanError(f"a {job.rule} job of the dry run has no `run` wildcard: {job}")
    resources = job.resources
    runtime = resources.get("runtime")
    if not isinstance(runtime, int):
        raise PlanError(
            f"the {job.rule} job of run {run!r} has no wall-clock limit in the dry run "
            f"(resources: runtime={runtime}): give the train rule a runtime"
        )
    request = scheduler.job_request(resources, job.threads)
    gpus_per_node = resources.get("gpus_per_node") or 0
    return TrainJob(
        run=run,
        nodes=request.nodes,
        ranks=request.ranks,
        cpus=request.cpus,
        gpus=int(resources.get("nodes") or 1) * int(gpus_per_node),
        runtime=runtime,
    )


def make_plan(dry_run: DryRun, executor: str, train_rule: str = "train") -> Plan:
    """The plan of a dry run planned for ``executor``; ``train_rule``: the train rule's name
    (``bench_train`` in a module used ``as bench_*``)."""
    scheduler = scheduler_of(executor)
    others = [r for r in dry_run.stats if r != train_rule and re.fullmatch(r"(.+_)?train", r)]
    if train_rule not in dry_run.stats and others:
        raise PlanError(
            f"the dry run has no {train_rule} job but {dry_run.stats[others[0]]} "
            f"{others[0]} job(s): the train rule's name is --train-rule {others[0]}?"
        )
    jobs = [train_job(job, scheduler) for job in dry_run.jobs if job.rule == train_rule]
    jobs.sort(key=lambda job: job.run)  # the dry run's order is no order of execution
    if len(jobs) != dry_run.stats.get(train_rule, 0):
        raise PlanError(
            f"the dry run's job stats count {dry_run.stats.get(train_rule, 0)} {train_rule} "
            f"job(s) but it printed {len(jobs)} {train_rule} job block(s): run it without "
            "--quiet (and with the train rule's name: --train-rule)"
        )
    return Plan(
        jobs=jobs,
        skipped=dict(dry_run.skipped),
        jobs_per_rule=dict(dry_run.stats),
        unchecked=list(dry_run.unchecked),
    )


def format_plan(plan: Plan, executor: str, scheduler: str | None = None) -> str:
    """The plan as text: one line per training job, the totals, the jobs per rule, the skips."""
    width = max([len("run"), *(len(job.run) for job in plan.jobs)])
    lines = [
        f"clusterbench plan ({executor} executor"
        + (f", {scheduler} scheduler" if scheduler and scheduler != executor else "")
        + "): every training job to run, as the "
        "scheduler will be asked for it",
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
    if plan.jobs_per_rule:
        per_rule = ", ".join(f"{rule} {count}" for rule, count in plan.jobs_per_rule.items())
        total = sum(plan.jobs_per_rule.values())
        lines.append(f"  jobs per rule ({total} in all): {per_rule}")
    else:
        lines.append("  jobs per rule: none (nothing to be done)")
    if plan.skipped:
        lines.append(f"  skipped ({len(plan.skipped)}):")
        lines += [f"    {run}: {reason}" for run, reason in plan.skipped.items()]
    else:
        lines.append("  skipped: none")
    lines += [f"  not checked: {note}" for note in plan.unchecked]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# make plan


def profile_dir(profile: str) -> Path | None:
    """Where Snakemake finds ``--profile profile``: the directory itself, else
    ``$XDG_CONFIG_HOME/snakemake/<name>`` (``~/.config``) or ``/etc/xdg/snakemake/<name>``."""
    path = Path(profile)
    if path.is_dir():
        return path
    config_home = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    for base in (Path(config_home), Path("/etc/xdg")):
        if (base / "snakemake" / profile).is_dir():
            return base / "snakemake" / profile
    return None


def profile_executor(profile: str | None) -> str | None:
    """The ``executor:`` of a Snakemake profile (its ``config.v8+.yaml`` or ``config.yaml``)."""
    import yaml

    folder = profile_dir(profile) if profile else None
    for name in ("config.v8+.yaml", "config.yaml"):
        if folder is not None and (folder / name).is_file():
            path = folder / name
            try:
                settings = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise PlanError(f"cannot read the profile {path}: {exc}") from None
            return settings.get("executor") if isinstance(settings, dict) else None
    return None


def executor_option(args: Sequence[str]) -> str | None:
    """The ``--executor``/``-e`` given among Snakemake's arguments, if any."""
    for i, arg in enumerate(args):
        if arg.startswith("--executor="):
            return arg.split("=", 1)[1]
        if arg in ("--executor", "-e") and i + 1 < len(args):
            return args[i + 1]
    return None


def planned_executor(profile: str | None, args: Sequence[str], env: Mapping[str, str]) -> str:
    """The executor the dry run plans for: ``CLUSTERBENCH_EXECUTOR``, else ``--executor``
    among Snakemake's arguments, else the profile's, else ``local``."""
    return env.get(EXECUTOR_VAR) or executor_option(args) or profile_executor(profile) or "local"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        prog="python -m clusterbench.plan",
        description="Snakemake's dry run, then every training job it would run with its nodes, "
        "ranks, CPUs, GPUs and wall-clock limit, the CPU-/GPU-hours requested, the jobs per "
        "rule and the runs skipped, and why. Submits nothing.",
        epilog="Arguments after -- go to snakemake (e.g. --set-resources train:runtime=90).",
    )
    parser.add_argument("--profile", default=None, help="the Snakemake profile to plan with")
    parser.add_argument(
        "--train-rule", default="train", help="the train rule's name (a module's: bench_train)"
    )
    args = parser.parse_args(argv[:split])
    snakemake_args = argv[split + 1 :]
    try:
        executor = planned_executor(args.profile, snakemake_args, os.environ)
        scheduler_of(executor)
    except PlanError as exc:
        print(f"clusterbench plan: error: {exc}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "snakemake"]
    if args.profile:
        cmd += ["--profile", args.profile]
    cmd += ["--dry-run", *snakemake_args]
    proc = subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, EXECUTOR_VAR: executor},
    )
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        print(
            f"clusterbench plan: the dry run failed (exit {proc.returncode}): no plan",
            file=sys.stderr,
        )
        return proc.returncode
    try:
        plan = make_plan(parse_dry_run(proc.stdout), executor, args.train_rule)
    except PlanError as exc:
        print(f"clusterbench plan: error: {exc}", file=sys.stderr)
        return 1
    print()
    print(format_plan(plan, executor, scheduler_of(executor).name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
