"""Configuration: JSON-schema validation, defaults, and the per-rule slices of config.

Imported by the Snakefile at parse time (in every cluster job too), so it imports only the
standard library, yaml and jsonschema.

Each rule receives only its own slice of the config as ``params``; Snakemake's params rerun
trigger then reruns exactly the stages whose slice changed. Settings that cannot change a
result (download retries, cache location, scheduler resources) are deliberately kept out of
the slices.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from clusterbench import models
from clusterbench.backends import BACKENDS, grad_compression_problems
from clusterbench.backends import is_elastic as backend_is_elastic
from clusterbench.bn import BN_MODES
from clusterbench.bn import mode as bn_mode
from clusterbench.config import experiments as expansion
from clusterbench.config import files as config_file
from clusterbench.config import model_data, storage
from clusterbench.config.datasets import DATASETS as BUILTIN_DATASETS
from clusterbench.config.datasets import DatasetError, declared_file_name, resolve_urls
from clusterbench.config.files import key_path
from clusterbench.config.lr import schedule_problems
from clusterbench.core.params import json_object
from clusterbench.formats import FORMAT_KEYS, FORMATS, format_module, is_synthetic, keys_of

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@functools.lru_cache(maxsize=1)
def _schema_file() -> dict[str, Any]:
    """The schema file as written (read once per process; :func:`load_schema` copies it)."""
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def slices_of(properties: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> dict:
    """Each key of ``properties`` -> the slices its ``x-slice`` tag names (one, or a list), each
    one of ``allowed``; a key without a tag, or with another, is an error in the schema."""
    slices = {}
    for key, sub in properties.items():
        tag = sub.get("x-slice")
        named = tuple(tag) if isinstance(tag, list) else (tag,)
        if not tag or not set(named) <= set(allowed):
            raise RuntimeError(
                f"{SCHEMA_PATH}: {where}.{key}: x-slice must name one of {', '.join(allowed)}, "
                f"got {tag!r}"
            )
        slices[key] = named
    return slices


def _tagged(slices: Mapping[str, tuple[str, ...]], name: str) -> tuple[str, ...]:
    return tuple(key for key, named in slices.items() if name in named)


_RUN_PROPERTIES = _schema_file()["$defs"]["run_settings"]["properties"]
_RUN_SLICES = slices_of(_RUN_PROPERTIES, ("train", "job", "workflow"), "run_settings")
#: Run keys that define what is trained (``x-slice: train``): the train rule's params (and
#: rerun trigger).
TRAIN_KEYS = _tagged(_RUN_SLICES, "train")
#: Training keys added since run.json was first written (``x-added-later``): absent (null) in
#: an older run.json.
LATER_TRAIN_KEYS = tuple(k for k in TRAIN_KEYS if _RUN_PROPERTIES[k].get("x-added-later"))
#: ``loading: auto`` holds a run's data resident when the node's ranks' copies fit in this
#: share of the memory (the schema's ``x-resident-memory-fraction`` of ``loading``).
RESIDENT_MEMORY_FRACTION = float(_RUN_PROPERTIES["loading"]["x-resident-memory-fraction"])
#: What an older run.json that lacks a later key trained with: the key's default.
LATER_TRAIN_DEFAULTS = {k: _RUN_PROPERTIES[k].get("default") for k in LATER_TRAIN_KEYS}
#: Run keys that only size or place the job (``x-slice: job``: scheduler resources, the order
#: of local jobs): never part of params, so changing them reruns nothing.
RESOURCE_KEYS = _tagged(_RUN_SLICES, "job")
#: Run keys that decide what the workflow does with a run (``x-slice: workflow``, e.g.
#: ``on_unavailable``) and change no result: no params either.
WORKFLOW_KEYS = _tagged(_RUN_SLICES, "workflow")

_DATASET_SLICES = slices_of(
    _schema_file()["properties"]["datasets"]["additionalProperties"]["properties"],
    ("preprocess", "download"),
    "datasets.<name>",
)
#: Dataset keys of the preprocess rule's params (``x-slice: preprocess``, see
#: :func:`preprocess_slice`).
PREPROCESS_KEYS = _tagged(_DATASET_SLICES, "preprocess")
#: Dataset keys saying where the download rule fetches the files from (``x-slice: download``,
#: see :func:`download_slice`).
DOWNLOAD_KEYS = _tagged(_DATASET_SLICES, "download")

_COMM_SLICES = slices_of(
    _schema_file()["properties"]["comm"]["properties"], ("comm", "workflow"), "comm"
)
#: ``comm`` keys of the comm rule's params (``x-slice: comm``, see :func:`comm_slice`); the others
#: (``enabled``) decide whether the comm jobs exist and change no result.
COMM_KEYS = _tagged(_COMM_SLICES, "comm")


class ConfigError(ValueError):
    """Bad settings (the config, or a stage's ``--params``); the message names the offending key.

    The one error type for bad settings: every stage's ``main`` turns it into
    :data:`EXIT_BAD_SETTINGS`.
    """


#: Exit status of every stage whose settings are invalid (a failure of the work itself is 1).
EXIT_BAD_SETTINGS = 2


def bad_settings(stage: str, exc: ConfigError) -> int:
    """Report ``exc`` for ``stage`` on stderr; the exit status of a stage with bad settings."""
    print(f"{stage}: error: {exc}", file=sys.stderr)
    return EXIT_BAD_SETTINGS


def load_schema() -> dict[str, Any]:
    """The config schema, with the choices of ``backend`` and ``bn`` from their registries and
    the definitions derived from the settings (each defined once, in the file)."""
    schema = copy.deepcopy(_schema_file())
    defs = schema["$defs"]
    run_props = defs["run_settings"]["properties"]
    # the choices of the extension points: their registries' plugins (clusterbench.core.registry)
    run_props["backend"]["enum"] = list(BACKENDS.names())
    run_props["bn"]["enum"] = list(BN_MODES.names())
    schema["$defs"]["format"]["enum"] = list(FORMATS.names())
    # an experiment's base settings: any run key but the name, without defaults (the runs it
    # expands to are merged over run_defaults, as hand-written runs are)
    defs["experiment"]["properties"].update(
        {
            key: {k: v for k, v in sub.items() if k != "default"}
            for key, sub in run_props.items()
            if key != "name"
        }
    )
    # the train stage's --run: the training keys and, for an expanded run, where it came from
    defs["train_settings"] = {
        **defs["run_settings"],
        "properties": {
            **run_props,
            # a hand-written name, or one an experiment made (``=`` and ``,`` too)
            "name": {
                "type": "string",
                "pattern": expansion.NAME_PATTERN.pattern,
                "maxLength": expansion.MAX_NAME_LENGTH,
            },
            "experiment": defs["experiment_origin"],
        },
    }
    # the train stage's --data-settings: how it reads the data, which changes no result
    defs["data_settings"] = {
        "type": "object",
        "properties": {
            **{key: run_props[key] for key in DATA_SETTINGS_KEYS},
            "staging": schema["properties"]["staging"],
        },
    }
    # the preprocess stage's --params: a dataset's preprocess keys (``files`` as names)
    dataset_props = schema["properties"]["datasets"]["additionalProperties"]["properties"]
    defs["preprocess_params"]["properties"] = {
        **{key: dataset_props[key] for key in PREPROCESS_KEYS},
        **defs["preprocess_params"]["properties"],
    }
    # the comm stage's --params: a job's environment and backend, and the comm settings
    comm_params = defs["comm_params"]["properties"]
    comm_params["backend"] = {**comm_params["backend"], "enum": list(BACKENDS.names())}
    comm_props = schema["properties"]["comm"]["properties"]
    defs["comm_params"]["properties"] = {
        **comm_params,
        **{key: comm_props[key] for key in COMM_KEYS},
    }
    return schema


def schema_default(section: str, key: str) -> Any:
    """The schema's default of setting ``section.key`` (``"report", "timing_warmup_epochs"``):
    for code outside the config, a command-line default, that takes a setting's default."""
    return copy.deepcopy(_schema_file()["properties"][section]["properties"][key]["default"])


def load_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The config file ``path`` as a mapping, read as Snakemake reads it (JSON, else YAML);
    :class:`ConfigError` naming the file (and the line, and for a YAML syntax error the column)
    when it is no UTF-8 text or no mapping, gives a key twice, or is larger, longer or deeper
    than a config may be (:mod:`clusterbench.config.files`)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(config_file.MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    if len(data) > config_file.MAX_BYTES:
        size = max(len(data), path.stat().st_size)
        raise ConfigError(f"{path}: {config_file.too_large(size)}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); "
            "save the config file as UTF-8"
        ) from None
    try:
        loaded = config_file.read(text)
    except config_file.ReadError as exc:
        where = "" if exc.line is None else f", line {exc.line}"
        raise ConfigError(f"{path}{where}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        raise ConfigError(
            f"{path}{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"{path}: a config file must be a YAML mapping of keys, got {type(loaded).__name__}"
        )
    return loaded


def check_files(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Read each config file of ``paths`` as :func:`load_file` does: :class:`ConfigError` for
    the first it refuses. For the files Snakemake was given (the workflow's ``configfile:``,
    ``--configfile``): it reads them with its own loader, which keeps the later of two equal
    keys without a word and has no limits, so the workflow reads them again."""
    for path in paths:
        if os.path.exists(path):  # a missing one: Snakemake says so
            load_file(path)


def with_config_args(config: Mapping[str, Any], config_args: Iterable[str] | None) -> dict:
    """``config`` with each list or mapping given by Snakemake's ``--config KEY=VALUE``
    (``config_args``: the ``KEY=VALUE`` texts) read as YAML, as it would be in a config file.

    Snakemake reads such a value with YAML's base loader, which keeps every value in it as text
    (``run_defaults={epochs: 2}`` gives ``{"epochs": "2"}``, refused as no integer); a plain
    value it types itself (``--config site=x``). The value read again is merged over
    ``config`` as Snakemake merged its own, so it replaces exactly what Snakemake's did; a key
    given twice in it is refused (:class:`ConfigError`)."""
    resolved = dict(config)
    for entry in config_args or ():
        key, sep, text = entry.partition("=")
        if not sep:
            continue
        try:
            value = config_file.read(text)
        except config_file.ReadError as exc:
            raise ConfigError(f"--config {key}=...: {exc}") from None
        except yaml.YAMLError:
            continue  # no YAML: Snakemake kept it as text
        if isinstance(value, dict | list):
            resolved[key] = _merged(resolved.get(key), value)
    return resolved


def _merged(base: Any, over: Any) -> Any:
    """``over`` merged over ``base`` as Snakemake merges config (mappings key by key)."""
    if isinstance(over, Mapping) and isinstance(base, Mapping):
        return {**base, **{key: _merged(base.get(key), sub) for key, sub in over.items()}}
    return over


def _fill_defaults(
    schema: Mapping[str, Any], value: Any, defs: Mapping[str, Any] | None = None
) -> Any:
    """Insert the schema's ``default`` values into ``value`` (objects only, recursively),
    following a definition's ``$ref`` into ``defs`` (the schema's ``$defs``; not through
    ``allOf``: a run is merged over ``run_defaults`` before its defaults are filled)."""
    if not isinstance(value, dict):
        return value
    ref = schema.get("$ref")
    if ref is not None and defs is not None:
        schema = defs[ref.removeprefix("#/$defs/")]
    props = schema.get("properties", {})
    for key, sub in props.items():
        if key not in value:
            if "default" not in sub:
                continue
            value[key] = copy.deepcopy(sub["default"])
        if isinstance(value[key], dict):
            _fill_defaults(sub, value[key], defs)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in value.keys() - props.keys():
            if value[key] is None:
                value[key] = {}
            _fill_defaults(extra, value[key], defs)
    return value


#: A number PyYAML reads as a string: YAML 1.1 wants a ``.`` in the mantissa and a sign in the
#: exponent (``1e-3``, ``1.0e9``).
_NUMBER_AS_STRING = re.compile(r"^([+-]?\d+(?:\.\d*)?)[eE]([+-]?)(\d+)$")


def _yaml_hint(error: jsonschema.ValidationError) -> str:
    """How YAML read a value that fails the schema, where that is the likely cause."""
    value = error.instance
    if error.validator not in ("type", "enum", "pattern", "minLength"):
        return ""
    if isinstance(value, str):
        match = _NUMBER_AS_STRING.match(value.strip())
        if match:
            mantissa, sign, exponent = match.groups()
            mantissa += "" if "." in mantissa else ".0"
            return (
                f" (YAML read {value} as a string, not a number: write it with a decimal point "
                f"and a signed exponent, e.g. {mantissa}e{sign or '+'}{exponent})"
            )
    if isinstance(value, bool):
        return (
            f" (YAML read an unquoted yes/no/on/off/true/false as the boolean {value}: "
            "quote the value if you meant text)"
        )
    return ""


def _non_finite(value: Any, path: tuple[Any, ...]) -> list[str]:
    """A problem for every NaN or infinite number in ``value`` (the schema's bounds let NaN by)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{key_path(path)}: {value!r} is not a finite number"]
    if isinstance(value, Mapping):
        return [p for key, sub in value.items() for p in _non_finite(sub, (*path, key))]
    if isinstance(value, list):
        return [p for i, sub in enumerate(value) for p in _non_finite(sub, (*path, i))]
    return []


def _schema_problems(
    value: Any, schema: Mapping[str, Any], prefix: tuple[Any, ...] = ()
) -> list[str]:
    """One line per schema violation of ``value``, each naming its key (under ``prefix``)."""
    problems = _non_finite(value, prefix)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    for e in errors:
        if isinstance(e.instance, float) and not math.isfinite(e.instance):
            continue  # already named above
        problems.append(f"{key_path((*prefix, *e.absolute_path))}: {_message(e)}")
    return problems


def _message(error: jsonschema.ValidationError) -> str:
    """``error``'s message, with a long value cut short and the YAML hint where it applies."""
    shown = repr(error.instance)
    if error.validator == "pattern" and error.validator_value == r"\S":
        return f"{shown} is blank: it needs a character other than spaces"
    message = error.message
    if error.validator == "additionalProperties" and {"weights", "pretrained"} & set(
        error.instance
    ):
        message += f": {models.NO_WEIGHTS}"
    if error.validator == "maxLength":
        message = f"{shown} is longer than the limit of {error.validator_value} characters"
    if len(shown) > 60 and isinstance(error.instance, str):
        message = message.replace(shown, f"{shown[:40]}...' ({len(error.instance)} characters)")
    return message + _yaml_hint(error)


def _raise_problems(what: str, problems: list[str]) -> None:
    if problems:
        raise ConfigError(f"invalid {what}:\n" + "\n".join(f"  {p}" for p in problems))


def _schema_errors(config: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    _raise_problems("configuration", _schema_problems(config, schema))


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` and return a resolved deep copy.

    The copy has schema defaults filled in and every run merged over ``run_defaults`` and the
    built-in run defaults, so downstream code never looks up a default itself.
    Raises :class:`ConfigError` naming each offending key.
    """
    schema = load_schema()
    _schema_errors(config, schema)
    resolved = _fill_defaults(schema, copy.deepcopy(dict(config)), schema["$defs"])

    run_schema = schema["$defs"]["run_settings"]
    defaults = resolved.get("run_defaults", {})
    checked: list[tuple[str, dict[str, Any]]] = []  # (where, run): every run, to check
    for i, run in enumerate(resolved["runs"]):
        merged = _fill_defaults(run_schema, {**defaults, **run})
        merged.update(dict.fromkeys(expansion.ORIGIN_KEYS))
        checked.append((f"runs[{i}]", merged))
    expanded, problems = expand_experiments(resolved, schema)
    checked += expanded
    resolved["runs"] = [run for _, run in checked]
    if not checked and not problems:
        problems.append("runs: no training runs: give at least one under 'runs' or 'experiments'")

    seen: dict[str, str] = {}
    models_seen: dict[str, list[str]] = {}
    for where, run in checked:
        name_where = f"{where}.name" if where.startswith("runs[") else where
        if run["name"] in seen:
            problems.append(f"{name_where}: {run['name']!r} is already used by {seen[run['name']]}")
        seen.setdefault(run["name"], where)
        problems += wildcard_problems(run["name"], name_where)
        if run["minutes"] is not None and run["minutes"] >= run["runtime"]:
            problems.append(
                f"{where}.minutes: a time box of {run['minutes']:g} min does not end before the "
                f"job's wall-clock limit (runtime: {run['runtime']} min): the scheduler would kill "
                "the job before it writes its model; raise runtime or lower minutes"
            )
        if run["warning_seconds"] >= 60 * run["runtime"]:
            problems.append(
                f"{where}.warning_seconds: a warning {run['warning_seconds']} s before the end "
                f"of a {run['runtime']} min job (runtime) would come at its start; lower "
                "warning_seconds or raise runtime"
            )
        if run["dataset"] not in resolved["datasets"]:
            problems.append(
                f"{where}.dataset: {run['dataset']!r} is not declared under 'datasets' "
                f"(declared: {', '.join(sorted(resolved['datasets'])) or 'none'})"
            )
        problems += run_problems(run, where, models_seen)
        problems += model_data.run_problems(run, where, resolved["datasets"])
    for name, ds in resolved["datasets"].items():
        problems += dataset_problems(name, ds)
    problems += storage.resolve(resolved["datasets"], checked, extractable(resolved["datasets"]))
    problems += cache_dir_problems(resolved["download"]["cache_dir"])
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))
    return resolved


def expand_experiments(
    resolved: Mapping[str, Any], schema: Mapping[str, Any]
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The runs ``experiments:`` expand to (clusterbench.config.experiments), each merged over
    ``run_defaults`` and the built-in defaults, as ``(where, run)``; and the problems, each
    naming its key path (``experiments.sweep.matrix.lr: ...``)."""
    if not resolved["experiments"]:
        return [], []
    run_schema = schema["$defs"]["run_settings"]
    base = _fill_defaults(run_schema, copy.deepcopy(dict(resolved.get("run_defaults", {}))))
    env_defaults = resolved["environment_defaults"]
    cores = env_defaults["cores_per_node"] or os.cpu_count() or 1

    def value_problems(key: str, value: Any, path: tuple[Any, ...]) -> list[str]:
        definition = {**run_schema["properties"][key], "$defs": schema["$defs"]}
        return _schema_problems(value, definition, path)

    runs, problems = expansion.expand(
        resolved["experiments"],
        base=base,
        presets=expansion.environments(resolved["environments"], env_defaults),
        run_keys=run_schema["properties"],
        cores_per_node=cores,
        value_problems=value_problems,
    )
    runs = [(where, _fill_defaults(run_schema, run)) for where, run in runs]
    for where, run in runs:
        problems += expansion.name_problems(run["name"], where)
    return runs, problems


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
    path = Path(cache_dir).expanduser()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return [f"download.cache_dir: {existing} is a file, not a folder"]
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".clusterbench-check-", dir=existing))
    except OSError as exc:
        made = "written" if existing == path else "created"
        return [
            f"download.cache_dir: {path} cannot be {made} by this user (no folder can be made "
            f"in {existing}: {exc.strerror or exc})"
        ]
    return []


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
    declared = [key for key in ("format", "files", "image_size", *FORMAT_KEYS) if key in ds]
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
    needs_files = "format" not in ds or 0 not in format_module(ds["format"]).FILES
    if "format" not in ds or "files" not in ds and needs_files:
        missing = " and ".join(k for k in ("format", "files") if k not in ds)
        return problems + [
            f"{where}: {name!r} is not a built-in dataset ({', '.join(BUILTIN_DATASETS)}): "
            f"declare its {missing} (config/README.md, 'Your own dataset')"
        ]
    for key in ("mirror", "urls"):
        if ds.get(key):
            problems.append(f"{where}.{key}: only for built-in datasets; give files[].url instead")
    fmt = format_module(ds["format"])
    if "image_size" in ds and not fmt.RESIZES:
        resized = [name for name, module in FORMATS.modules().items() if module.RESIZES]
        problems.append(f"{where}.image_size: only {' and '.join(resized)} datasets are resized")
    counts = fmt.FILES
    if len(ds.get("files", ())) not in counts:
        problems.append(
            f"{where}.files: format {ds['format']} takes "
            f"{' or '.join(map(str, counts))} file(s), got {len(ds.get('files', ()))}"
        )
    problems += format_key_problems(name, ds)
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
    if models_seen is None:
        problems += models.problems(run["model"], f"{where}.model")
    else:
        if run["model"] not in models_seen:
            models_seen[run["model"]] = models.problems(run["model"], "")
        problems += [f"{where}.model{problem}" for problem in models_seen[run["model"]]]
    problems += schedule_problems(run, where) + grad_compression_problems(run, where)
    return problems + elastic_problems(run, where) + grow_problems(run, where)


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


@dataclass(frozen=True)
class StageSettings:
    """Where a stage's ``--params`` are defined in the schema (a JSON pointer) and which of those
    keys it takes (None: all); ``required`` keys must be given, the others take the schema's
    defaults; ``check`` adds the cross-key checks the schema cannot express."""

    pointer: str
    keys: tuple[str, ...] | None = None
    required: tuple[str, ...] = ()
    check: Callable[[Mapping[str, Any], str], list[str]] | None = None


def _definition(schema: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    node: Any = schema
    for part in pointer.strip("/").split("/"):
        node = node[part]
    return dict(node)


def stage_params(stage: str, params: str | Mapping[str, Any], what: str = "--params") -> dict:
    """A stage's ``--params`` (JSON text or an object), validated against the schema's
    definition for that stage (:data:`STAGES`) with its defaults filled in.

    The one check of every setting a stage takes: the stages do not re-check values by hand.
    Raises :class:`ConfigError` naming each offending key as ``<what>.<key>``.
    """
    stage_def = STAGES[stage]
    raw = json_object(params, what=what, error=ConfigError) if isinstance(params, str) else params
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{what} must be a JSON object, got {raw!r}")
    schema = load_schema()
    definition = {**_definition(schema, stage_def.pointer), "$defs": schema["$defs"]}
    if stage_def.keys is not None:
        props = definition.get("properties", {})
        definition["properties"] = {key: props[key] for key in stage_def.keys}
    definition["required"] = sorted({*definition.get("required", ()), *stage_def.required})
    definition["additionalProperties"] = False
    problems = _schema_problems(raw, definition, (what,))
    resolved = _fill_defaults(definition, copy.deepcopy(dict(raw)), schema["$defs"])
    if not problems and stage_def.check is not None:
        problems = stage_def.check(resolved, what)
    _raise_problems(f"{stage} settings", problems)
    return resolved


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: the form every params slice is passed in."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


#: The characters :func:`script_safe_json` writes as JSON escapes: those that let text end an
#: HTML script block (``</script>``, ``<!--``) or start markup.
HTML_SPECIAL = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_safe_json(obj: Any) -> str:
    """:func:`canonical_json` with ``<``, ``>`` and ``&`` written as JSON escapes (``\\u003c``
    ...): the same value to any JSON reader, and text that cannot end a script block.

    For the params of a rule whose outputs Snakemake's HTML report shows (rules/report.smk):
    the report embeds each such job's params, as text, in the JSON of an inline ``<script>``
    block without escaping them (snakemake/report/html_reporter/data/results.py), and the
    report rule's params carry user text: the title, the author, the skipped runs' reasons. The
    characters stand only inside JSON strings, so the text stays valid JSON."""
    return canonical_json(obj).translate(HTML_SPECIAL)


def config_hash(config: Mapping[str, Any]) -> str:
    """Short hash of everything in a resolved config that can change a result.

    Shown in the report for provenance. Download settings and job resources are left out, like
    from the rules' params: changing them changes no result, so it must not rerun the report.
    """
    relevant = {
        "datasets": {
            name: {**preprocess_slice(ds), **download_slice(ds)}
            for name, ds in config["datasets"].items()
        },
        "runs": [train_slice(run) for run in config["runs"]],
        "evaluate": config["evaluate"],
        "report": config["report"],
        "comm": comm_slice(config["comm"]),
    }
    return hashlib.sha256(canonical_json(relevant).encode()).hexdigest()[:12]


def extractable(datasets: Mapping[str, Mapping[str, Any]]) -> dict[str, bool]:
    """Dataset -> whether its format can be stored as files (its module's ``EXTRACTS``)."""
    found = {}
    for name, ds in datasets.items():
        spec = BUILTIN_DATASETS.get(name)
        fmt = spec.format if spec is not None else ds.get("format")
        found[name] = fmt in FORMATS.names() and getattr(format_module(fmt), "EXTRACTS", False)
    return found


#: Run keys the train stage takes outside its ``--run`` (``x-slice: workflow``: no rerun
#: trigger): how it reads the data, which gives the same batches either way.
DATA_SETTINGS_KEYS = ("loading", "loader_workers")


def data_settings(run: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The train stage's ``--data-settings``: the run's :data:`DATA_SETTINGS_KEYS` and the
    config's ``staging``. No rerun trigger (rules/train.smk)."""
    return {**{k: run[k] for k in DATA_SETTINGS_KEYS}, "staging": dict(config["staging"])}


def train_slice(run: Mapping[str, Any]) -> dict[str, Any]:
    """The train rule's ``--run``: the training keys, and for a run an experiment expanded to,
    ``experiment`` (where it came from: clusterbench.config.experiments.origin, recorded in
    run.json). Hand-written runs have no ``experiment`` key: their slice is what it was."""
    train = {k: run[k] for k in TRAIN_KEYS}
    block = expansion.origin(run)
    if block is not None:
        train["experiment"] = block
    return train


def preprocess_slice(dataset_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """How a dataset is split, and for a declared one, how its files are read: its
    :data:`PREPROCESS_KEYS`, ``files`` as their names, ``storage`` only when it is ``files``
    (:func:`clusterbench.config.storage.preprocess_storage`)."""
    split = {
        key: dataset_cfg[key] for key in PREPROCESS_KEYS if key in dataset_cfg and key != "storage"
    }
    split.update(storage.preprocess_storage(dataset_cfg))
    if "files" in split:
        split["files"] = [declared_file_name(entry) for entry in split["files"]]
    if "image_size" in split:
        split["image_size"] = list(split["image_size"])
    return split


def synthetic_dataset(dataset_cfg: Mapping[str, Any]) -> bool:
    """Whether a resolved dataset entry is generated where it trains (its format is
    ``synthetic`` or ``synthetic-text``): it has no files, and its preprocessing writes
    ``meta.json`` alone."""
    fmt = dataset_cfg.get("format")
    return fmt in FORMATS and is_synthetic(fmt)


def download_slice(dataset_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Where a dataset's files come from (``clusterbench.download``'s ``source``).

    Retries, timeouts and the cache location are left out on purpose: they cannot change the
    (checksum-pinned) bytes, so changing them must not make anything stale.
    """
    source: dict[str, Any] = {}
    if dataset_cfg.get("mirror"):
        source["mirror"] = dataset_cfg["mirror"]
    if dataset_cfg.get("urls"):
        source["files"] = {name: {"url": url} for name, url in dataset_cfg["urls"].items()}
    if "format" in dataset_cfg:  # a declared dataset: its files (synthetic data has none)
        return {
            "source": source,
            "declared": [
                {**entry, "name": declared_file_name(entry)}
                for entry in dataset_cfg.get("files", ())
            ],
        }
    return {"source": source}


def comm_slice(comm: Mapping[str, Any]) -> dict[str, Any]:
    """How the comm stage measures (its :data:`COMM_KEYS`): part of every comm job's params,
    beside the job's environment and backend (:mod:`clusterbench.pipeline.comm_jobs`)."""
    return {key: comm[key] for key in COMM_KEYS}


#: The definition of each stage's ``--params`` (see :func:`stage_params`).
STAGES: dict[str, StageSettings] = {
    "train": StageSettings(
        "/$defs/train_settings",
        keys=(*TRAIN_KEYS, "experiment"),
        required=tuple(k for k in TRAIN_KEYS if k not in LATER_TRAIN_KEYS),
        check=run_problems,
    ),
    "evaluate": StageSettings("/properties/evaluate"),
    "report": StageSettings("/properties/report"),
    "download": StageSettings("/properties/download"),
    "download_source": StageSettings("/$defs/download_params"),
    "preprocess": StageSettings("/$defs/preprocess_params", check=split_problems),
    "data_settings": StageSettings("/$defs/data_settings"),
    "checkpoints": StageSettings("/properties/checkpoints"),
    "comm": StageSettings("/$defs/comm_params"),
}


def main(argv: list[str] | None = None) -> int:
    """``python -m clusterbench.config FILE...``: check config files as the workflow would."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        try:
            validate(load_file(path))
        except ConfigError as exc:
            status = bad_settings(str(path), exc)
        else:
            print(f"{path}: ok")
    return status
