"""``bn: sync``: exact full-batch statistics in forward and backward: the BatchNorm layers are
replaced by the backend's synchronised BatchNorm (on GPUs), or by
:class:`clusterbench.bn._blocks.CPUSyncBatchNorm` (on the CPU, where neither Horovod's nor
PyTorch's runs)."""

from __future__ import annotations

from typing import Any

DESCRIPTION = "full-batch statistics across workers in every forward and backward"
ELASTIC = (
    "'sync' replaces the BatchNorm layers for the starting world size, which an elastic run "
    "changes; use bn: aggregate (running statistics combined over whatever ranks there are) "
    "or local"
)


def prepare(model: Any, runtime: Any, device: Any) -> Any:
    """``model`` with every BatchNorm layer synchronised over ``runtime``'s ranks."""
    if runtime.size == 1:
        return model
    from clusterbench.bn._blocks import convert_batchnorm

    return convert_batchnorm(model, runtime.sync_batchnorm(device))


def aggregator(model: Any) -> None:
    return None
