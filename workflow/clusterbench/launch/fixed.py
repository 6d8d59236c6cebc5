"""Fixed-size launches (``clusterbench-launch --np W -- CMD``): the plan, and running it.

:func:`prepare` checks everything that can be checked before a rank starts and makes the
:class:`Plan`: the scheduler (detected through the registry of
:mod:`clusterbench.launch.schedulers`, or ``--scheduler``), its allocation, the ranks' slots
(:mod:`clusterbench.launch.slots`), the network interface, each rank's GPU and rank 0's
address. :func:`run` starts one rank per slot, each on a thread of its own, with the rank
runner of :mod:`clusterbench.launch.runner` (through the scheduler: a local process, an
``srun`` step, ``qrsh -inherit``, ssh), and waits for them all. Every rank gets the
``torch.distributed`` variables; a Horovod launch (``--backend horovod``) also starts Horovod's
rendezvous and gives each rank its ``HOROVOD_*`` variables
(:mod:`clusterbench.launch.horovod_runner`, the one module that uses Horovod's runner). The
launcher's signals are :mod:`clusterbench.launch.signals`'.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from clusterbench.core import preemption
from clusterbench.launch import horovod_runner, schedulers, slots
from clusterbench.launch.common import free_port, local_ifaces, rank_env, route_source
from clusterbench.launch.placement import IfaceChoice, choose_iface, local_nodes, rank_hosts
from clusterbench.launch.runner import RankRunner, failure_message
from clusterbench.launch.schedulers import Allocation, Scheduler, resolve, split_devices
from clusterbench.launch.schedulers.local import LocalScheduler
from clusterbench.launch.signals import StopSignals
from clusterbench.launch.slots import Slot

log = logging.getLogger("clusterbench.launch")


@dataclass
class Plan:
    args: argparse.Namespace
    scheduler: Scheduler  # whose allocation this is
    starter: Scheduler  # what starts the ranks: the scheduler, or local for a single rank
    allocation: Allocation
    slots: list[Slot]  # one per rank, rank 0 first
    iface: IfaceChoice
    devices: dict[int, str | None]
    env: dict[str, str]  # extra environment of every rank
    local_hosts: set[str] = field(default_factory=set)  # hosts whose address is this machine
    master: tuple[str, int] = ("127.0.0.1", 29500)  # rank 0's address and port (env://)

    @property
    def how(self) -> str:
        """How the ranks start, for the log."""
        return "one local process" if self.starter is not self.scheduler else self.starter.how

    @property
    def hosts(self) -> str:
        """``host:ranks,...``, for the log."""
        counts: dict[str, int] = {}
        for slot in self.slots:
            counts[slot.hostname] = counts.get(slot.hostname, 0) + 1
        return slots.describe(list(counts.items()))


def prepare(args: argparse.Namespace, env: Mapping[str, str]) -> Plan:
    """Everything that can be checked before a rank starts."""
    if args.backend == "horovod":
        horovod_runner.require("--backend horovod (a Horovod run)")
    scheduler = schedulers.select(args.scheduler, env)()
    alloc = scheduler.allocation(env)
    addresses = scheduler.addresses(alloc)
    ranks = slots.assign(rank_hosts(alloc, args.np, scheduler.spread))

    used = {s.hostname for s in ranks}
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
    single = args.np == 1 and scheduler.single_rank_here(ranks[0].hostname, here)
    starter = LocalScheduler() if single else scheduler
    starter.bind(alloc, args.np, f"cb-{uuid.uuid4().hex[:8]}", here)

    inherited = split_devices(env.get("CUDA_VISIBLE_DEVICES"))
    by_name = {h.name: h for h in alloc.hosts}
    devices: dict[int, str | None] = {}
    for s in ranks:
        host = by_name[s.hostname]
        device = starter.rank_device(host, s.local_rank, s.local_size, inherited)
        # one rank keeps the GPUs its environment has, unless the scheduler grants some
        keep = single and (host.gpus is None or not scheduler.pins_single)
        devices[s.rank] = None if keep else device

    extra = rank_env(args, scheduler, iface)
    # torch.distributed's rendezvous: a TCPStore served by rank 0, on rank 0's node address.
    first = ranks[0].hostname
    master_addr = addresses.get(first) or iface.address
    if first not in here:
        log.warning(
            "rank 0 runs on %s, not on this host: MASTER_PORT is chosen free here, not there",
            first,
        )
    master = (master_addr, free_port(master_addr if first in here else ""))
    return Plan(args, scheduler, starter, alloc, ranks, iface, devices, extra, here, master)


def run(plan: Plan) -> int:
    """Start every rank and wait for them all; the failing rank's exit code or 0."""
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
    shutdown = threading.Event()
    signals = StopSignals(
        shutdown, runner.kill_all, runner.sweep, runner.reaper.sweep, forward=runner.forward
    )
    with signals:
        try:
            with _rendezvous(plan) as slot_env:
                _start_all(plan, runner, slot_env, shutdown)
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


@contextlib.contextmanager
def _rendezvous(plan: Plan):
    """Each rank's environment beside the plan's: Horovod's (its rendezvous running for the
    time of the ``with``) in a Horovod launch, nothing more in a DDP one."""
    if plan.args.backend != "horovod":
        yield lambda slot: {}
        return
    verbose = 2 if log.isEnabledFor(logging.DEBUG) else 0
    with horovod_runner.rendezvous(
        plan.slots, plan.iface.address, plan.iface.iface, verbose
    ) as server:
        yield server.env


def _start_all(plan: Plan, runner: RankRunner, slot_env, shutdown: threading.Event) -> None:
    """One thread per rank, each running its rank to the end; returns when all have ended."""
    command = " ".join(shlex.quote(word) for word in plan.args.command)
    common = {**plan.env, "PYTHONUNBUFFERED": "1"}
    threads = []
    for slot in plan.slots:
        words = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**slot_env(slot), **common}.items())
        thread = threading.Thread(
            target=runner.exec_command,
            args=(f"{words} {command}", slot, [shutdown]),
            name=f"rank-{slot.rank}",
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
