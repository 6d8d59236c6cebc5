# Shared set-up: config validation, run lookup, helpers. Imports nothing heavy: this file is
# parsed again in every cluster job.
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

#: The clusterbench checkout: the parent of this file's directory. Not ``workflow.basedir``,
#: which is the directory of the *main* Snakefile: that of the consuming workflow when
#: clusterbench is a Snakemake module. A local path: scripts and stage modules are inputs.
CHECKOUT = Path(workflow.current_basedir.get_path_or_uri(secret_free=False)).parent
if not CHECKOUT.is_dir():
    raise WorkflowError(
        f"clusterbench must be a local checkout (module snakefile: a local path), not {CHECKOUT}"
    )

# Make the package importable even from a snakemake that is not the project's venv.
sys.path.insert(0, str(CHECKOUT / "workflow"))

from clusterbench import comm_jobs
from clusterbench import config as cbconfig
from clusterbench import integrity, interrupt, preemption
from clusterbench.data import storage
from clusterbench.resources import TRAIN_RESOURCE_KEYS, train_resources

# SIGINT to Snakemake alone stops the training launchers (and so their ranks) at once: Snakemake
# itself would wait for them to finish (see clusterbench.interrupt).
interrupt.install()

#: The default config, relative to the working directory (as Snakemake reads `configfile:`);
#: `--configfile` files are merged over it. Skipped in a module given `config:`.
DEFAULT_CONFIGFILE = "config/config.yaml"
# Snakemake reads config files (`--configfile` before this file runs) with its own loader, which
# names no file and no line, keeps the later of a key given twice without a word and has no size
# limit: the workflow reads them again, and this one before Snakemake does (see
# clusterbench.config_file).
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
    PYTHONPATH=prepend_path("PYTHONPATH", str(CHECKOUT / "workflow")),
    CLUSTERBENCH_HOME=str(CHECKOUT),
    CLUSTERBENCH_DOWNLOAD=cbconfig.canonical_json(CFG["download"]),
    # likewise the checkpoints settings (clusterbench.checkpoints reads them)
    CLUSTERBENCH_CHECKPOINTS=cbconfig.canonical_json(CFG["checkpoints"]),
)
# the site label runs record (clusterbench.train); unset: the launcher asks the scheduler
if CFG["site"]:
    os.environ.update(CLUSTERBENCH_SITE=CFG["site"])
#: Every rule runs in this software environment (see tools/setup.sh for the venv equivalent).
SOFTWARE = "../workflow/envs/clusterbench.yaml"


def script(stage):
    """The entry point ``scripts/<stage>.py``: an input, so editing it reruns the stage."""
    return str(CHECKOUT / "scripts" / f"{stage}.py")


def stage_module(stage):
    """The stage's own module ``workflow/clusterbench/<stage>.py``, or every module of its
    package ``workflow/clusterbench/<stage>/``: inputs, so editing them reruns the stage and
    what follows (the shared modules it imports are no input)."""
    package = CHECKOUT / "workflow" / "clusterbench" / stage
    if package.is_dir():
        return sorted(str(path) for path in package.glob("*.py"))
    return str(package.with_suffix(".py"))


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


def elastic_options(run):
    """The launcher's ``--min-np``/``--max-np`` for an elastic run ("" otherwise)."""
    if not cbconfig.is_elastic(run):
        return ""
    low, high = cbconfig.worker_bounds(run)
    return f"--min-np {low} --max-np {high} "


def data_dir(dataset):
    return f"results/data/{dataset}"


# A directory a command needs comes from the rule's own input or output paths, never from a
# literal: Snakemake puts a module's `prefix:` in front of input, output, log and benchmark paths,
# but not of params.
def dir_of(path):
    """The directory of ``path`` (an input or output file of the job)."""
    return os.path.dirname(str(path))


def dirs_of(paths):
    """The directories of ``paths``, each once, in order."""
    return list(dict.fromkeys(dir_of(path) for path in paths))


def stored_files(dataset, stored):
    """Every file of a preprocessed dataset stored as ``stored`` (arrays, or an image folder's
    files: clusterbench.data.storage); meta.json (written last) comes last."""
    return [f"{data_dir(dataset)}/{name}" for name in storage.data_files(stored)]


def data_files(dataset):
    """Every file of the preprocessed ``dataset``, as its storage has it."""
    return stored_files(dataset, CFG["datasets"][dataset]["storage"])


#: The datasets stored as files (an image folder a run streams), and those stored as arrays:
#: the preprocess rules of each (rules/preprocess.smk).
FILE_DATASETS = [d for d in DATASETS if CFG["datasets"][d]["storage"] == "files"]
ARRAY_DATASETS = [d for d in DATASETS if d not in FILE_DATASETS]


#: A path as the rules declare it (relative to the working directory) -> the path Snakemake
#: uses: with the `prefix:` (or `replace_prefix:`) of a module that includes this workflow,
#: which Snakemake puts in front of input, output and log paths but never of a path the code
#: builds. Taken now, while this file is parsed: later (in an input function) the including
#: workflow's own modifier is the current one.
IN_WORKDIR = workflow.modifier.path_modifier.replace_prefix

#: The sha256 of checked files, kept by size and times in Snakemake's folder of the working
#: directory: the checks run at every invocation and must not read every file every time.
CHECKSUMS = integrity.DigestCache(Path(".snakemake", "clusterbench", "checksums.json"))


def check_recorded_files(marker):
    """Before any job: the files ``marker`` (meta.json) recorded checksums of must be intact; a
    damaged or missing one stops the workflow with the command that makes it again (remove the
    marker: clusterbench.integrity.remake_command), instead of being used. At parse time:
    Snakemake passes over an error an input function raises for a file that exists, and
    Snakemake itself would only rerun the steps after a damaged file."""
    try:
        integrity.check(
            Path(marker), "files", integrity.remake_command(marker), cache=CHECKSUMS
        )
    except integrity.DamagedFile as exc:
        raise WorkflowError(str(exc)) from None
    finally:
        CHECKSUMS.save()


if workflow.is_main_process:
    for _dataset in DATASETS:
        check_recorded_files(IN_WORKDIR(f"{data_dir(_dataset)}/meta.json"))

if workflow.remote_exec:
    # This Snakemake runs a job on a cluster node, in the job's processes with the ranks: a
    # scheduler's preemption warning (Slurm's --signal=B:USR1@N, passed on to the job by the
    # profile's batch-shell stand-in; srun passes it on to its step; SGE's -notify goes to the
    # job) must not kill it or the rule's shell, which inherits this; the launcher and the
    # ranks install their own handlers for it.
    preemption.ignore()

#: The datasets whose raw files this process has checked (each once).
RAW_CHECKED = set()


def raw_files_intact(wildcards):
    """Input function of the download step; it adds no file. A raw file that its
    MANIFEST.json (the download's output) recorded and that is missing or damaged makes the
    download run again, and so everything after it:

    - a real run sets the manifest aside (``MANIFEST.json.damaged``: nothing is deleted), warns
      naming the file, and forces the download (as ``--forcerun`` would), which fetches the
      files again (from the cache, verified, or the network). Until a download has written a
      new manifest (it may fail, or the run be stopped), the next run forces it again;
    - a dry run (and ``--touch``, ``--report``, ...) changes nothing on disk, and warns what a
      real run will do; its plan shows the download, forced.

    Forced: Snakemake 9 reruns no job for its missing output (the manifest set aside) while the
    jobs after it are complete. Here, not at parse time: whether this is a dry run is known only
    once the executor is chosen, and the files to force only once the job graph is built;
    Snakemake calls input functions while it builds the graph, before it decides what runs.
    Only in the main process: cluster jobs parse and build their graph again.
    """
    dataset = wildcards.dataset
    if not workflow.is_main_process or dataset in RAW_CHECKED:
        return []
    RAW_CHECKED.add(dataset)
    manifest = Path(IN_WORKDIR(f"results/raw/{dataset}/MANIFEST.json"))
    try:
        found = integrity.recorded_problems(
            manifest, "files", cache=CHECKSUMS, strict=True
        )
    finally:
        CHECKSUMS.save()
    copies = integrity.set_aside_copies(manifest)
    if found:
        damage = f"{'; '.join(found)} (checked against {manifest})"
    elif copies and not manifest.exists():
        damage = (
            f"{manifest} was set aside as damaged ({copies[-1]}) and no download has made "
            "it again yet"
        )
    else:
        return []
    # The outputs whose jobs Snakemake forces: those --forcerun names.
    forced = getattr(workflow.dag, "forcefiles", None)
    touch = getattr(workflow, "touch", False)
    executing = (
        workflow.executor_plugin is not None and not touch
    )  # a plan to run or show
    real_run = executing and not getattr(workflow, "dryrun", True)  # unknown: as if dry
    if not isinstance(forced, set):  # another Snakemake: name the command, as before
        if real_run:
            raise WorkflowError(
                f"{damage}. Make it again with: {integrity.remake_command(manifest)}"
            )
    elif executing:
        forced.add(str(manifest))
    if not real_run:
        aside = f"sets {manifest} aside (as {integrity.next_aside(manifest)}) and "
        logger.warning(
            f"{damage}: a real run {aside if manifest.exists() else ''}downloads "
            f"{dataset} again, and runs what follows; this run changes nothing"
        )
        return []
    aside = ""
    if manifest.exists():
        try:
            aside = f"set {manifest} aside as {integrity.set_aside(manifest)}; "
        except OSError as exc:
            raise WorkflowError(
                f"{damage}, and {manifest} cannot be set aside to download {dataset} "
                f"again: {exc}"
            ) from None
    logger.warning(
        f"{damage}: {aside}the download of {dataset} runs again, and what follows it"
    )
    return []


#: Each run's training resources, computed once (see clusterbench.resources).
TRAIN_RESOURCES = {name: train_resources(run) for name, run in RUNS.items()}


def train_resource(key):
    """Resource ``key`` of the train job of ``wildcards.run`` (None: not used by this run)."""
    return lambda wildcards: TRAIN_RESOURCES[wildcards.run].get(key)


#: The comm jobs by name (clusterbench.comm_jobs: one per multi-worker environment and backend;
#: none with comm.enabled: false), and each one's resources: a train job's of its size.
COMM_JOBS = comm_jobs.config_jobs(CFG)
COMM_RESOURCES = {
    name: train_resources(comm_jobs.job_run(job, RUNS[job.runs[0]], CFG["comm"]))
    for name, job in COMM_JOBS.items()
}


def comm_resource(key):
    """Resource ``key`` of the comm job ``wildcards.comm`` (None: not used by it)."""
    return lambda wildcards: COMM_RESOURCES[wildcards.comm].get(key)


def comm_files(pattern, runs):
    """``pattern`` for every comm job measuring for one of ``runs`` (its ``{name}``)."""
    return [
        pattern.format(name=name) for name in comm_jobs.jobs_of_runs(COMM_JOBS, runs)
    ]


#: Why each run cannot run where this workflow runs (run -> reason), decided once per process
#: (see unavailable_runs); None until then.
UNAVAILABLE = {}


def planned_executor():
    """``(executor, planning)``: the executor whose limits decide which runs are skipped, and
    whether this Snakemake only plans (a dry run, ``--touch``, ``--report``: no executor of its
    own). Then ``CLUSTERBENCH_EXECUTOR`` names the executor to plan for (``make plan`` sets it
    from the profile), else the local one."""
    from clusterbench.launch.schedulers import SCHEDULERS

    plugin = workflow.executor_plugin
    if plugin is not None and plugin.name not in ("dryrun", "touch"):
        return plugin.name, False
    name = os.environ.get("CLUSTERBENCH_EXECUTOR") or "local"
    if name not in SCHEDULERS:
        raise WorkflowError(
            f"environment variable CLUSTERBENCH_EXECUTOR={name!r}: expected one of "
            f"{', '.join(SCHEDULERS)} (the executor a dry run plans for)"
        )
    return name, True


def train_job_resources(name, keys):
    """The rule resources ``keys`` of run ``name``'s train job as it would be submitted (the
    profile's defaults and ``--set-resources`` included, under the module's rule name if any);
    only those are evaluated."""
    train = rules.train.rule
    return train.expand_resources(
        {"run": name},
        [],
        attempt=1,
        skip_evaluation=set(train.resources.keys()) - {"_cores", *keys},
    )


def unavailable_runs():
    """Run -> why it cannot run under this executor: the pre-flight check of the executor's
    scheduler (clusterbench.preflight; each scheduler's own in
    clusterbench.launch.schedulers.<name>: local cores and GPUs, Slurm partitions from sinfo,
    SGE ``qsub -w v`` of the job), with the resources each train job would be submitted with.

    A run with ``on_unavailable: fail`` stops the workflow before any job when a target needs
    it (refuse_failing); the others are skipped: a warning names each with its reason (a dry
    run lists them too, and ``make plan``), and they drop out of the report's inputs (and so of
    every target). Decided once, while the job graph is built (the report's input functions
    come first): only then is the executor known. Only in the main process: cluster jobs parse
    and build their graph again. Without an executor (``--report``) as the local one would
    decide.
    """
    if "runs" in UNAVAILABLE:
        return UNAVAILABLE["runs"]
    if not workflow.is_main_process:
        return {}
    from clusterbench import preflight
    from clusterbench.launch.schedulers import SCHEDULERS

    executor, planning = planned_executor()
    scheduler = SCHEDULERS.get(executor)
    if scheduler is None or scheduler.cluster:  # jobs parse the config again elsewhere
        refuse_submit_host_cores()
    context = preflight.PreflightContext(
        runs=RUNS,
        resources=train_job_resources,
        # a dry run's --cores is 1 whatever the profile says: plan with the machine's
        cores=None if planning else (workflow.resource_settings.cores or 1),
        executor_settings=getattr(workflow, "executor_settings", None),
    )
    reasons = {}
    try:
        reasons = preflight.unavailable(executor, context)
    except preflight.PreflightError as exc:
        if not planning:
            raise WorkflowError(str(exc)) from None
        logger.warning(f"the plan cannot check the {executor} limits: {exc}")
    for name, reason in reasons.items():
        if RUNS[name]["on_unavailable"] == "skip":
            logger.warning(f"skipping run {name!r}: {reason}")
    UNAVAILABLE["runs"] = reasons
    return reasons


def refuse_submit_host_cores():
    """Runs whose environment preset takes ``workers: cores`` with ``cores_per_node: null``
    took this machine's cores: right for local jobs, wrong on a cluster, whose jobs parse the
    config again on a compute node (another count: another run). Stop, naming the key.
    """
    from clusterbench import experiments

    if CFG["environment_defaults"]["cores_per_node"] is not None:
        return
    presets = experiments.environments(CFG["environments"], CFG["environment_defaults"])
    runs = [
        name
        for name, run in RUNS.items()
        if run["environment"] is not None
        and presets[run["environment"]]["workers"] == experiments.CORES
    ]
    if runs:
        raise WorkflowError(
            f"environment_defaults.cores_per_node: null takes the cores of this machine "
            f"({os.cpu_count()}) for {', '.join(map(repr, runs))}; on a cluster set it to the "
            "cores of a compute node (the jobs read the config again there)"
        )


def refuse_failing(names):
    """Stop, naming run and reason, if one of ``names`` cannot run here and has
    ``on_unavailable: fail``."""
    reasons = unavailable_runs()
    failing = [n for n in names if n in reasons and RUNS[n]["on_unavailable"] == "fail"]
    if failing:
        raise WorkflowError(
            "\n".join(reasons[n] for n in failing)
            + f"\n(on_unavailable: fail for {', '.join(map(repr, failing))}; with skip, "
            "such a run is left out and the rest goes on)"
        )


def available_runs():
    """The runs this workflow trains here: all but the skipped ones (see unavailable_runs).
    The report's input functions call it: a run with ``on_unavailable: fail`` that cannot run
    here stops the workflow, and so does a config none of whose runs can."""
    skipped = unavailable_runs()
    if workflow.executor_plugin is None:  # --report and the like: nothing runs
        return [name for name in RUNS if name not in skipped]
    refuse_failing(RUNS)
    if skipped and len(skipped) == len(RUNS):
        executor, _ = planned_executor()
        raise WorkflowError(
            f"no run can run under the {executor} executor here:\n"
            + "\n".join(skipped.values())
        )
    return [name for name in RUNS if name not in skipped]


def skipped_runs():
    """The skipped runs as the report takes them (``--skipped``): a list of ``{run, experiment,
    environment, point, reason}``, in the config's order."""
    skipped = unavailable_runs()
    return [
        {
            "run": name,
            "experiment": RUNS[name]["experiment"],
            "environment": RUNS[name]["environment"],
            "point": RUNS[name]["point"],
            "reason": skipped[name],
        }
        for name in RUNS
        if name in skipped
    ]


def report_benchmarks(runs):
    """The benchmark files of ``runs`` and of the datasets they use."""
    datasets = sorted({RUNS[run]["dataset"] for run in runs})
    return (
        expand("results/benchmarks/download/{dataset}.tsv", dataset=datasets)
        + expand("results/benchmarks/preprocess/{dataset}.tsv", dataset=datasets)
        + expand(
            "results/benchmarks/{rule}/{run}.tsv", rule=["train", "evaluate"], run=runs
        )
    )


def preflight(wildcards):
    """Input function of the train step; it adds no file. Refuses, before any job starts, a
    training job this executor could never run as asked (see unavailable_runs): one of a run
    with ``on_unavailable: fail`` (there), or one of a skipped run asked for by name.

    Snakemake calls input functions while it builds the job graph, after it has chosen the
    executor and before it runs any job. Not ``onstart``, which Snakemake ignores in a module;
    not at parse time, when the executor is not known yet. Only in the main process: cluster
    jobs parse and build their graph again (under the jobstep executor).
    """
    if not workflow.is_main_process or workflow.executor_plugin is None:
        return []
    refuse_failing([wildcards.run])
    reason = unavailable_runs().get(wildcards.run)
    if reason is not None:
        raise WorkflowError(
            f"{reason}\n(run {wildcards.run!r} is skipped here, and a target asks for it)"
        )
    return []
