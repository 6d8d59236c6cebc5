# Shared set-up: the config, and the workflow's logic (clusterbench.pipeline) the rules call.
# Imports nothing heavy, and does little: this file is parsed again in every cluster job.
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError


def _uri(source):
    """A Snakemake source file's path or URI (Snakemake 9.x added ``secret_free``)."""
    try:
        return source.get_path_or_uri(secret_free=True)
    except TypeError:
        return source.get_path_or_uri()


def _git_source(basedir):
    """(repository folder, ref, this folder's path in it) of a folder of a git source: a
    module's ``gitfile(...)`` (a local repository) or ``github(...)``/``gitlab(...)`` (the
    clone Snakemake keeps in its cache)."""
    if hasattr(basedir, "repo_path"):
        return Path(basedir.repo_path), basedir.ref, basedir.path
    hosted = getattr(basedir, "hosted_repo", None)
    if hosted is not None:
        return Path(hosted.repo.git_dir), basedir.ref, basedir.path
    raise WorkflowError(
        f"clusterbench's rules are read from {_uri(basedir)}: clusterbench runs from a "
        "local checkout or from a git source (a module whose snakefile is gitfile(...), "
        "github(...) or gitlab(...) at a tag); see docs/running.md"
    )


def _local_copy(basedir):
    """The tree of the git source ``basedir`` is a folder of (the checkout: its parent) at
    its ref, as a local folder: ``.snakemake/clusterbench/source/<commit>`` in the working
    directory, made once per commit (atomically: a ``.complete`` file, then a rename), its
    files dated when they were made, so that a new commit makes the stages whose code changed
    stale, as an edit of a checkout does (clusterbench.pipeline.code)."""
    import io
    import shutil
    import subprocess
    import tarfile

    repo, ref, path = _git_source(basedir)
    tree = os.path.dirname(path.strip("/"))

    def git(*args):
        try:
            return subprocess.run(
                ["git", "-C", str(repo), *args], capture_output=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", b"") or str(exc).encode()
            raise WorkflowError(
                f"clusterbench's code at {ref} in {repo}: git {args[0]} failed: "
                f"{detail.decode(errors='replace').strip()}"
            ) from None

    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()
    dest = Path(".snakemake", "clusterbench", "source", commit).resolve()
    if (dest / ".complete").is_file():
        return dest
    made = dest.with_name(f"{commit}.{os.getpid()}.tmp")
    shutil.rmtree(made, ignore_errors=True)
    archive = git("archive", "--format=tar", f"{commit}:{tree}" if tree else commit)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(
            made, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {})
        )
    for file in made.rglob("*"):
        os.utime(file)
    (made / ".complete").write_text(f"{ref} {commit}\n")
    try:
        os.rename(made, dest)
    except OSError:  # made meanwhile by another process: theirs is as good
        shutil.rmtree(made, ignore_errors=True)
    return dest


def _checkout(basedir):
    """The clusterbench checkout this file is part of, as a local folder: its parent folder
    (never ``workflow.basedir``, the folder of the *main* Snakefile: the including workflow's
    in a module). A local path as it is; a git source as its local copy (:func:`_local_copy`),
    which a cluster job's Snakemake finds in ``CLUSTERBENCH_HOME`` (set by the workflow for
    its jobs: clusterbench.pipeline.Pipeline.environment)."""
    if type(basedir).__name__ == "LocalSourceFile":
        return Path(_uri(basedir)).resolve().parent
    home = os.environ.get("CLUSTERBENCH_HOME")
    if workflow.remote_exec and home and (Path(home) / ".complete").is_file():
        return Path(home)
    return _local_copy(basedir)


#: The clusterbench checkout: local files (scripts and stage modules are inputs).
CHECKOUT = _checkout(workflow.current_basedir)

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
