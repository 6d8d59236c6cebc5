"""F15: the seconds a dry run of a finished workflow takes (``snakemake --dry-run`` in a working
directory whose every job is done), several times.

```
.venv/bin/python benchmarks/dry_run.py --work DIR [--repeats 4] [--check auto|files|folders]
    [--out-dir OUT] [-- SNAKEMAKE ARGS]
```

Each repeat runs ``python -m snakemake --snakefile Snakefile --directory DIR --configfile
DIR/config.yaml --profile profiles/local --dry-run`` (and the arguments after ``--``) and times
it (wall clock, and the CPU seconds of the process and its children); it must say "Nothing to
be done". ``--check``: every dataset's ``check`` set so (``--config datasets=...``: no rerun
trigger). ``metrics.jsonl`` gets one record per repeat (``seconds``, ``cpu_seconds``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench_data import write_metrics

REPO = Path(__file__).resolve().parent.parent


def dry_run(work: Path, extra: list[str]) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(work), "--configfile", str(work / "config.yaml")]
    cmd += ["--profile", str(REPO / "profiles" / "local"), "--dry-run", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or "Nothing to be done" not in out:
        raise RuntimeError(f"the dry run in {work} was not of a finished workflow:\n{out[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, help="(unused: the rows' common argument)")
    parser.add_argument("--run", help="(unused)")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--check", choices=("auto", "files", "folders"))
    args = parser.parse_args(argv)
    if args.check:
        import yaml

        datasets = yaml.safe_load((args.work / "config.yaml").read_text())["datasets"]
        datasets = {name: {**ds, "check": args.check} for name, ds in datasets.items()}
        extra += ["--config", f"datasets={json.dumps(datasets)}"]
    records = []
    for repeat in range(args.repeats):
        seconds, cpu = dry_run(args.work, extra)
        records.append({"epoch": repeat + 1, "seconds": seconds, "cpu_seconds": cpu})
        print(f"dry_run: {json.dumps(records[-1])}", flush=True)
    if args.out_dir:
        write_metrics(args.out_dir, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
