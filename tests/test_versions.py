"""The Snakemake releases clusterbench runs with, oldest to newest, and Horovod as an option.

pyproject.toml states ranges for Snakemake and its executor plugins; make setup installs the
newest releases tested (tools/constraints.txt), with which the whole suite runs. Here the
oldest release of every range runs, in a venv of its own (tests/venvs.py): the demo's dry run,
the module test's dry run, and small real runs on this machine, on the test Slurm and on the
test SGE cell. That venv has no Horovod: the real runs are DDP runs of 2 workers, which is what
a site that benchmarks only DDP installs (``make setup HOROVOD=0``), and a Horovod run there is
refused before any job, naming how to install it. (The dry runs that plan Horovod runs use the
same releases with Horovod linked in.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from clusterbench.pipeline import adapter as adapter_mod
from conftest import (
    REPO,
    SGE_POLL,
    SLURM_POLL,
    default_config,
    demo_config,
    run_snakemake,
    snakemake_args,
    write_config,
)

sys.path.insert(0, str(REPO / "tools"))
import deps  # noqa: E402
import venvs  # noqa: E402

#: The packages whose range pyproject.toml states, and which run here at their oldest.
RANGED = (
    "snakemake",
    "snakemake-executor-plugin-slurm",
    "snakemake-executor-plugin-slurm-jobstep",
    "snakemake-executor-plugin-sge",
)
STEADY_POLLS = REPO / "tests" / "clusters" / "steady_polls.py"


# ------------------------------------------------------------------------------------------
# the ranges, stated once


def test_every_range_has_an_oldest_release_and_a_tested_newest_inside_it():
    from packaging.requirements import Requirement

    for name in RANGED:
        req = Requirement(deps.requirement(name))
        oldest, newest = deps.oldest(name), deps.pin(name)
        assert req.specifier.contains(oldest) and req.specifier.contains(newest), (name, req)
        assert not req.specifier.contains("10" if name == "snakemake" else "999"), req


def test_the_snakefile_asks_for_the_oldest_snakemake_of_the_range():
    text = (REPO / "workflow" / "Snakefile").read_text()
    assert f'min_version("{deps.oldest("snakemake")}")' in text


def test_the_version_is_written_in_one_place():
    import clusterbench

    with open(REPO / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "clusterbench.__version__"
    assert re.fullmatch(r"\d+\.\d+\.\d+", clusterbench.__version__)
    changelog = (REPO / "CHANGELOG.md").read_text()
    version = re.escape(clusterbench.__version__)
    assert re.search(rf"^## \[?{version}\]? - \d{{4}}-\d\d-\d\d$", changelog, re.M)


def test_a_snakemake_whose_internals_moved_is_refused_naming_its_version():
    """The adapter's parse-time check on a workflow object lacking what clusterbench reads."""
    import snakemake

    complete = SimpleNamespace(
        is_main_process=True,
        remote_exec=False,
        current_basedir="x",
        overwrite_configfiles=[],
        config_settings=SimpleNamespace(config_args=None),
        modifier=SimpleNamespace(
            skip_configfile=False, path_modifier=SimpleNamespace(replace_prefix=str)
        ),
        resource_settings=SimpleNamespace(cores=1),
    )
    assert adapter_mod.unreadable(complete) is None
    del complete.modifier.path_modifier
    message = adapter_mod.unreadable(complete, REPO / "pyproject.toml")
    assert message is not None
    assert snakemake.__version__ in message
    assert "modifier.path_modifier.replace_prefix" in message
    assert deps.requirement("snakemake") in message


# ------------------------------------------------------------------------------------------
# the oldest releases, in venvs of their own


def oldest_requirements() -> list[str]:
    return [f"{name}=={deps.oldest(name)}" for name in RANGED]


@pytest.fixture(scope="session")
def venv_base(tmp_path_factory) -> Path:
    """Where the venvs of this make test are made: shared by its pytest-xdist workers."""
    return tmp_path_factory.getbasetemp().parent / "venvs"


@pytest.fixture(scope="session")
def oldest(venv_base) -> Path:
    """The python of a venv with the oldest releases of the ranges (and Horovod)."""
    return venvs.with_releases(venv_base, "oldest", oldest_requirements())


@pytest.fixture(scope="session")
def oldest_ddp(venv_base, oldest) -> Path:
    """The same releases, without Horovod: a DDP-only install."""
    return venvs.without(venv_base, "oldest-ddp", ["horovod"], sites=[oldest])


def run_with(python: Path, workdir: Path, *args: str, check=True, env=None, timeout=900):
    """Snakemake of ``python``'s venv on the checkout, in ``workdir`` on its config.yaml."""
    cmd = [str(python), str(STEADY_POLLS), *snakemake_args(workdir, *args)]
    return run_snakemake(cmd, REPO, workdir / "results", check, timeout, env)


def installed(python: Path, name: str) -> str | None:
    out = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else None


@pytest.mark.slow
def test_the_venvs_hold_the_oldest_releases_and_the_ddp_one_no_horovod(oldest, oldest_ddp):
    for python in (oldest, oldest_ddp):
        for name in RANGED:
            assert installed(python, name) == deps.oldest(name) or installed(
                python, name
            ).startswith(deps.oldest(name) + "."), (python, name)
    assert installed(oldest, "horovod") == deps.pin("horovod")
    probe = subprocess.run([str(oldest_ddp), "-c", "import horovod"], capture_output=True)
    assert probe.returncode != 0


@pytest.mark.slow
def test_the_demos_dry_run_with_the_oldest_releases(oldest, tmp_path):
    workdir = tmp_path / "demo"
    write_config(workdir, demo_config())
    out = run_with(oldest, workdir, "--dry-run", "--cores", "2").stdout
    for rule in ("download", "preprocess", "train", "comm", "evaluate", "report", "best"):
        assert re.search(rf"^rule {rule}:$", out, re.MULTILINE) or f"\n{rule} " in out, rule
    assert not (workdir / "results").exists()


@pytest.mark.slow
def test_the_module_dry_run_with_the_oldest_releases(oldest, tmp_path):
    from test_module import PREFIX, RUN, bench_config, write_consumer

    consumer = write_consumer(tmp_path / "consumer", bench_config(tmp_path / "cache"))
    cmd = [str(oldest), "-m", "snakemake", "--dry-run", "--printshellcmds", "--cores", "1"]
    out = run_snakemake(cmd, consumer, consumer / PREFIX / "results", True, 600, None).stdout
    assert "rule bench_train:" in out
    assert f"{PREFIX}/results/runs/{RUN}/run.json" in out


def ddp_config(workdir: Path, name: str) -> dict:
    """Two DDP workers on the digits, 2 epochs, nothing but training asked for."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["run_defaults"].update(epochs=2, runtime=10)
    cfg["runs"] = [{"name": name, "dataset": "digits", "workers": 2, "backend": "ddp"}]
    write_config(workdir, cfg)
    return cfg


def trained(workdir: Path, name: str, scheduler: str) -> dict:
    info = json.loads((workdir / "results" / "runs" / name / "run.json").read_text())
    assert info["world"]["backend"] == "ddp" and info["world"]["size"] == 2, info["world"]
    assert info["world"]["scheduler"] == scheduler, info["world"]
    metrics = (workdir / "results" / "runs" / name / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 2
    return info


@pytest.mark.slow
def test_ddp_trains_two_workers_here_without_horovod_on_the_oldest_releases(oldest_ddp, tmp_path):
    workdir = tmp_path / "w"
    ddp_config(workdir, "ddp-2w")
    run_with(oldest_ddp, workdir, "--profile", str(REPO / "profiles" / "local"),
             "results/runs/ddp-2w/run.json")  # fmt: skip
    trained(workdir, "ddp-2w", "local")


@pytest.mark.slow
def test_a_horovod_run_without_horovod_is_refused_before_any_job(oldest_ddp, tmp_path):
    workdir = tmp_path / "w"
    cfg = ddp_config(workdir, "ddp-2w")
    cfg["runs"].append({"name": "hvd-2w", "dataset": "digits", "workers": 2})  # the default
    write_config(workdir, cfg)
    proc = run_with(oldest_ddp, workdir, "--dry-run", "--cores", "2", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "hvd-2w" in text and "backend: horovod" in text and "ddp-2w" not in text, text
    assert "make setup HOROVOD=1" in text and str(oldest_ddp) in text, text
    assert "Traceback" not in text, text
    assert not (workdir / "results").exists()
    # the launcher says the same, asked for a Horovod launch in that install
    launch = subprocess.run(
        [
            str(oldest_ddp),
            "-m",
            "clusterbench.launch",
            "--np",
            "1",
            "--backend",
            "horovod",
            "--",
            "true",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "workflow"), "PATH": "/usr/bin:/bin"},
    )
    assert launch.returncode == 2 and "make setup HOROVOD=1" in launch.stderr, launch.stderr


@pytest.mark.slurm
@pytest.mark.slow
def test_ddp_on_the_test_slurm_with_the_oldest_slurm_plugins_and_no_horovod(
    slurm_cluster, oldest_ddp, tmp_path
):
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path / "w"
    cfg = ddp_config(workdir, "ddp-2w-slurm")
    cfg["runs"][0]["nodes"] = 2
    write_config(workdir, cfg)
    run_with(oldest_ddp, workdir, "--profile", str(REPO / "profiles" / "slurm"), *SLURM_POLL,
             "results/runs/ddp-2w-slurm/run.json", env=slurm_cluster.environ())  # fmt: skip
    info = trained(workdir, "ddp-2w-slurm", "slurm")
    assert info["world"].get("nodes", 2) == 2


@pytest.mark.sge
@pytest.mark.slow
def test_ddp_on_the_test_sge_with_the_oldest_sge_plugin_and_no_horovod(
    sge_cluster, oldest_ddp, tmp_path
):
    workdir = tmp_path / "w"
    ddp_config(workdir, "ddp-2w-sge")
    run_with(oldest_ddp, workdir, "--profile", str(REPO / "profiles" / "sge"), *SGE_POLL,
             "results/runs/ddp-2w-sge/run.json", env=sge_cluster.environ())  # fmt: skip
    trained(workdir, "ddp-2w-sge", "sge")
