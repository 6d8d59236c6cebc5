"""Copying a preprocessed data dir: node-local staging (F9's numerator) or ``cp -r`` (its
reference), bytes/s per copy.

```
.venv/bin/python benchmarks/staging_copy.py --data-dir DATA --tool stage|cp|tar [--copies 4]
    [--source warm|cold] [--source-dir DIR] [--out-dir OUT]
```

Each copy goes into an empty directory under ``--out-dir`` (the same filesystem as the work
dir) and is timed around the whole call: ``stage``: :func:`clusterbench.data.staging.stage`
(the lock, the free-space check, the copy with every file hashed as it is read and checked
against its record, the rename into place, the marker); ``cp``: ``cp -r SOURCE DEST/`` as a
command; ``tar``: ``tar -C SOURCE -cf - . | tar -C DEST -xf -``. None syncs its writes to
disk. ``SOURCE`` is ``--source-dir``, else ``DATA``: a dataset read in place (its data dir
holds the index alone) is staged from its folder, which ``cp`` and ``tar`` then copy.
``metrics.jsonl`` gets bytes/s per copy.

``--source``: where the source is read from.

* ``warm``: the page cache. The first copy brings the source there (left out of the medians as
  the warm-up epoch); the others copy memory to memory.
* ``cold``: the disk, as on a node staging a dataset it has not read (the case staging is for:
  the source is on shared storage, not in the node's memory). Before each copy the source's
  files are written back (``os.sync``, not timed) and dropped from the page cache
  (``posix_fadvise(POSIX_FADV_DONTNEED)``, which needs no privilege).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_data import write_metrics


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stage_once(data: Path, dest: Path) -> int:
    """Stage ``data`` into the empty ``dest``; the bytes it copied."""
    from clusterbench.data.staging import stage

    facts = stage(data, str(dest), data.name, time.time(), "bench").facts
    if facts["action"] != "copied":
        raise RuntimeError(f"staging into the empty {dest} did not copy: {facts}")
    return int(facts["bytes"])


def cp_once(data: Path, dest: Path) -> int:
    """``cp -r data dest/``; the bytes of ``data``."""
    subprocess.run(["cp", "-r", str(data), str(dest)], check=True)
    return folder_bytes(data)


def tar_once(data: Path, dest: Path) -> int:
    """``tar -C data -cf - . | tar -C dest -xf -``; the bytes of ``data``."""
    subprocess.run(f"tar -C '{data}' -cf - . | tar -C '{dest}' -xf -", shell=True, check=True)
    return folder_bytes(data)


def evict(data: Path) -> None:
    """Drop the files of ``data`` from the page cache (written back first)."""
    os.sync()
    for path in data.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def measure(
    data: Path, tool: str, copies: int, where: Path, source: str, folder: Path | None = None
) -> list[dict[str, Any]]:
    copy = {"stage": stage_once, "cp": cp_once, "tar": tar_once}[tool]
    origin = data if tool == "stage" else (folder or data)
    records = []
    for i in range(copies):
        dest = Path(tempfile.mkdtemp(prefix=f"{tool}-", dir=where))
        if source == "cold":
            evict(data)
            if folder is not None:
                evict(folder)
        began = time.perf_counter()
        size = copy(origin, dest)
        seconds = time.perf_counter() - began
        shutil.rmtree(dest)
        records.append(
            {"epoch": i + 1, "bytes_per_second": size / seconds, "epoch_seconds": seconds}
        )
        print(f"staging_copy: {tool} copy {i + 1}: {size / seconds / 2**20:.0f} MiB/s", flush=True)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a preprocessed data dir")
    parser.add_argument("--out-dir", type=Path, required=True, help="copies and metrics.jsonl")
    parser.add_argument("--run", help="the trainer's run JSON (unused: a row's common flag)")
    parser.add_argument("--tool", choices=("stage", "cp", "tar"), required=True)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--source", choices=("warm", "cold"), default="warm")
    parser.add_argument("--source-dir", type=Path, help="what cp and tar copy (default: DATA)")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    records = measure(
        args.data_dir, args.tool, args.copies, args.out_dir, args.source, args.source_dir
    )
    write_metrics(args.out_dir, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
