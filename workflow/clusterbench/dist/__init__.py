"""The distributed runtime: one small interface, one implementation per backend.

``clusterbench.train`` talks only to :class:`~clusterbench.dist.base.Runtime`: rank and size,
allreduce, broadcast, wrapping the model and optimiser, BatchNorm across workers. It never
imports Horovod or ``torch.distributed`` itself and has no backend branches.

========== ============================================ =========================================
backend    implementation                               collectives
========== ============================================ =========================================
horovod    :mod:`clusterbench.dist.horovod_runtime`     Horovod (Gloo on CPU, NCCL on GPU)
ddp        :mod:`clusterbench.dist.torch_runtime`       ``torch.distributed`` + DDP (gloo / nccl)
========== ============================================ =========================================

Both are started by ``clusterbench.launch``, which gives every rank the Horovod variables
(``HOROVOD_RANK`` ...) *and* the ``torch.distributed`` ones (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
A single process started without a launcher is a world of one under either backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterbench.dist.base import Runtime

#: backend name -> ``module:class`` of its :class:`Runtime` (imported only when chosen).
BACKENDS = {
    "horovod": "clusterbench.dist.horovod_runtime:HorovodRuntime",
    "ddp": "clusterbench.dist.torch_runtime:TorchRuntime",
}


def init(backend: str, device_type: str) -> Runtime:
    """Start the runtime of ``backend`` for ranks computing on ``device_type`` (cpu / cuda)."""
    try:
        target = BACKENDS[backend]
    except KeyError:
        raise ValueError(
            f"unknown backend {backend!r} (choose from: {', '.join(BACKENDS)})"
        ) from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls).start(device_type)
