"""The few things clusterbench reads from Snakemake's ``workflow`` object, behind one class.

:class:`Adapter` says what the workflow's own logic (:mod:`clusterbench.pipeline`) needs to know
about the Snakemake run it is part of; :class:`SnakemakeAdapter` answers it from Snakemake 9's
``workflow`` and ``rules`` objects, the one place that reads Snakemake's internals (tests use a
fake). When each thing is known matters, and Snakemake says little about it:

- while the Snakefile is parsed (every process, cluster jobs included): whether this is the
  main process or a cluster job's, the module prefix (``path_modifier``), the cores given;
  **not** the executor, whether this is a dry run, or the forced files (``executor_plugin`` is
  None and ``dag_settings`` unset until the job graph is built);
- while the job graph is built (input functions): the executor, the dry-run flag, the forced
  files, the train rule's resources as a job would be submitted with;
- once Snakemake has decided which jobs run (a rule's ``priority`` function, which Snakemake
  calls for those jobs only, before any job starts): the planned jobs.

Every attribute read here is Snakemake's own, not its documented API: :func:`unreadable` checks
them while the Snakefile is parsed, so that a Snakemake whose internals moved is refused at
once, naming its version and the releases clusterbench runs with (pyproject.toml's range).

Imported by the Snakefile: the standard library only (Snakemake's logger is imported where it
is used).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

#: The rules of the workflow, by the names rules/*.smk give them (a module renames them).
RULES = (
    "download",
    "preprocess",
    "preprocess_files",
    "preprocess_extracted",
    "train",
    "comm",
    "evaluate",
    "watch",
    "history",
    "report",
    "best",
)


@dataclass(frozen=True)
class PlannedJob:
    """A job Snakemake will run: its rule (one of :data:`RULES`, else Snakemake's name for it),
    wildcards, input and output paths (as Snakemake uses them: with a module's prefix)."""

    rule: str
    wildcards: dict[str, str] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


#: What is read of Snakemake's ``workflow`` object (dotted attributes); the rest (the executor,
#: the job graph) is read later, each with a fallback where Snakemake lacks it.
WORKFLOW_ATTRIBUTES = (
    "is_main_process",
    "remote_exec",
    "current_basedir",
    "overwrite_configfiles",
    "config_settings.config_args",
    "modifier.skip_configfile",
    "modifier.path_modifier.replace_prefix",
    "resource_settings.cores",
)
#: The arguments of ``Rule.expand_resources`` the train job's resources are asked with.
EXPAND_RESOURCES = ("wildcards", "input", "attempt", "skip_evaluation")


def unreadable(workflow: Any, pyproject: Path | None = None) -> str | None:
    """Why clusterbench cannot read what it needs of this Snakemake (a message naming its
    version and the releases clusterbench runs with), None when it can."""
    missing = [name for name in WORKFLOW_ATTRIBUTES if not _has(workflow, name)]
    try:
        from snakemake.rules import Rule

        wanted = set(EXPAND_RESOURCES) - set(inspect.signature(Rule.expand_resources).parameters)
    except (ImportError, AttributeError, TypeError, ValueError):
        wanted = {"(the method itself)"}
    missing += [f"Rule.expand_resources({name}=...)" for name in sorted(wanted)]
    if not missing:
        return None
    import snakemake

    version = getattr(snakemake, "__version__", "of unknown version")
    return (
        f"this Snakemake ({version}) lacks what clusterbench reads of it: "
        f"{', '.join(missing)}. clusterbench runs with {supported(pyproject)}: install one of "
        "those (make setup does) or a clusterbench release made for this Snakemake"
    )


def supported(pyproject: Path | None) -> str:
    """The Snakemake releases clusterbench runs with: pyproject.toml's requirement."""
    import tomllib

    try:
        with open(pyproject or Path(__file__).resolve().parents[3] / "pyproject.toml", "rb") as fh:
            deps = tomllib.load(fh)["project"]["dependencies"]
        return next(d for d in deps if d.split(">")[0].split("=")[0].strip() == "snakemake")
    except (OSError, KeyError, StopIteration, ValueError):
        return "Snakemake 9 (pyproject.toml's range)"


def _has(obj: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return False
    return True


class Adapter:
    """What the workflow's logic asks Snakemake. Each method says when its answer is known.

    ``is_main_process`` and ``remote_exec`` are known at parse time: False and True in a
    cluster job's Snakemake (which parses the Snakefile again and builds its own graph).
    """

    is_main_process: bool = True
    remote_exec: bool = False

    def in_workdir(self, path: str) -> str:
        """``path`` (as a rule declares it) as Snakemake uses it: with a module's prefix."""
        return path

    def executor(self) -> str | None:
        """The executor plugin's name (``local``, ``slurm``, ``sge``, ``dryrun``, ``touch``,
        ...), known once the job graph is built; None without one (``--report``, ``--lint``)
        and at parse time."""
        raise NotImplementedError

    def cores(self) -> int | None:
        """``--cores``: what local jobs get."""
        raise NotImplementedError

    def executor_settings(self) -> Any:
        """The executor plugin's settings (e.g. the SGE plugin's ``pe``), or None."""
        return None

    def train_job_resources(self, run: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """The resources ``keys`` of ``run``'s train job as it would be submitted (the
        profile's defaults and ``--set-resources`` included); only those are evaluated."""
        raise NotImplementedError

    def forced(self, rule: str, outputs: list[str]) -> bool:
        """Whether the job of ``rule`` with ``outputs`` is forced (``--forcerun`` of the rule
        or of one of the files, ``--forceall``, ``--forcetargets``): it runs whatever its
        files hold. Known while the job graph is built."""
        raise NotImplementedError

    def force(self, path: str) -> bool:
        """Force the job that makes ``path``, as ``--forcerun path`` would; False where this
        Snakemake offers no way to."""
        raise NotImplementedError

    def planned_jobs(self) -> list[PlannedJob] | None:
        """The jobs Snakemake will run, once it has decided (see :class:`Pipeline.priority`);
        None where this Snakemake does not tell."""
        raise NotImplementedError

    def warn(self, message: str) -> None:
        raise NotImplementedError

    def stop(self, message: str) -> NoReturn:
        """Stop the workflow before any job, showing ``message`` alone."""
        raise NotImplementedError


class SnakemakeAdapter(Adapter):
    """:class:`Adapter` over Snakemake 9's ``workflow`` and ``rules`` (of the Snakefile that
    creates it: a module's own ``rules``, under their module names)."""

    def __init__(self, workflow: Any, rules: Any) -> None:
        self._workflow, self._rules = workflow, rules
        self.is_main_process = workflow.is_main_process
        self.remote_exec = workflow.remote_exec
        # Taken now, while the module's Snakefile is parsed: later (in an input function) the
        # including workflow's own modifier is the current one.
        self._in_workdir: Callable[[str], str] = workflow.modifier.path_modifier.replace_prefix

    def in_workdir(self, path: str) -> str:
        return self._in_workdir(path)

    def executor(self) -> str | None:
        plugin = self._workflow.executor_plugin
        return None if plugin is None else plugin.name

    def cores(self) -> int | None:
        return self._workflow.resource_settings.cores

    def executor_settings(self) -> Any:
        return getattr(self._workflow, "executor_settings", None)

    def _rule(self, name: str) -> Any:
        return getattr(self._rules, name).rule

    def train_job_resources(self, run: str, keys: tuple[str, ...]) -> dict[str, Any]:
        train = self._rule("train")
        return train.expand_resources(
            {"run": run},
            [],
            attempt=1,
            skip_evaluation=set(train.resources.keys()) - {"_cores", *keys},
        )

    def _dag(self) -> Any:
        return getattr(self._workflow, "dag", None)

    def forced(self, rule: str, outputs: list[str]) -> bool:
        dag = self._dag()
        rules, files = getattr(dag, "forcerules", None), getattr(dag, "forcefiles", None)
        if not isinstance(rules, set) or not isinstance(files, set):
            return False
        return self._rule(rule) in rules or not files.isdisjoint(outputs)

    def force(self, path: str) -> bool:
        files = getattr(self._dag(), "forcefiles", None)
        if not isinstance(files, set):
            return False
        files.add(path)
        return True

    def planned_jobs(self) -> list[PlannedJob] | None:
        dag = self._dag()
        if dag is None or not hasattr(dag, "needrun_jobs"):
            return None
        names = {self._rule(name): name for name in RULES}
        return [
            PlannedJob(
                rule=names.get(job.rule, job.rule.name),
                wildcards=dict(job.wildcards_dict),
                inputs=tuple(map(str, job.input)),
                outputs=tuple(map(str, job.output)),
            )
            for job in dag.needrun_jobs()
        ]

    def warn(self, message: str) -> None:
        from snakemake.logging import logger

        logger.warning(message)

    def stop(self, message: str) -> NoReturn:
        """Log ``message`` as an error and exit 1. A SystemExit, not an exception: Snakemake
        wraps any exception an input or priority function raises in its own report (rule,
        wildcards, a traceback), but lets SystemExit through; it then releases its lock and
        exits, with nothing run or deleted."""
        from snakemake.logging import logger

        logger.error(message)
        raise SystemExit(1)
