"""clusterbench deployed from git at a tag, as a Snakemake workflow is: a module whose snakefile
is ``gitfile(<repository>, path="workflow/Snakefile", tag=...)`` (docs/running.md shows it, and
``github(...)`` for a hosted one). The repository here is a local one, made from this checkout
and tagged three times: a run at the first tag, then a tag that changes only the report's code
(nothing the run made is stale) and one that changes the training loop (the training is).

snakedeploy 0.17.1 cannot deploy from a local repository at a tag (a ``file://`` URL has "no
matching provider"; a path is copied, its tag ignored, and its module's snakefile written as a
path relative to the deployment): docs/running.md gives the module lines to write instead.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import PYTHON_M_SNAKEMAKE, REPO, copy_checkout, run_snakemake

pytestmark = pytest.mark.slow

CONSUMER = """\
configfile: "config.yaml"


module clusterbench:
    snakefile:
        gitfile({repo!r}, path="workflow/Snakefile", tag={tag!r})
    config:
        config


use rule * from clusterbench
"""
RUN = "deployed-1w"


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def tag_with(repo: Path, tag: str, edited: str | None = None) -> None:
    """Commit the repository (with a comment added to ``edited``) and tag it."""
    if edited:
        with open(repo / edited, "a") as fh:
            fh.write(f"# changed for {tag}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", tag)
    git(repo, "tag", tag)


def consume(workdir: Path, repo: Path, tag: str, *args: str):
    (workdir / "Snakefile").write_text(CONSUMER.format(repo=str(repo), tag=tag))
    cmd = [*PYTHON_M_SNAKEMAKE, "--cores", "2", *args, f"results/runs/{RUN}/run.json"]
    return run_snakemake(cmd, workdir, workdir / "results", True, 600, None)


def test_a_module_from_a_git_tag_runs_and_reruns_only_what_a_new_tag_makes_stale(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    for name in ("pyproject.toml", "README.md"):
        (repo / name).write_bytes((REPO / name).read_bytes())
    git(repo, "init", "-q")
    tag_with(repo, "v1.0.0")
    tag_with(repo, "v1.0.1", "workflow/clusterbench/report/__init__.py")
    tag_with(repo, "v1.1.0", "workflow/clusterbench/training/loop.py")

    workdir = tmp_path / "mine"
    workdir.mkdir()
    cfg = {
        "download": {"cache_dir": str(tmp_path / "cache")},
        "datasets": {"digits": {}},
        "runs": [{"name": RUN, "dataset": "digits", "workers": 1, "epochs": 1, "backend": "ddp"}],
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))

    consume(workdir, repo, "v1.0.0")
    info = json.loads((workdir / "results" / "runs" / RUN / "run.json").read_text())
    assert info["world"]["backend"] == "ddp"
    source = workdir / ".snakemake" / "clusterbench" / "source"
    assert (source / ".complete").read_text().split() == [
        "v1.0.0",
        git(repo, "rev-parse", "v1.0.0").strip(),
    ]
    assert (source / "scripts" / "train.py").read_bytes() == (
        REPO / "scripts" / "train.py"
    ).read_bytes()
    log = (workdir / "results" / "logs" / "train" / f"{RUN}.log").read_text()
    assert "Traceback" not in log

    # a tag that changes the report's code only: nothing the run made is stale
    out = consume(workdir, repo, "v1.0.1", "--dry-run").stdout
    assert "Nothing to be done" in out, out
    # a tag that changes the training loop: the training is
    out = consume(workdir, repo, "v1.1.0", "--dry-run").stdout
    assert "rule train:" in out and "code/train+training.sha256" in out, out
    assert "rule download:" not in out and "rule preprocess:" not in out, out
    assert "# changed for v1.1.0" in (source / "workflow/clusterbench/training/loop.py").read_text()
