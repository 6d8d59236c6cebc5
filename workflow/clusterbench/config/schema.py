"""The config schema and what is read from it: the settings' definitions, defaults and
``x-slice`` tags (which rule's params each key belongs to), the one error type for bad
settings, and checking a value against a definition with messages that name each key.

``workflow/schemas/config.schema.yaml`` is the only place a setting is defined; this module
reads it once per process. The choices of ``backend``, ``bn`` and a dataset's ``format`` are
their registries' plugins, added when it is loaded (:func:`load_schema`). A new run key is its
line in the schema, with its ``x-slice`` tag (and a training key's ``x-speed``), and its row in
config/README.md, which ``tests/test_config_docs.py`` checks against the schema's default.

Imported by the Snakefile at parse time (in every cluster job too): the standard library,
yaml and jsonschema only, and the registries (which import no plugin's heavy code).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from clusterbench import models
from clusterbench.backends import BACKENDS
from clusterbench.bn import BN_MODES
from clusterbench.config import experiments as expansion
from clusterbench.config.errors import ConfigError, key_path
from clusterbench.formats import FORMATS

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


def speed_tags(properties: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, bool]:
    """Each of ``keys`` -> its ``x-speed`` tag (whether it sets how fast a step runs); a key
    without one, or with another value than true or false, is an error in the schema: every
    training key says, so that none is taken for one or the other by default."""
    tags = {}
    for key in keys:
        tag = properties[key].get("x-speed")
        if not isinstance(tag, bool):
            raise RuntimeError(
                f"{SCHEMA_PATH}: run_settings.{key}: a training key needs x-speed: true or "
                f"false (whether it sets how fast a step runs), got {tag!r}"
            )
        tags[key] = tag
    return tags


_SPEED_TAGS = speed_tags(_RUN_PROPERTIES, TRAIN_KEYS)
#: Training keys that set how fast a step runs (``x-speed: true``): the history's series and
#: the report's comparisons group runs by them.
SPEED_KEYS = tuple(k for k, speed in _SPEED_TAGS.items() if speed)
#: Training keys that do not (``x-speed: false``): what is learnt (the LR and its schedule, the
#: optimiser, the seed), how long, or what a recorded effective value stands for.
NOT_SPEED_KEYS = tuple(k for k, speed in _SPEED_TAGS.items() if not speed)


#: ``loading: auto`` holds a run's data resident when the node's ranks' copies fit in this
#: share of the memory (the schema's ``x-resident-memory-fraction`` of ``loading``).
RESIDENT_MEMORY_FRACTION = float(_RUN_PROPERTIES["loading"]["x-resident-memory-fraction"])


#: Every training key's default (None where it has none: ``name``, ``dataset``).
TRAIN_DEFAULTS = {k: _RUN_PROPERTIES[k].get("default") for k in TRAIN_KEYS}
#: What an older run.json that lacks a later key trained with: the key's default.
LATER_TRAIN_DEFAULTS = {k: TRAIN_DEFAULTS[k] for k in LATER_TRAIN_KEYS}


#: The evaluate stage's settings (its ``--params``, its rerun trigger); the others of
#: ``evaluate`` (``every_minutes``) are the watch stage's alone.
EVALUATE_KEYS = ("batch_size", "split")


#: Run keys that only size or place the job (``x-slice: job``: scheduler resources, the order
#: of local jobs): never part of params, so changing them reruns nothing.
RESOURCE_KEYS = _tagged(_RUN_SLICES, "job")


#: Run keys that decide what the workflow does with a run (``x-slice: workflow``, e.g.
#: ``on_unavailable``) and change no result: no params either.
WORKFLOW_KEYS = _tagged(_RUN_SLICES, "workflow")


_DATASET_PROPERTIES = _schema_file()["properties"]["datasets"]["additionalProperties"]["properties"]
_DATASET_SLICES = slices_of(
    _DATASET_PROPERTIES, ("preprocess", "download", "workflow"), "datasets.<name>"
)


#: ``check: auto`` compares every file of a folder read in place up to this many files, else
#: its folders only (the schema's ``x-check-files`` of ``check``).
CHECK_FILES_LIMIT = int(_DATASET_PROPERTIES["check"]["x-check-files"])


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


#: Run keys the train stage takes outside its ``--run`` (``x-slice: workflow``: no rerun
#: trigger): how it reads the data, which gives the same batches either way.
DATA_SETTINGS_KEYS = ("loading", "loader_workers")


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


def fill_defaults(
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
            fill_defaults(sub, value[key], defs)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in value.keys() - props.keys():
            if value[key] is None:
                value[key] = {}
            fill_defaults(extra, value[key], defs)
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


def schema_problems(
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
    if error.validator == "anyOf" and "x-hint" in error.schema:  # the schema's own words
        message = f"{shown} is not {error.schema['x-hint']}"
    if len(shown) > 60 and isinstance(error.instance, str):
        message = message.replace(shown, f"{shown[:40]}...' ({len(error.instance)} characters)")
    return message + _yaml_hint(error)


def raise_problems(what: str, problems: list[str]) -> None:
    if problems:
        raise ConfigError(f"invalid {what}:\n" + "\n".join(f"  {p}" for p in problems))


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
