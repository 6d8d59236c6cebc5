"""Find, before any job starts, a training job the executor could never run as asked.

``unavailable_runs`` in rules/common.smk (while Snakemake builds the job graph: the report's
input functions, and ``preflight``, an input function of the train rule) asks the scheduler of
the executor Snakemake runs under (or plans for) through :func:`unavailable`: the scheduler of
that name in the registry (:data:`clusterbench.launch.schedulers.SCHEDULERS`). Each scheduler's
check lives in its own module of :mod:`clusterbench.launch.schedulers`, behind
:meth:`~clusterbench.launch.schedulers.Scheduler.unavailable`; those clusterbench ships:

- local: a run needing more cores than local jobs get (its ranks would share cores and its
  timing would measure that), or GPUs where none is usable (``CUDA_VISIBLE_DEVICES`` and
  ``nvidia-smi -L``, no torch import);
- Slurm: each training job against the partition's nodes, CPUs and GPUs as ``sinfo`` reports
  them (Slurm would accept a larger job and leave it pending forever);
- SGE: the GPU complex a run names (``sge_gpu_complex``) is one of the cell's (``qconf -sc``),
  and ``qsub -w v`` (verify, submit nothing) of each training job as it would be submitted: what
  the profile's ``qsub -w e`` would refuse at submission;
- ssh (``CLUSTERBENCH_SCHEDULER=ssh`` under the local executor): a run needing more ranks than
  the hosts file's slots, and the hosts the runs use, over ssh within one time limit
  (reachable without a password prompt, the same Python with the same torch and Horovod, the
  data readable): a host that fails stops the workflow before any training job, naming the
  host and the check.

A run's ``on_unavailable`` decides what follows: ``skip`` (the default) leaves the run out, with
a warning naming it and the reason, and the report lists it (``skipped.csv``); ``fail`` stops
the workflow before any job.

Imported by the Snakefile: the standard library only (and the scheduler modules, which are).
"""

from __future__ import annotations

from clusterbench.launch.schedulers import PreflightContext, PreflightError, of_executor
from clusterbench.launch.schedulers.local import local_gpus

#: ``local_gpus`` stays importable from here: the GPUs local jobs can use (tests skip on it).
__all__ = ["PreflightContext", "PreflightError", "local_gpus", "unavailable"]


def unavailable(executor: str, context: PreflightContext) -> dict[str, str]:
    """Run -> why the scheduler behind Snakemake's ``executor`` (the scheduler of that name:
    ``local``, ``slurm``, ``sge``, ...; or the one ``CLUSTERBENCH_SCHEDULER`` names among those
    the executor runs: ``ssh`` under ``local``, :func:`~clusterbench.launch.schedulers.
    of_executor`) could never run the run's training job as asked; ``{}`` for an executor
    clusterbench has no scheduler for (``CLUSTERBENCH_SCHEDULER`` is read from
    ``context.env``). A :class:`PreflightError` when the scheduler could not be asked (its hosts
    not ready, for ssh); an :class:`~clusterbench.launch.schedulers.AllocationError` when the
    variable names another executor's scheduler."""
    scheduler = of_executor(executor, context.env)
    return {} if scheduler is None else scheduler.unavailable(context)
