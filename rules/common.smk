# Shared set-up: config validation, run lookup, helpers. Imports nothing heavy: this file is
# parsed again in every cluster job.
import os
import re
import sys
from pathlib import Path

# Make the package importable even from a snakemake that is not the project's venv.
sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from clusterbench import config as cbconfig
from clusterbench.resources import TRAIN_RESOURCE_KEYS, train_resources
from snakemake.exceptions import WorkflowError

try:
    CFG = cbconfig.validate(config)
except cbconfig.ConfigError as exc:
    raise WorkflowError(str(exc)) from None

RUNS = {run["name"]: run for run in CFG["runs"]}
DATASETS = sorted({run["dataset"] for run in CFG["runs"]})


# Jobs (local, and cluster jobs, which parse this file again) run `python` and the package of
# this Snakemake's own environment, as if it were activated. Download settings cannot change the
# checksum-pinned bytes, so they are no params (a rerun trigger): bumping `retries` must not make
# every stage stale; clusterbench.download reads them from CLUSTERBENCH_DOWNLOAD.
def prepend_path(var, entry):
    """``entry`` first in the path list ``var`` (once: cluster jobs inherit it and parse again)."""
    rest = [p for p in os.environ.get(var, "").split(os.pathsep) if p and p != entry]
    return os.pathsep.join([entry, *rest])


os.environ.update(
    PATH=prepend_path("PATH", str(Path(sys.executable).parent)),
    PYTHONPATH=prepend_path("PYTHONPATH", str(Path(workflow.basedir) / "workflow")),
    CLUSTERBENCH_HOME=str(Path(workflow.basedir)),
    CLUSTERBENCH_DOWNLOAD=cbconfig.canonical_json(CFG["download"]),
)
#: Every rule runs in this software environment (see tools/setup.sh for the venv equivalent).
SOFTWARE = "../workflow/envs/clusterbench.yaml"


def script(stage):
    """The entry point ``scripts/<stage>.py``: an input, so editing it reruns the stage."""
    return str(Path(workflow.basedir) / "scripts" / f"{stage}.py")


def stage_module(stage):
    """The stage's own module ``workflow/clusterbench/<stage>.py``: an input, so editing it
    reruns the stage and what follows (the shared modules it imports are no input)."""
    return str(Path(workflow.basedir) / "workflow" / "clusterbench" / f"{stage}.py")


def remote_download():
    """``CLUSTERBENCH_REMOTE_DOWNLOAD=1``: the site's compute nodes have internet, so the
    download runs as a cluster job; unset or ``0``: it runs on the submit host."""
    value = os.environ.get("CLUSTERBENCH_REMOTE_DOWNLOAD", "")
    if value not in ("", "0", "1"):
        raise WorkflowError(
            f"environment variable CLUSTERBENCH_REMOTE_DOWNLOAD={value!r}: expected 1 (download "
            "in a cluster job) or 0/unset (download on the submit host)"
        )
    return value == "1"


#: The download runs on the submit host (its `localrule:`): compute nodes often have no
#: internet. The report always does (rules/report.smk): it needs no compute-node resources.
LOCAL_DOWNLOAD = not remote_download()


def alternatives(names):
    """A wildcard constraint matching exactly ``names``: a run name may contain ``.``."""
    return "|".join(re.escape(name) for name in names)


wildcard_constraints:
    dataset=alternatives(DATASETS),
    run=alternatives(RUNS),


def run_of(wildcards):
    return RUNS[wildcards.run]


def data_dir(dataset):
    return f"results/data/{dataset}"


ARRAY_FILES = [
    f"{split}_{kind}.npy" for split in ("train", "val", "test") for kind in "xy"
]


def data_files(dataset):
    """Every file of a preprocessed dataset; meta.json (written last) comes last."""
    return [f"{data_dir(dataset)}/{name}" for name in ARRAY_FILES + ["meta.json"]]


#: Each run's training resources, computed once (see clusterbench.resources).
TRAIN_RESOURCES = {name: train_resources(run) for name, run in RUNS.items()}


def train_resource(key):
    """Resource ``key`` of the train job of ``wildcards.run`` (None: not used by this run)."""
    return lambda wildcards: TRAIN_RESOURCES[wildcards.run].get(key)


onstart:
    # Slurm accepts jobs larger than their partition and leaves them pending forever: refuse
    # such a training job before anything is submitted (see clusterbench.preflight).
    if workflow.executor_plugin.name == "slurm":
        from clusterbench.preflight import PreflightError, check_slurm

        train_jobs = [
            (job.wildcards.run, job.resources)
            for job in workflow.dag.needrun_jobs()
            if job.rule.name == "train"
        ]
        try:
            check_slurm(train_jobs)
        except PreflightError as exc:
            raise WorkflowError(str(exc)) from None
