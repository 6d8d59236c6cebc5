"""Which runs can run where the workflow runs, and which of them a target may not ask for.

Whether a run can run depends on the executor, known only while Snakemake builds the job graph.
:meth:`RunPlan.unavailable` decides it once per process (the report's input functions ask
first: ``rule all`` -> report -> train), through the pre-flight check of the executor's
scheduler (:func:`clusterbench.pipeline.preflight.unavailable`) with each train job's resources as
it
would be submitted. A run with ``on_unavailable: skip`` (the default) that cannot run is warned
about and left out of the report's inputs, and so of every target; one with ``fail`` stays in.
Once Snakemake has decided which jobs run, :meth:`RunPlan.refusals` names every training job
among them that may not run here: a ``fail`` run's, a skipped run's that a target asks for by
name, or any when the scheduler could not be asked. A trained run asks nothing: a profile whose
scheduler is absent does nothing wrong when there is nothing to do.

A dry run has no executor of its own: it plans for ``CLUSTERBENCH_EXECUTOR`` (``make plan`` sets
it from the profile), else the local one with the machine's cores; a scheduler it cannot ask is
a warning. Without any executor (``--report``) the local decision is used and nothing is
refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from clusterbench.launch.schedulers import (
    SCHEDULERS,
    AllocationError,
    Scheduler,
    executors,
    of_executor,
)
from clusterbench.pipeline import layout, preflight
from clusterbench.pipeline.adapter import Adapter

#: The executors that run nothing: a dry run plans, ``--touch`` marks outputs done.
PLANNING = ("dryrun", "touch")


class RunPlan:
    """The skip decisions for ``runs`` (name -> resolved run) under ``adapter``'s executor."""

    def __init__(
        self,
        runs: Mapping[str, dict[str, Any]],
        environment_defaults: Mapping[str, Any],
        environments: Mapping[str, Any],
        adapter: Adapter,
        env: Mapping[str, str] = os.environ,
        staging: str | None = None,
    ) -> None:
        self.runs, self.adapter, self.env = runs, adapter, env
        #: The config's ``staging.dir`` (the pre-flight's hosts check names it).
        self.staging = staging
        self._defaults, self._environments = environment_defaults, environments
        self._reasons: dict[str, str] | None = None
        #: Why the executor's scheduler could not be asked (a real run), else None.
        self.unreachable: str | None = None

    def executor(self) -> tuple[str, bool]:
        """``(executor, planning)``: the executor whose limits decide which runs are skipped,
        and whether this Snakemake only plans (a dry run, ``--touch``, ``--report``: no
        executor of its own). Then ``CLUSTERBENCH_EXECUTOR`` names the executor to plan for,
        else the local one."""
        name = self.adapter.executor()
        if name is not None and name not in PLANNING:
            return name, False
        planned = self.env.get("CLUSTERBENCH_EXECUTOR") or "local"
        if planned not in executors():
            self.adapter.stop(
                f"environment variable CLUSTERBENCH_EXECUTOR={planned!r}: expected one of "
                f"{', '.join(executors())} (the executor a dry run plans for)"
            )
        return planned, True

    def scheduler(self, executor: str) -> type[Scheduler] | None:
        """The scheduler behind ``executor`` (``CLUSTERBENCH_SCHEDULER`` may name one that
        executor runs: ``ssh`` under ``local``); a wrong one stops the workflow."""
        try:
            return of_executor(executor, self.env)
        except AllocationError as exc:
            self.adapter.stop(str(exc))

    def unavailable(self) -> dict[str, str]:
        """Run -> why it cannot run under this executor (see the module's docstring), decided
        once; each skipped run is warned about with its reason. Only in the main process:
        cluster jobs parse and build their graph again."""
        if self._reasons is not None:
            return self._reasons
        if not self.adapter.is_main_process:
            return {}
        executor, planning = self.executor()
        scheduler = self.scheduler(executor)
        if scheduler is None or scheduler.cluster:  # jobs parse the config again elsewhere
            self.refuse_submit_host_cores()
        context = preflight.PreflightContext(
            runs=dict(self.runs),
            resources=self.adapter.train_job_resources,
            # a dry run's --cores is 1 whatever the profile says: plan with the machine's
            cores=None if planning else (self.adapter.cores() or 1),
            executor_settings=self.adapter.executor_settings(),
            data_dirs={
                name: os.path.abspath(self.adapter.in_workdir(layout.data_dir(run["dataset"])))
                for name, run in self.runs.items()
            },
            staging=self.staging,
            env=self.env,
        )
        reasons: dict[str, str] = {}
        try:
            reasons = preflight.unavailable(executor, context)
        except preflight.PreflightError as exc:
            if planning:
                self.adapter.warn(f"the plan cannot check the {executor} limits: {exc}")
            else:
                self.unreachable = str(exc)
                self.adapter.warn(
                    f"{exc}: no run is skipped, and a training job to run stops the workflow"
                )
        for name, reason in reasons.items():
            if self.runs[name]["on_unavailable"] == "skip":
                self.adapter.warn(f"skipping run {name!r}: {reason}")
        self._reasons = reasons
        return reasons

    def refuse_submit_host_cores(self) -> None:
        """Runs whose environment preset takes ``workers: cores`` with ``cores_per_node:
        null`` took this machine's cores: right for local jobs, wrong on a cluster, whose jobs
        parse the config again on a compute node (another count: another run). Stop, naming
        the key."""
        from clusterbench.config import experiments

        if self._defaults["cores_per_node"] is not None:
            return
        presets = experiments.environments(self._environments, self._defaults)
        runs = [
            name
            for name, run in self.runs.items()
            if run["environment"] is not None
            and presets[run["environment"]]["workers"] == experiments.CORES
        ]
        if runs:
            self.adapter.stop(
                f"environment_defaults.cores_per_node: null takes the cores of this machine "
                f"({os.cpu_count()}) for {', '.join(map(repr, runs))}; on a cluster set it to "
                "the cores of a compute node (the jobs read the config again there)"
            )

    def available(self) -> list[str]:
        """The runs whose results the report takes: all but the skipped ones, in the config's
        order. A config none of whose runs can run here stops the workflow, naming each."""
        reasons = self.unavailable()
        if self.adapter.executor() is not None and reasons and len(reasons) == len(self.runs):
            executor, _ = self.executor()
            self.adapter.stop(
                f"no run can run under the {executor} executor here:\n"
                + "\n".join(reasons.values())
            )
        return [name for name in self.runs if not self._skipped(name, reasons)]

    def _skipped(self, name: str, reasons: Mapping[str, str]) -> bool:
        return name in reasons and self.runs[name]["on_unavailable"] == "skip"

    def skipped(self) -> list[dict[str, Any]]:
        """The skipped runs as the report takes them (``--skipped``): ``{run, experiment,
        environment, point, reason}`` each, in the config's order."""
        reasons = self.unavailable()
        return [
            {
                "run": name,
                "experiment": run["experiment"],
                "environment": run["environment"],
                "point": run["point"],
                "reason": reasons[name],
            }
            for name, run in self.runs.items()
            if self._skipped(name, reasons)
        ]

    def refusals(self, trained: list[str]) -> list[str]:
        """Why the training jobs of runs ``trained`` (those Snakemake will run) may not run
        here: one message per refusal, none if they may."""
        if not trained:
            return []
        found = self.grow_refusals(trained)
        if self.unreachable is not None:
            executor, _ = self.executor()
            scheduler = self.scheduler(executor)
            name = executor if scheduler is None else scheduler.name
            return found + [
                f"{self.unreachable}\n(the {name} scheduler decides whether a run can run "
                f"there; {len(trained)} training job(s) are to be submitted: "
                f"{', '.join(map(repr, trained[:5]))}{', ...' if len(trained) > 5 else ''})"
            ]
        reasons = self.unavailable()
        failing = [n for n in trained if n in reasons and self.runs[n]["on_unavailable"] == "fail"]
        if failing:
            found.append(
                "\n".join(reasons[n] for n in failing)
                + f"\n(on_unavailable: fail for {', '.join(map(repr, failing))}; with skip, "
                "such a run is left out and the rest goes on)"
            )
        found += [
            f"{reasons[n]}\n(run {n!r} is skipped here, and a target asks for it)"
            for n in trained
            if self._skipped(n, reasons)
        ]
        return found

    def grow_refusals(self, trained: list[str]) -> list[str]:
        """The runs of ``trained`` that grow through worker jobs (``grow: jobs``) under an
        executor whose scheduler cannot start a rank in another job: one message naming them
        and why; a plan (a dry run) only warns, since it plans for the local executor unless
        told otherwise."""
        growing = [n for n in trained if self.runs[n].get("grow") == "jobs"]
        if not growing:
            return []
        executor, planning = self.executor()
        scheduler = self.scheduler(executor)
        problem = scheduler.grow_problem() if scheduler is not None else None
        if problem is None:
            return []
        able = [name for name, cls in SCHEDULERS.items() if cls.grow_problem() is None]
        message = (
            f"run(s) {', '.join(map(repr, growing))} set grow: jobs, and under the {executor} "
            f"executor {problem} (schedulers that grow runs through worker jobs: "
            f"{', '.join(able)})"
        )
        if planning:
            self.adapter.warn(
                f"{message}; this plan is for the {executor} executor "
                "(CLUSTERBENCH_EXECUTOR=slurm or sge plans for a cluster)"
            )
            return []
        return [message]
