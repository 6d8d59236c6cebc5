"""Reference of F10: a hand-written single-process training loop of ``gpt-tiny`` on byte
tokens, written as a user writes it, with PyTorch's defaults.

```
.venv/bin/python benchmarks/gpt_hand_loop.py --data-dir DATA [--model gpt-tiny] [--epochs 4]
    [--batch-size 32] [--lr 0.05] [--precision fp32|bf16] [--run RUN_JSON] [--out-dir OUT]
```

``DATA`` is a preprocessed text data dir (``format: text``: ``train_x.npy`` inputs and
``train_y.npy`` next tokens, uint8 ``(N, T)``). The same network and seed as the trainer
(``build_model``), the training windows resident as int64 tensors on the device, one
permutation per epoch from ``numpy.random.default_rng([seed, epoch])``, batches taken in that
order, forward, ``F.cross_entropy`` over the flattened tokens (mean), backward, SGD with
momentum and weight decay (``bf16``: forward and loss under ``torch.autocast``). Threads: the
CPUs of this process's affinity mask (as ``hand_loop.py``). Nothing else: no LR warm-up,
validation, checkpoints or logging.

Each epoch is timed with ``time.perf_counter`` (after ``torch.cuda.synchronize`` on a GPU) and
printed with its tokens/s; ``--out-dir`` gets ``metrics.jsonl`` in the trainer's format (epoch,
epoch_seconds, images_per_second, tokens_per_second, train_loss).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from bench_data import TRAINING_DEFAULTS, cpu_cores, parsed_settings, settings_cli, write_metrics
from clusterbench.models import build_model

DEFAULTS = {
    **TRAINING_DEFAULTS,
    "model": "gpt-tiny",
    "epochs": 4,
    "batch_size": 32,
    "precision": "fp32",
}


def train(data_dir: Path, out_dir: Path | None = None, **settings: Any) -> list[dict[str, Any]]:
    """Train on one device; returns (and writes to ``out_dir``) one record per epoch."""
    s = {**DEFAULTS, **settings}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(cpu_cores())
    meta = json.loads((Path(data_dir) / "meta.json").read_text())
    x = torch.from_numpy(np.load(Path(data_dir) / "train_x.npy")).long().to(device)
    y = torch.from_numpy(np.load(Path(data_dir) / "train_y.npy")).long().to(device)
    n, seq_len = x.shape

    torch.manual_seed(s["seed"])
    model = build_model(s["model"], meta["vocabulary"], [seq_len]).to(device)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"]
    )
    records = []
    for epoch in range(s["epochs"]):
        model.train()
        order = torch.from_numpy(np.random.default_rng([s["seed"], epoch]).permutation(n))
        loss_sum = torch.zeros((), device=device)
        t0 = time.perf_counter()
        for start in range(0, n, s["batch_size"]):
            idx = order[start : start + s["batch_size"]].to(device)
            with torch.autocast(device.type, torch.bfloat16, enabled=s["precision"] == "bf16"):
                logits = model(x[idx])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), y[idx].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(idx)
        train_loss = float(loss_sum) / n  # waits for the device, like synchronize
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        record = {
            "epoch": epoch + 1,
            "epoch_seconds": seconds,
            "images_per_second": n / seconds,
            "tokens_per_second": n * seq_len / seconds,
            "train_loss": train_loss,
        }
        records.append(record)
        print(
            f"gpt_hand_loop: epoch {epoch + 1}: loss {record['train_loss']:.4f}, {seconds:.2f} s, "
            f"{record['tokens_per_second']:.0f} tokens/s",
            flush=True,
        )
    if out_dir is not None:
        write_metrics(out_dir, records)
    return records


def main(argv: list[str] | None = None) -> int:
    args = settings_cli(__doc__.split("\n\n")[0], DEFAULTS).parse_args(argv)
    train(args.data_dir, args.out_dir, **parsed_settings(args, DEFAULTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
