"""Config input through the real Snakemake command line (issue 19): the files Snakemake reads
itself (``--configfile``) are read again by the workflow, oversized files are refused before
Snakemake reads them, and lists and mappings given with ``--config`` keep their types.

Each runs a real Snakemake (a dry run: a config is checked before any job).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from clusterbench.config import files as cf
from conftest import REPO, snakemake_env
from test_bad_input import dry_run

pytestmark = pytest.mark.slow  # a real Snakemake per test

ONE_RUN = {
    "runs": [{"name": "a", "dataset": "digits", "workers": 1}],
    "report": {"title": "t"},
}


def snakemake_in(workdir, *args):
    """A dry run of the workflow in ``workdir`` (no config/config.yaml there: the files come
    from the arguments), printing the shell command of each job."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(workdir), "--dry-run", "--printshellcmds", "--cores", "1", *args]
    return subprocess.run(
        cmd, cwd=workdir, capture_output=True, text=True, timeout=600, env=snakemake_env()
    )


def test_a_key_given_twice_in_a_configfile_is_refused_naming_the_file_and_lines(tmp_path):
    base, extra = tmp_path / "base.yaml", tmp_path / "extra.yaml"
    base.write_text(yaml.safe_dump(ONE_RUN))
    extra.write_text("run_defaults:\n  epochs: 1\n  lr: 0.1\n  epochs: 3\n")
    proc = snakemake_in(tmp_path, "--configfiles", str(base), str(extra))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"{extra}, line 4: run_defaults.epochs is given twice (lines 2 and 4)" in out, out
    assert "Traceback" not in out and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "given, planned",
    [
        ("run_defaults={epochs: 2, lr: 1.0e-2}", ['"epochs":2', '"lr":0.01']),
        ("runs=[{name: b, dataset: digits, workers: 1, epochs: 3}]", ['"name":"b"', '"epochs":3']),
    ],
)
def test_lists_and_mappings_given_with_config_keep_their_types(tmp_path, given, planned):
    """Snakemake's --config keeps every value inside a list or mapping as text ('2')."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(ONE_RUN))
    proc = snakemake_in(tmp_path, "--configfile", str(config), "--config", given)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    train = [line for line in out.splitlines() if "--run " in line]
    assert train and all(all(p in line for p in planned) for line in train), out


def test_a_mapping_given_with_config_with_a_key_twice_is_refused(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(ONE_RUN))
    proc = snakemake_in(tmp_path, "--configfile", str(config), "--config", "report={a: 1, a: 2}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "--config report=...: a is given twice" in out, out
    assert "Traceback" not in out


def huge_environments(path) -> str:
    """The issue's case: 600,000 `environments:` entries, 14 MB; the message it gets."""
    with open(path, "w") as fh:
        fh.write("report: {title: t}\nruns: [{name: a, dataset: digits, workers: 1}]\n")
        fh.write("environments:\n")
        fh.writelines(f"  e{i}: {{workers: 1}}\n" for i in range(600_000))
    return (
        f"config/config.yaml, line {cf.MAX_ENTRIES + 4}: environments has more than "
        f"{cf.MAX_ENTRIES} entries"
    )


def huge_comments(path) -> str:
    """50 MB of comments; the message it gets."""
    with open(path, "w") as fh:
        fh.write("report: {title: t}\nruns: [{name: a, dataset: digits, workers: 1}]\n")
        fh.writelines("#" * 99 + "\n" for _ in range(500_000))
    size = path.stat().st_size
    return f"config/config.yaml: {size} bytes, more than the {cf.MAX_BYTES} bytes a config file"


@pytest.mark.parametrize("make", [huge_environments, huge_comments])
def test_an_oversized_config_is_refused_before_snakemake_reads_it(tmp_path, make):
    case = tmp_path / "case.yaml"
    message = make(case)
    proc = dry_run(case, tmp_path / "work")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert message in out, out
    assert "Traceback" not in out and not (tmp_path / "work" / "results").exists()


README = (REPO / "config" / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "args, last_line",
    [
        (
            ["--config", "report.title=x"],
            "ValueError: Invalid config definition: Config entry must start with a valid "
            "identifier.",
        ),
        (
            ["--config", "report"],
            "ValueError: Invalid config definition: Config entries have to be defined as "
            "name=value pairs. (Unparsable value: 'report')",
        ),
        (
            ["--configfile", "missing.yaml"],
            "FileNotFoundError: [Errno 2] No such file or directory: 'missing.yaml'",
        ),
        (
            ["--configfile", "latin1.yaml"],
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 19: invalid "
            "start byte",
        ),
        (
            ["--configfile", "deep.yaml"],
            "RecursionError: maximum recursion depth exceeded while calling a Python object",
        ),
    ],
)
def test_snakemakes_own_command_line_errors_are_the_ones_config_readme_lists(
    tmp_path, args, last_line
):
    """They come before the workflow's code runs: config/README's troubleshooting names each
    with what to type instead (checked here against the real Snakemake)."""
    (tmp_path / "latin1.yaml").write_bytes(b"report: {title: t}\n\xff\xfe\n")
    (tmp_path / "deep.yaml").write_text("runs: " + "[" * 5000 + "]" * 5000 + "\n")
    proc = snakemake_in(tmp_path, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert out.strip().splitlines()[-1] == last_line, out[-2000:]
    assert f"| `{last_line}` |" in README


def test_what_config_readme_says_to_type_instead_works(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(ONE_RUN))
    proc = snakemake_in(
        tmp_path, "--configfile", str(config), "--config", "report={title: x}", "site="
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tmp_path / "latin1.yaml").write_bytes(b"report: {title: t}\n\xff\xfe\n")
    (tmp_path / "deep.yaml").write_text("runs: " + "[" * 5000 + "]" * 5000 + "\n")
    for path, line in (("latin1.yaml", 2), ("deep.yaml", 1)):
        assert f"`python -m clusterbench.config {path}` names the line" in README
        proc = subprocess.run(
            [sys.executable, "-m", "clusterbench.config", path],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=snakemake_env({"PYTHONPATH": str(REPO / "workflow")}),
        )
        assert proc.returncode == 2 and f"{path}, line {line}: " in proc.stderr, proc.stderr
