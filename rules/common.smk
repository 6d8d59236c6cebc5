# Shared set-up: the config, and the workflow's logic (clusterbench.pipeline) the rules call.
# Imports nothing heavy, and does little: this file is parsed again in every cluster job.
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError


# Make the package importable even from a snakemake that is not the project's venv.
sys.path.insert(0, str(CHECKOUT / "workflow"))

from clusterbench import config as cbconfig
from clusterbench.pipeline.adapter import unreadable

# A Snakemake whose internals clusterbench reads are not where they were: refused now, naming
# its version and the releases clusterbench runs with (clusterbench.pipeline.adapter).
_unreadable = unreadable(workflow, CHECKOUT / "pyproject.toml")
if _unreadable:
    raise WorkflowError(_unreadable)
from clusterbench.pipeline import interrupt
from clusterbench.core import preemption
from clusterbench.pipeline import Pipeline, SnakemakeAdapter, software
from clusterbench.pipeline.commands import dir_of, evaluate_dirs
from clusterbench.pipeline.layout import stored_files
from clusterbench.pipeline.resources import TRAIN_RESOURCE_KEYS

# SIGINT to Snakemake alone stops the training launchers (and so their ranks) at once: Snakemake
# itself would wait for them to finish (see clusterbench.pipeline.interrupt).
interrupt.install()

#: The default config, relative to the working directory (as Snakemake reads `configfile:`);
#: `--configfile` files are merged over it. Skipped in a module given `config:`.
DEFAULT_CONFIGFILE = "config/config.yaml"
# Snakemake reads config files (`--configfile` before this file runs) with its own loader, which
# names no file and no line, keeps the later of a key given twice without a word and has no size
# limit: the workflow reads them again, and this one before Snakemake does (see
# clusterbench.config.files).
if not workflow.modifier.skip_configfile:
    try:
        cbconfig.check_files([DEFAULT_CONFIGFILE, *workflow.overwrite_configfiles])
    except cbconfig.ConfigError as exc:
        raise WorkflowError(str(exc)) from None


configfile: DEFAULT_CONFIGFILE


try:
    # `--config KEY=VALUE` lists and mappings read as YAML (Snakemake keeps their values as text)
    CFG = cbconfig.validate(
        config
        if workflow.modifier.skip_configfile
        else cbconfig.with_config_args(config, workflow.config_settings.config_args)
    )
except cbconfig.ConfigError as exc:
    raise WorkflowError(str(exc)) from None

#: The workflow's logic (clusterbench.pipeline), over this Snakefile's `workflow` and `rules`
#: (a module's own, under their module names).
PIPELINE = Pipeline(CFG, SnakemakeAdapter(workflow, rules), CHECKOUT)
RUNS = PIPELINE.runs
# A Horovod run in an install without Horovod: refused now, before any job, naming the runs
# and how to install it (clusterbench.pipeline.software).
_missing = software.missing(RUNS)
if _missing and not workflow.remote_exec:
    raise WorkflowError(_missing)
DATASETS = PIPELINE.datasets
#: The datasets generated where they train (format synthetic, synthetic-text): no arrays, their
#: preprocessing writes meta.json alone (rules/preprocess.smk).
SYNTHETIC = PIPELINE.synthetic

# Jobs (local ones, and cluster jobs, which parse this file again) run `python` and the package
# of this Snakemake's own environment; download and checkpoint settings reach them from here.
os.environ.update(PIPELINE.environment())

if workflow.remote_exec:
    # This Snakemake runs a job on a cluster node, in the job's processes with the ranks: a
    # scheduler's preemption warning (Slurm's --signal=B:USR1@N, passed on to the job by the
    # profile's batch-shell stand-in; srun passes it on to its step; SGE's -notify goes to the
    # job) must not kill it or the rule's shell, which inherits this; the launcher and the
    # ranks install their own handlers for it.
    preemption.ignore()

#: Every rule runs in this software environment (see tools/setup.sh for the venv equivalent).
SOFTWARE = "../workflow/envs/clusterbench.yaml"

script = PIPELINE.script
#: A path in the working directory (under a module's prefix), as Snakemake reads the rules' files.
IN_WORKDIR = PIPELINE.adapter.in_workdir


def stage_code(*stages):
    """The code stamp of ``stages``: one input of the stage's jobs (clusterbench.pipeline.code),
    in the working directory, ``local``: a module's prefix does not apply to it."""
    return local(PIPELINE.stage_code(*stages))


run_of = PIPELINE.run_of

#: The download runs on the submit host (its `localrule:`) unless CLUSTERBENCH_REMOTE_DOWNLOAD=1:
#: compute nodes often have no internet. The report always does (rules/report.smk).
LOCAL_DOWNLOAD = not PIPELINE.remote_download()


def alternatives(names):
    """A wildcard constraint matching exactly ``names``: a name may contain ``.``; none, if
    there are none (an empty constraint would be no constraint)."""
    return "|".join(re.escape(name) for name in names) or "(?!)"


#: Every file of the preprocessed dataset, as its storage has it (clusterbench.config.storage).
data_files = PIPELINE.data_files
#: The datasets stored as files (an image folder a run streams, or one read in place), those
#: whose files are extracted (a .tar.gz's), and those stored as arrays (synthetic ones have
#: none of these): the preprocess rules of each (rules/preprocess.smk).
FILE_DATASETS = [d for d in DATASETS if PIPELINE.storages[d] == "files"]
EXTRACTED_DATASETS = [d for d in DATASETS if PIPELINE.storages[d] == "extracted"]
ARRAY_DATASETS = [d for d in DATASETS if PIPELINE.storages[d] == "arrays"]


# `run` matches any file name: the config's runs are checked by the train rule's input
# (Pipeline.known_run). An alternation of every run name (exact, but as long as all of them)
# made Snakemake's job graph quadratic in the runs: it is part of every path pattern it reads.
wildcard_constraints:
    dataset=alternatives(DATASETS),
    run="[^/]+",


# A directory a command needs comes from the rule's own input or output paths (dir_of), never
# from a literal: Snakemake puts a module's `prefix:` in front of input, output, log and
# benchmark paths, but not of params.
def dirs_of(paths):
    """The directories of ``paths``, each once, in order."""
    return list(dict.fromkeys(dir_of(path) for path in paths))
