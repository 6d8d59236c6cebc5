"""The trainings of a workflow, from its config files as Snakemake reads them: the default
``config/config.yaml`` of the workflow's directory (where it exists), with each
``--configfile`` merged over it in order, checked and resolved by
:func:`clusterbench.config.validate` (every run, the experiments' too, with its settings). The
config files are only read."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clusterbench.config import ConfigError, load_file, validate

#: The workflow's own config file, relative to its directory (rules/common.smk's
#: ``configfile:``).
DEFAULT_CONFIGFILE = "config/config.yaml"


def merged(base: Any, over: Any) -> Any:
    """``over`` merged over ``base`` as Snakemake merges config files (mappings key by key)."""
    if isinstance(over, Mapping) and isinstance(base, Mapping):
        return {**base, **{key: merged(base.get(key), sub) for key, sub in over.items()}}
    return over


def workflow_runs(workdir: Path, configfiles: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """Every run of the workflow in ``workdir`` (resolved, in the config's order);
    :class:`ConfigError` naming the file when a config file is missing or bad."""
    default = workdir / DEFAULT_CONFIGFILE
    paths = [Path(p) if Path(p).is_absolute() else workdir / p for p in configfiles]
    if not paths and not default.is_file():
        raise ConfigError(
            f"{default}: no such config file (run the status in the workflow's directory, "
            "or name its config with --configfile FILE)"
        )
    config: dict[str, Any] = load_file(default) if default.is_file() else {}
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{path}: no such config file (--configfile)")
        config = merged(config, load_file(path))
    # download.cache_dir is checked by making a folder in it (rules/common.smk): the status
    # writes nothing, and trains nothing, so it leaves the check out
    config = copy.deepcopy(config)
    if isinstance(config.get("download"), dict):
        config["download"]["cache_dir"] = None
    return validate(config)["runs"]
