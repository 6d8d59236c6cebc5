"""Each stage's ``--params``: where the schema defines them (:data:`STAGES`) and the one
check of every setting a stage takes (:func:`stage_params`); the stages re-check no value by
hand.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clusterbench.config.errors import ConfigError
from clusterbench.config.problems import run_problems, split_problems
from clusterbench.config.schema import (
    EVALUATE_KEYS,
    LATER_TRAIN_KEYS,
    TRAIN_KEYS,
    fill_defaults,
    load_schema,
    raise_problems,
    schema_problems,
)
from clusterbench.core.params import json_object


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
    problems = schema_problems(raw, definition, (what,))
    resolved = fill_defaults(definition, copy.deepcopy(dict(raw)), schema["$defs"])
    if not problems and stage_def.check is not None:
        problems = stage_def.check(resolved, what)
    raise_problems(f"{stage} settings", problems)
    return resolved


#: The definition of each stage's ``--params`` (see :func:`stage_params`).
STAGES: dict[str, StageSettings] = {
    "train": StageSettings(
        "/$defs/train_settings",
        keys=(*TRAIN_KEYS, "experiment"),
        required=tuple(k for k in TRAIN_KEYS if k not in LATER_TRAIN_KEYS),
        check=run_problems,
    ),
    "evaluate": StageSettings("/properties/evaluate", keys=EVALUATE_KEYS),
    # the watch stage's: evaluate's and how often it evaluates while the training runs
    "watch": StageSettings("/properties/evaluate"),
    "report": StageSettings("/properties/report"),
    "download": StageSettings("/properties/download"),
    "download_source": StageSettings("/$defs/download_params"),
    "preprocess": StageSettings("/$defs/preprocess_params", check=split_problems),
    "data_settings": StageSettings("/$defs/data_settings"),
    "checkpoints": StageSettings("/properties/checkpoints"),
    "comm": StageSettings("/$defs/comm_params"),
}
