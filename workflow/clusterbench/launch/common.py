"""What a fixed-size launch (:mod:`.fixed`) and an elastic one (:mod:`.elastic`) share: this
machine's network interfaces and its route to an address, a free port, and the environment every
rank gets beside Horovod's own variables."""

from __future__ import annotations

import argparse
import os
import socket

from clusterbench.core.rank_env import CPUS_PER_RANK_VAR, GROW_RECORD_VAR, NODE_VAR
from clusterbench.launch import schedulers
from clusterbench.launch.placement import IfaceChoice
from clusterbench.launch.schedulers import Scheduler

__all__ = [
    "CPUS_PER_RANK_VAR",
    "GROW_RECORD_VAR",
    "NODE_VAR",
    "free_port",
    "local_ifaces",
    "rank_env",
]


def local_ifaces() -> dict[str, list[str]]:
    """This machine's network interfaces with an IPv4 address: name -> addresses."""
    import psutil

    return {
        name: [a.address for a in addrs if a.family == socket.AF_INET]
        for name, addrs in psutil.net_if_addrs().items()
        if any(a.family == socket.AF_INET for a in addrs)
    }


def route_source(address: str) -> str | None:
    """The address of this machine the kernel sends from to ``address`` (the interface that
    routes there); None when there is no route. A UDP socket's ``connect`` asks the routing
    table and sends nothing."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def free_port(address: str) -> int:
    """A TCP port that is free on this machine's ``address`` now (for rank 0's TCPStore)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def rank_env(args: argparse.Namespace, scheduler: Scheduler, iface: IfaceChoice) -> dict[str, str]:
    """The extra environment of every rank (beside Horovod's own variables)."""
    # the ranks record what started them (clusterbench.train writes it to run.json)
    extra: dict[str, str] = {
        schedulers.SCHEDULER_VAR: scheduler.name,
        # the cluster's name for the results (the config's `site` wins: the workflow sets it)
        schedulers.SITE_VAR: os.environ.get(schedulers.SITE_VAR) or scheduler.site(),
        # the interface of every library that opens sockets between the ranks: torch's gloo
        # and NCCL here (Horovod's Gloo gets HOROVOD_GLOO_IFACE from its runner); a scheduler
        # whose hosts name their interfaces differently sets each rank's own (ssh)
        "GLOO_SOCKET_IFNAME": iface.iface,
        "NCCL_SOCKET_IFNAME": iface.iface,
    }
    if args.iface:  # asked for: the same name on every host (a scheduler whose hosts choose
        extra["CLUSTERBENCH_IFACE"] = args.iface  # their own reads it there: ssh)
    if args.log_level:
        extra["HOROVOD_LOG_LEVEL"] = args.log_level
    if args.timeout:
        extra["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(args.timeout)
    return extra
