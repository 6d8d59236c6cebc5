"""The ranks of a launch, slot by slot: which host each rank runs on, and its place there.

A pure function of the hosts and their rank counts, in the order the placement chose
(:func:`clusterbench.launch.placement.rank_hosts`): ranks fill the hosts in order, so rank r's
host, its rank on that host (``local_rank``) and its rank among the ranks of the same
``local_rank`` on every host (``cross_rank``) follow from the list alone. These are the
numbers every backend reads (``torch.distributed``'s ``RANK``/``LOCAL_RANK``/``GROUP_RANK``,
Horovod's ``HOROVOD_RANK``/``HOROVOD_LOCAL_RANK``/``HOROVOD_CROSS_RANK``), and they are the same
as ``horovodrun`` gives for the same ``host:slots`` list, so a Horovod rank started by the
launcher sees the world ``horovodrun`` would have made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """One rank's place: its host, its rank in the world, on its host and across hosts."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int


def assign(hosts: Sequence[tuple[str, int]]) -> list[Slot]:
    """Every rank of ``hosts`` (``(host, ranks)`` in order, each host once), rank 0 first.

    A host's ranks are consecutive; ``cross_rank`` is the host's place among the hosts that
    have a rank of the same ``local_rank``, ``cross_size`` how many such hosts there are."""
    names = [host for host, _ in hosts]
    if len(set(names)) != len(names):
        raise ValueError(f"a host is listed twice: {', '.join(names)}")
    if any(count < 1 for _, count in hosts):
        raise ValueError(f"every host needs at least one rank: {list(hosts)}")
    size = sum(count for _, count in hosts)
    # for each local rank, the hosts that have one, in order
    having = [
        [h for h, count in hosts if count > local]
        for local in range(max((c for _, c in hosts), default=0))
    ]
    slots: list[Slot] = []
    for host, count in hosts:
        for local in range(count):
            slots.append(
                Slot(
                    hostname=host,
                    rank=len(slots),
                    local_rank=local,
                    cross_rank=having[local].index(host),
                    size=size,
                    local_size=count,
                    cross_size=len(having[local]),
                )
            )
    return slots


def describe(hosts: Sequence[tuple[str, int]]) -> str:
    """``host:ranks,...``: the hosts as the launcher's log (and ``horovodrun -H``) write them."""
    return ",".join(f"{host}:{count}" for host, count in hosts)
