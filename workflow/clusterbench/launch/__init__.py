"""``clusterbench-launch`` (``python -m clusterbench.launch``): start one rank per slot of the
allocation this job runs in (or of a hosts file's hosts, over ssh): no MPI, no torchrun.

    clusterbench-launch --np W [--backend auto|horovod|ddp]
                        [--min-np A --max-np B [--grow jobs [--grow-resources JSON]
                        [--grow-site KEY=VALUE ...] [--grow-record PATH]]]
                        [--scheduler auto|<name>] [--iface IF]
                        [--timeout S] [--log-level L] [--lock PATH] -- CMD ARGS...

"Launcher" is this program; the cluster system whose allocation it runs in is the *scheduler*.
The package:

- :mod:`~clusterbench.launch.cli`: the options (``parse_args``), ``main``, ``cli``;
- :mod:`~clusterbench.launch.fixed`: a launch of ``--np`` ranks: its
  :class:`~clusterbench.launch.fixed.Plan` (``prepare``) and ``run`` (a thread per rank);
- :mod:`~clusterbench.launch.slots`: each rank's place (host, rank, local and cross rank);
- :mod:`~clusterbench.launch.process`: one rank's command as a process of this machine
  (started, streamed, stopped; the watchdog, ``watchdog.py``, that stops the ranks of a killed
  launcher);
- :mod:`~clusterbench.launch.horovod_runner`: the one module that uses Horovod's runner: its
  rendezvous for Horovod ranks, its elastic driver (an install without Horovod runs DDP);
- :mod:`~clusterbench.launch.elastic`: with ``--min-np``/``--max-np``, Horovod elastic's driver
  over the scheduler's host discovery;
- :mod:`~clusterbench.launch.grow`: with ``--grow jobs``, the worker jobs an elastic run grows
  into (one queued per slot beyond ``--np``; each one's rank joins when it starts);
- :mod:`~clusterbench.launch.common`: what both share (this machine's interfaces, a free port,
  every rank's extra environment);
- :mod:`~clusterbench.launch.runner`: the rank runner (start every rank, watch, fail fast, pass
  a warning on) and the :class:`~clusterbench.launch.runner.Reaper`;
- :mod:`~clusterbench.launch.signals`: the launcher's own signals (SIGINT/SIGTERM stop every
  rank, SIGUSR1/SIGUSR2 are passed on to every rank);
- :mod:`~clusterbench.launch.exclusive`: ``--lock``, one launch of a run at a time;
- :mod:`~clusterbench.launch.placement`: where ranks go (slots, network interface);
- :mod:`~clusterbench.launch.schedulers`: the registry of schedulers, one module each
  (``local``, ``slurm``, ``sge``, ``ssh``), with its parsers, how it starts and signals a rank,
  pins GPUs and discovers hosts for Horovod elastic, and the workflow's side: its part of the
  train rule's resources, its pre-flight check (``unavailable``) and what a training job asks
  it for (``job_request``); the registry picks the one the job runs in (or the executor's);
- :mod:`~clusterbench.launch.slurm_batch`: the Slurm profile's stand-in for the batch shell,
  which passes Slurm's preemption warning on to the job.

Each rank's output is streamed with a ``[rank]`` prefix. When a rank fails the others are
stopped (SIGTERM, then SIGKILL after a grace period) and the launcher exits with the failing
rank's exit code and a message naming its rank, host, exit code and last log lines. Every rank
gets the ``torch.distributed`` variables, and in a Horovod launch Horovod's too, so both
training backends start the same way under every scheduler.
"""

# The console script is `clusterbench.launch:cli`: the package's `cli` is the function, which
# hides the submodule of that name (import from it: `from clusterbench.launch.cli import ...`).
from clusterbench.launch.cli import cli, main

__all__ = ["cli", "main"]
