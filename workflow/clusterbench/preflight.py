"""Find, before any job starts, a training job the executor could never run as asked.

``preflight`` in rules/common.smk (an input function of the train rule) calls the check of the
executor Snakemake runs under:

- Slurm: :func:`clusterbench.launch.schedulers.slurm.check_slurm` compares each training job of
  the job graph with the partition's nodes, CPUs and GPUs as ``sinfo`` reports them (Slurm would
  accept a larger job and leave it pending forever);
- local: :func:`local_problems` finds a run needing more cores than local jobs get (its ranks
  would share cores and its timing would measure that), or GPUs where none is usable
  (:func:`local_gpus`: ``CUDA_VISIBLE_DEVICES`` and ``nvidia-smi -L``, no torch import).

A run's ``on_unavailable`` decides what follows: ``skip`` (the default) leaves the run out, with
a warning naming it and the reason, and the report lists it (``skipped.csv``); ``fail`` stops
the workflow before any job.

SGE needs no check of ours: the profile's ``qsub -w e`` rejects a job that could never run
(at submission: the job fails, it is not skipped).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping


class PreflightError(RuntimeError):
    """A job asks for more than the cluster has; the message names the run and both sizes."""


def count_gpus(cuda_visible_devices: str | None, listing: str | None) -> int:
    """GPUs a local job can use: ``nvidia-smi -L``'s ``listing`` (None: no nvidia-smi, or it
    failed: no usable GPU), limited by ``CUDA_VISIBLE_DEVICES`` when that is set (empty, or
    ``-1``: none)."""
    found = sum(1 for line in (listing or "").splitlines() if line.startswith("GPU "))
    if cuda_visible_devices is None:
        return found
    visible = [d for d in cuda_visible_devices.split(",") if d.strip()]
    if not visible or visible[0].strip().startswith("-"):
        return 0
    return min(found, len(visible))


def local_gpus(env: Mapping[str, str] | None = None) -> int:
    """The GPUs local jobs can use here (:func:`count_gpus`), asked of ``nvidia-smi -L``: cheap,
    and no torch import while the job graph is built."""
    env = os.environ if env is None else env
    tool = shutil.which("nvidia-smi")
    listing = None
    if tool:
        try:
            listing = subprocess.run(
                [tool, "-L"], capture_output=True, text=True, check=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError):
            listing = None
    return count_gpus(env.get("CUDA_VISIBLE_DEVICES"), listing)


def local_problems(
    run: str, workers: int, cpus_per_worker: int, cores: int, gpus_per_node: int = 0, gpus: int = 0
) -> list[str]:
    """A problem if a training run needs more cores than local jobs get (its ranks would share
    cores, and its timing would measure that rather than the machine), or more GPUs than this
    machine has usable (``gpus``; the local profile is one node)."""
    problems = []
    if gpus_per_node > gpus:
        have = (
            f"{gpus} usable" if gpus else "none usable (no nvidia-smi GPU, or CUDA_VISIBLE_DEVICES)"
        )
        problems.append(
            f"run {run!r} asks for {gpus_per_node} GPU(s) per node (gpus_per_node) and this "
            f"machine has {have}: run it where GPUs are (a cluster profile), or set "
            "gpus_per_node: 0 to train on the CPU"
        )
    needed = workers * cpus_per_worker
    if needed <= cores:
        return problems
    return problems + [
        f"run {run!r} needs {needed} cores ({workers} workers x cpus_per_worker="
        f"{cpus_per_worker}) but local jobs get {cores} here: its ranks would share cores and "
        "its time per epoch would measure that; lower workers or cpus_per_worker, or run it "
        "through a cluster profile (--profile profiles/slurm or profiles/sge)"
    ]
