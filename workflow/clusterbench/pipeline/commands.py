"""The per-job options of the train and evaluate commands, in one param each.

Snakemake calls every input and param function of every job while it builds the job graph
(resolving each function's signature every time), and a sweep has two jobs per run: at 5,000
runs, each function a job has costs more than clusterbench's own code. So each rule has one
param function for its rerun trigger (the run's config slice, rules/train.smk) and one for
everything derived from the job's own input and output paths (no rerun trigger: Snakemake leaves
a param whose function takes ``input`` or ``output`` out of the params it compares). The
directories come from those paths, never from a literal: Snakemake puts a module's ``prefix:``
in front of input and output paths, but not of params.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusterbench import config as cbconfig


def dir_of(path: Any) -> str:
    """The directory of ``path`` (an input or output file of the job)."""
    return os.path.dirname(str(path))


@dataclass(frozen=True)
class TrainCommand:
    """The train job's options: ``launch`` for the launcher, ``stage`` for scripts/train.py."""

    launch: str
    stage: str


def train_command(
    run: Mapping[str, Any], cfg: Mapping[str, Any], data_file: Any, info_file: Any
) -> TrainCommand:
    """The options of ``run``'s train job, its dataset's files beside ``data_file`` and its
    outputs beside ``info_file``, each quoted for the shell.

    The launcher: the workers (an elastic run's bounds too), the backend (Horovod's
    rendezvous, or none) and the lock that lets one job at a
    time train the run (clusterbench.launch.exclusive). The stage: where the data and the outputs
    are, and how the data is read (loading, loader_workers, staging), and whether a watch job
    evaluates it while it trains (``--watched``): no result changes with them, so they are no
    rerun trigger."""
    out_dir = dir_of(info_file)
    launch = f"--np {run['workers']} --backend {run['backend']} "
    if cbconfig.is_elastic(run):
        low, high = cbconfig.worker_bounds(run)
        launch += f"--min-np {low} --max-np {high} "
    if cbconfig.grows_through_jobs(run):
        record = os.path.join(out_dir, "worker_jobs.json")
        launch += f"--grow jobs --grow-record {shlex.quote(record)} "
        where = grow_resources(run)
        if where:
            launch += f"--grow-resources {shlex.quote(cbconfig.canonical_json(where))} "
    launch += network_options(run)
    launch += f"--lock {shlex.quote(os.path.join(out_dir, 'train.lock'))}"
    settings = cbconfig.canonical_json(cbconfig.data_settings(run, cfg))
    stage = (
        f"--data-dir {shlex.quote(dir_of(data_file))} --data-settings {shlex.quote(settings)} "
        f"--out-dir {shlex.quote(out_dir)}"
    )
    if (cfg.get("evaluate") or {}).get("every_minutes"):  # a watch job asks for its weights
        stage += " --watched"
    return TrainCommand(launch, stage)


def network_options(run: Mapping[str, Any]) -> str:
    """The launcher's ``--iface`` and ``--log-level`` for the run's ``iface`` and
    ``log_level`` (none where the run leaves them null: the launcher's variables then work)."""
    found = ""
    for key, flag in (("iface", "--iface"), ("log_level", "--log-level")):
        if run.get(key):
            found += f"{flag} {shlex.quote(str(run[key]))} "
    return found


def grow_resources(run: Mapping[str, Any]) -> dict[str, str]:
    """Where the run's worker jobs go (``grow_resources``), and the SGE GPU complex they ask
    one GPU of (``sge_gpu_complex``, for a run on GPUs)."""
    where = dict(run.get("grow_resources") or {})
    if run.get("sge_gpu_complex") and run.get("gpus_per_node"):
        where["sge_gpu_complex"] = run["sge_gpu_complex"]
    return where


def evaluate_dirs(data_file: Any, metrics_file: Any) -> str:
    """The evaluate job's ``--data-dir`` and ``--out-dir``, quoted for the shell."""
    return (
        f"--data-dir {shlex.quote(dir_of(data_file))} --out-dir {shlex.quote(dir_of(metrics_file))}"
    )


def watch_command(data_file: Any, out_file: Any, deadline_minutes: int) -> str:
    """The watch job's ``--data-dir``, ``--run-dir`` (its run's outputs: ``results/runs/RUN``
    beside ``results/watch/RUN``), ``--out`` and ``--deadline-minutes``, quoted for the
    shell."""
    out = str(out_file)
    run_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(out))), "runs")
    run_dir = os.path.join(run_dir, os.path.basename(os.path.dirname(out)))
    return (
        f"--data-dir {shlex.quote(dir_of(data_file))} --run-dir {shlex.quote(run_dir)} "
        f"--out {shlex.quote(out)} --deadline-minutes {deadline_minutes}"
    )
