"""Where the ranks go, whatever the scheduler: pure functions, text and data in, data out.

How ``--np`` ranks spread over an allocation's hosts (with
:func:`~clusterbench.launch.schedulers.spread_ranks`, Slurm's block distribution, which the Slurm
scheduler also uses), which hosts are this machine, and the network interface Gloo binds to.
The schedulers (:mod:`clusterbench.launch.schedulers`) read the allocation; a launch
(:mod:`clusterbench.launch.fixed`, :mod:`clusterbench.launch.elastic`) puts the two together.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clusterbench.launch.schedulers import Allocation, AllocationError, spread_ranks

# ------------------------------------------------------------------------------------------
# ranks on hosts


def rank_hosts(
    allocation: Allocation,
    np: int,
    spread: Callable[[Sequence[tuple[str, int]], int], list[tuple[str, int]]] = spread_ranks,
) -> list[tuple[str, int]]:
    """The hosts of ``allocation`` that get ranks, and how many each, for ``np`` ranks spread
    over its hosts by ``spread`` (the scheduler's: one per host first, or every slot in order);
    :func:`clusterbench.launch.slots.assign` numbers them."""
    for h in allocation.hosts:
        if ":" in h.name or "," in h.name:
            raise AllocationError(f"host name {h.name!r} contains ':' or ','")
    return spread([(h.name, h.slots) for h in allocation.hosts], np)


# ------------------------------------------------------------------------------------------
# network interface


def local_nodes(
    node_addresses: Mapping[str, str | None], local_ifaces: Mapping[str, Sequence[str]]
) -> set[str]:
    """The nodes whose address is on this machine (one of its addresses, or loopback)."""
    local_ips = {a for addrs in local_ifaces.values() for a in addrs}
    return {n for n, a in node_addresses.items() if a and (a in local_ips or _is_loopback(a))}


@dataclass(frozen=True)
class IfaceChoice:
    iface: str
    address: str  # this host's IPv4 address on it: the rendezvous server address
    reason: str


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def choose_iface(
    node_addresses: Mapping[str, str | None],
    local_ifaces: Mapping[str, Sequence[str]],
    host_name: str,
    host_address: str | None,
    requested: str | None = None,
    route: Callable[[str], str | None] | None = None,
) -> IfaceChoice:
    """The interface Gloo (Horovod's and torch's) and NCCL bind to, and the rendezvous address
    on it.

    ``requested`` (``--iface``/``CLUSTERBENCH_IFACE``) wins. Otherwise the loopback interface
    when every node's address is on this machine; else the interface that routes to the other
    nodes: ``route(address)`` is the address of this machine the kernel sends from to
    ``address`` (:func:`clusterbench.launch.common.route_source`), asked for each node that is
    not on this machine, in order; the first node's interface is taken (the reason names any
    node reached through another). Without a route (unresolved nodes, or no ``route``), the
    interface carrying the address ``host_name`` resolves to (``host_address``).

    :param node_addresses: node name -> its resolved IPv4 address (None: unresolved)
    :param local_ifaces: interface -> its IPv4 addresses (this machine)
    """
    local_ips = {a: i for i, addrs in local_ifaces.items() for a in addrs}
    if requested:
        addrs = local_ifaces.get(requested)
        if not addrs:
            known = ", ".join(sorted(local_ifaces)) or "none"
            raise AllocationError(
                f"network interface {requested!r} has no IPv4 address on this machine "
                f"(interfaces with one: {known})"
            )
        return IfaceChoice(requested, addrs[0], "requested with --iface / CLUSTERBENCH_IFACE")

    here = local_nodes(node_addresses, local_ifaces)
    remote = {n: a for n, a in node_addresses.items() if n not in here}
    if not remote:
        loop = next(
            (i for i, addrs in local_ifaces.items() if any(_is_loopback(a) for a in addrs)), None
        )
        if loop is None:
            raise AllocationError("no loopback interface with an IPv4 address; pass --iface")
        where = ", ".join(f"{n}={a}" for n, a in node_addresses.items())
        addr = next(a for a in local_ifaces[loop] if _is_loopback(a))
        return IfaceChoice(loop, addr, f"every node address is on this machine ({where})")

    where = ", ".join(f"{n}={a or 'unresolved'}" for n, a in remote.items())
    routed = _routed_iface(remote, local_ips, route)
    if routed is not None:
        return routed
    if host_address and not _is_loopback(host_address) and host_address in local_ips:
        iface = local_ips[host_address]
        return IfaceChoice(
            iface,
            host_address,
            f"nodes {where} are not on this machine; this host's name {host_name!r} resolves "
            f"to {host_address}, carried by {iface}",
        )
    raise AllocationError(
        f"cannot choose a network interface: nodes {where} are not on this machine and this "
        f"host's name {host_name!r} resolves to {host_address or 'nothing'}, "
        "which no non-loopback interface carries; pass --iface or set CLUSTERBENCH_IFACE"
    )


def _routed_iface(
    remote: Mapping[str, str | None],
    local_ips: Mapping[str, str],
    route: Callable[[str], str | None] | None,
) -> IfaceChoice | None:
    """The interface the route to the first routable node of ``remote`` leaves through (see
    :func:`choose_iface`); None when no node has a route from a non-loopback interface."""
    if route is None:
        return None
    sources = {}
    for node, address in remote.items():
        source = route(address) if address else None
        if source and not _is_loopback(source) and source in local_ips:
            sources[node] = (address, source, local_ips[source])
    if not sources:
        return None
    node, (address, source, iface) = next(iter(sources.items()))
    reason = (
        f"nodes {', '.join(f'{n}={a}' for n, (a, _, _) in sources.items())} are not on this "
        f"machine; the route to {node} ({address}) leaves through {iface} ({source})"
    )
    others = {n: i for n, (_, _, i) in sources.items() if i != iface}
    if others:
        reason += "; NOTE: " + ", ".join(f"{n} is reached through {i}" for n, i in others.items())
    return IfaceChoice(iface, source, reason)
