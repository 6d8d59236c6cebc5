"""The workflow's checks of files on disk against the checksums their steps recorded.

Snakemake notices a missing output, not a damaged one, and removes a job's outputs before the
job runs: a job that then fails on a damaged input (a truncated ``model.pt``, a garbled
``metrics.jsonl``) loses good outputs. So, before any job, the workflow checks (with
:mod:`clusterbench.core.integrity`; sha256s are remembered by size and times, so an unchanged file
is
not read again):

- at every invocation, while the job graph is built, each used dataset: its raw files against
  the download's ``MANIFEST.json`` (:meth:`Checks.raw_files`: a damaged one makes the download
  run again), its arrays or index against preprocess's ``meta.json`` (:meth:`Checks.arrays`:
  damage, or files whose record is missing, stop the workflow with the command that makes them
  again), and the folder or archives a dataset reads in place against its index
  (:meth:`Checks.in_place`: a folder that is missing or unreadable stops the workflow; one that
  changed since it was indexed makes the indexing run again);
- once Snakemake has decided which jobs run, every existing output of the train and evaluate
  steps that a planned job reads and no planned job makes again, against the ``checksums.json``
  beside it (:meth:`Checks.consumed`): damage, or a missing record, stops the workflow with the
  command that makes them again.

Nothing is deleted. A forced job's files (``--forcerun``, which the commands named use) are not
checked: they are made again. The stages check their inputs again before use.
"""

from __future__ import annotations

import errno
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clusterbench.core import integrity
from clusterbench.core.paths import PathError, expand
from clusterbench.data import changes as source_changes
from clusterbench.data import index as images_index
from clusterbench.pipeline import layout
from clusterbench.pipeline.adapter import Adapter, PlannedJob

#: Where the sha256s of checked files are kept between invocations, in Snakemake's folder of
#: the working directory.
DIGESTS = Path(".snakemake", "clusterbench", "checksums.json")


class Checks:
    """The checks for the ``runs`` and ``datasets`` of a workflow under ``adapter``."""

    def __init__(
        self,
        runs: Iterable[str],
        adapter: Adapter,
        digests: Path | None = DIGESTS,
        storages: Mapping[str, str] | None = None,
        in_place: Mapping[str, Mapping[str, Any]] | None = None,
        check_files_limit: int = 200_000,
    ):
        self.runs, self.adapter, self._digests = list(runs), adapter, digests
        #: Each dataset's storage (``arrays`` unless named): which files preprocess records.
        self.storages = dict(storages or {})
        #: The datasets read in place: their ``path``, ``format`` and ``check``.
        self.in_place_sources = {k: dict(v) for k, v in (in_place or {}).items()}
        self.check_files_limit = check_files_limit
        self._cache: integrity.DigestCache | None = None
        self._checked: set[tuple[str, str]] = set()

    @property
    def cache(self) -> integrity.DigestCache:
        if self._cache is None:  # read once, when a check first needs it
            self._cache = integrity.DigestCache(self._digests)
        return self._cache

    def _once(self, kind: str, name: str) -> bool:
        """True the first time ``(kind, name)`` is asked in this process (main process only:
        cluster jobs parse and build their graph again, and check nothing)."""
        if not self.adapter.is_main_process or (kind, name) in self._checked:
            return False
        self._checked.add((kind, name))
        return True

    # ------------------------------------------------------------------- the data sets
    def arrays(self, dataset: str) -> None:
        """Stop if an array of ``dataset`` differs from what preprocess recorded in
        ``meta.json``, or if the arrays are there and their record is not (deleted: they would
        never be checked again). Not when preprocess is forced: it makes them again."""
        if not self._once("arrays", dataset):
            return
        stored = self.storages.get(dataset, "arrays")
        files = [self.adapter.in_workdir(path) for path in layout.stored_files(dataset, stored)]
        marker = files[-1]  # meta.json, written last
        rule = {
            "files": "preprocess_files",
            "extracted": "preprocess_extracted",
            "synthetic": "preprocess_synthetic",
        }.get(stored, "preprocess")
        if self.adapter.forced(rule, files):
            return
        try:
            names = layout.RECORDED[stored]
            found = recorded_problems(
                Path(marker), None if Path(marker).exists() else names, self.cache
            )
        finally:
            self.cache.save()
        if found:
            problems = "; ".join(problem for _, problem in found)
            self.adapter.stop(
                f"{problems} (checked against {marker}). Nothing was run or deleted. "
                f"Make it again with: {integrity.remake_command(marker)}"
            )

    def in_place(self, dataset: str) -> None:
        """A dataset read in place (``path``): a folder that is missing, no folder, unreadable
        (or, for ImageNet, lacks one of its files) stops the workflow before any job; one that
        changed since it was indexed (:mod:`clusterbench.data.changes`) makes the indexing
        (the preprocess step) and everything after it run again, as a damaged raw file makes
        the download: a real run forces it and warns naming what changed; a dry run warns and
        plans it. Not when the indexing is forced anyway."""
        source = self.in_place_sources.get(dataset)
        if source is None or not self._once("in place", dataset):
            return
        try:
            folder = Path(expand(source["path"], f"datasets.{dataset}.path"))
        except PathError as exc:  # a user or variable this host lacks
            self.adapter.stop(str(exc))
            return
        problem = folder_problem(dataset, folder, source["format"])
        if problem:
            self.adapter.stop(problem)
        stored = self.storages.get(dataset, "files")
        files = [self.adapter.in_workdir(path) for path in layout.stored_files(dataset, stored)]
        meta, index = Path(files[-1]), Path(files[-2])
        if not (meta.exists() and index.exists()) or self.adapter.forced("preprocess_files", files):
            return
        try:
            found = source_changes.compare(index, source["check"], self.check_files_limit)
        except images_index.IndexError_:
            return  # a damaged index: Checks.arrays names it
        if found.undigested:
            said = (
                f"datasets.{dataset}.check: content compares each image's sha256 with its "
                f"index's, and the index of {folder} keeps none (it was made before)"
            )
            self._index_again(meta, said)
        elif found:
            said = f"datasets.{dataset}: {folder} changed since it was indexed: {found.text()}"
            self._index_again(meta, said)

    def _index_again(self, meta: Path, said: str) -> None:
        executor = self.adapter.executor()
        executing = executor is not None and executor != "touch"
        real_run = executing and executor != "dryrun"
        if executing and not self.adapter.force(str(meta)) and real_run:
            self.adapter.stop(f"{said}. Index it again with: {integrity.remake_command(meta)}")
        if not real_run:
            self.adapter.warn(
                f"{said}. A real run indexes it again (the preprocess step) and runs what "
                "follows; this run changes nothing"
            )
            return
        self.adapter.warn(f"{said}. It is indexed again, and what follows runs again")

    def raw_files(self, dataset: str) -> None:
        """A raw file of ``dataset`` that its ``MANIFEST.json`` (the download's output)
        recorded and that is missing or damaged makes the download run again, and so
        everything after it:

        - a real run sets the manifest aside (``MANIFEST.json.damaged``: nothing is deleted),
          warns naming the file, and forces the download (as ``--forcerun`` would: Snakemake 9
          reruns no job for its missing output while the jobs after it are complete). Until a
          download has written a new manifest (it may fail, or be stopped), the next run forces
          it again;
        - a dry run (and ``--touch``, ``--report``, ...) changes nothing on disk and warns what
          a real run will do; its plan shows the download, forced.
        """
        if not self._once("raw", dataset):
            return
        manifest = Path(self.adapter.in_workdir(layout.manifest(dataset)))
        try:
            found = integrity.recorded_problems(manifest, "files", cache=self.cache, strict=True)
        finally:
            self.cache.save()
        copies = integrity.set_aside_copies(manifest)
        if found:
            damage = f"{'; '.join(found)} (checked against {manifest})"
        elif copies and not manifest.exists():
            damage = (
                f"{manifest} was set aside as damaged ({copies[-1]}) and no download has made "
                "it again yet"
            )
        else:
            return
        self._download_again(dataset, manifest, damage)

    def _download_again(self, dataset: str, manifest: Path, damage: str) -> None:
        executor = self.adapter.executor()
        executing = executor is not None and executor != "touch"  # a plan to run or show
        real_run = executing and executor != "dryrun"
        if executing and not self.adapter.force(str(manifest)) and real_run:
            self.adapter.stop(f"{damage}. Make it again with: {integrity.remake_command(manifest)}")
        if not real_run:
            aside = f"sets {manifest} aside (as {integrity.next_aside(manifest)}) and "
            self.adapter.warn(
                f"{damage}: a real run {aside if manifest.exists() else ''}downloads "
                f"{dataset} again, and runs what follows; this run changes nothing"
            )
            return
        aside = ""
        if manifest.exists():
            try:
                aside = f"set {manifest} aside as {integrity.set_aside(manifest)}; "
            except OSError as exc:
                self.adapter.stop(
                    f"{damage}, and {manifest} cannot be set aside to download {dataset} "
                    f"again: {exc}"
                )
        self.adapter.warn(
            f"{damage}: {aside}the download of {dataset} runs again, and what follows it"
        )

    # ------------------------------------------------------------------- run outputs
    def consumed(self, planned: list[PlannedJob]) -> None:
        """Stop if an output of a train or evaluate step that a planned job reads, and that no
        planned job makes again, differs from its record (``checksums.json``), or has none."""
        made = {path for job in planned for path in job.outputs}
        read = {path for job in planned for path in job.inputs if path not in made}
        records = self._records()
        wanted: dict[str, list[str]] = defaultdict(list)
        for path in sorted(read):
            if path in records:
                wanted[records[path]].append(Path(path).name)
        found, remake = [], []
        try:
            for record, names in wanted.items():
                problems = recorded_problems(Path(record), names, self.cache)
                if problems:
                    found.append(f"{'; '.join(p for _, p in problems)} (checked against {record})")
                    remake.append(str(Path(record).parent / problems[0][0]))
        finally:
            self.cache.save()
        if found:
            self.adapter.stop(
                "\n".join(found)
                + "\nNothing was run or deleted. Make them again with: "
                + integrity.remake_command(*remake)
            )

    def _records(self) -> dict[str, str]:
        """Each recorded output of a run (as Snakemake names it) -> its record's path."""
        records = {}
        for run in self.runs:
            for folder, names in (
                (layout.run_dir(run), integrity.RUN_FILES),
                (layout.eval_dir(run), integrity.EVAL_FILES),
            ):
                record = self.adapter.in_workdir(f"{folder}/{integrity.CHECKSUMS}")
                for name in names:
                    records[self.adapter.in_workdir(f"{folder}/{name}")] = record
        return records


def recorded_problems(
    marker: Path, names: Iterable[str] | None, cache: integrity.DigestCache | None = None
) -> list[tuple[str, str]]:
    """``(name, problem)`` for each file beside ``marker`` that differs from what ``marker``
    recorded under ``files``: of ``names`` (None: every file it records), with one that is
    there but not recorded. With the marker missing, each of ``names`` that is there is
    unchecked; a marker that is not the JSON a step wrote is a problem of its own (named by the
    marker's name)."""
    folder = marker.parent
    if not marker.exists():
        there = [name for name in names or () if (folder / name).exists()]
        if not there:
            return []  # none made yet, or all deleted: Snakemake makes them when needed
        missing = f"{marker} is missing: {', '.join(there)} beside it cannot be checked"
        return [(marker.name, missing)]
    files = recorded(marker)
    if files is None:
        return [(marker.name, f"{marker} records no 'files' (not the JSON the step wrote)")]
    found = []
    for name in sorted(files) if names is None else names:
        if name in files:
            problems = integrity.problems(folder, {name: files[name]}, cache)
            found += [(name, problem) for problem in problems]
        elif (folder / name).exists():
            found.append((name, f"{folder / name} is not recorded in {marker}"))
    return found


def recorded(marker: Path) -> dict | None:
    """The ``files`` object of ``marker``; None if it has none (or is not JSON)."""
    try:
        content = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = content.get("files") if isinstance(content, dict) else None
    return files if isinstance(files, dict) else None


def unreachable(path: Path) -> str:
    """Why ``path``, which ``exists()`` says is not there, cannot be reached: a loop of
    symbolic links, a link to nothing, a folder on the way that cannot be entered, or
    nothing there."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return (
                "leads through a loop of symbolic links (one links, in the end, to itself: "
                "`ls -l` each part of the path)"
            )
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            return f"cannot be reached ({exc.strerror or exc})"
    return "does not exist"


def folder_problem(dataset: str, folder: Path, fmt: str) -> str | None:
    """What is wrong with the folder a dataset reads in place, or None: missing, not a
    folder, unreadable; for ImageNet, one of its files missing."""
    where = f"datasets.{dataset}.path: {folder}"
    if not folder.exists():
        return f"{where} {unreachable(folder)}"
    if not folder.is_dir():
        return f"{where} is not a directory"
    try:
        with os.scandir(folder) as entries:
            next(entries, None)
    except OSError as exc:
        return f"{where} cannot be read ({exc.strerror or exc})"
    if fmt == "imagenet":
        from clusterbench.formats.imagenet import missing

        lacking = missing(folder)
        if lacking:
            return f"{where} lacks ImageNet's {', '.join(lacking)}"
    return None
