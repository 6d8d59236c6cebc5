"""The checks across a config's keys that the schema cannot express, each problem naming its
key path: a run's settings together (its model, LR schedule, gradient compression, elastic
bounds), a dataset's files and splits, names Snakemake cannot take as wildcard values, a
cache folder that cannot be written.

Pure but for :func:`cache_dir_problems` (which makes and removes a temporary folder) and the
registries they ask (models, backends, BatchNorm modes, dataset formats).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from clusterbench import models
from clusterbench.backends import BACKENDS, grad_compression_problems
from clusterbench.backends import is_elastic as backend_is_elastic
from clusterbench.bn import mode as bn_mode
from clusterbench.config.datasets import DATASETS as BUILTIN_DATASETS
from clusterbench.config.datasets import DatasetError, declared_file_name, resolve_urls
from clusterbench.config.lr import schedule_problems
from clusterbench.config.slices import download_slice
from clusterbench.core.paths import PathError, cannot_make_in, expand
from clusterbench.formats import FORMAT_KEYS, FORMATS, format_module, is_synthetic, keys_of
from clusterbench.models import custom_training


def wildcard_problems(value: str, where: str) -> list[str]:
    """A problem if Snakemake would refuse ``value`` as a wildcard value.

    Snakemake takes a value ending in a part repeated 20 or more times (``run-000...0``) for a
    cyclic dependency (PeriodicWildcardError) and skips the job in silence: refuse it here, with
    Snakemake's own detector, before any job.
    """
    from snakemake.io import PeriodicityDetector

    repeated = PeriodicityDetector().is_periodic(value)
    if repeated is None:
        return []
    return [
        f"{where}: {value!r} ends in {repeated!r} repeated 20 or more times, which Snakemake "
        "cannot use as a wildcard value (it would take it for a cyclic dependency); rename it"
    ]


def cache_dir_problems(cache_dir: str | None) -> list[str]:
    """``download.cache_dir`` must be a folder this user can write (or create): checked now,
    not when the download job starts, by making a folder (a temporary one, removed at once) in
    it, or where it does not exist yet, in its nearest existing folder. Not ``os.access``: it
    grants root any folder, ``/proc`` included, where nothing can be made. Nothing is left
    behind (a dry run changes nothing), and the cache folder itself is never made or removed
    here: a download making it at the same time finds it as it left it."""
    if cache_dir is None:
        return []
    if "\0" in cache_dir:
        return [f"download.cache_dir: {cache_dir!r} holds a NUL character"]
    try:
        path = Path(expand(cache_dir, "download.cache_dir"))
    except PathError as exc:
        return [str(exc)]
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return [f"download.cache_dir: {existing} is a file, not a folder"]
    why = cannot_make_in(existing)
    if why:
        made = "written" if existing == path else "created"
        return [
            f"download.cache_dir: {path} cannot be {made} by this user (no folder can be made "
            f"in {existing}: {why})"
        ]
    return []


def path_keys(schema: Mapping[str, Any], where: str = "") -> Iterator[tuple[str, str]]:
    """``(key path, x-path tag)`` of every path key (:mod:`clusterbench.core.paths`) of the
    top-level ``schema`` (its sections' properties)."""
    for name, sub in schema.get("properties", {}).items():
        path = f"{where}.{name}" if where else name
        if "x-path" in sub:
            yield path, sub["x-path"]
        if isinstance(sub.get("properties"), dict):
            yield from path_keys(sub, path)


def path_problems(resolved: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """A problem for each path key tagged ``x-path: here`` (expanded where the config is read)
    whose value names a user or a variable that does not exist here; a ``node`` one is
    expanded, and so checked, on each node when the run starts."""
    problems = []
    for key, tag in path_keys(schema):
        value: Any = resolved
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if tag == "here" and isinstance(value, str):
            try:
                expand(value, key)
            except PathError as exc:
                problems.append(str(exc))
    return problems


def split_problems(split: Mapping[str, Any], where: str) -> list[str]:
    """The split fractions must leave training data."""
    total = split["val_fraction"] + split["test_fraction"]
    if total >= 1:
        return [f"{where}: val_fraction + test_fraction = {total:g} leaves no training data"]
    return []


def split_sizes(
    train_samples: int, test_samples: int | None, val_fraction: float, test_fraction: float
) -> dict[str, int]:
    """The samples in each split (train, val, test) that preprocessing makes of
    ``train_samples`` training samples and an official test split of ``test_samples`` (None: no
    official test split, one is held out of the training samples), rounded exactly as
    ``clusterbench.preprocess.split_indices`` rounds."""
    val = round(val_fraction * train_samples)
    if test_samples is None:
        test = round(test_fraction * train_samples)
        return {"train": train_samples - val - test, "val": val, "test": test}
    return {"train": train_samples - val, "val": val, "test": test_samples}


def split_size_problems(
    name: str, split: Mapping[str, Any], train_samples: int, test_samples: int | None
) -> list[str]:
    """A problem for each split of dataset ``name`` that would hold fewer samples than its
    ``min_split_size``, split with the fractions of ``split`` (see :func:`split_sizes`), naming
    the key to change, the split, its size and the minimum. A tiny split reports meaningless
    figures (an accuracy of 1.0000 from 2 samples)."""
    where = f"datasets.{name}"
    minimum = split["min_split_size"]
    val, test = split["val_fraction"], split["test_fraction"]
    held_out = test_samples is None
    causes = {  # split -> (the key that sets its size, how)
        "train": (
            (where, f"what val_fraction + test_fraction = {val + test:g} leave of {train_samples}")
            if held_out
            else (f"{where}.val_fraction", f"what val_fraction {val:g} leaves of {train_samples}")
        ),
        "val": (f"{where}.val_fraction", f"val_fraction {val:g} of {train_samples}"),
        "test": (
            (f"{where}.test_fraction", f"test_fraction {test:g} of {train_samples}")
            if held_out
            else (f"{where}.min_split_size", f"the official test split of {name!r}")
        ),
    }
    sizes = split_sizes(train_samples, test_samples, val, test)
    return [
        f"{causes[part][0]}: the {part} split would hold {size} sample(s) ({causes[part][1]}), "
        f"fewer than min_split_size = {minimum}"
        for part, size in sizes.items()
        if size < minimum
    ]


def dataset_problems(name: str, ds: Mapping[str, Any]) -> list[str]:
    """Checks across the keys of one resolved dataset entry that the schema cannot express."""
    where = f"datasets.{name}"
    problems = wildcard_problems(name, where) + split_problems(ds, where)
    declared = [key for key in ("format", "files", "path", "image_size", *FORMAT_KEYS) if key in ds]
    if name in BUILTIN_DATASETS:
        if declared:
            problems.append(
                f"{where}.{declared[0]}: {name!r} is a built-in dataset with pinned files; "
                "declare your own data under another name"
            )
        try:  # a mirror or per-file URL the download could not use: now, not in its job
            resolve_urls(name, download_slice(ds)["source"])
        except DatasetError as exc:
            problems.append(f"{where}: {exc}")
        spec = BUILTIN_DATASETS[name]
        if spec.train_samples is not None and not split_problems(ds, where):
            # its size is known: a split below the minimum now (a declared one's: preprocess)
            problems += split_size_problems(name, ds, spec.train_samples, spec.test_samples)
        return problems
    reads_folder = "format" in ds and getattr(format_module(ds["format"]), "PATH", None)
    needs_files = "format" not in ds or (
        0 not in format_module(ds["format"]).FILES and "path" not in ds
    )
    if "format" not in ds or "files" not in ds and needs_files:
        missing = " and ".join(k for k in ("format", "files") if k not in ds)
        if reads_folder:
            missing = "files (archives to download) or path (a folder read in place)"
        return problems + [
            f"{where}: {name!r} is not a built-in dataset ({', '.join(BUILTIN_DATASETS)}): "
            f"declare its {missing} (config/README.md, 'Your own dataset')"
        ]
    for key in ("mirror", "urls"):
        if ds.get(key):
            problems.append(f"{where}.{key}: only for built-in datasets; give files[].url instead")
    problems += folder_problems(name, ds)
    fmt = format_module(ds["format"])
    if "image_size" in ds and not fmt.RESIZES:
        resized = [name for name, module in FORMATS.modules().items() if module.RESIZES]
        problems.append(f"{where}.image_size: only {' and '.join(resized)} datasets are resized")
    counts = fmt.FILES
    if "path" not in ds and len(ds.get("files", ())) not in counts:
        problems.append(
            f"{where}.files: format {ds['format']} takes "
            f"{' or '.join(map(str, counts))} file(s), got {len(ds.get('files', ()))}"
        )
    problems += format_key_problems(name, ds)
    return problems + file_name_problems(name, ds)


def folder_problems(name: str, ds: Mapping[str, Any]) -> list[str]:
    """A dataset read in place (``path``): only a format that reads a folder, not with
    ``files``, stored as files; a format that must be read so without one."""
    where = f"datasets.{name}"
    reads_folder = getattr(format_module(ds["format"]), "PATH", None)
    if "path" not in ds:
        if reads_folder == "required":
            return [
                f"{where}: format {ds['format']} is read in place: give path, the folder that "
                "holds its files"
            ]
        return []
    if "files" in ds:
        return [
            f"{where}: path and files are both given: a dataset is read in place from its "
            "folder (path) or from its files (files), not both"
        ]
    if not reads_folder:
        takes = [f for f, module in FORMATS.modules().items() if getattr(module, "PATH", None)]
        return [
            f"{where}.path: format {ds['format']} reads files, not a folder; only "
            f"{' and '.join(takes)} are read from a folder"
        ]
    if ds.get("storage") == "arrays":
        return [
            f"{where}.storage: arrays, but {ds['path']} is read in place (path): a dataset read "
            "in place is stored as files (its index; the images are read where they are); "
            "its runs stream it"
        ]
    return []


def file_name_problems(name: str, ds: Mapping[str, Any]) -> list[str]:
    """Each declared file's name: a file name, used once, with a suffix its format takes."""
    where, fmt = f"datasets.{name}", format_module(ds["format"])
    problems: list[str] = []
    names: dict[str, int] = {}
    for i, entry in enumerate(ds.get("files", ())):
        try:
            file_name = declared_file_name(entry)
        except DatasetError as exc:
            problems.append(f"{where}.files[{i}]: {exc}")
            continue
        if file_name in names:
            problems.append(
                f"{where}.files[{i}]: file name {file_name!r} is already used by "
                f"files[{names[file_name]}]; give it another name"
            )
        names.setdefault(file_name, i)
        if fmt.SUFFIXES and not file_name.endswith(fmt.SUFFIXES):
            problems.append(
                f"{where}.files[{i}]: format {ds['format']} takes a file ending in "
                f"{', '.join(fmt.SUFFIXES)}, got {file_name!r}"
            )
    return problems


def format_key_problems(name: str, ds: Mapping[str, Any]) -> list[str]:
    """The keys of :data:`~clusterbench.formats.FORMAT_KEYS` a declared dataset's format needs
    and does not have, or has and does not take; a synthetic dataset's splits below
    ``min_split_size`` (its size is known: ``samples``)."""
    where, fmt = f"datasets.{name}", ds["format"]
    required, optional = keys_of(fmt)
    problems = [f"{where}: format {fmt} needs {key!r}" for key in required if key not in ds]
    for key in FORMAT_KEYS:
        if key in ds and key not in (*required, *optional):
            takes = [f for f in FORMATS.names() if key in (*keys_of(f)[0], *keys_of(f)[1])]
            problems.append(f"{where}.{key}: only for format {' and '.join(takes)}")
    if is_synthetic(fmt) and "samples" in ds and not problems and not split_problems(ds, where):
        problems += split_size_problems(name, ds, ds["samples"], None)
    return problems


def run_problems(
    run: Mapping[str, Any], where: str = "run", models_seen: dict[str, list[str]] | None = None
) -> list[str]:
    """Checks across the keys of one resolved run that the schema cannot express.
    ``models_seen``: the problems of each model already checked (under no key path), for
    :func:`validate` to check each model once: looking one up lists its registry's folder."""
    problems = []
    if run["epochs"] is None and run["minutes"] is None:
        problems.append(f"{where}: set 'epochs' or 'minutes' (both are null)")
    if run["batch_scaling"] == "global" and run["batch_size"] < run["workers"]:
        problems.append(
            f"{where}.batch_size: global batch {run['batch_size']} is smaller than "
            f"workers={run['workers']}: every worker needs at least one sample per step"
        )
    if run["nodes"] > run["workers"]:
        problems.append(
            f"{where}.nodes: {run['nodes']} nodes for {run['workers']} workers leaves a node idle"
        )
    if run.get("decode") == "gpu" and not run["gpus_per_node"]:
        problems.append(
            f"{where}.decode: gpu decodes the images on the run's GPUs, and it trains on the CPU "
            "(gpus_per_node: 0): use decode: cpu, or auto (the CPU there, the GPU on GPUs)"
        )
    if models_seen is None:
        problems += models.problems(run["model"], f"{where}.model")
    else:
        if run["model"] not in models_seen:
            models_seen[run["model"]] = models.problems(run["model"], "")
        problems += [f"{where}.model{problem}" for problem in models_seen[run["model"]]]
    problems += custom_training.problems(run, where)  # your own loss and optimiser
    problems += share_problems(run, where)
    problems += schedule_problems(run, where) + grad_compression_problems(run, where)
    return problems + elastic_problems(run, where) + grow_problems(run, where)


def share_problems(run: Mapping[str, Any], where: str = "run") -> list[str]:
    """A list of ``shares`` that is not one weight per worker, or given to an elastic run (whose
    world changes: ``auto`` follows it)."""
    shares = run.get("shares")
    if not isinstance(shares, list):
        return []
    if is_elastic(run):
        return [
            f"{where}.shares: a list of {len(shares)} shares for an elastic run, whose number "
            "of workers changes: use shares: auto (timed again after each change) or none"
        ]
    if len(shares) != run["workers"]:
        return [
            f"{where}.shares: {len(shares)} shares for workers={run['workers']}: give one "
            "weight per worker, in rank order"
        ]
    return []


def is_elastic(run: Mapping[str, Any]) -> bool:
    """Whether the run trains under Horovod elastic (it sets ``min_workers`` or
    ``max_workers``)."""
    return run.get("min_workers") is not None or run.get("max_workers") is not None


def worker_bounds(run: Mapping[str, Any]) -> tuple[int, int]:
    """The fewest and most ranks ``run`` may train on: (workers, workers) unless elastic."""
    workers = run["workers"]
    low, high = run.get("min_workers"), run.get("max_workers")
    return (workers if low is None else low, workers if high is None else high)


def grows_through_jobs(run: Mapping[str, Any]) -> bool:
    """Whether an elastic run grows through worker jobs (``grow: jobs``) rather than within
    its own job."""
    return is_elastic(run) and run.get("grow", "none") == "jobs"


def allocated_workers(run: Mapping[str, Any]) -> int:
    """The ranks the run's job is sized for: ``max_workers`` for an elastic run that grows
    within its job (a rank may join up to it), else ``workers`` (a fixed run; an elastic run
    with ``grow: jobs``, whose further ranks come in worker jobs of their own)."""
    return run["workers"] if grows_through_jobs(run) else worker_bounds(run)[1]


def grow_problems(run: Mapping[str, Any], where: str = "run") -> list[str]:
    """What ``grow`` and ``grow_resources`` cannot combine with."""
    grow, extra = run.get("grow", "none"), run.get("grow_resources") or {}
    if grow == "none":
        if extra:
            return [
                f"{where}.grow_resources: set for a run that does not grow through worker jobs "
                f"({', '.join(sorted(extra))} would go unused): add grow: jobs, or drop "
                "grow_resources"
            ]
        return []
    if not is_elastic(run):
        return [
            f"{where}.grow: 'jobs' grows an elastic run, and this run is not elastic: set "
            "max_workers (the most ranks it may grow to) and min_workers, or drop grow"
        ]
    high = worker_bounds(run)[1]
    if high <= run["workers"]:
        return [
            f"{where}.grow: 'jobs' adds worker jobs beyond the run's own job of workers="
            f"{run['workers']} ranks, up to max_workers={high}: leaves none to add; raise "
            "max_workers, or drop grow"
        ]
    return []


def elastic_problems(run: Mapping[str, Any], where: str = "run") -> list[str]:
    """What an elastic run (``min_workers``/``max_workers``) cannot combine with."""
    if not is_elastic(run):
        return []
    low, high = worker_bounds(run)
    problems = []
    if not low <= run["workers"] <= high:
        problems.append(
            f"{where}.workers: an elastic run starts with workers={run['workers']}, which must "
            f"lie between min_workers={low} and max_workers={high}"
        )
    if not backend_is_elastic(run["backend"]):
        elastic = [name for name in BACKENDS.names() if backend_is_elastic(name)]
        problems.append(
            f"{where}.min_workers/max_workers: backend {run['backend']!r} has no elastic mode "
            f"(its world cannot change while it trains): use backend: {' or '.join(elastic)}, "
            "or drop min_workers and max_workers"
        )
    if bn_mode(run["bn"]).ELASTIC is not None:
        problems.append(f"{where}.bn: {bn_mode(run['bn']).ELASTIC}")
    if run["batch_scaling"] == "global" and run["batch_size"] < high:
        problems.append(
            f"{where}.batch_size: global batch {run['batch_size']} is smaller than "
            f"max_workers={high}: every worker needs at least one sample per step"
        )
    return problems
