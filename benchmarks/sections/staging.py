"""staging: node-local staging's bytes/s over ``cp -r`` of the same data dir (F9, goal >= 0.8),
on two data dirs: CIFAR-shaped arrays (``--staging-mib`` MiB in a few large files) and an image
folder stored as files (``--staging-images`` JPEGs of 128 pixels square: many small files).

Each row (``staging_copy.py``) copies its data dir ``--staging-copies`` times into empty
directories of the work dir, each timed around the whole call: staging
(:func:`clusterbench.data.staging.stage`: lock, free-space check, the copy hashed against the
records, the rename, the marker) or ``cp -r``; its bytes/s is the median over the copies after
the first (which brings the source into the page cache). The two rows alternate their order
from round to round.
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
    for case in ("staging-arrays", "staging-folder"):
        stage = Spec(case, "staging_copy", args=("--tool", "stage", *copies), label="staging")
        cp = Spec(case, "staging_copy", args=("--tool", "cp", *copies), label="cp -r")
        for spec in (stage, cp) if runner.round % 2 else (cp, stage):
            runner.get(spec)
        what = f"{case}: staging bytes/s / cp -r bytes/s"
        figs.append(ratio_figure(runner, f"F9 {case}", what, 0.8, stage, cp, "bytes_per_second"))
    return figs
