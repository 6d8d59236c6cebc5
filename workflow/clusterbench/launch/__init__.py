"""``clusterbench-launch`` (``python -m clusterbench.launch``): start one rank per slot of the
allocation this job runs in: no ssh, no MPI, no torchrun.

    clusterbench-launch --np W [--scheduler auto|slurm|sge|local] [--iface IF] [--timeout S]
                        [--log-level L] -- CMD ARGS...

"Launcher" is this program; the cluster system whose allocation it runs in is the *scheduler*.
The package:

- :mod:`~clusterbench.launch.cli`: the options, the :class:`~clusterbench.launch.cli.Plan` of a
  launch (``prepare``), ``main``;
- :mod:`~clusterbench.launch.runner`: the rank runner (start every rank, watch, fail fast) and the
  launcher's signals (SIGINT/SIGTERM stop every rank, SIGUSR1 is passed on to every rank);
- :mod:`~clusterbench.launch.schedulers`: one module per scheduler (``local``, ``slurm``,
  ``sge``), each with its parsers, how it starts and signals a rank, pins GPUs and discovers
  hosts for Horovod elastic, and the workflow's side: its pre-flight check (``unavailable``),
  what a training job asks it for (``job_request``) and, for Slurm and SGE, the train rule's
  resources; the registry picks the one the job runs in (or the executor's);
- :mod:`~clusterbench.launch.placement`: where ranks go (slots, network interface).

Each rank's output is streamed with a ``[rank]`` prefix. When a rank fails the others are
stopped (SIGTERM, then SIGKILL after a grace period) and the launcher exits with the failing
rank's exit code and a message naming its rank, host, exit code and last log lines. Every rank
gets Horovod's variables and the ``torch.distributed`` ones, so both training backends start the
same way under every scheduler.
"""

# The console script is `clusterbench.launch:cli`: the package's `cli` is the function, which
# hides the submodule of that name (import from it: `from clusterbench.launch.cli import ...`).
from clusterbench.launch.cli import cli, main

__all__ = ["cli", "main"]
