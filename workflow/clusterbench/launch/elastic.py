"""Horovod elastic launches: ``clusterbench-launch --np W --min-np A --max-np B -- CMD``.

Horovod's Gloo elastic driver (through :mod:`clusterbench.launch.horovod_runner`, the one module
that uses Horovod's runner) runs the rendezvous, assigns slots and decides when the world
changes; this module gives it

- a :class:`SchedulerDiscovery`: the scheduler's ``elastic_hosts`` (local: each slot of this
  host or of the hosts file ``CLUSTERBENCH_HOSTS_FILE``, one host per slot; Slurm: the job's
  nodes, SGE: the parallel environment's hosts, each limited to the hosts file when one is
  named; less those where a rank failed), asked again about every second;
- an :class:`ElasticRankRunner` as ``exec_command``: ranks start exactly as in a fixed launch
  (local process, ``srun`` step, ``qrsh -inherit``; no ssh), but a rank that fails takes only
  its host out (Horovod blacklists the host, and the other ranks reset to the smaller world)
  instead of stopping every rank; a rank whose host left the discovery (stopped by Horovod's
  host event, or ended by Horovod itself) is no failure (the host may come back).

Horovod's driver starts on every slot the discovery offers, up to ``--max-np``, once it offers
at least ``--np`` (its ``num_proc``): an allocation sized for ``max_workers`` starts with that
many, unless a hosts file holds slots back; ranks join and leave as the offer changes.

Signals are handled as in a fixed launch (:class:`~clusterbench.launch.signals.StopSignals`):
SIGINT/SIGTERM stop every rank, SIGUSR1 is passed on to every rank that runs.
"""

from __future__ import annotations

import argparse
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.core import preemption
from clusterbench.core.rank_env import read_grow_record
from clusterbench.launch import horovod_runner, schedulers
from clusterbench.launch.common import (
    CPUS_PER_RANK_VAR,
    GROW_RECORD_VAR,
    local_ifaces,
    rank_env,
    route_source,
)
from clusterbench.launch.grow import Grower
from clusterbench.launch.placement import IfaceChoice, choose_iface, local_nodes
from clusterbench.launch.runner import RankResult, RankRunner, failure_message
from clusterbench.launch.schedulers import (
    ENDED,
    Allocation,
    LaunchError,
    Scheduler,
    resolve,
    split_devices,
)
from clusterbench.launch.signals import StopSignals

log = logging.getLogger("clusterbench.launch")

#: Seconds the driver waits for enough slots (at the start, and after a rank failed).
ELASTIC_TIMEOUT_S = 120


#: Seconds a host may be offered without a rank starting on it before it is offered anew.
REOFFER_S = 10.0


class SchedulerDiscovery:
    """Horovod's ``HostDiscovery`` over a scheduler: ``find_available_hosts_and_slots`` is the
    scheduler's :meth:`~clusterbench.launch.schedulers.Scheduler.elastic_hosts`; ``offered`` is
    what it answered last (None: not asked yet).

    Horovod's driver tells the ranks of a new host only once rank 0 has registered for such
    news; a host that appears before (a worker job that starts while the first ranks start up)
    would wait for the next change of the hosts, which may never come. So a host offered for
    :data:`REOFFER_S` without a rank started on it (``in_use``: the hosts whose rank runs) is
    left out of one answer and offered again, as a new host, in the next."""

    def __init__(
        self, scheduler: Scheduler, in_use: Callable[[], set[str]] = set, clock=time.monotonic
    ) -> None:
        self.scheduler = scheduler
        self.in_use, self.clock = in_use, clock
        self.offered: dict[str, int] | None = None
        self.since: dict[str, float] = {}  # host -> when it was (last) offered anew

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        hosts = self.scheduler.elastic_hosts()
        now, used = self.clock(), self.in_use()
        self.since = {h: self.since.get(h, now) for h in hosts}
        offered = dict(hosts)
        for host, first in self.since.items():
            if host not in used and now - first >= REOFFER_S:
                del offered[host]  # this once: next time it is new again
                self.since[host] = now
        self.offered = offered
        return offered

    def left(self, host: str) -> bool:
        """Whether ``host`` has left the hosts offered (a hosts file's ``:0``, say)."""
        return self.offered is not None and not self.offered.get(host)


def discovery(scheduler: Scheduler, in_use: Callable[[], set[str]] = set) -> Any:
    """A :class:`SchedulerDiscovery` that is also a Horovod ``HostDiscovery``."""
    return horovod_runner.host_discovery(SchedulerDiscovery)(scheduler, in_use)


class ElasticRankRunner(RankRunner):
    """The rank runner of an elastic launch: a rank that fails is reported to Horovod's driver
    (which blacklists its host and resets the others to the smaller world); nothing else is
    stopped. An event Horovod hands a slot (the driver's shutdown, its host blacklisted)
    stops that rank only; the launcher's own stop signals still stop every rank. Each slot's
    GPU comes from the scheduler (``elastic_device``) when it starts."""

    def __init__(
        self,
        scheduler: Scheduler,
        inherited: Any,
        stop_all: threading.Event,
        found: SchedulerDiscovery | None = None,
    ):
        super().__init__(scheduler, {})
        self.inherited = inherited
        self.stop_all = stop_all  # the launcher's shutdown: stops every rank
        self.found = found  # the driver's host discovery (which hosts left)
        #: (seconds since the launch, rank, host, exit code) of each rank that failed
        self.failures: list[RankResult] = []

    def device_of(self, slot_info: Any) -> str | None:
        return self.scheduler.elastic_device(slot_info, self.inherited)

    def on_external_event(self, stop_rank: Callable[[], None]) -> Callable[[], None]:
        return stop_rank

    def ended(self, result: RankResult, slot_info: Any) -> None:
        code = result.exit_code
        if code in (0, preemption.EXIT_PREEMPTED) or self.stop_all.is_set():
            return
        # Its worker job ended (cancelled, preempted, its time limit, its node): the rank left
        # with it, no failure.
        gone = self.scheduler.worker_left(result.host)
        if gone is not None:
            log.info(
                "rank %d in worker job %s on %s ended (exit %d): its worker job ended (%s)",
                result.rank,
                self.scheduler.worker_job(result.host).job,
                self.scheduler.node_of(result.host),
                code,
                gone,
            )
            return
        # Its host left the hosts offered: Horovod stopped the rank, or the rank ended itself
        # ("<host>[<slot>] has been removed from elastic job", an abort): no failure, as for
        # Horovod's driver, and the host may come back.
        if result.after_stop or (self.found is not None and self.found.left(result.host)):
            log.info(
                "rank %d on %s ended (exit %d): %s left the hosts the job may use",
                result.rank,
                result.host,
                code,
                result.host,
            )
            return
        self.failures.append(result)
        self.scheduler.rank_failed(slot_info)
        log.warning(
            "rank %d on %s exited with code %d: Horovod elastic goes on without %s",
            result.rank,
            result.host,
            code,
            result.host,
        )


@dataclass
class ElasticPlan:
    args: argparse.Namespace
    scheduler: Scheduler
    allocation: Allocation
    hosts: dict[str, int]  # what discovery gave at the start
    iface: IfaceChoice
    env: dict[str, str]
    inherited: tuple[str, ...] | None
    grower: Grower | None = None  # --grow jobs: the worker jobs


def prepare(args: argparse.Namespace, env: Mapping[str, str]) -> ElasticPlan:
    """What can be checked before the elastic driver starts: the scheduler, its allocation,
    the hosts discovery gives now (enough for ``--np`` ranks), the network interface."""
    horovod_runner.require("elastic training (--min-np/--max-np)")
    scheduler = schedulers.select(args.scheduler, env)()
    alloc = scheduler.allocation(env)
    hosts = scheduler.elastic_hosts()
    if sum(hosts.values()) < args.np:
        raise LaunchError(
            f"elastic launch of {args.np} rank(s): the {scheduler.name} scheduler's host "
            f"discovery gives {sum(hosts.values())} slot(s) ({_describe(hosts) or 'none'})"
        )
    addresses = scheduler.addresses(alloc)
    grower = prepare_grower(args, scheduler) if args.grow == "jobs" else None
    # the ranks talk over the interface that reaches every node they may run on: worker jobs'
    # nodes too
    reach = dict(addresses)
    if grower is not None:
        for node, address in scheduler.grow_addresses(args.grow_resources).items():
            reach.setdefault(node, address)
    host_name = socket.gethostname()
    ifaces = local_ifaces()
    iface = choose_iface(reach, ifaces, host_name, resolve(host_name), args.iface, route_source)
    scheduler.bind(alloc, args.max_np, f"cb-{uuid.uuid4().hex[:8]}", local_nodes(addresses, ifaces))
    inherited = split_devices(env.get("CUDA_VISIBLE_DEVICES"))
    env_extra = rank_env(args, scheduler, iface)
    env_extra[CPUS_PER_RANK_VAR] = str(alloc.cpus_per_task)
    if grower is not None and grower.record_path is not None:
        env_extra[GROW_RECORD_VAR] = str(grower.record_path)
    return ElasticPlan(args, scheduler, alloc, hosts, iface, env_extra, inherited, grower)


def prepare_grower(args: argparse.Namespace, scheduler: Scheduler) -> Grower:
    """``--grow jobs``: the worker jobs (none submitted yet), one per slot beyond ``--np`` up
    to ``--max-np``; their logs beside the record (``--grow-record``). Worker jobs of an
    earlier launch of this run that its record lists as queued or running (a launcher killed
    outright) are cancelled first."""
    record = Path(args.grow_record).resolve() if args.grow_record else None
    log_dir = record.with_suffix("") if record is not None else None
    queue = scheduler.worker_queue(args.grow_resources, log_dir)
    earlier = [
        j["job"]
        for j in (read_grow_record(record) or {}).get("jobs", [])
        if isinstance(j, dict) and j.get("state") not in (ENDED, None)
    ]
    if earlier:
        log.info("grow: cancelling worker job(s) %s of an earlier launch", " ".join(earlier))
        try:
            queue.cancel(earlier)
        except LaunchError as exc:
            log.warning("grow: could not cancel them: %s", exc)
    return Grower(queue, args.max_np - args.np, record)


def _describe(hosts: Mapping[str, int]) -> str:
    return ", ".join(f"{h}:{n}" for h, n in hosts.items())


def run(plan: ElasticPlan) -> int:
    """Run the elastic driver to the end; 0 when the training finished, the exit code of a
    preemption, 128 + a stop signal, or 1 when Horovod gave up (too few slots, every host
    failed)."""
    args = plan.args
    log.info(
        "%s scheduler, Horovod elastic: %d rank(s) to start, between %d and %d; hosts now: %s",
        plan.scheduler.name,
        args.np,
        args.min_np,
        args.max_np,
        _describe(plan.hosts),
    )
    log.info("Gloo interface %s: %s", plan.iface.iface, plan.iface.reason)
    verbose = 2 if log.isEnabledFor(logging.DEBUG) else 0
    runners: list[ElasticRankRunner] = []
    found = discovery(plan.scheduler, lambda: {s.hostname for r in runners for s in r.running()})
    shutdown = threading.Event()
    runner = ElasticRankRunner(plan.scheduler, plan.inherited, shutdown, found)
    runners.append(runner)
    if plan.grower is not None:
        plan.grower.shutdown = shutdown  # a stop signal cancels the worker jobs at once
        plan.scheduler.grower = plan.grower
        plan.grower.start()
    signals = StopSignals(
        shutdown, runner.kill_all, runner.sweep, runner.reaper.sweep, forward=runner.forward
    )
    env = dict(plan.env)
    error: str | None = None
    with signals:
        try:
            horovod_runner.run_elastic(
                args.command,
                runner.exec_command,
                found,
                (args.np, args.min_np, args.max_np),
                ELASTIC_TIMEOUT_S,
                plan.iface.iface,
                env,
                shutdown,
                verbose,
            )
        except RuntimeError as exc:
            error = str(exc)
        finally:
            if plan.grower is not None:
                plan.grower.stop()
            if signals.killed_at is not None:
                runner.reaper.sweep()
            if error is not None or signals.first is not None:
                plan.scheduler.cleanup()
    return outcome(runner, signals, error, args.max_np)


def outcome(runner: ElasticRankRunner, signals: StopSignals, error: str | None, max_np: int) -> int:
    """How the elastic launch ended, logged; its exit code (see :func:`run`). ``error``:
    Horovod's, when it gave up."""
    for failed in runner.failures:
        log.info("rank %d on %s had failed (exit %d)", failed.rank, failed.host, failed.exit_code)
    if signals.first is not None:
        log.error("the launcher received %s: all ranks were stopped", signals.describe())
        return 128 + signals.first
    if runner.preempted():
        log.warning(
            "preempted: every rank stopped at the checkpoint they agreed on after the warning; "
            "run the same command again to continue from it (exit %d)",
            preemption.EXIT_PREEMPTED,
        )
        return preemption.EXIT_PREEMPTED
    if error is None:
        log.info(
            "the elastic training finished (%d rank failure(s) survived)", len(runner.failures)
        )
        return 0
    last = runner.failures[-1] if runner.failures else None
    detail = f"\n{failure_message(last, max_np)}" if last else ""
    log.error("Horovod elastic gave up: %s%s", error.strip(), detail)
    return 1
