"""Shared fixtures: the repository, running the workflow in a scratch directory."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.clusters.fixtures import sge_cluster, slurm_cluster, ssh_hosts  # noqa: F401

REPO = Path(__file__).resolve().parent.parent

#: make test's workers (pytest-xdist) share the machine's cores, each running trainings. A rank
#: alone takes every CPU for its torch threads (clusterbench.training.device.cpu_threads, right
#: for a benchmark on its own node), and two such OpenMP teams on 2 cores spin against each
#: other: a test that takes 12 s alone took 88 s beside a copy of itself, and 11 s with one
#: thread each. So a worker's processes get one thread each (Snakemake's jobs get their rule's
#: threads, as ever).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import archives` etc. from tests/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gpu_check as _gpu_check  # noqa: E402
from snakemake_forks import Server  # noqa: E402


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


#: The fixtures that start the test clusters (their tests share them), and the group of make
#: test's workers their tests run in: the Slurm tests in one (one Slurm per machine: it needs
#: /etc/slurm/slurm.conf), the SGE tests in another (a cell of its own root and ports can run
#: beside another), the ssh hosts' (two network namespaces) in a third. A test that needs
#: Slurm and another cluster goes with Slurm's (:data:`FIRST`).
CLUSTER_FIXTURES = {
    "slurm_cluster": "slurm-cluster",
    "sge_cluster": "sge-cell",
    "ssh_hosts": "ssh-hosts",
}
#: Which group a test that uses several clusters goes to: the first of these it uses.
FIRST = ("slurm-cluster", "sge-cell", "ssh-hosts")
#: The longest groups, longest first (seconds summed over a group's tests in make test on
#: 2026-11-27, fresh clone at 12915a8: Slurm's 934, SGE's 369, then 340 down to 37; the groups
#: not listed took 25 s or less). A worker takes the next group in collection order when it is
#: free (make test's --no-loadscope-reorder turns off pytest-xdist's own order, the groups of
#: most tests first, which left the demo's 2 tests to the end: 3 minutes alone, the other
#: worker idle), so these go first, and the last to start are short. A group not listed
#: follows, in collection order; a stale entry costs minutes, never a result.
LONGEST_FIRST = (
    "slurm-cluster",
    "sge-cell",
    "tests/test_workflow.py",
    "tests/test_demo.py",
    "tests/test_resume.py",
    "tests/test_examples.py",
    "tests/test_versions.py",
    "tests/test_integrity.py",
    "tests/test_dist.py",
    "tests/test_workloads.py",
    "ssh-hosts",
    "tests/test_gpu_check.py",
    "tests/test_report.py",
    "tests/test_in_place_workflow.py",
    "tests/test_streaming.py",
    "tests/test_own_model.py",
    "tests/test_elastic.py",
    "tests/test_uneven_workers.py",
    "tests/test_train.py",
    "tests/test_comm_stage.py",
    "tests/test_experiments_workflow.py",
    "tests/test_launch_signals.py",
    "tests/test_bad_input.py",
    "tests/test_doc_examples.py",
    "tests/test_deploy.py",
    "tests/test_step_times.py",
    "tests/test_image_folder_workflow.py",
    "tests/test_report_designs.py",
    "tests/test_module.py",
    "tests/test_compression.py",
    "tests/test_launch.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "loadgroup", False):  # a make test worker (pytest-xdist)
        for item in items:
            group_for_workers(item)
        items.sort(key=longest_first)
    for item in items:  # a test that uses a test cluster is in that cluster's tier
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in CLUSTER_TIERS:
                item.add_marker(CLUSTER_TIERS[fixture])
    for tier, reason in skipped_tiers().items():
        skip = pytest.mark.skip(reason=f"tier {tier}: {reason}")
        for item in items:
            if tier in item.keywords:
                item.add_marker(skip)


#: The tier (marker) of the tests that use each test cluster's fixture.
CLUSTER_TIERS = {"slurm_cluster": "slurm", "sge_cluster": "sge", "ssh_hosts": "ssh"}


#: Why each tier of tests cannot run here, by the marker of its tests.
TIER_NEEDS = {
    "gpu": (lambda: _has_cuda(), "needs a CUDA GPU (none on this machine)"),
    "horovod": (
        lambda: importlib.util.find_spec("horovod") is not None,
        "needs Horovod, not installed in this environment (make setup HOROVOD=1)",
    ),
    **{
        tier: (
            lambda: os.geteuid() == 0,
            f"needs root: the test {what} are installed from Debian's packages and started as "
            "root (run make test as root, or in a container)",
        )
        for tier, what in (
            ("slurm", "Slurm's daemons (slurmctld, slurmd, munged, slurmdbd, MariaDB)"),
            ("sge", "SGE cell's daemons (sge_qmaster, sge_execd)"),
            ("ssh", "ssh hosts (network namespaces, each with an sshd)"),
        )
    },
}


def skipped_tiers() -> dict[str, str]:
    """The tiers of tests that cannot run here, and why (:data:`TIER_NEEDS`)."""
    return {tier: why for tier, (can, why) in TIER_NEEDS.items() if not can()}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per tier of tests skipped here, and why (the workers' skips say it per test)."""
    for tier, why in skipped_tiers().items():
        terminalreporter.write_line(f"skipped tier {tier}: {why}")


def group_for_workers(item) -> None:
    """``item``'s group among ``make test``'s workers (pytest-xdist's ``--dist loadgroup``):
    every test that uses a test cluster in its cluster's group (:data:`CLUSTER_FIXTURES`), on
    one worker (a cluster is one per machine, and started once per worker); every other test
    with its module (its module-scoped fixtures, whole workflow runs, are made once).

    The group goes where pytest-xdist's scheduler reads it, the node id's ``@group`` suffix.
    pytest-xdist 3.8 sets it from ``xdist_group`` marks through ``item._nodeid``, which pytest
    9 no longer reads (its node id is ``item._id``): so it is set here, as pytest-xdist means
    to, for the pinned pytest."""
    from _pytest.nodeid import NodeId

    used = [CLUSTER_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in CLUSTER_FIXTURES]
    group = min(used, key=FIRST.index) if used else item.nodeid.split("::")[0]
    if "@" not in item.nodeid:
        item._id = NodeId.parse(f"{item.nodeid}@{group}")


def longest_first(item) -> int:
    """Where ``item``'s group goes in the order of :data:`LONGEST_FIRST` (a stable sort)."""
    group = item.nodeid.rpartition("@")[2]
    return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


#: What a checkout needs to run the workflow (see :func:`copy_checkout`).
CHECKOUT_PARTS = ("Snakefile", "rules", "scripts", "workflow", "profiles", "config")


def copy_checkout(dest: Path) -> Path:
    """A copy of the workflow at ``dest``: tests that edit its code edit the copy, never the
    repository (jobs import the package of the checkout they run from: rules/common.smk)."""
    import shutil

    for part in CHECKOUT_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / part)
    return dest


#: The comm stage at tiny sizes, for a workflow test that is not about it: `make gpu-check
#: --cpu-smoke`'s (up to 64 KiB; the stage's defaults, up to 256 MiB at 0.2 s a size, take
#: about a minute a job on 2 cores).
TINY_COMM = _gpu_check.CPU_SMOKE["comm"]

#: How the tests start Snakemake: as ``python -m snakemake``, with the executor plugins' status
#: polls kept at ``--seconds-between-status-checks`` (:mod:`tests.clusters.steady_polls`).
SNAKEMAKE = [sys.executable, str(REPO / "tests" / "clusters" / "steady_polls.py")]
#: Snakemake as a user starts it (the tests whose runs need no steady polls); run_snakemake
#: forks a run started so, as one started as :data:`SNAKEMAKE`.
PYTHON_M_SNAKEMAKE = [sys.executable, "-m", "snakemake"]
#: The cluster tests' status polls: every second (the test clusters' jobs last seconds).
POLL = ["--seconds-between-status-checks", "1"]
SLURM_POLL = [*POLL, "--slurm-init-seconds-before-status-checks", "1"]
SGE_POLL = [*POLL, "--sge-init-seconds-before-status-checks", "1"]


def snakemake_cmd(workdir: Path, *args: str, repo: Path = REPO) -> list[str]:
    """Command line running ``repo``'s Snakefile in ``workdir`` on its config.yaml."""
    return [*SNAKEMAKE, *snakemake_args(workdir, *args, repo=repo)]


def snakemake_args(workdir: Path, *args: str, repo: Path = REPO) -> list[str]:
    """:func:`snakemake_cmd`'s arguments (for a command that passes them on to Snakemake)."""
    return [
        "--snakefile",
        str(repo / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        *args,
    ]


def default_sigint() -> None:
    """``preexec_fn`` for a process a test sends SIGINT to: SIGINT restored to its default, on
    which Python installs its KeyboardInterrupt handler. A pytest started in the background by a
    shell without job control inherits SIGINT ignored, and so would the process."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def snakemake_env(env=None) -> dict[str, str]:
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    return full_env


def popen_snakemake(cmd: list[str], env: dict, *, new_session: bool = False) -> subprocess.Popen:
    """``snakemake`` (``cmd``) started in the background from the repository, its output in one
    pipe; with ``new_session``, in a session of its own (a test can kill its whole group). Its
    SIGINT is a user's (:func:`default_sigint`): tests interrupt it."""
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=snakemake_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=new_session,
        preexec_fn=default_sigint,
    )


#: This worker's Snakemake fork server (tests/snakemake_forks.py): the runs of
#: :func:`run_snakemake` started as :data:`SNAKEMAKE` pay for Snakemake's imports once.
SNAKEMAKE_FORKS = Server()


def run_snakemake(cmd: list[str], cwd: Path, results: Path, check: bool, timeout, env):
    """Run a snakemake command line; with ``check``, a failure shows its output and the job
    logs under ``results``. One started as :data:`SNAKEMAKE` or ``python -m snakemake`` runs in
    a process forked from :data:`SNAKEMAKE_FORKS` (the same Snakemake, its imports already made;
    the steady polls change nothing without a remote executor)."""
    prefix = next((p for p in (SNAKEMAKE, PYTHON_M_SNAKEMAKE) if cmd[: len(p)] == p), None)
    if prefix is not None:
        proc = SNAKEMAKE_FORKS.run(cmd[len(prefix) :], cwd, snakemake_env(env), timeout)
    else:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=snakemake_env(env)
        )
    if check and proc.returncode != 0:
        logs = "\n".join(
            f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted(results.glob("logs/*/*"))
        )
        raise AssertionError(
            f"{' '.join(cmd[2:])} failed ({proc.returncode}):\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}\n{logs}"
        )
    return proc


def snakemake(
    workdir: Path,
    *args: str,
    check: bool = True,
    timeout: float = 900,
    env=None,
    repo: Path = REPO,
):
    """Run ``repo``'s Snakefile (this repository's by default) in working directory ``workdir``."""
    cmd = snakemake_cmd(workdir, *args, repo=repo)
    return run_snakemake(cmd, repo, workdir / "results", check, timeout, env)


def pdf_text(path: Path, layout: bool = True) -> str:
    """The text of the PDF at ``path`` (poppler's pdftotext); the test is skipped where it is
    missing (make test installs poppler-utils as root; a user without root may lack it)."""
    if shutil.which("pdftotext") is None:
        pytest.skip(
            "tier pdf: pdftotext (poppler-utils) not installed, and installing it needs root"
        )
    flags = ["-layout"] if layout else []
    return subprocess.run(
        ["pdftotext", *flags, str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def write_config(workdir: Path, cfg: dict) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def default_config() -> dict:
    """The configuration most tests start from (tests/base_config.yaml: four hand-written runs);
    the demo's own, config/config.yaml, is :func:`demo_config`."""
    return yaml.safe_load((Path(__file__).resolve().parent / "base_config.yaml").read_text())


def demo_config() -> dict:
    """config/config.yaml: what `make demo` runs."""
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch working directory whose dataset cache is private to the test."""
    return tmp_path / "work"


@pytest.fixture(scope="session")
def dataset_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dataset-cache")


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


@pytest.fixture
def server():
    """A real HTTP server on loopback whose routes can fail on purpose (tests/test_download.py)."""
    from test_download import FaultServer

    srv = FaultServer()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
