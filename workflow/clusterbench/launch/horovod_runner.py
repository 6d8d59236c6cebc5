"""Horovod's runner, where Horovod's own ranks need it: the one module that imports it.

The launcher starts every rank itself (:mod:`.process`, through the scheduler), whatever the
backend: a DDP run needs nothing of Horovod, and an install without Horovod trains DDP runs.
A Horovod rank needs two things more, and they come from Horovod's runner, through here only:

- **its rendezvous** (:class:`Rendezvous`): the HTTP key-value server Horovod's Gloo ranks
  meet at, and the ``HOROVOD_*`` variables that tell each rank its place and where the server
  is: exactly those ``horovodrun`` sets, taken from Horovod's own functions so that they keep
  up with its release;
- **its elastic driver** (:func:`run_elastic`): which hosts train, when the world changes, the
  ranks' resets. It calls the launcher's ``exec_command`` for each rank to start.

The only private detail of Horovod used is in :func:`shutdown_event_without_handlers`, for the
elastic driver. Everything here imports Horovod when called, never at import: the launcher
imports this module in every install, with Horovod or without (:func:`require` names the way
to install it).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from clusterbench.launch.schedulers import LaunchError
from clusterbench.launch.slots import Slot

#: How to get Horovod, for the messages that need it.
INSTALL_HINT = (
    "install it with `make setup HOROVOD=1` in the clusterbench checkout (it builds "
    "horovod with its Gloo and, on a GPU machine, NCCL, and caches the wheel), or use "
    "backend: ddp, which needs no Horovod"
)


def available() -> bool:
    """Whether Horovod is installed in this Python: its distribution's metadata, read without
    importing it (nor asking the import system, which a process may have told to refuse it)."""
    try:
        importlib.metadata.distribution("horovod")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def require(what: str) -> None:
    """A :class:`LaunchError` naming ``what`` needs Horovod, when it is not installed."""
    if not available():
        raise LaunchError(
            f"{what} needs Horovod, which is not installed in this environment "
            f"({sys.executable}): {INSTALL_HINT}"
        )


class Rendezvous:
    """Horovod's rendezvous server for a fixed launch of ``slots``, listening on every address
    of this host (the ranks reach it at ``address``). :meth:`env` is a rank's ``HOROVOD_*``
    variables; :meth:`stop` ends the server."""

    def __init__(self, slots: Sequence[Slot], address: str, iface: str, verbose: int = 0):
        require("a Horovod launch")
        from horovod.runner import gloo_run
        from horovod.runner.common.util.hosts import SlotInfo
        from horovod.runner.http.http_server import RendezvousServer

        self._gloo_run = gloo_run
        self._server = RendezvousServer(verbose)
        port = self._server.start()
        self._server.init([SlotInfo(**vars(slot)) for slot in slots])
        self._common = {
            k: str(v) for k, v in gloo_run.create_run_env_vars(address, [iface], port).items()
        }

    def env(self, slot: Slot) -> dict[str, str]:
        """The ``HOROVOD_*`` variables of ``slot``'s rank (and NCCL's interface)."""
        return {**self._gloo_run.create_slot_env_vars(slot), **self._common}

    def stop(self) -> None:
        self._server.stop()


@contextlib.contextmanager
def rendezvous(
    slots: Sequence[Slot], address: str, iface: str, verbose: int = 0
) -> Iterator[Rendezvous]:
    """A :class:`Rendezvous` for the time of the ``with``."""
    server = Rendezvous(slots, address, iface, verbose)
    try:
        yield server
    finally:
        server.stop()


def host_discovery(base: type) -> type:
    """``base`` made a Horovod ``HostDiscovery`` too (what the elastic driver asks for)."""
    from horovod.runner.elastic.discovery import HostDiscovery

    return type(base.__name__, (base, HostDiscovery), {})


def run_elastic(
    command: Sequence[str],
    exec_command: Callable[[str, Any, list], tuple[int, float]],
    discovery: Any,
    sizes: tuple[int, int, int],
    timeout: int,
    iface: str,
    env: Mapping[str, str],
    shutdown: threading.Event,
    verbose: int = 0,
) -> None:
    """Run Horovod's elastic driver to its end: ``sizes`` are (ranks to start, fewest, most);
    it starts each rank with ``exec_command(command_line, slot_info, events)``. Raises
    RuntimeError when Horovod gives up (too few slots, every host failed)."""
    require("elastic training")
    from horovod.runner.elastic.settings import ElasticSettings
    from horovod.runner.gloo_run import launch_gloo_elastic
    from horovod.runner.http.http_server import RendezvousServer

    start, low, high = sizes
    settings = ElasticSettings(
        discovery=discovery,
        min_num_proc=low,
        max_num_proc=high,
        elastic_timeout=timeout,
        reset_limit=None,
        num_proc=start,
        verbose=verbose,
        nics={iface},
    )
    with shutdown_event_without_handlers(shutdown):
        launch_gloo_elastic(
            list(command),
            exec_command,
            settings,
            dict(env),
            lambda driver: [iface],
            RendezvousServer(verbose),
            sys.executable,
        )


@contextlib.contextmanager
def shutdown_event_without_handlers(shutdown: threading.Event) -> Iterator[None]:
    """Horovod's driver handing ``shutdown`` to every rank, without Horovod's signal handlers.

    horovod 0.28.1's ``launch_gloo_elastic`` (and ``launch_gloo``) calls
    ``gloo_run.register_shutdown_event()`` (by its module global name, at each call), which
    installs SIGINT and SIGTERM handlers that call ``Event.set``: a ``Condition`` lock taken in
    a signal handler, which deadlocks when a second signal comes while the first one's handler
    holds it. It is the only place in ``horovod.runner`` that installs a signal handler, so
    while this is in force Horovod leaves the launcher's handlers
    (:class:`clusterbench.launch.signals.StopSignals`) in place."""
    from horovod.runner import gloo_run

    original = gloo_run.register_shutdown_event
    gloo_run.register_shutdown_event = lambda: shutdown
    try:
        yield
    finally:
        gloo_run.register_shutdown_event = original
