"""The workflow's logic, called from rules/*.smk: one :class:`Pipeline` per Snakefile parse.

rules/common.smk makes it from the validated config and a :class:`SnakemakeAdapter`, and the
rules take their input, priority and resource functions from it. What runs when:

- parse time (every process, cluster jobs included, so kept to a minimum): the config's runs,
  datasets and comm jobs, the environment for the jobs, the code files each stage reads;
- while the job graph is built (input functions; only in the main process): the checks of each
  used dataset's files (:class:`Checks`), the skip decisions (:class:`RunPlan`);
- once Snakemake has decided which jobs run, before any of them starts: every rule's priority
  function (:meth:`Pipeline.priority`, which Snakemake calls for the jobs that will run, and
  only for them) runs :meth:`Pipeline.before_jobs` once: the training jobs that may not run
  here, and the outputs the planned jobs read, checked against their records.

A problem found stops the workflow with a message alone (:meth:`Adapter.stop`), nothing run or
deleted. Imported by the Snakefile: the standard library, yaml and jsonschema only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clusterbench import config as cbconfig
from clusterbench.config import storage
from clusterbench.launch.schedulers import SCHEDULER_VAR, SCHEDULERS
from clusterbench.pipeline import code, comm_jobs, commands, layout
from clusterbench.pipeline.adapter import Adapter
from clusterbench.pipeline.checks import DIGESTS, Checks
from clusterbench.pipeline.comm_jobs import CommJob
from clusterbench.pipeline.resources import train_resources
from clusterbench.pipeline.runs import RunPlan


class Pipeline:
    """The workflow's logic for the validated config ``cfg`` of a checkout at ``checkout``."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        adapter: Adapter,
        checkout: Path,
        env: Mapping[str, str] = os.environ,
        digests: Path | None = DIGESTS,
    ) -> None:
        self.cfg, self.adapter, self.checkout = cfg, adapter, Path(checkout)
        self.env = scheduler_env(cfg, env, adapter)
        self.runs: dict[str, dict[str, Any]] = {run["name"]: run for run in cfg["runs"]}
        self.datasets = sorted({run["dataset"] for run in cfg["runs"]})
        self.plan = RunPlan(
            self.runs,
            cfg["environment_defaults"],
            cfg["environments"],
            adapter,
            self.env,
            staging=cfg["staging"]["dir"],
        )
        #: The datasets generated where they train (format synthetic, synthetic-text): their
        #: preprocessing writes meta.json alone (storage ``synthetic``).
        self.synthetic = [
            d for d in self.datasets if cbconfig.synthetic_dataset(cfg["datasets"][d])
        ]
        #: How each dataset is stored (clusterbench.config.storage: arrays, files read where
        #: they are, files extracted, synthetic): which files its preprocessing writes.
        self.storages = {
            d: "synthetic" if d in self.synthetic else storage.stored_as(cfg["datasets"][d])
            for d in self.datasets
        }
        in_place = {
            d: {"path": ds["path"], "format": ds["format"], "check": ds.get("check", "auto")}
            for d in self.datasets
            for ds in [cfg["datasets"][d]]
            if ds.get("path")
        }
        self.checks = Checks(
            self.runs, adapter, digests, self.storages, in_place, cbconfig.CHECK_FILES_LIMIT
        )
        self._resources: dict[str, dict[str, Any]] = {}
        #: The comm jobs by name (:mod:`clusterbench.pipeline.comm_jobs`: one per multi-worker
        #: environment and backend of the runs; none with ``comm.enabled: false``).
        self.comm_jobs = comm_jobs.config_jobs(cfg)
        self._comm_resources: dict[str, dict[str, Any]] = {}
        self._before_jobs_done = False
        self._job_checks: list[tuple[str, Callable[[], str | None]]] = []
        self._stamps: dict[str, str] = {}
        #: Your own models', losses' and optimisers' code stamps, by name (written now, by the
        #: main process).
        self.model_stamps = {name: self.model_code(name) for name in self.own_models()}

    # ------------------------------------------------------------------- parse time
    def environment(self, python: str = sys.executable) -> dict[str, str]:
        """What jobs (local ones, and cluster jobs, which parse the Snakefile again) need in
        their environment: ``python`` and the package of this Snakemake's own environment
        first on ``PATH``/``PYTHONPATH`` (as if it were activated), and the settings that are
        no rerun trigger (download and checkpoint settings cannot change a result: bumping
        ``retries`` must not make every stage stale), read by the stages from there."""
        found = {
            "PATH": prepend_path(self.env.get("PATH", ""), str(Path(python).parent)),
            "PYTHONPATH": prepend_path(
                self.env.get("PYTHONPATH", ""), str(self.checkout / "workflow")
            ),
            "CLUSTERBENCH_HOME": str(self.checkout),
            "CLUSTERBENCH_DOWNLOAD": cbconfig.canonical_json(self.cfg["download"]),
            "CLUSTERBENCH_CHECKPOINTS": cbconfig.canonical_json(self.cfg["checkpoints"]),
        }
        if self.cfg["site"]:  # the site label runs record; unset: the launcher asks
            found["CLUSTERBENCH_SITE"] = self.cfg["site"]
        if SCHEDULER_VAR in self.env:  # the config's `scheduler` (a profile's), or the variable
            found[SCHEDULER_VAR] = self.env[SCHEDULER_VAR]
        return found

    def remote_download(self) -> bool:
        """``CLUSTERBENCH_REMOTE_DOWNLOAD=1``: the site's compute nodes have internet, so the
        download runs as a cluster job; unset or ``0``: it runs on the submit host."""
        value = self.env.get("CLUSTERBENCH_REMOTE_DOWNLOAD", "")
        if value not in ("", "0", "1"):
            self.adapter.stop(
                f"environment variable CLUSTERBENCH_REMOTE_DOWNLOAD={value!r}: expected 1 "
                "(download in a cluster job) or 0/unset (download on the submit host)"
            )
        return value == "1"

    def script(self, stage: str) -> str:
        """The entry point ``scripts/<stage>.py``: an input, so editing it reruns the stage."""
        return str(self.checkout / "scripts" / f"{stage}.py")

    def stage_code(self, *stages: str) -> str:
        """The code stamp of ``stages`` (:mod:`clusterbench.pipeline.code`): one input, so that
        editing the stage's code reruns the stage and what follows. Written here, while the
        Snakefile is parsed, by the main process (cluster jobs read the one it wrote), in the
        working directory's ``.snakemake`` (as the checksums: a module's prefix holds only what
        its jobs make). A path relative to the working directory (a working directory copied
        or moved elsewhere reruns nothing), which the rules mark ``local`` (no module prefix)."""
        name = "+".join(stages)
        if name not in self._stamps:
            stamp = code.STAMPS / f"{name}.sha256"
            if self.adapter.is_main_process:
                files = [f for stage in stages for f in code.stage_files(self.checkout, stage)]
                code.write_stamp(stamp, files, self.checkout, self.checks.cache.sha256)
            self._stamps[name] = str(stamp)
        return self._stamps[name]

    def own_models(self) -> list[str]:
        """The config's own models, losses and optimisers (``package.module:callable``), each
        once."""
        from clusterbench.models.custom_training import own_code

        return sorted({name for r in self.runs.values() for _, name in own_code(r)})

    def model_code(self, model: str) -> str | None:
        """The code stamp of your own ``model``'s (loss's, optimiser's) module
        (:func:`code.model_stamp`): an input of the train jobs of its runs, so that editing the
        module retrains them, as a stage's code stamp (:meth:`stage_code`). None where the
        module has no file (built in)."""
        from clusterbench.models.custom import module_files

        files = module_files(model, what="code")
        if not files:
            return None
        stamp = code.model_stamp(model)
        if self.adapter.is_main_process:
            code.write_stamp(stamp, files, self.checkout, self.checks.cache.sha256)
        return str(stamp)

    # ------------------------------------------------------------------- runs
    def run_of(self, wildcards: Any) -> dict[str, Any]:
        return self.runs[wildcards.run]

    def data_input(self) -> list[str] | Callable[[Any], list[str]]:
        """The train and evaluate rules' data input. When every run reads one dataset (a
        sweep), its files as a plain list; else the input function :meth:`run_data`. Snakemake
        makes a new file object, parsing its path, for each file an input function returns, in
        every job: for a sweep's seven files a run, the costliest part of its job graph."""
        if len(self.datasets) == 1:
            return self.data_files(self.datasets[0])
        return self.run_data

    def run_data(self, wildcards: Any) -> list[str]:
        """Input function: the preprocessed files of the run's dataset (none for a name the
        config has no run of: :meth:`known_run`)."""
        run = self.runs.get(wildcards.run)
        return [] if run is None else self.data_files(run["dataset"])

    def known_run(self, wildcards: Any) -> list[str]:
        """Input function of the train rule: for a run of the config, the code stamps of its
        own model, loss and optimiser (:meth:`model_code`; nothing for built-in ones). For
        another name (the ``run`` wildcard matches any file name: an alternation of every name
        made Snakemake's graph quadratic in the runs), a file nothing makes, which Snakemake
        reports as the job's missing input."""
        run = self.runs.get(wildcards.run)
        if run is None:
            return [f"(no run {wildcards.run!r} in the config)"]
        from clusterbench.models.custom_training import own_code

        stamps = [self.model_stamps.get(name) for _, name in own_code(run)]
        return sorted({stamp for stamp in stamps if stamp is not None})

    def data_files(self, dataset: str) -> list[str]:
        """Every file of the preprocessed ``dataset``, as its storage has it."""
        return layout.stored_files(dataset, self.storages[dataset])

    def preprocess_check(self, wildcards: Any, output: Any) -> str:
        """The indexing's ``--check``: the dataset's ``check`` where it is read in place
        (``content``: each image's sha256 goes into the index), else ``auto``. It takes
        ``output``, so it is no rerun trigger (Snakemake compares no such param): an index
        made without the digests ``content`` needs is made again by the check before any job
        (:meth:`Checks.in_place`)."""
        source = self.checks.in_place_sources.get(wildcards.dataset) or {}
        return source.get("check", "auto")

    def train_command(self, wildcards: Any, input: Any, output: Any) -> commands.TrainCommand:
        """Param function of the train rule: the job's options but its rerun trigger
        (:func:`clusterbench.pipeline.commands.train_command`)."""
        return commands.train_command(self.run_of(wildcards), self.cfg, input.data[-1], output.info)

    def train_threads(self, wildcards: Any) -> int:
        """The train job's threads: every worker's CPUs."""
        run = self.run_of(wildcards)
        return cbconfig.allocated_workers(run) * run["cpus_per_worker"]

    def train_resource(self, key: str) -> Callable[[Any], Any]:
        """The resource function of ``key`` of the train rule (None: not used by this run);
        each run's resources (:func:`clusterbench.pipeline.resources.train_resources`) are computed
        when a job first asks."""

        def resource(wildcards: Any) -> Any:
            found = self._resources.get(wildcards.run)
            if found is None:
                found = self._resources[wildcards.run] = train_resources(self.run_of(wildcards))
            return found.get(key)

        return resource

    # ------------------------------------------------------------------- watch jobs
    def watch_files(self, runs: list[str]) -> list[str]:
        """The watch jobs' outputs of ``runs`` (rules/watch.smk): one per run where the config
        evaluates while training (``evaluate.every_minutes``), else none."""
        if not self.cfg["evaluate"].get("every_minutes"):
            return []
        return [f"results/watch/{run}/watch.json" for run in runs]

    def watch_threads(self, wildcards: Any) -> int:
        """A watch job's threads: none where Snakemake runs the jobs on this machine (it
        evaluates while its training waits: no core of its own, beside the timed training),
        one on a cluster (its own job)."""
        return 0 if self.adapter.executor() in ("local", None) else 1

    def watch_runtime(self, wildcards: Any) -> int:
        """A watch job's wall-clock limit, minutes: its run's training job's and half an hour
        (queued beside it, it must outlast it)."""
        return int(self.run_of(wildcards)["runtime"]) + 30

    def available_runs(self) -> list[str]:
        """The runs the report (and so every target) takes: see :class:`RunPlan`."""
        return self.plan.available()

    def skipped_runs(self) -> list[dict[str, Any]]:
        return self.plan.skipped()

    def report_benchmarks(self, runs: list[str]) -> list[str]:
        """The benchmark files of ``runs``, of the datasets they use and of their comm jobs."""
        datasets = sorted({self.runs[run]["dataset"] for run in runs})
        return [
            *(
                f"results/benchmarks/{rule}/{d}.tsv"
                for rule in ("download", "preprocess")
                for d in datasets
            ),
            *(f"results/benchmarks/{rule}/{r}.tsv" for rule in ("train", "evaluate") for r in runs),
            *self.comm_files("results/benchmarks/comm/{name}.tsv", runs),
        ]

    def dataset_records(self, runs: list[str]) -> list[str]:
        """The ``meta.json`` of each dataset ``runs`` train on (the report's data page)."""
        datasets = sorted({self.runs[run]["dataset"] for run in runs})
        return [layout.stored_files(d, self.storages[d])[-1] for d in datasets]

    # ------------------------------------------------------------------- comm jobs
    def comm_of(self, wildcards: Any) -> CommJob:
        """The comm job ``wildcards.comm`` (the rule's wildcard allows these names only)."""
        return self.comm_jobs[wildcards.comm]

    def comm_threads(self, wildcards: Any) -> int:
        """The comm job's threads, as a train job's of its size."""
        return comm_jobs.threads(self.comm_of(wildcards), self.runs)

    def comm_resource(self, key: str) -> Callable[[Any], Any]:
        """The resource function of ``key`` of the comm rule (None: not used by the job): a
        train job's resources of its size (:func:`clusterbench.pipeline.comm_jobs.job_run`),
        computed
        when a job first asks."""

        def resource(wildcards: Any) -> Any:
            found = self._comm_resources.get(wildcards.comm)
            if found is None:
                job = self.comm_of(wildcards)
                run = comm_jobs.job_run(job, self.runs[job.runs[0]], self.cfg["comm"])
                found = self._comm_resources[wildcards.comm] = train_resources(run)
            return found.get(key)

        return resource

    def comm_files(self, pattern: str, runs: list[str]) -> list[str]:
        """``pattern`` (its ``{name}``) for every comm job measuring for one of ``runs``: the
        skipped runs' environments drop out with them."""
        return [pattern.format(name=name) for name in comm_jobs.jobs_of_runs(self.comm_jobs, runs)]

    # ------------------------------------------------------------------- checks
    def raw_files_intact(self, wildcards: Any) -> list[str]:
        """Input function of the download rule; it adds no file: see :meth:`Checks.raw_files`
        (here because the executor, and so whether this is a dry run, and the forced files
        are known only once Snakemake builds the job graph)."""
        self.checks.raw_files(wildcards.dataset)
        return []

    def arrays_intact(self, wildcards: Any) -> list[str]:
        """Input function of the preprocess rule; it adds no file: see :meth:`Checks.arrays`
        (Snakemake calls it whenever a job reads the dataset, planned to run or not)."""
        self.checks.arrays(wildcards.dataset)
        return []

    def files_intact(self, wildcards: Any) -> list[str]:
        """Input function of the preprocess rules of image folders stored as files; it adds no
        file: a folder read in place that is missing, unreadable or changed
        (:meth:`Checks.in_place`), then the index against its record (:meth:`Checks.arrays`)."""
        self.checks.in_place(wildcards.dataset)
        self.checks.arrays(wildcards.dataset)
        return []

    def priority(self, rule: str) -> Callable[[Any], int]:
        """The ``priority:`` function of ``rule``: the run's ``priority`` for a train job, else
        0 (Snakemake's default). Snakemake calls it for the jobs it will run, once it has
        decided which, and before any job starts: the first call runs
        :meth:`before_jobs`."""

        def priority(wildcards: Any) -> int:
            self.before_jobs()
            return self.run_of(wildcards)["priority"] if rule == "train" else 0

        return priority

    def before_jobs(self) -> None:
        """Once, before any job: stop if a planned training job may not run here
        (:meth:`RunPlan.refusals`), a planned job would read a damaged output
        (:meth:`Checks.consumed`) or a planned job's own check fails
        (:meth:`check_before_jobs`). Not in cluster jobs, nor where nothing runs (``--touch``,
        no executor)."""
        if self._before_jobs_done:
            return
        self._before_jobs_done = True
        if not self.adapter.is_main_process or self.adapter.executor() in (None, "touch"):
            return
        planned = self.adapter.planned_jobs()
        if planned is None:
            return
        trained = [job.wildcards["run"] for job in planned if job.rule == "train"]
        refusals = self.plan.refusals(trained)
        if refusals:
            self.adapter.stop("\n".join(refusals))
        self.checks.consumed(planned)
        rules = {job.rule for job in planned}
        for rule, check in self._job_checks:
            problem = check() if rule in rules else None
            if problem:
                self.adapter.stop(problem)

    def check_before_jobs(self, rule: str, check: Callable[[], str | None]) -> None:
        """Have :meth:`before_jobs` call ``check()`` when a job of ``rule`` is planned, and stop
        the workflow with what it returns (None: nothing wrong). For what only that job's
        running needs (e.g. a store it appends to), checked then and not at every parse."""
        self._job_checks.append((rule, check))


def prepend_path(value: str, entry: str) -> str:
    """The path list ``value`` with ``entry`` first, once (cluster jobs inherit it and parse
    again)."""
    rest = [p for p in value.split(os.pathsep) if p and p != entry]
    return os.pathsep.join([entry, *rest])


def scheduler_env(
    cfg: Mapping[str, Any], env: Mapping[str, str], adapter: Adapter
) -> Mapping[str, str]:
    """``env`` with the config's ``scheduler`` (``profiles/ssh`` sets ``ssh``) as
    ``CLUSTERBENCH_SCHEDULER``, which the workflow's checks and the jobs' launchers read; the
    variable set to another one stops the workflow, naming both."""
    wanted = cfg.get("scheduler", "auto")
    if wanted == "auto":
        return env
    if wanted not in SCHEDULERS:
        adapter.stop(
            f"scheduler: {wanted!r} is not a scheduler clusterbench has (auto, "
            f"{', '.join(SCHEDULERS)})"
        )
    given = (env.get(SCHEDULER_VAR) or "auto").strip().lower()
    if given not in ("auto", wanted):
        adapter.stop(
            f"the config's scheduler: {wanted} (a profile's `config:` entry, or your own) and "
            f"the environment's {SCHEDULER_VAR}={given} disagree: unset the variable, or use "
            f"the profile of {given}"
        )
    return {**env, SCHEDULER_VAR: wanted}
