"""What ``check: content`` costs: every image's sha256, at indexing and at every invocation.

```
.venv/bin/python benchmarks/content_check.py --folder DIR [--files 100000] [--classes 100] \
    [--repeats 3] [--bytes-mib 1024] [--out-dir OUT]
```

``DIR`` gets ``--files`` tiny PNGs in ``--classes`` class folders (``bench_data.tiny_tree``, kept
when it is there: about 100 bytes each, so what is measured is the cost of a file, not of its
bytes) and is indexed in place as the preprocess stage does (``bench_data.index_in_place``,
with ``--check content``). Each repeat times, on that index: ``digests`` (every image's sha256,
what indexing adds with ``check: content``), ``files`` (``changes.compare`` with ``check:
files``: a ``stat`` per file) and ``content`` (the same with ``check: content``: the ``stat`` and
then every file read and hashed). The cost of the bytes is measured apart: ``--bytes-mib`` of
one file read and hashed twice (the first read from the disk unless the page cache holds it,
the second from the page cache), and SHA-256 of that many bytes in memory. ``metrics.jsonl``
gets one record per repeat, then one of the bytes; the first repeat may read files the page
cache does not hold yet.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_data import tiny_tree, write_metrics


def timed(fn, *args):
    began = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - began, result


def index_with_digests(folder: Path, out: Path) -> Path:
    """``folder`` indexed in place as the workflow does for ``check: content``."""
    from clusterbench import preprocess

    manifest = out.parent / "MANIFEST.json"
    manifest.write_text(json.dumps({"dataset": "photos", "path": str(folder), "files": {}}))
    settings = {
        "format": "image-folder",
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "split_seed": 0,
        "min_split_size": 5,
        "storage": "files",
    }
    argv = ["--dataset", "photos", "--manifest", str(manifest), "--check", "content"]
    if preprocess.main([*argv, "--params", json.dumps(settings), "--out-dir", str(out)]):
        raise RuntimeError(f"indexing {folder} failed")
    return out


def repeat(index_path: Path) -> dict[str, float]:
    from clusterbench.data import changes, content
    from clusterbench.data import index as images_index

    index = images_index.read(index_path)
    record = {"files": len(index)}
    record["digests"], _ = timed(content.digests, index)
    record["files_check"], _ = timed(changes.compare, index_path, "files", 0)
    record["content_check"], found = timed(changes.compare, index_path, "content", 0)
    assert not found, found.text()
    return record


def bytes_cost(mib: int, where: Path) -> dict[str, float]:
    """Seconds to read and hash ``mib`` MiB of one file (twice), and to hash them in memory."""
    data = os.urandom(1 << 20) * mib
    path = where / "bytes.bin"
    path.write_bytes(data)
    record = {"mib": mib}
    record["hash_in_memory"], _ = timed(lambda: hashlib.sha256(data).digest())
    for which in ("first_read", "cached_read"):
        with open(path, "rb") as fh:
            record[which], _ = timed(lambda f=fh: hashlib.file_digest(f, "sha256").digest())
    path.unlink()
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bytes-mib", type=int, default=1024)
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    args = parser.parse_args(argv)
    tiny_tree(args.folder, args.files, args.classes)
    work = Path(tempfile.mkdtemp(prefix="content-"))
    try:
        seconds, data = timed(index_with_digests, args.folder, work / "data")
        records = []
        for i in range(args.repeats):
            records.append(
                {"repeat": i, "index_with_digests": seconds, **repeat(data / "index.npz")}
            )
            print(records[-1], flush=True)
        records.append(bytes_cost(args.bytes_mib, work))
        print(records[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out_dir:
        write_metrics(args.out_dir, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
