"""The status of every training of a workflow (``python -m clusterbench.status``, ``make
status``): a line each, from what the runs write and what the scheduler's queue says. It
writes nothing.

=============  ==================================================================================
module         its one job
=============  ==================================================================================
``cli``        the command: its options, one look or ``--watch``
``runs``       the workflow's runs, from its config files as Snakemake reads them
``files``      what a run has written so far: its lock file, metrics, worker jobs, done marker
``queue``      a job of a queue (:class:`QueueJob`), the words of its states, asking a tool
``slurm``      Slurm's queue (``squeue``): the workflow's jobs, a train job's run by its comment
``sge``        SGE's queue (``qstat``): the same, a train job's run by the plugin's manifest
``local``      whether a launcher runs on this machine (the lock's pid)
``collect``    each run's state, job, ranks, epoch, rate, times (pure, given files and queue)
``render``     the status as text: its columns (stable: other tools and tests read them)
=============  ==================================================================================
"""

from clusterbench.status.cli import main

__all__ = ["main"]
