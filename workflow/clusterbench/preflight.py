"""Refuse, before any job starts, a training job the executor could never run as asked.

``preflight`` in rules/common.smk (an input function of the train rule) calls the check of the
executor Snakemake runs under:

- Slurm: :func:`clusterbench.launch.schedulers.slurm.check_slurm` compares each training job of
  the job graph with the partition's nodes, CPUs and GPUs as ``sinfo`` reports them (Slurm would
  accept a larger job and leave it pending forever);
- local: :func:`local_problems` refuses a run needing more cores than local jobs get (its ranks
  would share cores and its timing would measure that).

SGE needs no check of ours: the profile's ``qsub -w e`` rejects a job that could never run.
"""

from __future__ import annotations


class PreflightError(RuntimeError):
    """A job asks for more than the cluster has; the message names the run and both sizes."""


def local_problems(run: str, workers: int, cpus_per_worker: int, cores: int) -> list[str]:
    """A problem if a training run needs more cores than local jobs get: its ranks would share
    cores, and its timing would measure that rather than the machine."""
    needed = workers * cpus_per_worker
    if needed <= cores:
        return []
    return [
        f"run {run!r} needs {needed} cores ({workers} workers x cpus_per_worker="
        f"{cpus_per_worker}) but local jobs get {cores} here: its ranks would share cores and "
        "its time per epoch would measure that; lower workers or cpus_per_worker, or run it "
        "through a cluster profile (--profile profiles/slurm or profiles/sge)"
    ]
