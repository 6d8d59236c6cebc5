"""Stage: the interconnect, measured. Allreduce, allgather and broadcast are timed across the
ranks of one environment, through one backend's own collectives, for messages from 8 B up to
``max_bytes``, doubling; started as a train job of that size is.

```
python -m clusterbench.launch --np W -- \\
    python scripts/comm.py --params JSON --out-dir results/comm/NAME
```

``--params`` is the job's slice (:func:`clusterbench.pipeline.comm_jobs.job_params`): its ``name``,
environment (``workers``, ``nodes``, ``gpus_per_node``: the CPU for 0, else one GPU per rank)
and ``backend``, and the ``comm`` settings (``max_bytes``, ``seconds_per_size``,
``warmup_iterations``, ``min_iterations``). Writes ``comm.json`` (the job, where it ran, its
provenance and one row per operation and size) and ``comm.csv`` (the rows) to ``--out-dir``.

The collectives are those training uses: Horovod's (``hvd.allreduce_``, ``hvd.allgather``,
``hvd.broadcast_``, with the runtime's own settings, e.g. its CPU cycle time) or
``torch.distributed``'s (``all_reduce``, ``all_gather_single``, ``broadcast``): Gloo on the
CPU, NCCL on GPUs. Buffers are float32 zeros (a sum of zeros stays zero: no overflow, no
denormals).

Timing, per operation and size, on every rank: a collective lines the ranks up; then the
warm-up iterations, each timed; the fastest of them gives rank 0 the iteration count that fills
``seconds_per_size`` (between ``min_iterations`` and :data:`MAX_ITERATIONS`), which it sends to
every rank. The timed iterations run back to back in up to :data:`SAMPLES` consecutive chunks,
each on ``time.perf_counter`` (the device synchronised at its end): a chunk's time per
operation is its time over its iterations. A collective ends when its slowest rank does, so
each chunk counts at its slowest rank's time. The row's latency (``time_s``) is the whole timed
stretch over the iterations; the chunks give its spread (min, median, max, sd).

Bandwidths are nccl-tests' (doc/PERFORMANCE.md): ``algbw = S / t``, ``busbw = algbw x F``
with S the message (for allgather the gathered whole: every rank's part times the ranks) and F
= 2(n-1)/n for allreduce, (n-1)/n for allgather, 1 for broadcast; GB/s are 1e9 bytes/s.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterbench.backends import Collectives
from clusterbench.config import ConfigError, bad_settings, stage_params
from clusterbench.core.atomic import atomic_open, write_json
from clusterbench.core.interrupted import one_line
from clusterbench.records.comm import COLUMNS, FORMAT, OPS

#: The smallest message, bytes: two float32 values.
MIN_BYTES = 8
#: The most timed iterations of one operation and size.
MAX_ITERATIONS = 10_000
#: The most chunks the timed iterations are split into (the spread's samples).
SAMPLES = 10
#: Bytes per element of the buffers (float32).
ELEMENT_BYTES = 4
# ------------------------------------------------------------------------------------------
# the arithmetic (pure)


def size_ladder(max_bytes: int, min_bytes: int = MIN_BYTES) -> list[int]:
    """The message sizes: ``min_bytes`` doubling while not above ``max_bytes``."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"no message sizes from {min_bytes} B to {max_bytes} B")
    sizes = [min_bytes]
    while sizes[-1] * 2 <= max_bytes:
        sizes.append(sizes[-1] * 2)
    return sizes


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' factor from algorithm to bus bandwidth of ``op`` over ``ranks`` ranks."""
    if ranks < 1:
        raise ValueError(f"{ranks} ranks")
    if op == "allreduce":
        return 2 * (ranks - 1) / ranks
    if op == "allgather":
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown operation {op!r}: one of {', '.join(OPS)}")


def message(op: str, size: int, ranks: int) -> tuple[int, int]:
    """``(count, bytes)`` of ``op`` at ``size``: the float32 elements each rank gives (for
    allgather its part of the whole), and the message S of the bandwidths: ``size`` itself,
    but for an allgather, whose parts are whole elements, the gathered total (``size`` rounded
    down to whole parts, at least one element each)."""
    if op == "allgather":
        count = max(1, size // (ELEMENT_BYTES * ranks))
        return count, count * ELEMENT_BYTES * ranks
    count = max(1, size // ELEMENT_BYTES)
    return count, count * ELEMENT_BYTES


def iterations(estimate_s: float, budget_s: float, minimum: int, maximum: int = MAX_ITERATIONS):
    """The timed iterations filling ``budget_s`` at ``estimate_s`` per operation, within
    ``minimum..maximum``."""
    if estimate_s <= 0:
        return maximum
    return max(minimum, min(maximum, math.ceil(budget_s / estimate_s)))


def chunks(total: int, samples: int = SAMPLES) -> list[int]:
    """``total`` iterations as up to ``samples`` consecutive chunks of near-equal size."""
    parts = min(total, samples)
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def slowest(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Each chunk's time at its slowest rank (``per_rank``: every rank's chunk times)."""
    return [max(times) for times in zip(*per_rank, strict=True)]


def row(op: str, size: int, ranks: int, sizes: Sequence[int], seconds: Sequence[float]):
    """One result row from the chunks' iteration counts ``sizes`` and times ``seconds``
    (each chunk's whole time, at its slowest rank): latency and its spread, algorithm and bus
    bandwidth (GB/s) with the bus bandwidth's range over the chunks."""
    count, nbytes = message(op, size, ranks)
    per_op = [s / n for s, n in zip(seconds, sizes, strict=True)]
    total = sum(sizes)
    mean = sum(seconds) / total
    factor = bus_factor(op, ranks)

    def bus(t: float) -> float:
        return nbytes / t / 1e9 * factor if t > 0 else math.inf

    return {
        "op": op,
        "size": size,
        "bytes": nbytes,
        "count": count,
        "iterations": total,
        "samples": len(per_op),
        "time_s": mean,
        "time_min_s": min(per_op),
        "time_median_s": statistics.median(per_op),
        "time_max_s": max(per_op),
        "time_sd_s": statistics.stdev(per_op) if len(per_op) > 1 else 0.0,
        "algbw_gbps": nbytes / mean / 1e9 if mean > 0 else math.inf,
        "busbw_gbps": bus(mean),
        "busbw_min_gbps": bus(max(per_op)),
        "busbw_max_gbps": bus(min(per_op)),
    }


# ------------------------------------------------------------------------------------------
# the collectives of the run's backend (each backend's module defines its own)


def collectives(rt: Any, device: Any) -> Collectives:
    """The collectives of the runtime ``rt``'s backend (its runtime's ``COLLECTIVES``); an error
    naming the backend if it has none."""
    made = type(rt).COLLECTIVES
    if made is None:
        raise ConfigError(
            f"backend {rt.name!r} has no collectives to time (its runtime class "
            f"{type(rt).__name__} sets no COLLECTIVES)"
        )
    return made(rt, device)


# ------------------------------------------------------------------------------------------
# timing (every rank)


class Timer:
    """Times the calls of one rank: the device synchronised at the end of each timed stretch."""

    def __init__(self, rt: Any, device: Any, settings: Mapping[str, Any]) -> None:
        self.rt, self.device, self.settings = rt, device, settings

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def lined_up(self) -> None:
        """Every rank here before the next timed stretch (one tiny collective)."""
        import torch

        self.rt.allreduce_sum(torch.zeros(1, device=self.device), name="comm.line-up")
        self.sync()

    def stretch(self, call: Callable[[], Any], times: int) -> float:
        """Seconds of ``times`` calls back to back."""
        start = time.perf_counter()
        for _ in range(times):
            call()
        self.sync()
        return time.perf_counter() - start

    def time(self, call: Callable[[], Any], label: str) -> tuple[list[int], list[float]]:
        """``(chunk sizes, chunk seconds)`` of one operation and size on this rank: warm-up,
        the iteration count (rank 0's), then the timed chunks."""
        settings = self.settings
        self.lined_up()
        fastest = min(self.stretch(call, 1) for _ in range(settings["warmup_iterations"]))
        count = iterations(fastest, settings["seconds_per_size"], settings["min_iterations"])
        count = self.rt.broadcast_object(count, name=f"comm.iterations.{label}")
        sizes = chunks(count)
        self.lined_up()
        return sizes, [self.stretch(call, n) for n in sizes]


def measure_op(timer: Timer, colls: Collectives, op: str, sizes: Sequence[int]) -> list[dict]:
    """Every size of ``op``: the rows (on rank 0; an empty list elsewhere)."""
    rt = timer.rt
    mine = []
    for size in sizes:
        count, _ = message(op, size, rt.size)
        call = colls.prepare(op, count, name=f"comm.{op}.{size}")
        mine.append(timer.time(call, f"{op}.{size}"))
        del call  # its buffers go before the next size's come
    every = rt.allgather_object([seconds for _, seconds in mine], name=f"comm.times.{op}")
    if rt.rank != 0:
        return []
    rows = []
    for i, (size, (counts, _)) in enumerate(zip(sizes, mine, strict=True)):
        seconds = slowest([rank_times[i] for rank_times in every])
        rows.append(row(op, size, rt.size, counts, seconds))
    return rows


def measure(rt: Any, device: Any, settings: Mapping[str, Any], log: Callable[[str], None]):
    """Every operation at every size (rows on rank 0) and the library the backend used."""
    colls = collectives(rt, device)
    timer = Timer(rt, device, settings)
    sizes = size_ladder(settings["max_bytes"])
    rows: list[dict[str, Any]] = []
    for op in OPS:
        start = time.perf_counter()
        found = measure_op(timer, colls, op, sizes)
        rows += found
        for r in found:
            log(
                f"comm: {op} {r['bytes']:>10d} B: {r['time_s'] * 1e6:10.1f} us, "
                f"busbw {r['busbw_gbps']:8.3f} GB/s ({r['iterations']} iterations)"
            )
        log(f"comm: {op}: {len(sizes)} sizes in {time.perf_counter() - start:.1f} s")
    return rows, colls.library


# ------------------------------------------------------------------------------------------
# the stage


def setup_device(settings: Mapping[str, Any], local_rank: int, local_size: int) -> Any:
    """The rank's device: the GPU of its local rank, or the CPU with its share of the threads."""
    import torch

    from clusterbench.training.device import cpu_threads

    if settings["gpus_per_node"]:
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    torch.set_num_threads(cpu_threads(local_size))
    return torch.device("cpu")


def result(settings: Mapping[str, Any], rt: Any, library: str, rows: list[dict], extra: dict):
    """comm.json's content."""
    from clusterbench.config import comm_slice
    from clusterbench.training.device import node_name

    return {
        "format": FORMAT,
        "name": settings["name"],
        "backend": settings["backend"],
        "library": library,
        "environment": {
            "workers": settings["workers"],
            "nodes": settings["nodes"],
            "gpus_per_node": settings["gpus_per_node"],
            "device": "cuda" if settings["gpus_per_node"] else "cpu",
        },
        "ranks": rt.size,
        # the cluster it ran on, as a run.json's: the config's `site`, else the scheduler's name
        "site": os.environ.get("CLUSTERBENCH_SITE") or node_name(),
        "settings": comm_slice(settings),
        **extra,
        "rows": rows,
    }


def write_outputs(out_dir: Path, content: dict[str, Any]) -> None:
    """``comm.csv`` (the rows, with the job's columns), then ``comm.json``."""
    env = content["environment"]
    job = {"name": content["name"], "backend": content["backend"], "library": content["library"]}
    job.update({key: env[key] for key in ("workers", "nodes", "gpus_per_node", "device")})
    with atomic_open(out_dir / "comm.csv", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in content["rows"]:
            writer.writerow({**job, **r})
    write_json(out_dir / "comm.json", content)


def check_memory(settings: Mapping[str, Any], local_ranks: int, device: Any) -> None:
    """Stop before allocating buffers this node (its memory, or the job's cgroup limit) or the
    GPU cannot hold: each rank's allgather input and output, up to twice ``comm.max_bytes``."""
    from clusterbench.data import DataError, loading

    size = settings["max_bytes"]
    try:
        loading.check_fits(
            f"comm.max_bytes {size} ({loading.gib(size)}): the buffers of a message of that "
            "size, an allgather's input and output,",
            2 * size,
            local_ranks,
            loading.node_memory(),
            loading.gpu_memory(device),
            remedy="lower comm.max_bytes",
        )
    except DataError as exc:
        raise ConfigError(str(exc)) from None


def run_job(settings: Mapping[str, Any], out_dir: Path) -> None:
    """Start the backend, measure on every rank, rank 0 writes the outputs."""
    from clusterbench import backends
    from clusterbench.training.device import check_device
    from clusterbench.training.record import rank_provenance, run_provenance

    device_type = check_device(settings)
    rt = backends.init(settings["backend"], device_type)
    try:
        if rt.size != settings["workers"]:
            raise ConfigError(
                f"--params workers={settings['workers']} but the {rt.name} backend has "
                f"{rt.size} process(es): launch with clusterbench-launch --np WORKERS"
            )
        device = setup_device(settings, rt.local_rank, rt.local_size)
        check_memory(settings, rt.local_size, device)
        facts = rt.allgather_object(
            rank_provenance(rt.rank, rt.local_rank, device), name="comm.provenance"
        )
        start = time.perf_counter()

        def log(line: str) -> None:
            if rt.rank == 0:
                print(line, flush=True)

        rows, library = measure(rt, device, settings, log)
        if rt.rank == 0:
            prov = run_provenance(facts)
            extra = {
                "hosts": [h["node"] for h in prov["hosts"]],
                # the network interface the collectives ran over, on each host
                "interfaces": {h["node"]: h.get("iface") for h in prov["hosts"]},
                "seconds": time.perf_counter() - start,
                "provenance": prov,
            }
            write_outputs(out_dir, result(settings, rt, library, rows, extra))
            over = ", ".join(f"{h} over {i}" for h, i in extra["interfaces"].items())
            print(
                f"comm: {len(rows)} rows in {extra['seconds']:.1f} s ({over}) -> {out_dir}",
                flush=True,
            )
    except BaseException:
        rt.shutdown()  # the other ranks' pending collectives then fail instead of hanging
        raise
    rt.finish()


@one_line("comm")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", required=True, help="the job's settings, as JSON")
    parser.add_argument("--out-dir", type=Path, required=True, help="results/comm/NAME")
    args = parser.parse_args(argv)
    try:
        settings = stage_params("comm", args.params)
    except ConfigError as exc:
        return bad_settings("comm", exc)
    try:
        run_job(settings, args.out_dir)
    except ConfigError as exc:
        return bad_settings("comm", exc)
    return 0
