"""A whole config checked and resolved (:func:`validate`): the schema, then every run merged
over ``run_defaults`` and the built-in defaults, the experiments expanded into runs, and the
cross-key checks; ``python -m clusterbench.config FILE`` (:func:`main`) checks config files as
the workflow would.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterbench.config import experiments as expansion
from clusterbench.config import memory, model_data, storage
from clusterbench.config.effects import no_effect_problems
from clusterbench.config.errors import ConfigError, bad_settings
from clusterbench.config.files import load_file
from clusterbench.config.problems import (
    allocated_workers,
    cache_dir_problems,
    dataset_problems,
    path_problems,
    run_problems,
    wildcard_problems,
)
from clusterbench.config.schema import (
    fill_defaults,
    load_schema,
    raise_problems,
    schema_problems,
)
from clusterbench.config.slices import extractable


def _schema_errors(config: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    raise_problems("configuration", schema_problems(config, schema))


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` and return a resolved deep copy.

    The copy has schema defaults filled in and every run merged over ``run_defaults`` and the
    built-in run defaults, so downstream code never looks up a default itself.
    Raises :class:`ConfigError` naming each offending key.
    """
    schema = load_schema()
    _schema_errors(config, schema)
    resolved = fill_defaults(schema, copy.deepcopy(dict(config)), schema["$defs"])

    run_schema = schema["$defs"]["run_settings"]
    defaults = resolved.get("run_defaults", {})
    checked: list[tuple[str, dict[str, Any]]] = []  # (where, run): every run, to check
    problems: list[str] = []
    if "name" in defaults:
        problems.append(
            "run_defaults.name: a name is each run's own (results/runs/<name>/): give it in "
            "runs, not in run_defaults"
        )
    for i, run in enumerate(resolved["runs"]):
        merged = fill_defaults(run_schema, {**defaults, **run})
        merged.update(dict.fromkeys(expansion.ORIGIN_KEYS))
        if "dataset" not in merged:
            problems.append(
                f"runs[{i}].dataset: required: give it here or in run_defaults (merged under "
                "every run)"
            )
            continue
        checked.append((f"runs[{i}]", merged))
    expanded, found = expand_experiments(resolved, schema)
    problems += found
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
        problems += memory_problems(run, where, resolved["datasets"])
    for name, ds in resolved["datasets"].items():
        problems += dataset_problems(name, ds)
    problems += storage.resolve(resolved["datasets"], checked, extractable(resolved["datasets"]))
    builtin = fill_defaults(run_schema, {})
    problems += no_effect_problems(config, checked, resolved["datasets"], builtin)
    problems += path_problems(resolved, schema)
    if not any(p.startswith("download.cache_dir:") for p in problems):
        problems += cache_dir_problems(resolved["download"]["cache_dir"])
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))
    return resolved


def memory_problems(run: Mapping[str, Any], where: str, datasets: Mapping[str, Any]) -> list[str]:
    """Why ``run``'s synthetic data cannot fit in its job's memory
    (:func:`clusterbench.config.memory.run_problems`)."""
    ds = datasets.get(run["dataset"])
    found = model_data.synthetic_input(run["dataset"], ds, run["model"])
    if found is None:
        return []
    task, shape = found
    return memory.run_problems(run, where, ds, shape, task, allocated_workers(run))


def expand_experiments(
    resolved: Mapping[str, Any], schema: Mapping[str, Any]
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The runs ``experiments:`` expand to (clusterbench.config.experiments), each merged over
    ``run_defaults`` and the built-in defaults, as ``(where, run)``; and the problems, each
    naming its key path (``experiments.sweep.matrix.lr: ...``)."""
    if not resolved["experiments"]:
        return [], []
    run_schema = schema["$defs"]["run_settings"]
    base = fill_defaults(run_schema, copy.deepcopy(dict(resolved.get("run_defaults", {}))))
    env_defaults = resolved["environment_defaults"]
    cores = env_defaults["cores_per_node"] or os.cpu_count() or 1

    def value_problems(key: str, value: Any, path: tuple[Any, ...]) -> list[str]:
        definition = {**run_schema["properties"][key], "$defs": schema["$defs"]}
        return schema_problems(value, definition, path)

    runs, problems = expansion.expand(
        resolved["experiments"],
        base=base,
        presets=expansion.environments(resolved["environments"], env_defaults),
        run_keys=run_schema["properties"],
        cores_per_node=cores,
        value_problems=value_problems,
    )
    runs = [(where, fill_defaults(run_schema, run)) for where, run in runs]
    for where, run in runs:
        problems += expansion.name_problems(run["name"], where)
    return runs, problems


def main(argv: list[str] | None = None) -> int:
    """``python -m clusterbench.config FILE...``: check config files as the workflow would.
    With ``--backends``: print the training backends the files' runs use, one a line (what
    ``make setup`` reads to decide whether to build Horovod)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument(
        "--backends", action="store_true", help="print the backends the runs use, one a line"
    )
    args = parser.parse_args(argv)
    status = 0
    backends: set[str] = set()
    for path in args.files:
        try:
            cfg = validate(load_file(path))
        except ConfigError as exc:
            status = bad_settings(str(path), exc)
        else:
            backends |= {run["backend"] for run in cfg["runs"]}
            if not args.backends:
                print(f"{path}: ok")
    if args.backends and status == 0:
        print("\n".join(sorted(backends)))
    return status
