"""Configuration: the one definition of every setting (the JSON schema), a config checked and
resolved, and each rule's slice of it. The foundation of the package: it imports the core and
the extension points' registries, nothing above them.

=================  ============================================================================
module             its one job
=================  ============================================================================
``errors``         :class:`ConfigError`, the exit status of bad settings, key paths in messages
``files``          reading a config file (JSON or YAML) with what YAML lets by refused
``schema``         the schema: definitions, defaults, ``x-slice`` tags, values checked against it
``problems``       the checks across keys that the schema cannot express
``slices``         each rule's slice of a resolved config (its params: an exact rerun trigger)
``stages``         each stage's ``--params`` checked against its definition
``validate``       a whole config checked and resolved; ``python -m clusterbench.config FILE``
``datasets``       the built-in datasets (pinned files, sizes, classes)
``experiments``    experiments expanded into plain runs
``model_data``     whether a run's model fits its dataset
``storage``        how preprocessing stores a dataset, decided from its runs
``lr``             a run's learning-rate schedule (pure)
=================  ============================================================================

Imported by the Snakefile at parse time (in every cluster job too), so it imports only the
standard library, yaml and jsonschema. This module hands the API on; the code is in the modules
above.
"""

from __future__ import annotations

from clusterbench.config.errors import EXIT_BAD_SETTINGS, ConfigError, bad_settings, key_path
from clusterbench.config.files import check_files, load_file, with_config_args
from clusterbench.config.problems import (
    allocated_workers,
    elastic_problems,
    grow_problems,
    grows_through_jobs,
    is_elastic,
    run_problems,
    split_size_problems,
    split_sizes,
    worker_bounds,
)
from clusterbench.config.schema import (
    CHECK_FILES_LIMIT,
    DATA_SETTINGS_KEYS,
    DOWNLOAD_KEYS,
    EVALUATE_KEYS,
    LATER_TRAIN_DEFAULTS,
    LATER_TRAIN_KEYS,
    NOT_SPEED_KEYS,
    PREPROCESS_KEYS,
    RESIDENT_MEMORY_FRACTION,
    RESOURCE_KEYS,
    SCHEMA_PATH,
    SPEED_KEYS,
    TRAIN_DEFAULTS,
    TRAIN_KEYS,
    WORKFLOW_KEYS,
    canonical_json,
    load_schema,
    schema_default,
    script_safe_json,
    slices_of,
)
from clusterbench.config.slices import (
    comm_slice,
    config_hash,
    data_settings,
    download_slice,
    preprocess_slice,
    synthetic_dataset,
    train_slice,
)
from clusterbench.config.stages import STAGES, stage_params
from clusterbench.config.validate import main, validate

__all__ = [
    "CHECK_FILES_LIMIT",
    "DATA_SETTINGS_KEYS",
    "DOWNLOAD_KEYS",
    "EXIT_BAD_SETTINGS",
    "LATER_TRAIN_DEFAULTS",
    "EVALUATE_KEYS",
    "LATER_TRAIN_KEYS",
    "NOT_SPEED_KEYS",
    "PREPROCESS_KEYS",
    "RESIDENT_MEMORY_FRACTION",
    "RESOURCE_KEYS",
    "SCHEMA_PATH",
    "SPEED_KEYS",
    "STAGES",
    "TRAIN_DEFAULTS",
    "TRAIN_KEYS",
    "WORKFLOW_KEYS",
    "ConfigError",
    "allocated_workers",
    "bad_settings",
    "canonical_json",
    "check_files",
    "comm_slice",
    "config_hash",
    "data_settings",
    "download_slice",
    "elastic_problems",
    "grow_problems",
    "grows_through_jobs",
    "is_elastic",
    "key_path",
    "load_file",
    "load_schema",
    "main",
    "preprocess_slice",
    "run_problems",
    "schema_default",
    "script_safe_json",
    "slices_of",
    "split_size_problems",
    "split_sizes",
    "stage_params",
    "synthetic_dataset",
    "train_slice",
    "validate",
    "worker_bounds",
    "with_config_args",
]
