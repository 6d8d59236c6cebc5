"""Workflow conventions: `snakemake --lint` clean, snakefmt and ruff formatted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

BIN = Path(sys.executable).parent
PY_DIRS = [d for d in ("workflow", "scripts", "tests", "benchmarks") if (REPO / d).exists()]


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_snakemake_lint_is_clean():
    proc = run(str(BIN / "snakemake"), "--lint", "--cores", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "cmd",
    [
        ["snakefmt", "--check", "Snakefile", "workflow/Snakefile", "rules"],
        ["ruff", "check", *PY_DIRS],
        ["ruff", "format", "--check", *PY_DIRS],
    ],
    ids=["snakefmt", "ruff-check", "ruff-format"],
)
def test_formatting(cmd):
    proc = run(str(BIN / cmd[0]), *cmd[1:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
