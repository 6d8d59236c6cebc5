"""The peak arithmetic rate of a rank's device, which model-FLOPs utilisation (MFU) divides by.

* **GPUs**: a table by model name and precision (:data:`GPU_PEAKS`), dense tensor-core rates
  (no sparsity) from NVIDIA's datasheets, named in :data:`SOURCES` and in docs/report.md
  ("Model-FLOPs utilisation"). ``bf16`` runs are divided by the bfloat16 tensor-core peak;
  ``fp32`` runs by the TF32 tensor-core peak on GPUs that have TF32 (Ampere and later:
  PyTorch's convolutions in fp32 run on TF32 tensor cores by default), else by the fp32 peak.
  A GPU the table does not know has no peak (its runs get no MFU, and run.json says why).
* **CPUs**: measured on the node where the rank trains (:func:`cpu_peak`): the best of a few
  square matrix products in the run's precision (float32, or bfloat16 for ``bf16``) with the
  rank's own torch threads, as the training runs them. It is recorded in run.json per rank.

Pure but for :func:`cpu_peak` (torch, timed) and :func:`device_peak`.
"""

from __future__ import annotations

import re
import time
from typing import Any

#: Dense peak TFLOP/s by GPU: (pattern matched in the device's name, the table's name, fp32,
#: tf32 tensor core, bf16 tensor core; None: the GPU has none). The first pattern that matches
#: wins (``H100 PCIe`` before ``H100``).
GPU_PEAKS: tuple[tuple[str, str, float, float | None, float | None], ...] = (
    (r"H200 NVL", "H200 NVL", 60.0, 417.5, 835.5),
    (r"H200", "H200 SXM", 67.0, 494.7, 989.4),
    (r"H100 NVL", "H100 NVL", 60.0, 417.5, 835.5),
    (r"H100 PCIe", "H100 PCIe", 51.0, 378.0, 756.5),
    (r"H100", "H100 SXM", 67.0, 494.7, 989.4),
    (r"A100", "A100", 19.5, 156.0, 312.0),
    (r"L40S", "L40S", 91.6, 183.0, 362.05),
    (r"\bL4\b", "L4", 30.3, 60.0, 121.0),
    (r"\bA10\b", "A10", 31.2, 62.5, 125.0),
    (r"V100-PCIE|V100 PCIe", "V100 PCIe", 14.0, None, None),
    (r"V100", "V100 SXM2", 15.7, None, None),
    (r"\bT4\b", "T4", 8.1, None, None),
)
#: Where each table name's figures come from (their dense, non-sparse values).
SOURCES = {
    "H200 NVL": "NVIDIA H200 Tensor Core GPU datasheet",
    "H200 SXM": "NVIDIA H200 Tensor Core GPU datasheet",
    "H100 NVL": "NVIDIA H100 Tensor Core GPU datasheet",
    "H100 PCIe": "NVIDIA H100 Tensor Core GPU datasheet",
    "H100 SXM": "NVIDIA H100 Tensor Core GPU datasheet",
    "A100": "NVIDIA A100 Tensor Core GPU datasheet",
    "L40S": "NVIDIA L40S GPU datasheet",
    "L4": "NVIDIA L4 Tensor Core GPU datasheet",
    "A10": "NVIDIA A10 Tensor Core GPU datasheet",
    "V100 PCIe": "NVIDIA V100 Tensor Core GPU datasheet",
    "V100 SXM2": "NVIDIA V100 Tensor Core GPU datasheet",
    "T4": "NVIDIA T4 Tensor Core GPU datasheet",
}
#: The side of the CPU's timed matrix product, by the rank's threads (fewer: smaller): at 1 thread
#: a product of 512 took 36 ms and gave the highest rate of 256, 512 and 1024 on the reference
#: CPU (every training rank measures once per launch: it must cost little).
CPU_SIDES = ((8, 2048), (4, 1024), (0, 512))
#: Timed products (after one untimed): the best is the peak.
CPU_REPEATS = 5


def gpu_peak(name: str, precision: str) -> dict[str, Any]:
    """The table's peak of GPU ``name`` (``torch.cuda.get_device_name``) for ``precision``
    (fp32, bf16): ``{"flops", "precision", "source"}``, ``flops`` None (and ``source`` saying
    why) where the table has no figure."""
    for pattern, model, fp32, tf32, bf16 in GPU_PEAKS:
        if re.search(pattern, name, re.IGNORECASE):
            if precision == "bf16":
                kind, tflops = "bf16", bf16
            else:
                kind, tflops = ("tf32", tf32) if tf32 is not None else ("fp32", fp32)
            if tflops is None:
                return {"flops": None, "precision": kind, "source": f"{model}: no {kind} peak"}
            source = f"{SOURCES[model]} ({model}, {kind} dense)"
            return {"flops": tflops * 1e12, "precision": kind, "source": source}
    return {
        "flops": None,
        "precision": precision,
        "source": f"GPU {name!r} is not in the peak table (clusterbench.training.peaks)",
    }


def cpu_peak(precision: str, threads: int) -> dict[str, Any]:
    """The best rate of :data:`CPU_REPEATS` square matrix products on this process's torch
    threads (``threads``: how many; it chooses the side), in float32 or (``bf16``) bfloat16."""
    import torch

    side = next(n for least, n in CPU_SIDES if threads >= least)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(side, side).to(dtype)
    b = torch.randn(side, side).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(CPU_REPEATS):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    kind = "bf16" if precision == "bf16" else "fp32"
    return {
        "flops": 2 * side**3 / best,
        "precision": kind,
        "source": f"measured: {kind} {side}x{side} matrix product, {threads} thread(s), best of "
        f"{CPU_REPEATS}",
    }


def device_peak(device: Any, precision: str) -> dict[str, Any]:
    """The peak of the rank's ``device`` for ``precision``: the GPU table's, or the CPU's
    measured."""
    import torch

    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), precision)
    return cpu_peak(precision, torch.get_num_threads())
