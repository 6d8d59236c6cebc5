"""Bad input is refused before any job starts, with a message naming its cause (issue 9).

``tests/bad_configs/`` holds the corpus: one config per file, as a user would put it in
``config/config.yaml``, whose first ``# expect: REGEX`` line is the message it must produce.
Each is given to the real workflow (a dry run, which is where a config is checked: before any
job), which must fail with that message, name no traceback, and create no results.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO, snakemake_env

CORPUS = Path(__file__).resolve().parent / "bad_configs"
CASES = sorted(CORPUS.glob("*.yaml"))
_EXPECT = re.compile(r"# expect: (.+)")


def expected_message(path: Path) -> str:
    match = _EXPECT.search(path.read_bytes().decode("utf-8", errors="replace"))
    assert match, f"{path}: no '# expect: REGEX' line"
    return match.group(1).strip()


def dry_run_args(case: Path, workdir: Path) -> list[str]:
    """Snakemake's arguments for the workflow on ``case`` as the working directory's
    config/config.yaml (which is written)."""
    (workdir / "config").mkdir(parents=True)
    (workdir / "config" / "config.yaml").write_bytes(case.read_bytes())
    return [
        *("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)),
        *("--dry-run", "--cores", "1"),
    ]


def dry_run(case: Path, workdir: Path) -> subprocess.CompletedProcess:
    """The workflow on ``case`` as the working directory's config/config.yaml."""
    cmd = [sys.executable, "-m", "snakemake", *dry_run_args(case, workdir)]
    return subprocess.run(
        cmd, cwd=workdir, capture_output=True, text=True, timeout=300, env=snakemake_env()
    )


def test_the_corpus_is_large_and_every_case_has_an_expected_message():
    assert len(CASES) >= 60
    for case in CASES:
        re.compile(expected_message(case))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, SimpleNamespace]:
    """Every case's dry run, each a Snakemake process of its own, three at a time (forked after
    Snakemake's imports, which are most of a dry run's time: tests/snakemake_forks.py)."""
    root = tmp_path_factory.mktemp("bad")
    jobs = [
        {
            "argv": dry_run_args(case, root / case.stem),
            "cwd": str(root / case.stem),
            "out": str(root / f"{case.stem}.out"),
        }
        for case in CASES
    ]
    (root / "jobs.json").write_text(json.dumps(jobs))
    forks = [sys.executable, str(Path(__file__).parent / "snakemake_forks.py")]
    subprocess.run(
        [*forks, str(root / "jobs.json"), "3"], check=True, timeout=900, env=snakemake_env()
    )
    return {
        case.stem: SimpleNamespace(
            returncode=int(Path(job["out"] + ".rc").read_text()),
            stdout=Path(job["out"]).read_text(),
            stderr="",
        )
        for case, job in zip(CASES, jobs, strict=True)
    }


@pytest.mark.slow  # a Snakemake per case: about a minute in all on 2 cores (make test only)
@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_config_is_refused_before_any_job_naming_its_cause(case, outcomes, tmp_path_factory):
    proc = outcomes[case.stem]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert re.search(expected_message(case), out), f"expected /{expected_message(case)}/ in:\n{out}"
    assert "Traceback" not in out, out
    assert not list(tmp_path_factory.getbasetemp().glob(f"bad*/{case.stem}/results")), out
