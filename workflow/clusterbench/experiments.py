"""Experiments: a compact way to write many runs, expanded into plain runs when the config is read.

``experiments:`` maps a name to base run settings (any run key, ``dataset`` included), a
``matrix`` of run keys to lists of values (the Cartesian product of which is swept), optional
``environments`` (preset names: one more dimension, setting ``workers``, ``nodes`` and
``gpus_per_node``) and optional ``repeats`` (k seeds per point: ``seed`` = base seed + i)::

    experiments:
      sweep:
        dataset: digits
        epochs: 2
        matrix: {lr: [0.01, 0.1], momentum: [0.0, 0.9]}
        environments: [cpu, cpu-parallel]
        repeats: 2

Each point becomes one run named ``<experiment>--<key>=<value>,...`` (``env=<preset>`` first,
then the matrix keys in the order written, then ``seed=S`` when ``repeats`` > 1): a file-name
component (``results/runs/<name>/``) and a Snakemake wildcard value, deterministic and
readable; a value's characters other than letters, digits and ``_ . + -`` become ``_``, and
two values that would then give the same name are refused. Each expanded run records where it
came from in the run keys ``experiment``, ``environment``, ``point`` (swept key -> value) and
``repeat`` (0-based); hand-written runs have ``None`` in all four.

Pure: :func:`expand` takes the already schema-checked parts of the config and returns the runs
and the problems (each naming its key path); :func:`clusterbench.config.validate` calls it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

#: Run keys every expanded run gets (None on hand-written runs): where the run came from.
ORIGIN_KEYS = ("experiment", "environment", "point", "repeat")

#: The keys an environment preset sets.
ENVIRONMENT_KEYS = ("workers", "nodes", "gpus_per_node")

#: A preset's ``workers: cores``: as many ranks as the node's cores hold (cores per node //
#: the run's ``cpus_per_worker``), resolved when a run is expanded.
CORES = "cores"

#: The most runs one experiment may expand to (a typo in a matrix must not make 10^5 jobs).
MAX_RUNS = 1000

#: An expanded run name: a file-name component with ``=`` and ``,`` too; at most this long.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,=+-]*$")
MAX_NAME_LENGTH = 200


def builtin_environments(gpus_per_node: int, nodes: int) -> dict[str, dict[str, Any]]:
    """The shipped presets; ``gpus_per_node`` (G) and ``nodes`` (N) come from
    ``environment_defaults``: multi-gpu is G ranks on one node, multi-node N*G ranks on N."""
    g, n = gpus_per_node, nodes
    return {
        "cpu": {"workers": 1, "nodes": 1, "gpus_per_node": 0},
        "cpu-parallel": {"workers": CORES, "nodes": 1, "gpus_per_node": 0},
        "gpu": {"workers": 1, "nodes": 1, "gpus_per_node": 1},
        "multi-gpu": {"workers": g, "nodes": 1, "gpus_per_node": g},
        "multi-node": {"workers": n * g, "nodes": n, "gpus_per_node": g},
    }


def environments(
    user: Mapping[str, Mapping[str, Any]], defaults: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The presets: the shipped ones, with the user's (``environments:``, resolved: with the
    schema's defaults) over them by name."""
    presets = builtin_environments(defaults["gpus_per_node"], defaults["nodes"])
    presets.update({name: dict(preset) for name, preset in user.items()})
    return presets


def format_value(value: Any) -> str:
    """A value as it appears in a run name: ``true``/``false``, ``null``, floats exactly
    (``repr``: ``0.1``, ``1e-05``), the rest as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return str(value)


#: What a value may keep in a run name: the rest becomes ``_`` (``,`` and ``=`` separate the
#: parts; ``/`` or a space would make no file name).
UNSAFE_IN_VALUE = re.compile(r"[^A-Za-z0-9_.+-]")


def name_value(value: Any) -> str:
    """A value as it appears in a run name: :func:`format_value`, sanitised for file names
    (``a/b c`` -> ``a_b_c``). Two values that become the same text are refused (a collision)."""
    return UNSAFE_IN_VALUE.sub("_", format_value(value))


def run_name(experiment: str, parts: list[tuple[str, Any]]) -> str:
    """``<experiment>--<key>=<value>,<key>=<value>``."""
    return f"{experiment}--" + ",".join(f"{key}={name_value(value)}" for key, value in parts)


def expand(
    experiments: Mapping[str, Mapping[str, Any]],
    *,
    base: Mapping[str, Any],
    presets: Mapping[str, Mapping[str, Any]],
    run_keys: Mapping[str, Any],
    cores_per_node: int,
    value_problems: Callable[[str, Any, tuple[Any, ...]], list[str]] = lambda *_: [],
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Expand ``experiments`` (schema-checked, defaults filled: base keys are run keys,
    ``repeats`` is set).

    ``base``: the resolved run defaults (``run_defaults`` over the built-in defaults), under
    every run; ``presets``: :func:`environments`; ``run_keys``: the keys a run may have (a
    matrix may sweep any but ``name``); ``cores_per_node`` resolves a preset's ``workers:
    cores``; ``value_problems(key, value, path)`` checks one matrix value against the schema.

    Returns ``(where, run)`` pairs, ``where`` naming the run for later checks
    (``experiments.<name>[<run name>]``), and the problems, each naming its key path.
    """
    runs: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    for exp, spec in experiments.items():
        where = f"experiments.{exp}"
        settings = {k: v for k, v in spec.items() if k not in ("matrix", "environments", "repeats")}
        matrix = spec.get("matrix")
        envs = list(spec.get("environments") or [])
        repeats = spec["repeats"]
        found: list[str] = []
        if matrix is not None and not isinstance(matrix, Mapping):
            found.append(f"{where}.matrix: expected a mapping of run keys to lists, got {matrix!r}")
            matrix = {}
        if matrix is not None and not matrix:
            found.append(f"{where}.matrix: empty: give at least one run key and its values")
        matrix = dict(matrix or {})
        for key, values in matrix.items():
            at = f"{where}.matrix.{key}"
            if key not in run_keys:
                found.append(
                    f"{at}: not a run key (run keys: {', '.join(sorted(set(run_keys) - {'name'}))})"
                )
            elif key == "name":
                found.append(f"{at}: run names are made by the expansion; 'name' is no sweep")
            elif not isinstance(values, list):
                found.append(f"{at}: expected a list of values, got {values!r}")
            elif not values:
                found.append(f"{at}: an empty list of values would give no run")
            else:
                for i, value in enumerate(values):
                    found += value_problems(key, value, ("experiments", exp, "matrix", key, i))
                seen: dict[str, int] = {}
                for i, value in enumerate(values):
                    text = name_value(value)
                    if text in seen:
                        found.append(
                            f"{at}[{i}]: {value!r} repeats {key}[{seen[text]}] "
                            f"({values[seen[text]]!r}): both would give runs named {key}={text}"
                        )
                    seen.setdefault(text, i)
            if envs and key in ENVIRONMENT_KEYS:
                found.append(
                    f"{at}: also set by this experiment's environments ({', '.join(envs)}); "
                    "sweep it or give environments, not both"
                )
            if repeats > 1 and key == "seed":
                found.append(f"{at}: repeats: {repeats} sets the seeds; sweep seed or repeat")
        for key in ENVIRONMENT_KEYS:
            if envs and key in settings:
                found.append(
                    f"{where}.{key}: also set by this experiment's environments "
                    f"({', '.join(envs)}), which would replace it; set it in an environment "
                    "preset (environments:), or give no environments"
                )
        for i, env in enumerate(envs):
            if env not in presets:
                found.append(
                    f"{where}.environments[{i}]: unknown environment {env!r} "
                    f"(known: {', '.join(sorted(presets))}; define it under 'environments')"
                )
            elif env in envs[:i]:
                found.append(f"{where}.environments[{i}]: {env!r} is listed twice")
        if not any("dataset" in where_set for where_set in (base, settings, matrix)):
            found.append(
                f"{where}.dataset: required: give it here, in the matrix or in run_defaults"
            )
        if not matrix and not envs and repeats == 1 and not found:
            found.append(
                f"{where}: nothing to expand: give a matrix, environments or repeats > 1 "
                "(a single run goes under 'runs')"
            )
        count = repeats * max(1, len(envs)) * _product_size(matrix)
        if count > MAX_RUNS:
            found.append(
                f"{where}: expands to {count} runs, more than the limit of {MAX_RUNS}; "
                "shorten the matrix or split the experiment"
            )
        problems += found
        if found:
            continue
        for env in envs or [None]:
            for values in itertools.product(*matrix.values()):
                point = dict(zip(matrix, values, strict=True))
                for repeat in range(repeats):
                    run = {**base, **settings}
                    parts: list[tuple[str, Any]] = []
                    if env is not None:
                        preset = dict(presets[env])
                        if preset["workers"] == CORES:
                            preset["workers"] = max(1, cores_per_node // run["cpus_per_worker"])
                        run.update(preset)
                        parts.append(("env", env))
                    run.update(point)
                    parts += list(point.items())
                    if repeats > 1:
                        run["seed"] = run["seed"] + repeat
                        parts.append(("seed", run["seed"]))
                    run["name"] = run_name(exp, parts)
                    run.update(experiment=exp, environment=env, point=dict(point), repeat=repeat)
                    runs.append((f"{where}[{run['name']}]", run))
    return runs, problems


def _product_size(matrix: Mapping[str, Any]) -> int:
    size = 1
    for values in matrix.values():
        size *= len(values) if isinstance(values, list) else 1
    return size


def name_problems(name: str, where: str) -> list[str]:
    """An expanded run name must be a file-name component of a sane length."""
    if not NAME_PATTERN.match(name):
        return [f"{where}: run name {name!r} is no file name (letters, digits, _ . , = + -)"]
    if len(name) > MAX_NAME_LENGTH:
        return [
            f"{where}: run name {name[:60]!r}... is {len(name)} characters, more than "
            f"{MAX_NAME_LENGTH}: shorten the experiment's name or its values"
        ]
    return []


def origin(run: Mapping[str, Any]) -> dict[str, Any] | None:
    """``run.json``'s ``experiment`` block: where an expanded run came from (None: written by
    hand)."""
    if run.get("experiment") is None:
        return None
    return {
        "name": run["experiment"],
        "environment": run["environment"],
        "point": dict(run["point"]),
        "repeat": run["repeat"],
    }
