"""Where a rank trains: its device (the CPU, or the GPU of its local rank), its CPU threads, its
node's name, and the random state it carries across a checkpoint.

* ``gpus_per_node: 0`` trains on the CPU even where a GPU is visible; ``gpus_per_node > 0``
  needs a usable CUDA GPU (else a clear error naming the run, before any training) and uses
  the GPU of the rank's local rank.
* ``deterministic: false`` lets cuDNN autotune; ``true`` asks for deterministic algorithms.
* ``precision: bf16`` on a GPU needs one with bfloat16 arithmetic (Ampere or later): on an
  older one the run stops before training, naming the GPU. The CPU runs bf16 autocast
  everywhere (with native instructions where the CPU has them, AVX512-BF16 or AMX).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from clusterbench.config import ConfigError
from clusterbench.core.rank_env import NODE_VAR


class DeviceError(ConfigError):
    """The run asks for a device this machine cannot give it."""


def check_device(run: Mapping[str, Any]) -> str:
    """The device type the run asks for: ``cpu`` for ``gpus_per_node: 0`` (even where a GPU is
    visible), ``cuda`` otherwise; :class:`DeviceError` when no usable GPU is there."""
    if run["gpus_per_node"] == 0:
        return "cpu"
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise DeviceError(
            f"run {run['name']!r} asks for gpus_per_node={run['gpus_per_node']}, but "
            f"{node_name()} has no usable CUDA GPU (torch.cuda.is_available() is False"
            + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
            + f", torch {torch.__version__}): not training it on the CPU instead"
        )
    if run["precision"] == "bf16" and not torch.cuda.is_bf16_supported():
        raise DeviceError(
            f"run {run['name']!r} asks for precision bf16, but the GPU of {node_name()} "
            f"({torch.cuda.get_device_name()}) has no bfloat16 arithmetic (bfloat16 needs "
            "compute capability 8.0, Ampere, or later): use precision fp32 on it"
        )
    return "cuda"


def setup_device(run: Mapping[str, Any], device_type: str, local_rank: int, local_size: int):
    """The rank's device (the GPU of its local rank, modulo the visible GPUs), with the run's
    determinism and the CPU threads set."""
    import torch

    if run["deterministic"]:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by cuBLAS
        torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = bool(run["deterministic"])
    torch.backends.cudnn.benchmark = not run["deterministic"]
    if device_type == "cuda":
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    torch.set_num_threads(cpu_threads(local_size))
    return torch.device("cpu")


def cpu_threads(local_size: int, env: Mapping[str, str] = os.environ) -> int:
    """Torch threads of one rank: the CPUs it may use, shared among the node's ranks.

    ``OMP_NUM_THREADS`` only caps the node's total: Snakemake sets it to the whole job's
    ``threads``, and taking it per rank oversubscribed a 2-core machine 2x and made 2-worker
    training about 18x slower (measured with the 2-worker trainer on the digits).
    """
    cpus = len(os.sched_getaffinity(0))
    if env.get("OMP_NUM_THREADS", "").isdigit():
        cpus = min(cpus, int(env["OMP_NUM_THREADS"]))
    return max(1, cpus // local_size)


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (a clock must not stop before it)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def node_name() -> str:
    """The scheduler's name for this node: several may share one machine. What the launcher
    says (``CLUSTERBENCH_NODE``: a local elastic launch's slot host's host, a worker job's
    node), else Horovod's host (``HOROVOD_HOSTNAME``), else this machine's name."""
    return os.environ.get(NODE_VAR) or os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


def scheduler_name() -> str:
    """Whose allocation the ranks ran in: the scheduler clusterbench-launch exports to them
    (local, slurm, sge); else "gloo" (another Gloo launcher started them) or "none"."""
    name = os.environ.get("CLUSTERBENCH_SCHEDULER", "auto")
    if name != "auto":
        return name
    return "gloo" if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ else "none"


def rng_state() -> dict[str, Any]:
    """This process's torch random state (CPU, and the current CUDA device's if any)."""
    import torch

    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
