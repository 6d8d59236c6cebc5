"""Dependencies are declared once, in pyproject.toml: set-up and the conda env follow it."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import deps  # noqa: E402


def test_conda_env_is_generated_from_pyproject():
    text = (REPO / "workflow" / "envs" / "clusterbench.yaml").read_text()
    assert text == deps.conda_env(), "run: python tools/deps.py conda --write"
    pip = yaml.safe_load(text)["dependencies"][-1]["pip"]
    assert pip == [r for r in deps.dependencies() if deps.name_of(r) != "horovod"]


def test_setup_scripts_take_versions_from_pyproject():
    for script in ("tools/setup.sh", "tools/build-horovod.sh"):
        text = (REPO / script).read_text()
        for package in ("torch", "horovod"):
            assert deps.pin(package) not in re.sub(r"#.*", "", text), (script, package)
    assert "tools/deps.py pin torch" in (REPO / "tools" / "setup.sh").read_text()
    assert not (REPO / "requirements.txt").exists()


@pytest.mark.parametrize(
    "package", ["snakemake", "pandas", "seaborn", "scikit-learn", "jsonschema"]
)
def test_the_environment_has_the_pinned_versions(package):
    assert importlib.metadata.version(package) == deps.pin(package)


def test_pin_names_the_file_for_an_unknown_or_unpinned_package():
    with pytest.raises(SystemExit, match="pyproject.toml: no dependency named 'nope'"):
        deps.pin("nope")
    with pytest.raises(SystemExit, match="'numpy<3' is a range with no == in .*constraints.txt"):
        deps.pin("numpy")
    with pytest.raises(SystemExit, match="'torch==2.13.0' states no oldest release"):
        deps.oldest("torch")


def test_a_range_pins_its_newest_tested_release_and_names_its_oldest():
    assert deps.requirement("snakemake").startswith("snakemake>=")
    assert deps.pin("snakemake") == next(
        line.partition("==")[2] for line in deps.constraints() if line.startswith("snakemake==")
    )
    assert deps.oldest("snakemake") == deps.requirement("snakemake").split(">=")[1].split(",")[0]
    assert deps.pin("horovod") == "0.28.1"  # an extra's pin (horovod is optional)


def test_cli_prints_a_pin():
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "deps.py"), "pin", "torch"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == deps.pin("torch")


def test_the_pinned_scikit_learn_is_the_one_the_digits_checksum_belongs_to():
    from clusterbench.config.datasets import DIGITS_SKLEARN_VERSION

    assert deps.pin("scikit-learn") == DIGITS_SKLEARN_VERSION


@pytest.mark.parametrize(
    ("horovod", "config", "builds"),
    [
        ("", "config/config.yaml", "a run of config/config.yaml trains with it"),  # the demo
        ("", "ddp.yaml", ""),  # a DDP-only site's config
        ("0", "config/config.yaml", ""),
        ("1", "ddp.yaml", "HOROVOD=1"),
    ],
)
def test_setup_builds_horovod_only_where_a_run_needs_it(tmp_path, horovod, config, builds):
    """tools/horovod-wanted.sh, make setup's decision: a config with no Horovod run (or
    HOROVOD=0) skips the Horovod build."""
    (tmp_path / "ddp.yaml").write_text(
        "datasets: {digits: {}}\nrun_defaults: {backend: ddp}\n"
        "runs: [{name: a, dataset: digits, workers: 2}]\n"
    )
    path = REPO / config if config.startswith("config/") else tmp_path / config
    env = {**os.environ, "PYTHON": sys.executable, "HOROVOD": horovod, "CONFIG": str(path)}
    env["PYTHONPATH"] = str(REPO / "workflow")
    out = subprocess.run(
        [str(REPO / "tools" / "horovod-wanted.sh")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == builds.replace("config/config.yaml", str(path))


def test_setup_refuses_another_horovod_value_and_an_unreadable_config(tmp_path):
    script = str(REPO / "tools" / "horovod-wanted.sh")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(REPO / "workflow")}
    out = subprocess.run([script], env={**env, "HOROVOD": "yes"}, capture_output=True, text=True)
    assert out.returncode == 1 and "HOROVOD=yes: expected 1" in out.stderr
    (tmp_path / "bad.yaml").write_text("runs: [{name: a, dataset: nope}]\n")
    bad = {**env, "HOROVOD": "", "CONFIG": str(tmp_path / "bad.yaml")}
    out = subprocess.run([script], env=bad, capture_output=True, text=True)
    assert out.returncode == 1 and "cannot tell from" in out.stderr and "nope" in out.stderr
