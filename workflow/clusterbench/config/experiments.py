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
from dataclasses import dataclass
from typing import Any

#: Run keys every expanded run gets (None on hand-written runs): where the run came from.
ORIGIN_KEYS = ("experiment", "environment", "point", "repeat")

#: The keys an environment preset sets.
ENVIRONMENT_KEYS = ("workers", "nodes", "gpus_per_node")

#: A preset's ``workers: cores``: as many ranks as the node's cores hold (cores per node //
#: the run's ``cpus_per_worker``), resolved when a run is expanded.
CORES = "cores"

#: The most runs one experiment may expand to (a typo in a matrix must not make 10^5 jobs).
MAX_RUNS = 10_000

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


@dataclass(frozen=True)
class Experiment:
    """One experiment's parts, as written: its name, its key path (``experiments.<name>``), its
    base settings (every key but the three below), matrix, environments and repeats."""

    name: str
    where: str
    settings: dict[str, Any]
    matrix: dict[str, Any]
    environments: list[str]
    repeats: int


#: An experiment's own keys: the rest are base run settings.
EXPERIMENT_KEYS = ("matrix", "environments", "repeats")


def parse(name: str, spec: Mapping[str, Any]) -> tuple[Experiment, list[str]]:
    """Experiment ``name`` (``spec``: schema-checked, defaults filled) and the problems of a
    matrix that is no mapping or is empty (read as an empty matrix)."""
    where = f"experiments.{name}"
    matrix = spec.get("matrix")
    problems = []
    if matrix is not None and not isinstance(matrix, Mapping):
        problems.append(f"{where}.matrix: expected a mapping of run keys to lists, got {matrix!r}")
        matrix = {}
    if matrix is not None and not matrix:
        problems.append(f"{where}.matrix: empty: give at least one run key and its values")
    experiment = Experiment(
        name=name,
        where=where,
        settings={k: v for k, v in spec.items() if k not in EXPERIMENT_KEYS},
        matrix=dict(matrix or {}),
        environments=list(spec.get("environments") or []),
        repeats=spec["repeats"],
    )
    return experiment, problems


def repeated_values(at: str, key: str, values: list[Any]) -> list[str]:
    """A problem for each value of matrix list ``key`` (at key path ``at``) equal to an earlier
    one (``1`` and ``1.0`` too: the same run twice, under two names) or giving the same run
    name as an earlier one."""
    problems = []
    names: dict[str, int] = {}
    numbers: dict[tuple[str, Any], int] = {}  # a number or boolean -> where it came first
    for i, value in enumerate(values):
        text = name_value(value)
        number = _number(value)
        if number in numbers:
            first = values[numbers[number]]
            named = (
                f"both named {key}={text}"
                if name_value(first) == text
                else f"as {key}={name_value(first)} and {key}={text}"
            )
            problems.append(
                f"{at}[{i}]: {value!r} repeats {key}[{numbers[number]}] ({first!r}): equal "
                f"values would train the same run twice, {named}"
            )
        elif text in names:
            problems.append(
                f"{at}[{i}]: {value!r} repeats {key}[{names[text]}] "
                f"({values[names[text]]!r}): both would give runs named {key}={text}"
            )
        names.setdefault(text, i)
        if number is not None:
            numbers.setdefault(number, i)
    return problems


def _number(value: Any) -> tuple[str, Any] | None:
    """A number's value (``1`` and ``1.0`` are one), a boolean apart; None for other values."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    return None


def sweep_problems(
    experiment: Experiment,
    key: str,
    run_keys: Mapping[str, Any],
    value_problems: Callable[[str, Any, tuple[Any, ...]], list[str]],
) -> list[str]:
    """The problems of the matrix's ``key``: no run key, no list, a value the run key refuses
    (``value_problems``), a value repeated, or a key the environments or repeats also set."""
    at = f"{experiment.where}.matrix.{key}"
    values = experiment.matrix[key]
    envs = experiment.environments
    if key not in run_keys:
        from clusterbench.models import NO_WEIGHTS

        problems = [
            f"{at}: not a run key (run keys: {', '.join(sorted(set(run_keys) - {'name'}))})"
            + (f": {NO_WEIGHTS}" if key in ("weights", "pretrained") else "")
        ]
    elif key == "name":
        problems = [f"{at}: run names are made by the expansion; 'name' is no sweep"]
    elif not isinstance(values, list):
        problems = [f"{at}: expected a list of values, got {values!r}"]
    elif not values:
        problems = [f"{at}: an empty list of values would give no run"]
    else:
        path = ("experiments", experiment.name, "matrix", key)
        problems = [p for i, v in enumerate(values) for p in value_problems(key, v, (*path, i))]
        problems += repeated_values(at, key, values)
    if envs and key in ENVIRONMENT_KEYS:
        problems.append(
            f"{at}: also set by this experiment's environments ({', '.join(envs)}); "
            "sweep it or give environments, not both"
        )
    if experiment.repeats > 1 and key == "seed":
        problems.append(f"{at}: repeats: {experiment.repeats} sets the seeds; sweep seed or repeat")
    return problems


def environment_problems(
    experiment: Experiment, presets: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Unknown or repeated environments, and base settings the environments would replace."""
    where, envs = experiment.where, experiment.environments
    problems = [
        f"{where}.{key}: also set by this experiment's environments ({', '.join(envs)}), which "
        "would replace it; set it in an environment preset (environments:), or give no "
        "environments"
        for key in ENVIRONMENT_KEYS
        if envs and key in experiment.settings
    ]
    for i, env in enumerate(envs):
        if env not in presets:
            problems.append(
                f"{where}.environments[{i}]: unknown environment {env!r} "
                f"(known: {', '.join(sorted(presets))}; define it under 'environments')"
            )
        elif env in envs[:i]:
            problems.append(f"{where}.environments[{i}]: {env!r} is listed twice")
    return problems


def size_problems(experiment: Experiment, base: Mapping[str, Any], found: list[str]) -> list[str]:
    """No dataset from anywhere, nothing to expand (unless ``found`` has other problems), or
    more runs than :data:`MAX_RUNS`."""
    where, matrix = experiment.where, experiment.matrix
    problems = []
    if not any("dataset" in keys for keys in (base, experiment.settings, matrix)):
        problems.append(
            f"{where}.dataset: required: give it here, in the matrix or in run_defaults"
        )
    if not matrix and not experiment.environments and experiment.repeats == 1:
        if not found and not problems:
            problems.append(
                f"{where}: nothing to expand: give a matrix, environments or repeats > 1 "
                "(a single run goes under 'runs')"
            )
    count = experiment.repeats * max(1, len(experiment.environments)) * _product_size(matrix)
    if count > MAX_RUNS:
        problems.append(
            f"{where}: expands to {count} runs, more than the limit of {MAX_RUNS}; "
            "shorten the matrix or split the experiment"
        )
    return problems


def runs_of(
    experiment: Experiment,
    base: Mapping[str, Any],
    presets: Mapping[str, Mapping[str, Any]],
    cores_per_node: int,
) -> list[tuple[str, dict[str, Any]]]:
    """The runs of a checked experiment, as ``(where, run)``: each environment, then each
    point of the matrix (in the order written), then each repeat."""
    runs = []
    matrix, repeats = experiment.matrix, experiment.repeats
    for env in experiment.environments or [None]:
        for values in itertools.product(*matrix.values()):
            point = dict(zip(matrix, values, strict=True))
            for repeat in range(repeats):
                run = {**base, **experiment.settings}
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
                run["name"] = run_name(experiment.name, parts)
                run.update(
                    experiment=experiment.name, environment=env, point=dict(point), repeat=repeat
                )
                runs.append((f"{experiment.where}[{run['name']}]", run))
    return runs


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
    (``experiments.<name>[<run name>]``), and the problems, each naming its key path. An
    experiment with a problem expands to no run.
    """
    runs: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    for name, spec in experiments.items():
        experiment, found = parse(name, spec)
        for key in experiment.matrix:
            found += sweep_problems(experiment, key, run_keys, value_problems)
        found += environment_problems(experiment, presets)
        found += size_problems(experiment, base, found)
        problems += found
        if not found:
            runs += runs_of(experiment, base, presets, cores_per_node)
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
