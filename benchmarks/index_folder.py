"""F14: the seconds preprocessing takes to index a folder read in place, and where they go.

```
.venv/bin/python benchmarks/index_folder.py --folder DIR [--repeats 2] [--out-dir OUT]
```

Each repeat indexes ``DIR`` into an empty data dir with the preprocess stage's own steps
(:mod:`clusterbench.data.indexing`), timed one by one: ``walk`` (the folder listed, every
file ``lstat``-ed: :func:`clusterbench.data.scan.scan_folder`), ``split`` (the seeded split
and the index's arrays), ``sample`` (the statistics' decoded sample and header sample),
``write`` (``index.npz`` compressed and ``meta.json``). ``metrics.jsonl`` gets one record per
repeat (its ``seconds`` and each phase's, and ``files_per_second``); the first repeat reads a
folder the page cache may not hold yet.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench_data import write_metrics

PARAMS = {
    "format": "image-folder",
    "val_fraction": 0.01,
    "test_fraction": 0.01,
    "split_seed": 0,
    "min_split_size": 5,
    "storage": "files",
}


def index_once(folder: Path, out: Path) -> dict[str, float]:
    from clusterbench.core import integrity
    from clusterbench.core.atomic import write_json
    from clusterbench.data import index as images_index
    from clusterbench.data import indexing, scan

    phases = {}
    began = time.perf_counter()
    listing = scan.scan_folder(folder)
    phases["walk"] = time.perf_counter() - began
    mark = time.perf_counter()
    codes = indexing.split_codes(listing, PARAMS, "photos")
    index = indexing.make_index(listing, "photos", codes)
    phases["split"] = time.perf_counter() - mark
    mark = time.perf_counter()
    stats = indexing.sample_statistics(out, index, 0)
    phases["sample"] = time.perf_counter() - mark
    mark = time.perf_counter()
    images_index.write(out / "index.npz", index)
    write_json(
        out / "meta.json", {"files": {"index.npz": integrity.record(out / "index.npz")}, **stats}
    )
    phases["write"] = time.perf_counter() - mark
    phases["seconds"] = time.perf_counter() - began
    phases["files"] = len(listing)
    phases["index_bytes"] = (out / "index.npz").stat().st_size
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, help="(unused: the rows' common argument)")
    parser.add_argument("--run", help="(unused)")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    records = []
    for repeat in range(args.repeats):
        out = Path(tempfile.mkdtemp(prefix="index-"))
        try:
            phases = index_once(args.folder, out)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        phases["files_per_second"] = phases["files"] / phases["seconds"]
        records.append({"epoch": repeat + 1, **phases})
        print(f"index_folder: {json.dumps(phases)}", flush=True)
    if args.out_dir:
        write_metrics(args.out_dir, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
