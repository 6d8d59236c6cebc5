"""What a fixed-size launch (:mod:`.fixed`) and an elastic one (:mod:`.elastic`) share: this
machine's network interfaces and its route to an address, a free port, and the environment every
rank gets beside Horovod's own variables."""

from __future__ import annotations

import argparse
import json
import os
import socket

from clusterbench.core.rank_env import (
    CPUS_PER_RANK_VAR,
    GROW_RECORD_VAR,
    LOG_LEVEL_VAR,
    NETWORK_FROM_VAR,
    NODE_VAR,
)
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
    if args.log_level:  # each library's variable, unless the environment sets that one itself
        levels = log_variables(args.log_level)
        extra.update({k: v for k, v in levels.items() if not os.environ.get(k)})
        extra[LOG_LEVEL_VAR] = args.log_level
    if args.timeout:
        extra["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(args.timeout)
    # where the interface and the level came from, for run.json (clusterbench.training.record)
    extra[NETWORK_FROM_VAR] = json.dumps(getattr(args, "origins", {}), sort_keys=True)
    return extra


#: The communication libraries' own debug variables, by the launcher's log level (Horovod's
#: levels): Horovod's log level; NCCL's (WARN, INFO, TRACE: NCCL has no quieter level than
#: VERSION, its version line); torch.distributed's checks and logs (DETAIL adds a consistency
#: check of every collective: slower), which it prints only at TORCH_CPP_LOG_LEVEL=INFO.
LOG_VARIABLES = {
    "trace": {"NCCL_DEBUG": "TRACE", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
    "debug": {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
    "info": {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "INFO"},
    "warning": {"NCCL_DEBUG": "WARN", "TORCH_DISTRIBUTED_DEBUG": "OFF"},
    "error": {"NCCL_DEBUG": "VERSION", "TORCH_DISTRIBUTED_DEBUG": "OFF"},
    "fatal": {"NCCL_DEBUG": "VERSION", "TORCH_DISTRIBUTED_DEBUG": "OFF"},
}


def log_variables(level: str) -> dict[str, str]:
    """The ranks' variables for the launcher's log ``level`` (:data:`LOG_VARIABLES`)."""
    found = {"HOROVOD_LOG_LEVEL": level, **LOG_VARIABLES[level]}
    if found["TORCH_DISTRIBUTED_DEBUG"] != "OFF":
        found["TORCH_CPP_LOG_LEVEL"] = "INFO"
    return found
