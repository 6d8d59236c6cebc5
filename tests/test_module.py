"""clusterbench as a Snakemake module of another workflow.

The consumer is written into a scratch directory (its own working directory, not the checkout)
and includes this repository's Snakefile the way README.md shows:

    module clusterbench:
        snakefile: "<repo>/Snakefile"
        config: config["bench"]
        prefix: "bench"
    use rule * from clusterbench as bench_*

Every path clusterbench reads or writes must then lie under ``bench/``, its config must be the
consumer's ``bench`` key, and the Slurm pre-flight check must still run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from clusterbench import config as cbconfig
from clusterbench.pipeline.code import STAMPS
from conftest import (
    PYTHON_M_SNAKEMAKE,
    REPO,
    default_config,
    pdf_text,
    run_snakemake,
    snakemake,
    snakemake_args,
    write_config,
)

PREFIX = "bench"
RUN = "module-digits-1w"  # a name no other test uses: the checkout must never see it
TITLE = "Module consumer: one digits run"

CONSUMER_SNAKEFILE = """\
configfile: "config.yaml"


# The consumer's own default target comes first; clusterbench's `all` (imported as bench_all)
# must not take it over.
rule all:
    input:
        "{prefix}/results/report/report.pdf",


module clusterbench:
    snakefile:
        {snakefile!r}
    config:
        config["bench"]
    prefix:
        "{prefix}"


use rule * from clusterbench as bench_*
"""


def bench_config(cache: Path) -> dict:
    """A small clusterbench config: one 1-worker digits run of 2 epochs, its own title."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(cache)
    cfg["run_defaults"]["epochs"] = 2
    cfg["runs"] = [{"name": RUN, "dataset": "digits", "workers": 1}]
    cfg["report"]["title"] = TITLE
    return cfg


def write_consumer(directory: Path, bench: dict) -> Path:
    """A workflow in ``directory`` that uses clusterbench as a module under ``bench/``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Snakefile").write_text(
        CONSUMER_SNAKEFILE.format(snakefile=str(REPO / "Snakefile"), prefix=PREFIX)
    )
    consumer_config = {"consumer": {"note": "not clusterbench's"}, "bench": bench}
    (directory / "config.yaml").write_text(yaml.safe_dump(consumer_config, sort_keys=False))
    return directory


def run_consumer(directory: Path, *args: str, check: bool = True, env=None, timeout=900):
    """``snakemake ARGS`` in the consumer's directory (its Snakefile, its working directory)."""
    cmd = [*PYTHON_M_SNAKEMAKE, *args]
    return run_snakemake(cmd, directory, directory / PREFIX / "results", check, timeout, env)


def expected_report_params(bench: dict) -> str:
    """The report's `--params` and `--config-hash` for ``bench``: its title and config hash."""
    cfg = cbconfig.validate(bench)
    return (
        f"--params '{cbconfig.script_safe_json(cfg['report'])}' "
        f"--config-hash {cbconfig.config_hash(cfg)}"
    )


def checkout_untouched() -> None:
    """Nothing of the consumer's run landed in the checkout."""
    assert not (REPO / PREFIX).exists()
    assert not [p for p in (REPO / "results").rglob(f"*{RUN}*")], "consumer output in checkout"


# ------------------------------------------------------------------------------------ dry run
@pytest.mark.horovod
def test_dry_run_plans_every_path_under_the_prefix(tmp_path: Path):
    bench = bench_config(tmp_path / "cache")
    # a 2-worker run too, and so a comm job (the stage is off in the tests' base config)
    bench["runs"].append({"name": "module-digits-2w", "dataset": "digits", "workers": 2})
    bench["comm"] = {"enabled": True}
    consumer = write_consumer(tmp_path / "consumer", bench)
    out = run_consumer(consumer, "--dry-run", "--printshellcmds", "--cores", "1").stdout

    # the consumer's own `all` is the default target; bench_all is not even needed
    assert re.search(r"^rule all:$", out, re.MULTILINE), out
    assert "bench_all" not in out
    for rule in ("download", "preprocess", "train", "comm", "evaluate", "report"):
        assert f"rule bench_{rule}:" in out

    # outputs, logs and benchmarks: under the prefix
    for kind in ("output", "log", "benchmark"):
        paths = [
            path
            for line in re.findall(rf"^    {kind}: (.*)$", out, re.MULTILINE)
            for path in line.split(", ")
        ]
        assert paths, kind
        assert all(path.startswith(f"{PREFIX}/results/") for path in paths), (kind, paths)
    # inputs: under the prefix, the stage scripts in the checkout (real files: edits rerun),
    # or the stages' code stamps in the working directory's .snakemake (clusterbench.pipeline.code)
    inputs = [
        path
        for line in re.findall(r"^    input: (.*)$", out, re.MULTILINE)
        for path in line.split(", ")
    ]
    code = [path for path in inputs if not path.startswith(f"{PREFIX}/results/")]
    assert code and all(
        path.startswith(str(REPO / "scripts")) or path.startswith(str(STAMPS)) for path in code
    ), code
    assert any(path.startswith(str(STAMPS)) for path in code), code
    assert all((consumer / path).is_file() for path in code), code

    # every path a command is given, params included, lies under the prefix or in the checkout
    commands = re.findall(r"^Shell command: (python .*)$", out, re.MULTILINE)
    # download, preprocess, train and evaluate of each run, comm, history, report
    assert len(commands) == 9, out
    for command in commands:
        for word in command.split():
            if "results/" in word:
                assert word.removesuffix(")").startswith(f"{PREFIX}/results/"), (word, command)
    for option in ("--data-dir", "--out-dir", "--run-dirs", "--eval-dirs", "--manifest", "--comm"):
        for value in re.findall(rf"{option} (?:\$\(dirname )?(\S+)", "\n".join(commands)):
            assert value.startswith(f"{PREFIX}/results/"), (option, value)

    # the consumer's config, not the checkout's config/config.yaml
    assert f"--run-dirs {PREFIX}/results/runs/{RUN} " in out
    assert expected_report_params(bench) in out
    assert "digits-cnn-2w" not in out  # a run of config/config.yaml


# ------------------------------------------------------------ damaged files, under the prefix
def recorded(folder: Path, name: str, data: bytes, written: bytes, marker: str, **extra) -> None:
    """``folder/name`` holding ``data`` while ``marker`` next to it records ``written``."""
    folder.mkdir(parents=True)
    (folder / name).write_bytes(data)
    record = {"size": len(written), "sha256": hashlib.sha256(written).hexdigest()}
    (folder / marker).write_text(json.dumps({**extra, "files": {name: record}}))


@pytest.mark.horovod
def test_a_damaged_array_under_the_prefix_stops_the_workflow_naming_the_remedy(tmp_path: Path):
    """The checks look where the module's files are: under its prefix (they once looked under
    the consumer's results/, found nothing and passed)."""
    consumer = write_consumer(tmp_path / "consumer", bench_config(tmp_path / "cache"))
    data = consumer / PREFIX / "results" / "data" / "digits"
    recorded(data, "train_x.npy", b"cut", b"the array as written", "meta.json")
    proc = run_consumer(consumer, "--dry-run", "--cores", "1", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    marker = f"{PREFIX}/results/data/digits/meta.json"
    assert f"{PREFIX}/results/data/digits/train_x.npy has 3 bytes, 20 were written" in out, out
    assert f"Make it again with: snakemake --forcerun {marker} <your usual options>" in out, out
    assert "Traceback" not in out and "Exception" not in out, out


@pytest.mark.horovod
def test_a_damaged_raw_file_under_the_prefix_plans_the_download_again(tmp_path: Path):
    consumer = write_consumer(tmp_path / "consumer", bench_config(tmp_path / "cache"))
    raw = consumer / PREFIX / "results" / "raw" / "digits"
    recorded(raw, "digits.csv.gz", b"other", b"the bytes", "MANIFEST.json", dataset="digits")
    before = sorted((p.name, p.read_bytes()) for p in raw.iterdir())
    proc = run_consumer(consumer, "--dry-run", "--cores", "1")
    out = proc.stdout + proc.stderr
    manifest = f"{PREFIX}/results/raw/digits/MANIFEST.json"
    assert (
        f"{PREFIX}/results/raw/digits/digits.csv.gz has 5 bytes, 9 were written (checked "
        f"against {manifest}): a real run sets {manifest} aside (as {manifest}.damaged)"
    ) in out, out
    # planned as forced: the manifest is there, and the rest of the plan needs it
    assert re.search(r"^rule bench_download:\n(    .*\n)*?    reason: Forced execution$", out, re.M)
    assert sorted((p.name, p.read_bytes()) for p in raw.iterdir()) == before  # a dry run


# ---------------------------------------------------------------------- Slurm pre-flight check
FAKE_SINFO = "debug*|2|2|(null)"  # 2 nodes of 2 CPUs


def fake_slurm(directory: Path) -> dict[str, str]:
    """``sinfo`` answering FAKE_SINFO, and Slurm commands that log their call and fail."""
    directory.mkdir(parents=True)
    calls = directory / "calls"
    (directory / "sinfo").write_text(f"#!/bin/sh\necho 'sinfo' >> {calls}\necho '{FAKE_SINFO}'\n")
    for command in ("sbatch", "srun", "squeue", "sacct", "scontrol", "sacctmgr"):
        (directory / command).write_text(f'#!/bin/sh\necho "{command} $*" >> {calls}\nexit 1\n')
    for tool in directory.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.mark.horovod
@pytest.mark.parametrize("use", ["standalone", "module"])
def test_slurm_preflight_refuses_a_job_no_partition_can_hold(tmp_path: Path, use: str):
    """The check once ran in `onstart`, which Snakemake ignores in a module: it must run in both
    uses, under the Slurm executor, before anything runs or is submitted. A run with
    `on_unavailable: fail` stops the workflow (with `skip`, the default, it is left out)."""
    bench = bench_config(tmp_path / "cache")
    bench["runs"].append(
        {"name": "too-big", "dataset": "digits", "workers": 64, "on_unavailable": "fail"}
    )
    env = fake_slurm(tmp_path / "bin")
    args = ("--executor", "slurm", "--jobs", "1")
    if use == "module":
        workdir = write_consumer(tmp_path / "consumer", bench)
        proc = run_consumer(workdir, *args, check=False, env=env)
    else:
        workdir = tmp_path / "work"
        write_config(workdir, bench)
        proc = snakemake(workdir, *args, check=False, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "run 'too-big' asks for 64 workers x 1 CPU(s) = 64 CPUs" in text, text
    assert "forever" in text
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert "sinfo" in calls
    assert not [call for call in calls if call.startswith(("sbatch", "srun"))], calls
    assert not (workdir / "results").exists() and not (workdir / PREFIX).exists()


@pytest.mark.horovod
def test_a_dry_run_planned_for_slurm_lists_the_runs_no_partition_can_hold(tmp_path: Path):
    """CLUSTERBENCH_EXECUTOR=slurm (what `make plan` sets from the profile): a dry run asks
    sinfo, names the run it will skip and why, and submits nothing; the plan (`make plan`'s
    command, clusterbench.plan) lists it as skipped."""
    bench = bench_config(tmp_path / "cache")
    bench["runs"].append({"name": "too-big", "dataset": "digits", "workers": 64})
    env = fake_slurm(tmp_path / "bin")
    env.update(CLUSTERBENCH_EXECUTOR="slurm")
    workdir = tmp_path / "work"
    write_config(workdir, bench)
    plan = [sys.executable, "-m", "clusterbench.plan", "--", *snakemake_args(workdir)]
    proc = run_snakemake(plan, REPO, workdir / "results", True, 300, env)
    text = proc.stdout + proc.stderr
    assert "skipping run 'too-big': run 'too-big' asks for 64 workers x 1 CPU(s)" in text, text
    assert "clusterbench plan (slurm executor)" in text
    assert "  skipped (1):\n    too-big: run 'too-big' asks for 64 workers" in text
    assert "train/too-big" not in text and "runs/too-big/" not in text, text
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert "sinfo" in calls
    assert not [call for call in calls if call.startswith(("sbatch", "srun"))], calls


@pytest.mark.horovod
def test_slurm_preflight_stays_out_of_dry_runs(tmp_path: Path):
    """A dry run submits nothing, so it asks Slurm nothing (and works without Slurm)."""
    bench = bench_config(tmp_path / "cache")
    bench["runs"].append({"name": "too-big", "dataset": "digits", "workers": 64})
    env = fake_slurm(tmp_path / "bin")
    consumer = write_consumer(tmp_path / "consumer", bench)
    run_consumer(consumer, "--executor", "slurm", "--jobs", "1", "--dry-run", env=env)
    calls = tmp_path / "bin" / "calls"
    assert not calls.exists() or "sinfo" not in calls.read_text().splitlines()


# -------------------------------------------------------------------------------- real run
@pytest.mark.slow
def test_module_runs_the_pipeline_under_its_prefix(tmp_path: Path, dataset_cache: Path):
    bench = bench_config(dataset_cache)
    consumer = write_consumer(tmp_path / "consumer", bench)
    proc = run_consumer(consumer, "--cores", "2", "--printshellcmds", "--show-failed-logs")

    res = consumer / PREFIX / "results"
    pdf = res / "report" / "report.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")
    for table in ("runs.csv", "epochs.csv", "benchmarks.csv"):
        assert (res / "report" / table).stat().st_size > 0
    assert RUN in (res / "report" / "runs.csv").read_text()
    metrics = (res / "runs" / RUN / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 2  # the consumer's epochs, not config/config.yaml's
    assert (res / "runs" / RUN / "model.pt").stat().st_size > 0
    assert json.loads((res / "eval" / RUN / "metrics.json").read_text())["accuracy"] > 0
    assert (res / "raw" / "digits" / "MANIFEST.json").is_file()
    assert (res / "data" / "digits" / "meta.json").is_file()
    for rule in ("download", "preprocess", "train", "evaluate", "report"):
        assert any((res / "logs" / rule).iterdir()), rule
        assert any((res / "benchmarks" / rule).iterdir()), rule

    # nothing outside the prefix, apart from the consumer's own files and Snakemake's state
    own = {"Snakefile", "config.yaml", ".snakemake"}
    assert {p.name for p in consumer.iterdir()} == own | {PREFIX}
    assert [p.name for p in (consumer / PREFIX).iterdir()] == ["results"]
    checkout_untouched()

    # the report was made from the consumer's config: its title and its config hash
    assert expected_report_params(bench) in proc.stdout + proc.stderr
    if shutil.which("pdftotext"):
        text = pdf_text(pdf, layout=False)
        assert TITLE in text, text[:2000]
        cfg = cbconfig.validate(bench)
        assert cbconfig.config_hash(cfg) in text

    # Snakemake's HTML report finds the module's captions and outputs
    html = tmp_path / "report.html"
    run_consumer(consumer, "--report", str(html))
    text = html.read_text(errors="replace")
    assert "report.pdf" in text and "runs.csv" in text

    # and a second invocation has nothing to do
    again = run_consumer(consumer, "--dry-run", "--cores", "2")
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout
