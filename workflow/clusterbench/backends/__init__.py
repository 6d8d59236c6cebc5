"""The distributed backends: one plugin module each, one small interface.

The training loop talks only to :class:`clusterbench.runtime.Runtime`: rank and size,
allreduce, broadcast, wrapping the model and optimiser, BatchNorm across workers. It never
imports Horovod or ``torch.distributed`` itself and has no backend branches.

========== ============================================ =========================================
backend    module                                       collectives
========== ============================================ =========================================
horovod    :mod:`clusterbench.backends.horovod`         Horovod (Gloo on CPU, NCCL on GPU);
                                                        elastic (:class:`ElasticRuntime`)
ddp        :mod:`clusterbench.backends.ddp`             ``torch.distributed`` + DDP (gloo / nccl)
========== ============================================ =========================================

A backend is a module of this package (:mod:`clusterbench.registry`) defining ``RUNTIME``, its
:class:`~clusterbench.runtime.Runtime` class; the config's choices of ``backend`` are this
package's modules. The modules import nothing heavy at import time (the config check asks
``RUNTIME`` whether it is elastic while the Snakefile is parsed): torch and the backend's
library are imported when the runtime starts.

Both are started by ``clusterbench.launch``, which gives every rank the Horovod variables
(``HOROVOD_RANK`` ...) *and* the ``torch.distributed`` ones (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
A single process started without a launcher is a world of one under either backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clusterbench.registry import Registry

if TYPE_CHECKING:
    from clusterbench.runtime import Runtime

#: The backends: the schema's choices of a run's ``backend``.
BACKENDS = Registry("clusterbench.backends", "backend")


def runtime_class(backend: str) -> type[Runtime]:
    """The :class:`Runtime` class of ``backend``."""
    return BACKENDS.get(backend, "RUNTIME")


def is_elastic(backend: str) -> bool:
    """Whether ``backend`` can train while its world changes (an :class:`ElasticRuntime`)."""
    from clusterbench.runtime import ElasticRuntime

    return issubclass(runtime_class(backend), ElasticRuntime)


def grad_compression_problems(run: Mapping[str, Any], where: str = "run") -> list[str]:
    """A ``grad_compression`` the run's backend cannot apply, named (before any job)."""
    wanted = run.get("grad_compression") or "none"
    if run["backend"] not in BACKENDS.names():
        return []  # the schema names an unknown backend
    able = runtime_class(run["backend"]).GRAD_COMPRESSIONS
    if wanted in able:
        return []
    others = [b for b in BACKENDS.names() if wanted in runtime_class(b).GRAD_COMPRESSIONS]
    return [
        f"{where}.grad_compression: backend {run['backend']!r} cannot compress gradients to "
        f"{wanted} (it takes {', '.join(able)})"
        + (f": use backend {' or '.join(others)} for {wanted}" if others else "")
    ]


def init(backend: str, device_type: str) -> Runtime:
    """Start the runtime of ``backend`` for ranks computing on ``device_type`` (cpu / cuda)."""
    return runtime_class(backend).start(device_type)
