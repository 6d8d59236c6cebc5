"""Dependencies are declared once, in pyproject.toml: set-up and the conda env follow it."""

from __future__ import annotations

import importlib.metadata
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
