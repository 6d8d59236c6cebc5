"""``clusterbench-launch``: the command line, the plan of a launch, and running it.

    clusterbench-launch --np W [--min-np A --max-np B] [--scheduler auto|slurm|sge|local]
                        [--iface IF] [--timeout S] [--log-level L] [--lock PATH] -- CMD ARGS...

:func:`prepare` checks everything that can be checked before a rank starts and makes the
:class:`Plan`: the scheduler (detected through the registry of
:mod:`clusterbench.launch.schedulers`, or ``--scheduler``), its allocation, Horovod's
``host:slots`` string, the network interface, each rank's GPU and rank 0's address.
:func:`run` hands the plan to Horovod's Gloo runner
(:func:`horovod.runner.gloo_run.launch_gloo`), which does the rendezvous, the slot assignment
and every rank's Horovod environment, with the rank runner of :mod:`clusterbench.launch.runner`
as its ``exec_command``. With ``--min-np``/``--max-np`` the launch is Horovod elastic's
(:mod:`clusterbench.launch.elastic`). With ``--lock`` one launch at a time runs a training
(:mod:`clusterbench.launch.exclusive`).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from clusterbench import preemption
from clusterbench.launch import schedulers
from clusterbench.launch.exclusive import RunLock, describe
from clusterbench.launch.placement import IfaceChoice, choose_iface, horovod_hosts, local_nodes
from clusterbench.launch.runner import (
    RankRunner,
    StopSignals,
    failure_message,
    shutdown_event_without_handlers,
)
from clusterbench.launch.schedulers.base import (
    Allocation,
    AllocationError,
    LaunchError,
    Scheduler,
    resolve,
    split_devices,
)
from clusterbench.launch.schedulers.local import LocalScheduler

log = logging.getLogger("clusterbench.launch")

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")
# Launcher verbosity for each Horovod log level; without one the launcher logs at INFO.
_PY_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.INFO,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


# ------------------------------------------------------------------------------------------
# command line


def parse_args(argv: Sequence[str], env: Mapping[str, str]) -> argparse.Namespace:
    """The options before ``--`` (flags win over the CLUSTERBENCH_* variables), the command
    after it in ``.command``."""
    argv = list(argv)
    parser = argparse.ArgumentParser(
        prog="clusterbench-launch",
        description="Start one Horovod (Gloo) rank per slot of the current allocation.",
        epilog="Environment: CLUSTERBENCH_SCHEDULER, CLUSTERBENCH_IFACE, CLUSTERBENCH_LOG_LEVEL, "
        "CLUSTERBENCH_GLOO_TIMEOUT (the flags win). SIGINT/SIGTERM stop every rank; SIGUSR1 is "
        "passed on to every rank.",
    )
    parser.add_argument("--np", type=int, required=True, help="number of ranks")
    parser.add_argument(
        "--scheduler",
        default=None,
        help="the scheduler whose allocation this runs in: auto (default: slurm if SLURM_JOB_ID, "
        "sge if PE_HOSTFILE, else local), " + ", ".join(schedulers.SCHEDULERS),
    )
    # its old name: deprecated, still accepted (with a warning, see main)
    parser.add_argument("--launcher", dest="old_scheduler", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--min-np",
        type=int,
        default=None,
        help="Horovod elastic: the fewest ranks the training may go on with (with --max-np)",
    )
    parser.add_argument(
        "--max-np",
        type=int,
        default=None,
        help="Horovod elastic: the most ranks; ranks join as the scheduler's hosts allow",
    )
    parser.add_argument("--iface", default=None, help="network interface for Gloo")
    parser.add_argument(
        "--timeout", default=None, help="Gloo timeout in seconds (HOROVOD_GLOO_TIMEOUT_SECONDS)"
    )
    parser.add_argument(
        "--log-level", default=None, help=f"Horovod log level: {', '.join(LOG_LEVELS)}"
    )
    parser.add_argument(
        "--lock",
        default=None,
        metavar="PATH",
        help="hold an exclusive lock on PATH while the ranks run: a second launch with the same "
        "PATH waits for the first to end, and starts no rank if that one succeeded meanwhile "
        "(two jobs of one run: a requeued one and its retry)",
    )
    if "--" not in argv:
        parser.parse_known_args(argv)  # --help, or an error about the options themselves
        raise LaunchError("missing '--' before the command to run (... --np W -- CMD ARGS)")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    args = parser.parse_args(options)
    if not command:
        raise LaunchError("no command after '--'")
    args.command = command
    args.deprecated = []
    if args.old_scheduler is not None:
        args.deprecated.append(
            "--launcher is deprecated (the launcher is this program, the scheduler what it runs "
            f"under): use --scheduler {args.old_scheduler}"
        )
        args.scheduler = args.scheduler or args.old_scheduler

    if args.np < 1:
        raise LaunchError(f"--np must be at least 1, got {args.np}")
    if (args.min_np is None) != (args.max_np is None):
        raise LaunchError("elastic training needs both --min-np and --max-np")
    if args.min_np is not None and not 1 <= args.min_np <= args.np <= args.max_np:
        raise LaunchError(
            f"elastic bounds must satisfy 1 <= --min-np ({args.min_np}) <= --np ({args.np}) "
            f"<= --max-np ({args.max_np})"
        )
    args.iface = args.iface or env.get("CLUSTERBENCH_IFACE") or None
    level = args.log_level or env.get("CLUSTERBENCH_LOG_LEVEL") or None
    if level is not None and level.lower() not in LOG_LEVELS:
        raise LaunchError(f"unknown log level {level!r}: choose one of {', '.join(LOG_LEVELS)}")
    args.log_level = level.lower() if level else None
    timeout = args.timeout or env.get("CLUSTERBENCH_GLOO_TIMEOUT") or None
    if timeout is not None:
        try:
            args.timeout = int(timeout)
        except ValueError:
            args.timeout = 0
        if args.timeout <= 0:
            raise LaunchError(f"the Gloo timeout must be a positive number of seconds: {timeout!r}")
    return args


# ------------------------------------------------------------------------------------------
# the plan


def local_ifaces() -> dict[str, list[str]]:
    """This machine's network interfaces with an IPv4 address: name -> addresses."""
    import psutil

    return {
        name: [a.address for a in addrs if a.family == socket.AF_INET]
        for name, addrs in psutil.net_if_addrs().items()
        if any(a.family == socket.AF_INET for a in addrs)
    }


def free_port(address: str) -> int:
    """A TCP port that is free on this machine's ``address`` now (for rank 0's TCPStore)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


@dataclass
class Plan:
    args: argparse.Namespace
    scheduler: Scheduler  # whose allocation this is
    starter: Scheduler  # what starts the ranks: the scheduler, or local for a single rank
    allocation: Allocation
    hosts: str  # Horovod's host:slots string
    iface: IfaceChoice
    devices: dict[int, str | None]
    env: dict[str, str]  # extra environment of every rank
    local_hosts: set[str] = field(default_factory=set)  # hosts whose address is this machine
    master: tuple[str, int] = ("127.0.0.1", 29500)  # rank 0's address and port (env://)

    @property
    def how(self) -> str:
        """How the ranks start, for the log."""
        return "one local process" if self.args.np == 1 else self.starter.how


def rank_env(args: argparse.Namespace, scheduler: Scheduler, iface: IfaceChoice) -> dict[str, str]:
    """The extra environment of every rank (beside Horovod's own variables)."""
    # the ranks record what started them (clusterbench.train writes it to run.json)
    extra: dict[str, str] = {
        schedulers.SCHEDULER_VAR: scheduler.name,
        # the cluster's name for the results (the config's `site` wins: the workflow sets it)
        schedulers.SITE_VAR: os.environ.get(schedulers.SITE_VAR) or scheduler.site(),
        "GLOO_SOCKET_IFNAME": iface.iface,  # torch.distributed's gloo (Horovod's is set apart)
    }
    if args.log_level:
        extra["HOROVOD_LOG_LEVEL"] = args.log_level
    if args.timeout:
        extra["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(args.timeout)
    return extra


def prepare(args: argparse.Namespace, env: Mapping[str, str]) -> Plan:
    """Everything that can be checked before a rank starts."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    scheduler = schedulers.select(args.scheduler, env)()
    alloc = scheduler.allocation(env)
    addresses = scheduler.addresses(alloc)
    hosts = horovod_hosts(alloc, args.np)
    slots = get_host_assignments(parse_hosts(hosts), args.np)

    used = {s.hostname for s in slots}
    host_name = socket.gethostname()
    ifaces = local_ifaces()
    iface = choose_iface(
        {h: a for h, a in addresses.items() if h in used},
        ifaces,
        host_name,
        resolve(host_name),
        args.iface,
    )
    here = local_nodes(addresses, ifaces)

    # A single rank runs right here as a local process: no step of its own (and a one-slot SGE
    # job's PE need not allow qrsh -inherit), and it keeps the GPUs its environment already has.
    single = args.np == 1
    starter = LocalScheduler() if single else scheduler
    starter.bind(alloc, args.np, f"cb-{uuid.uuid4().hex[:8]}", here)

    inherited = split_devices(env.get("CUDA_VISIBLE_DEVICES"))
    by_name = {h.name: h for h in alloc.hosts}
    devices: dict[int, str | None] = {}
    for s in slots:
        device = starter.rank_device(by_name[s.hostname], s.local_rank, s.local_size, inherited)
        devices[s.rank] = None if single else device

    extra = rank_env(args, scheduler, iface)
    # torch.distributed's rendezvous: a TCPStore served by rank 0, on rank 0's node address.
    first = slots[0].hostname
    master_addr = addresses.get(first) or iface.address
    if first not in here:
        log.warning(
            "rank 0 runs on %s, not on this host: MASTER_PORT is chosen free here, not there",
            first,
        )
    master = (master_addr, free_port(master_addr if first in here else ""))
    return Plan(args, scheduler, starter, alloc, hosts, iface, devices, extra, here, master)


# ------------------------------------------------------------------------------------------
# running it


def run(plan: Plan) -> int:
    """Start the ranks through Horovod's Gloo runner; the failing rank's exit code or 0."""
    from horovod.runner.common.util.settings import Settings
    from horovod.runner.gloo_run import launch_gloo

    args = plan.args
    log.info(
        "%s scheduler (%s): %d rank(s) on %s (allocation: %s)",
        plan.scheduler.name,
        plan.how,
        args.np,
        plan.hosts,
        plan.allocation.describe(),
    )
    log.info(
        "Gloo interface %s, rendezvous on %s: %s",
        plan.iface.iface,
        plan.iface.address,
        plan.iface.reason,
    )
    pinned = {r: d for r, d in plan.devices.items() if d is not None}
    note = plan.starter.gpu_note()
    if pinned:
        log.info("CUDA_VISIBLE_DEVICES by rank: %s", pinned)
    elif note:
        log.info(note)

    runner = RankRunner(plan.starter, plan.devices, plan.master)
    verbose = 2 if log.isEnabledFor(logging.DEBUG) else 0
    settings = Settings(hosts=plan.hosts, num_proc=args.np, verbose=verbose)
    shutdown = threading.Event()
    signals = StopSignals(
        shutdown, runner.kill_all, runner.sweep, runner.reaper.sweep, forward=runner.forward
    )
    with signals:
        try:
            with shutdown_event_without_handlers(shutdown):
                launch_gloo(
                    args.command,
                    runner.exec_command,
                    settings,
                    [plan.iface.iface],
                    plan.env,
                    plan.iface.address,
                )
        except RuntimeError:
            if runner.failure() is None and not runner.preempted() and signals.first is None:
                raise
        finally:
            if signals.killed_at is not None:
                runner.reaper.sweep()  # nothing started for a rank outlives a kill
            if runner.failure() is not None or signals.first is not None:
                plan.starter.cleanup()

    failed = runner.failure()
    if signals.first is not None and (failed is None or failed.after_stop):
        log.error("the launcher received %s: all ranks were stopped", signals.describe())
        return 128 + signals.first
    if failed is None and runner.preempted():
        log.warning(
            "preempted: every rank stopped at the checkpoint they agreed on after the warning; "
            "run the same command again to continue from it (exit %d)",
            preemption.EXIT_PREEMPTED,
        )
        return preemption.EXIT_PREEMPTED
    if failed is None:
        log.info("all %d rank(s) finished", args.np)
        return 0
    log.error(failure_message(failed, args.np))
    return failed.exit_code if 0 < failed.exit_code < 256 else 1


class _StderrHandler(logging.StreamHandler):
    """A handler writing to the current ``sys.stderr``, also when it was replaced since."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, env)
    except LaunchError as exc:
        print(f"clusterbench-launch: error: {exc}", file=sys.stderr)
        return 2
    level = _PY_LEVELS[args.log_level] if args.log_level else logging.INFO
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[launch] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level)
    for warning in args.deprecated:
        log.warning(warning)
    if args.min_np is not None:  # Horovod elastic: its own plan and driver
        from clusterbench.launch import elastic

        prepare_plan, run_plan = elastic.prepare, elastic.run
    else:
        prepare_plan, run_plan = prepare, run
    lock = RunLock(args.lock) if args.lock else None
    if lock is not None:
        try:
            if not lock.acquire():
                log.info(
                    "%s finished this training with success while this one waited: nothing "
                    "left to do, no rank started",
                    describe(lock.before),
                )
                lock.release()
                return 0
        except OSError as exc:
            log.warning("cannot lock %s (%s): going on without the lock", args.lock, exc)
            lock = None
    exit_code = None
    try:
        try:
            plan = prepare_plan(args, env)
        except (LaunchError, AllocationError) as exc:
            print(f"clusterbench-launch: error: {exc}", file=sys.stderr)
            exit_code = 2
            return exit_code
        exit_code = run_plan(plan)
        return exit_code
    finally:
        if lock is not None:
            lock.release(exit_code)


def cli() -> None:
    sys.exit(main())
