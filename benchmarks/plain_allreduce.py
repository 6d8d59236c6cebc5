"""Reference 3: a plain ``torch.distributed.all_reduce`` loop, N processes started by this script.

```
.venv/bin/python benchmarks/plain_allreduce.py [--nproc 2] [--min-bytes 1048576]
    [--max-bytes 268435456] [--warmup 5] [--iters 20] [--out FILE]
```

The loop a user writes to see what their interconnect gives: ``torch.multiprocessing.spawn``
starts ``--nproc`` ranks on this host (``MASTER_ADDR=127.0.0.1``, a free port), process group
``gloo`` on CPU (``nccl`` and one GPU per rank on GPU), CPU threads per rank = cores / ranks.
For each size from ``--min-bytes`` doubling to ``--max-bytes``: one float32 tensor of zeros,
``--warmup`` untimed ``all_reduce`` calls, a barrier, then ``--iters`` calls back to back on
``time.perf_counter`` (the device synchronised at the end). Time per operation: rank 0's
elapsed / iters; bus bandwidth as nccl-tests defines it for allreduce: size / time x 2(n-1)/n
(GB/s = 1e9 bytes/s). Rank 0 prints one line per size; ``--out`` gets
``{"ranks": n, "rows": [{"size", "time_s", "busbw_gbps"}, ...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from bench_data import cpu_cores, free_port


def _rank_main(rank: int, nproc: int, args: argparse.Namespace) -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=nproc)
    try:
        rows = _measure(rank, nproc, args, cuda)
    finally:
        dist.destroy_process_group()
    if rank == 0 and args.out is not None:
        args.out.write_text(json.dumps({"ranks": nproc, "rows": rows}, indent=1))


def _measure(rank: int, nproc: int, args: argparse.Namespace, cuda: bool) -> list[dict]:
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, cpu_cores() // nproc))
    rows, size = [], args.min_bytes
    while size <= args.max_bytes:
        tensor = torch.zeros(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / args.iters
        busbw = size / seconds / 1e9 * 2 * (nproc - 1) / nproc
        rows.append({"size": size, "time_s": seconds, "busbw_gbps": busbw})
        if rank == 0:
            print(f"plain_allreduce: {size:>10d} B: {seconds * 1e6:10.1f} us, {busbw:.3f} GB/s")
        size *= 2
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2, help="number of ranks (processes)")
    parser.add_argument("--min-bytes", type=int, default=2**20, help="the smallest message")
    parser.add_argument("--max-bytes", type=int, default=2**28, help="the largest message")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per size")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per size")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    mp.spawn(_rank_main, args=(args.nproc, args), nprocs=args.nproc, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
