"""F6's reference: Horovod's synthetic benchmark, written the way a Horovod user writes it.

```
horovodrun -np 2 -H localhost:2 --gloo python benchmarks/horovod_synthetic.py \
    --model resnet18 --image-size 64 --batch-size 32
python benchmarks/horovod_synthetic.py --nproc 2 ...      # starts itself under horovodrun
python benchmarks/horovod_synthetic.py --data-dir D --out-dir O --run JSON --nproc 2  # bench
```

What Horovod's ``examples/pytorch/pytorch_synthetic_benchmark.py`` does, written anew: a
torchvision model by name, randomly initialised (1000 classes); plain SGD at ``0.01 x ranks``;
``hvd.DistributedOptimizer`` over the model's named parameters (``--fp16-allreduce``:
``hvd.Compression.fp16``); rank 0's parameters and optimiser state broadcast to every rank; ONE
fixed random batch per rank, made once (images and labels); each step ``zero_grad``, forward,
cross-entropy, backward, ``step``; ``timeit`` over ``--num-batches-per-iter`` steps, after
``--num-warmup-batches`` untimed ones, ``--num-iters`` times; rank 0 prints each iteration's
images/s per rank and the total (ranks x the mean, +- 1.96 sd).

Where it differs from Horovod's script, and why:

* CPU threads: each rank takes its share of the node's cores (cores / ranks on the node, as
  ``OMP_NUM_THREADS`` would be set by a user who launches several ranks per node). Horovod's
  script leaves PyTorch's default (every core in every rank), which oversubscribes a CPU node
  and would make any competitor look fast.
* BatchNorm: torchvision's plain ``BatchNorm2d``. The current script builds the model with
  ``norm_layer=hvd.SyncBatchNorm``, which takes CUDA tensors only; its earlier versions used
  the plain layer, as this one does (each rank normalises its own batch).
* ``--image-size`` (Horovod's is fixed at 224) and ``--bf16`` / ``--channels-last`` (autocast
  and the memory format, for GPU runs) are options here.
* For ``make bench`` it also takes the trainer's interface (``--data-dir``, ``--out-dir``,
  ``--run``: the model, the per-rank batch, the precision and memory format of the run slice;
  the image shape, classes and training images from the data dir's ``meta.json``) and writes
  ``metrics.jsonl`` in the trainer's format, one record per timed iteration
  (``images_per_second`` of all ranks), so that a bench row reads it as an epoch: then an
  iteration is as many steps as the trainer's epoch, there are as many as its epochs, and no
  separate warm-up (the first, like the trainer's first epoch, is left out of the median).

Nothing of clusterbench is used: torch, torchvision and Horovod only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import timeit
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18", help="a torchvision model")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank and step")
    p.add_argument("--image-size", type=int, default=224, help="the images' height and width")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--num-warmup-batches", type=int, default=10, help="untimed steps first")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="steps per iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--fp16-allreduce", action="store_true", help="hvd.Compression.fp16")
    p.add_argument("--bf16", action="store_true", help="forward and loss under bf16 autocast")
    p.add_argument("--channels-last", action="store_true", help="channels-last memory format")
    p.add_argument("--no-cuda", action="store_true", help="train on the CPU even with a GPU")
    p.add_argument("--nproc", type=int, help="start this many ranks under horovodrun (local)")
    p.add_argument("--data-dir", type=Path, help="bench: meta.json gives shape and classes")
    p.add_argument("--out-dir", type=Path, help="bench: metrics.jsonl goes here (rank 0)")
    p.add_argument("--run", help="bench: the trainer's run slice (JSON)")
    args = p.parse_args(argv)
    if args.run:
        from_run_slice(args, json.loads(args.run))
    return args


def from_run_slice(args: argparse.Namespace, run: dict[str, Any]) -> None:
    """Settings from a bench row's run slice and data dir (a per-rank batch: Horovod's)."""
    args.model = run["model"].removeprefix("torchvision.")
    args.batch_size = run["batch_size"]
    if run.get("batch_scaling", "global") == "global":
        args.batch_size = max(1, run["batch_size"] // run["workers"])
    args.bf16 = run.get("precision") == "bf16"
    args.channels_last = run.get("channels_last") is True
    args.no_cuda = run.get("gpus_per_node", 0) == 0
    args.fp16_allreduce = run.get("grad_compression") == "fp16"
    if args.data_dir is not None and (args.data_dir / "meta.json").is_file():
        meta = json.loads((args.data_dir / "meta.json").read_text())
        shape = meta.get("shape") or meta.get("image_shape")
        if shape:  # [C, H, W] of synthetic data, or [H, W, C] of arrays
            args.image_size = shape[1] if len(shape) == 3 and shape[0] in (1, 3) else shape[0]
        args.num_classes = int(meta.get("num_classes", args.num_classes))
        train = meta.get("counts", {}).get("train")
        if train:  # an iteration is the trainer's epoch: as many steps of as many images
            args.num_batches_per_iter = max(1, train // (args.batch_size * run["workers"]))
    # the trainer's epochs: the first one, warm-up included, left out of the medians alike
    args.num_iters = run.get("epochs", args.num_iters)
    args.num_warmup_batches = 0


def relaunch(args: argparse.Namespace, argv: list[str]) -> int:
    """``horovodrun -np N -H localhost:N --gloo python this_script.py ...``, as a user starts
    it on one machine."""
    horovodrun = Path(sys.executable).parent / "horovodrun"
    rest = [a for i, a in enumerate(argv) if a != "--nproc" and argv[i - 1 : i] != ["--nproc"]]
    n = str(args.nproc)
    cmd = [str(horovodrun), "-np", n, "-H", f"localhost:{n}", "--gloo", sys.executable]
    return subprocess.call([*cmd, str(Path(__file__).resolve()), *rest])


def benchmark(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The benchmark on this rank; rank 0 returns a record per timed iteration."""
    import horovod.torch as hvd
    import torch
    import torch.nn.functional as F
    from torchvision import models

    hvd.init()
    cuda = not args.no_cuda and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // hvd.local_size()))
    model = getattr(models, args.model)(num_classes=args.num_classes)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to("cuda" if cuda else "cpu", memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))
    data = data.to(memory_format=memory_format)
    if cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step() -> None:
        optimizer.zero_grad()
        with torch.autocast("cuda" if cuda else "cpu", torch.bfloat16, enabled=args.bf16):
            loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()

    device = "GPU" if cuda else "CPU"
    log(hvd, f"Model: {args.model}, {args.image_size}x{args.image_size}")
    log(hvd, f"Batch size: {args.batch_size} per rank; number of {device}s: {hvd.size()}")
    log(hvd, "Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    log(hvd, "Running benchmark...")
    records = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        per_rank = args.batch_size * args.num_batches_per_iter / seconds
        log(hvd, f"Iter #{i}: {per_rank:.1f} img/sec per {device}")
        records.append(
            {
                "epoch": i + 1,
                "epoch_seconds": seconds,
                "images_per_second": per_rank * hvd.size(),
                "steps": args.num_batches_per_iter,
            }
        )
    rates = [r["images_per_second"] / hvd.size() for r in records]
    mean = sum(rates) / len(rates)
    conf = 1.96 * (sum((r - mean) ** 2 for r in rates) / len(rates)) ** 0.5
    log(hvd, f"Img/sec per {device}: {mean:.1f} +-{conf:.1f}")
    total, spread = hvd.size() * mean, hvd.size() * conf
    log(hvd, f"Total img/sec on {hvd.size()} {device}(s): {total:.1f} +-{spread:.1f}")
    return records if hvd.rank() == 0 else []


def log(hvd: Any, text: str) -> None:
    if hvd.rank() == 0:
        print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.nproc and args.nproc > 1 and "HOROVOD_RANK" not in os.environ:
        return relaunch(args, argv)
    records = benchmark(args)
    if records and args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(r) + "\n" for r in records)
        (args.out_dir / "metrics.jsonl").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
