"""staging: node-local staging's bytes/s over ``cp -r`` of the same data dir (F9, goal >= 0.8),
on two data dirs: CIFAR-shaped arrays (``--staging-mib`` MiB in a few large files) and an image
folder stored as files (``--staging-images`` JPEGs of 128 pixels square: many small files).

Each row (``staging_copy.py``) copies its data dir ``--staging-copies`` times into empty
directories of the work dir, each timed around the whole call: staging
(:func:`clusterbench.data.staging.stage`: lock, free-space check, the copy hashed against the
records, the rename, the marker) or ``cp -r``; its bytes/s is the median over the copies after
the first. The rows alternate their order from round to round. Two sources:

* warm: the source in the page cache (the first copy brings it there): memory to memory,
  where staging's sha256 of every byte (on one core per file) is the slowest part;
* cold: the source dropped from the page cache before each copy, as on a node staging a
  dataset it has not read, from storage (staging's purpose).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_data import extract_folder, jpeg_folder, make_cifar_like, with_records
from benchlib.figures import Figure, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 90
TITLE = "node-local staging / cp -r of the same folder (F9)"
OPTIONS = {
    "staging_mib": (int, 256, 32, "MiB of the arrays the staging rows copy"),
    "staging_images": (int, 4000, 500, "JPEGs of the image folder the staging rows copy"),
    "staging_copies": (int, 4, 3, "copies per staging row (the first is the warm-up)"),
}
NEEDS: tuple[str, ...] = ()
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    print("making the staging data dirs ...", flush=True)
    images = max(1, args.staging_mib * 2**20 // (32 * 32 * 3))
    arrays = with_records(make_cifar_like(work / "staging" / "arrays", images))
    archive = jpeg_folder(work / "staging" / "raw" / "photos.zip", args.staging_images, 128)
    folder = extract_folder(archive, work / "staging" / "photos", None)
    # the copies are of the data dirs: model, epochs and batch are unused
    return {
        "staging-arrays": Case("staging-arrays", "cifar10", "resnet", arrays, 1, 1, 0.0),
        "staging-folder": Case("staging-folder", "photos", "resnet", folder, 1, 1, 0.0),
    }


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = []
    copies = ("--copies", str(args.staging_copies))
    for source in ("warm", "cold"):
        for case in ("staging-arrays", "staging-folder"):
            common = (*copies, "--source", source)
            stage = Spec(
                case, "staging_copy", args=("--tool", "stage", *common), label=f"staging, {source}"
            )
            cp = Spec(
                case, "staging_copy", args=("--tool", "cp", *common), label=f"cp -r, {source}"
            )
            for spec in (stage, cp) if runner.round % 2 else (cp, stage):
                runner.get(spec)
            what = f"{case}, source {source}: staging bytes/s / cp -r bytes/s"
            name = f"F9 {case} {source}"
            figs.append(ratio_figure(runner, name, what, 0.8, stage, cp, "bytes_per_second"))
    return figs
