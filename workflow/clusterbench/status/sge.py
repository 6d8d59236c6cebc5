"""SGE's queue, read for the status: ``qstat -xml`` (this user's jobs), then ``qstat -j`` of
each job that may be the workflow's (a train job or a worker job, by name) for its folders.

What a job is comes from what the plugins name. snakemake-executor-plugin-sge submits every
job as an array job named ``<rule>_<the run's uuid, 8 characters>``, from the workflow's
directory (``sge_o_workdir``), with ``-wd`` a log folder of its own,
``<log dir>/<tag>_chunk<N>_<sub-chunk>_<sub-range>``. The job's task id is its index in the
plugin's manifest, ``<log dir>/.meta/rule_<rule>/task_manifest_<tag>_chunk<N>.json`` (index ->
wildcards): so a train job's run is known while it is queued, before the run has written any
file. The launcher names a worker job ``cbgrow-<the run's job id>``
(:mod:`clusterbench.launch.schedulers._sge_grow`) and submits it from the workflow's
directory. The parsers (:func:`parse_qstat_xml`, :func:`manifest_path`; ``qstat -j``'s is the
launcher's, :func:`clusterbench.launch.schedulers.sge.parse_qstat_j`) are pure (tested on SGE
8.1.9's text); the manifest is only read."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path

from clusterbench.launch.schedulers.sge import parse_qstat_j
from clusterbench.status.queue import (
    ENDING,
    OTHER,
    QUEUED,
    RUNNING,
    SUSPENDED,
    TRAIN,
    WORKER,
    QueueError,
    QueueJob,
    ask,
    is_train_rule,
    same_dir,
    worker_of,
)

_LOG_FOLDER = re.compile(r"(\w+_chunk\d+)_\d+_\d+")


@dataclass(frozen=True)
class Listed:
    """One line of ``qstat -xml``: a job (or one task of an array job) and its state code."""

    id: str
    name: str
    state: str
    task: str | None


def parse_qstat_xml(text: str) -> list[Listed]:
    """Every job (task) of ``qstat -xml`` output; :class:`~.queue.QueueError` if it is no
    XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise QueueError(f"qstat -xml: not XML ({exc})") from None
    return [
        Listed(
            job.findtext("JB_job_number") or "",
            job.findtext("JB_name") or "",
            job.findtext("state") or "",
            (job.findtext("tasks") or "").strip() or None,
        )
        for job in root.iter("job_list")
    ]


def state_of(code: str) -> str:
    """A qstat state code (``qw``, ``r``, ``dr``, ``s``, ``Eqw``...) in the status's words."""
    if "d" in code:
        return ENDING
    if any(c in code for c in "sST"):
        return SUSPENDED
    if "r" in code or "t" in code:
        return RUNNING
    return QUEUED


def rule_of(name: str) -> str | None:
    """The rule of a job the SGE plugin named ``<rule>_<8 characters>`` (None: another name)."""
    rule, sep, tag = name.rpartition("_")
    return rule if sep and rule and 0 < len(tag) <= 8 else None


def manifest_path(cwd: str, rule: str) -> Path | None:
    """Where the plugin's manifest of the array job working in ``cwd`` is (None: ``cwd`` is
    no log folder of the plugin's)."""
    match = _LOG_FOLDER.fullmatch(os.path.basename(os.path.normpath(cwd)))
    if not match:
        return None
    return Path(cwd).parent / ".meta" / f"rule_{rule}" / f"task_manifest_{match.group(1)}.json"


def run_in_manifest(path: Path | None, task: str | None) -> str | None:
    """The run (its ``run`` wildcard) of task ``task`` in the manifest at ``path``; None where
    it cannot be read."""
    if path is None or task is None or not task.isdigit():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8")).get(task) or {}
        wildcards = entry.get("wildcards") or {}
    except (OSError, ValueError, AttributeError):
        return None
    run = wildcards.get("run") if isinstance(wildcards, dict) else None
    return run if isinstance(run, str) else None


def classify(listed: Listed, fields: dict[str, str], workdir: str | os.PathLike[str]):
    """The :class:`QueueJob` of ``listed`` (``fields``: its ``qstat -j``), None when it is not
    the workflow's in ``workdir``."""
    cwd, submitted_in = fields.get("cwd"), fields.get("sge_o_workdir")
    inside = cwd is not None and os.path.realpath(cwd).startswith(os.path.realpath(workdir) + "/")
    if not (same_dir(submitted_in, workdir) or same_dir(cwd, workdir) or inside):
        return None
    job = QueueJob("sge", listed.id, state_of(listed.state), OTHER, workdir=submitted_in or cwd)
    run_job = worker_of(listed.name)
    rule = rule_of(listed.name)
    if run_job is not None:
        return replace(job, kind=WORKER, run_job=run_job)
    if rule and is_train_rule(rule):
        run = run_in_manifest(manifest_path(cwd, rule), listed.task) if cwd else None
        return replace(job, kind=TRAIN, run=run)
    return job


def read_queue(workdir: str | os.PathLike[str]) -> list[QueueJob]:
    """This user's jobs of the workflow in ``workdir`` in SGE's queue now
    (:class:`~.queue.QueueError` when qstat fails)."""
    listed = parse_qstat_xml(ask(["qstat", "-xml"]))
    details: dict[str, dict[str, str]] = {}
    jobs = []
    for item in listed:
        rule = rule_of(item.name)
        if worker_of(item.name) is None and not (rule and is_train_rule(rule)):
            continue
        if item.id not in details:
            try:
                details[item.id] = parse_qstat_j(ask(["qstat", "-j", item.id]))
            except QueueError:  # it left the queue meanwhile
                details[item.id] = {}
        job = classify(item, details[item.id], workdir)
        if job is not None:
            jobs.append(job)
    return jobs
