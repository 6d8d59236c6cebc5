"""Fixed-size launches (``clusterbench-launch --np W -- CMD``): the plan, and running it.

:func:`prepare` checks everything that can be checked before a rank starts and makes the
:class:`Plan`: the scheduler (detected through the registry of
:mod:`clusterbench.launch.schedulers`, or ``--scheduler``), its allocation, Horovod's
``host:slots`` string, the network interface, each rank's GPU and rank 0's address.
:func:`run` hands the plan to Horovod's Gloo runner
(:func:`horovod.runner.gloo_run.launch_gloo`), which does the rendezvous, the slot assignment
and every rank's Horovod environment, with the rank runner of :mod:`clusterbench.launch.runner`
as its ``exec_command``; the launcher's signals are :mod:`clusterbench.launch.signals`'.
"""

from __future__ import annotations

import argparse
import logging
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from clusterbench.core import preemption
from clusterbench.launch import schedulers
from clusterbench.launch.common import free_port, local_ifaces, rank_env, route_source
from clusterbench.launch.placement import IfaceChoice, choose_iface, horovod_hosts, local_nodes
from clusterbench.launch.runner import RankRunner, failure_message
from clusterbench.launch.schedulers import Allocation, Scheduler, resolve, split_devices
from clusterbench.launch.schedulers.local import LocalScheduler
from clusterbench.launch.signals import StopSignals, shutdown_event_without_handlers

log = logging.getLogger("clusterbench.launch")


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
        return "one local process" if self.starter is not self.scheduler else self.starter.how


def prepare(args: argparse.Namespace, env: Mapping[str, str]) -> Plan:
    """Everything that can be checked before a rank starts."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    scheduler = schedulers.select(args.scheduler, env)()
    alloc = scheduler.allocation(env)
    addresses = scheduler.addresses(alloc)
    hosts = horovod_hosts(alloc, args.np, scheduler.spread)
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
        route_source,
    )
    here = local_nodes(addresses, ifaces)

    # A single rank runs right here as a local process: no step of its own (and a one-slot SGE
    # job's PE need not allow qrsh -inherit), and it keeps the GPUs its environment already has
    # (where the scheduler's hosts are elsewhere, as ssh's may be, it runs on its host).
    single = args.np == 1 and scheduler.single_rank_here(slots[0].hostname, here)
    starter = LocalScheduler() if single else scheduler
    starter.bind(alloc, args.np, f"cb-{uuid.uuid4().hex[:8]}", here)

    inherited = split_devices(env.get("CUDA_VISIBLE_DEVICES"))
    by_name = {h.name: h for h in alloc.hosts}
    devices: dict[int, str | None] = {}
    for s in slots:
        host = by_name[s.hostname]
        device = starter.rank_device(host, s.local_rank, s.local_size, inherited)
        # one rank keeps the GPUs its environment has, unless the scheduler grants some
        keep = single and (host.gpus is None or not scheduler.pins_single)
        devices[s.rank] = None if keep else device

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
