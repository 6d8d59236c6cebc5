"""staging: node-local staging's bytes/s over the faster of ``cp -r`` and ``tar | tar`` of the
same data (F9, goal >= 0.8), on two datasets: CIFAR-shaped arrays (``--staging-mib`` MiB in a
few large files) and a folder of ``--staging-files`` JPEGs (128 x 96, 64 distinct ones written
in turn) read in place (``datasets.<name>.path``: staged from the folder itself, each file
checked against the index's size and modification time and hashed as it is copied; ``cp`` and
``tar`` copy the folder).

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

from bench_data import index_in_place, jpeg_tree, make_cifar_like, with_records
from benchlib.figures import Figure, rate, ratio_figure
from benchlib.rows import Case, Runner, Spec

ORDER = 90
TITLE = "node-local staging / cp -r of the same folder (F9)"
OPTIONS = {
    "staging_mib": (int, 256, 32, "MiB of the arrays the staging rows copy"),
    "staging_files": (int, 100_000, 2000, "JPEGs of the folder the staging rows copy"),
    "staging_copies": (int, 4, 3, "copies per staging row (the first is the warm-up)"),
}
NEEDS: tuple[str, ...] = ()
GPU = False


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    print("making the staging data dirs ...", flush=True)
    images = max(1, args.staging_mib * 2**20 // (32 * 32 * 3))
    arrays = with_records(make_cifar_like(work / "staging" / "arrays", images))
    tree = jpeg_tree(
        work / "staging" / "tree", args.staging_files, 100, distinct=64, size=(128, 96)
    )
    folder = index_in_place(tree, work / "staging" / "photos", None)
    # the copies are of the data dirs: model, epochs and batch are unused
    return {
        "staging-arrays": Case("staging-arrays", "cifar10", "resnet", arrays, 1, 1, 0.0),
        "staging-folder": Case("staging-folder", "photos", "resnet", folder, 1, 1, 0.0),
    }


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    figs = []
    copies = ("--copies", str(args.staging_copies))
    tree = ("--source-dir", str(runner.work / "staging" / "tree"))
    for source in ("warm", "cold"):
        for case in ("staging-arrays", "staging-folder"):
            common = (*copies, "--source", source, *(tree if case == "staging-folder" else ()))
            specs = [
                Spec(
                    case, "staging_copy", args=("--tool", tool, *common), label=f"{label}, {source}"
                )
                for tool, label in (("stage", "staging"), ("cp", "cp -r"), ("tar", "tar | tar"))
            ]
            for spec in specs if runner.round % 2 else specs[::-1]:
                runner.get(spec)
            what = f"{case}, source {source}: staging bytes/s / the faster of cp -r and tar | tar"
            figs.append(fastest_figure(runner, f"F9 {case} {source}", what, specs))
    return figs


def fastest_figure(runner: Runner, name: str, what: str, specs: list[Spec]) -> Figure:
    """Staging's bytes/s over the faster reference's, in the round."""
    stage, *references = specs
    rates = [(rate(runner, s, "bytes_per_second")[0], s) for s in references]
    known = [(r, s) for r, s in rates if r is not None]
    if not known:
        return ratio_figure(runner, name, what, 0.8, stage, references[0], "bytes_per_second")
    best = max(known, key=lambda pair: pair[0])[1]
    return ratio_figure(runner, name, what, 0.8, stage, best, "bytes_per_second")
