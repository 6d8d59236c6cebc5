"""The whole pipeline, end to end on the local profile, and Snakemake's staleness behaviour.

One real run of the default configuration (digits, 1 and 2 Horovod workers) is shared by the
tests of this module, which then change one setting at a time and check which stages reran.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import html_report
import pytest
import yaml
from clusterbench import config as cbconfig
from clusterbench.plan import parse_dry_run
from conftest import (
    REPO,
    copy_checkout,
    default_config,
    pdf_text,
    snakemake,
    snakemake_args,
    snakemake_env,
    write_config,
)

pytestmark = pytest.mark.slow

STAGE_DIRS = {
    "raw": "download",
    "data": "preprocess",
    "runs": "train",
    "eval": "evaluate",
    "report": "report",
}


def stage_mtimes(workdir: Path) -> dict[tuple[str, str], dict[str, int]]:
    """{(stage, wildcard): {file: mtime_ns}} for every output under results/."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    results = workdir / "results"
    for top, stage in STAGE_DIRS.items():
        base = results / top
        if not base.exists():
            continue
        for f in base.rglob("*"):
            if f.is_file():
                rel = f.relative_to(base)
                key = (stage, rel.parts[0] if stage != "report" else "")
                out.setdefault(key, {})[str(rel)] = f.stat().st_mtime_ns
    return out


def rerun_stages(before, after) -> set[tuple[str, str]]:
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def checkout_of(workdir: Path) -> Path:
    """The copy of the workflow that ``finished`` runs (and the code-edit tests edit). Its path
    holds a space: every path in every rule's command must be quoted."""
    return workdir / "clusterbench checkout"


def run_local(workdir: Path, *extra: str, check: bool = True):
    repo = checkout_of(workdir) if checkout_of(workdir).is_dir() else REPO
    profile = str(repo / "profiles" / "local")
    return snakemake(workdir, "--profile", profile, *extra, repo=repo, check=check)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """The default configuration, run to the end on the local profile, from a copy of the
    checkout, in a working directory whose path holds a space (so do the checkout's)."""
    workdir = tmp_path_factory.mktemp("pipeline run")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    write_config(workdir, cfg)
    copy_checkout(checkout_of(workdir))
    run_local(workdir)
    return workdir


def test_full_pipeline_produces_every_output(finished: Path):
    res = finished / "results"
    runs = [r["name"] for r in default_config()["runs"]]
    assert (res / "raw" / "digits" / "MANIFEST.json").is_file()
    meta = json.loads((res / "data" / "digits" / "meta.json").read_text())
    assert meta["num_classes"] == 10
    for run in runs:
        metrics = [
            json.loads(line)
            for line in (res / "runs" / run / "metrics.jsonl").read_text().splitlines()
        ]
        assert len(metrics) == default_config()["run_defaults"]["epochs"]
        assert (res / "runs" / run / "model.pt").stat().st_size > 0
        assert any((res / "runs" / run / "tensorboard").iterdir())
        assert (res / "eval" / run / "metrics.json").is_file()
        assert (res / "benchmarks" / "train" / f"{run}.tsv").is_file()
        # progress within every epoch, on plain lines, from rank 0 alone
        log = (res / "logs" / "train" / f"{run}.log").read_text()
        progress = re.findall(
            r"^(.*)train: epoch (\d+) step \d+/\d+ \(\d+%\), \d+ images/s, ETA \d+ s$",
            log,
            re.MULTILINE,
        )
        assert {int(epoch) for _, epoch in progress} == set(range(1, len(metrics) + 1)), log
        assert {prefix for prefix, _ in progress} <= {"", "[0]<stdout>:"}, log
        assert "\r" not in log
    pdf = res / "report" / "report.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")
    for table in ("runs.csv", "epochs.csv", "benchmarks.csv"):
        assert (res / "report" / table).stat().st_size > 0


def test_two_worker_run_reaches_target_accuracy(finished: Path):
    acc = {
        run["name"]: json.loads(
            (finished / "results" / "eval" / run["name"] / "metrics.json").read_text()
        )["accuracy"]
        for run in default_config()["runs"]
    }
    two_workers = [r["name"] for r in default_config()["runs"] if r.get("workers") == 2]
    assert max(acc[name] for name in two_workers) >= 0.95, acc
    info = json.loads((finished / "results" / "runs" / two_workers[0] / "run.json").read_text())
    assert info["world"]["size"] == 2
    assert info["world"]["scheduler"] == "local"


def test_the_status_of_a_finished_workflow_reads_its_runs_and_writes_nothing(finished: Path):
    """`python -m clusterbench.status` in the workflow's directory: every run done, with its
    epochs, ranks, rate and time from its own files; no file or folder changed."""
    from test_status import status_of, tree

    before = tree(finished)
    lines = status_of(finished)
    assert tree(finished) == before
    assert lines.pop("note:") == []
    assert list(lines) == [r["name"] for r in default_config()["runs"]]
    epochs = default_config()["run_defaults"]["epochs"]
    for run in default_config()["runs"]:
        folder = finished / "results" / "runs" / run["name"]
        last = json.loads((folder / "metrics.jsonl").read_text().splitlines()[-1])
        lock = json.loads((folder / "train.lock").read_text())
        took = round(lock["ended"] - lock["started"])
        assert lines[run["name"]] == [
            run["name"],
            "done",
            f"pid {lock['holder']['pid']}",
            str(run["workers"]),
            f"{epochs}/{epochs}",
            f"{last['images_per_second']:.0f} images/s",
            f"0:{took // 60:02d}:{took % 60:02d}",
            "-",
            "-",
        ]


def test_html_report_builds(finished: Path):
    html = finished / "report.html"
    run_local(finished, "--report", str(html))
    text = html.read_text(errors="replace")
    assert "report.pdf" in text and "runs.csv" in text
    # each figure with its own page's caption (clusterbench.report.captions), the PDF its pages
    for title in ("Time per epoch", "Throughput", "Training curves", "Backend comparison"):
        assert f"<strong>{title}</strong>" in text, title
    assert "page 1: the title page: recommendation, summary and provenance" in text


def test_second_invocation_does_nothing(finished: Path):
    before = stage_mtimes(finished)
    proc = run_local(finished, "--dry-run")
    assert "Nothing to be done" in proc.stdout + proc.stderr
    run_local(finished)
    assert rerun_stages(before, stage_mtimes(finished)) == set()


def test_the_workflow_appends_its_runs_to_the_history_once(finished: Path):
    """The history step appended every run (before the report, which draws their history);
    running it again appends nothing; a dry run with another history.path writes nothing, and
    one that cannot be written stops the workflow before any job, naming it."""
    from clusterbench.history import store

    res = finished / "results"
    path = res / "history.sqlite"
    names = sorted(r["name"] for r in default_config()["runs"])
    rows = store.read_runs(path)
    assert sorted(r["run"] for r in rows) == names
    assert {r["run_dir"] for r in rows} == {str(res / "runs" / n) for n in names}
    assert all(r["images_per_second_mean"] > 0 and r["timed_epochs"] == 14 for r in rows)
    assert all(r["torch"] and r["cpu_model"] and r["commit_sha"] for r in rows)
    log = (res / "logs" / "history" / "history.log").read_text()
    assert f"history: 4 run(s) appended to {path}" in log
    series = (res / "history" / "series.csv").read_text().splitlines()
    assert len(series) == 5 and all(line.endswith(",True") for line in series[1:])
    text = pdf_text(res / "report" / "report.pdf", layout=False)
    assert "History: throughput over time" in text and "Recommendation" in text

    run_local(finished, "--forcerun", "history")  # the step again, and the report after it
    assert len(store.read_runs(path)) == 4
    assert "history: 0 run(s) appended" in (res / "logs" / "history" / "history.log").read_text()

    elsewhere = finished / "elsewhere" / "history.sqlite"
    dry = run_local(finished, "--dry-run", "--config", f"history={{path: '{elsewhere}'}}")
    assert "history" in dry.stdout and not (finished / "elsewhere").exists()
    blocked = res / "report" / "report.pdf" / "history.sqlite"  # under a file
    proc = run_local(finished, "--config", f"history={{path: '{blocked}'}}", check=False)
    assert proc.returncode != 0
    assert (
        f"history store {blocked} cannot be created: {res / 'report' / 'report.pdf'} is not a "
        in (proc.stdout + proc.stderr)
    )


@contextlib.contextmanager
def _edited(path: Path):
    """``path`` with a comment appended; afterwards its content and its mtime are restored.

    An edit, not a touch: Snakemake 9 reruns a job for an input newer than its outputs only if
    the input's checksum differs from the one it recorded. The restored mtime keeps the file
    older than every output, so the restore makes nothing stale.
    """
    text, stat = path.read_bytes(), path.stat()
    try:
        path.write_bytes(text + b"\n# edited by tests/test_workflow.py\n")
        yield
    finally:
        path.write_bytes(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _write_changed_config(workdir: Path, mutate) -> None:
    """The default config (its download cache in ``workdir``), changed by ``mutate``."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    mutate(cfg)
    write_config(workdir, cfg)


def _change(workdir: Path, mutate, edit: Path | None = None) -> set[tuple[str, str]]:
    """Rerun with the config changed by ``mutate`` (and the file ``edit`` edited meanwhile):
    the stages that reran."""
    _write_changed_config(workdir, mutate)
    before = stage_mtimes(workdir)
    with _edited(edit) if edit else contextlib.nullcontext():
        run_local(workdir)
    return rerun_stages(before, stage_mtimes(workdir))


def test_report_title_reruns_only_the_report(finished: Path):
    reran = _change(finished, lambda c: c["report"].update(title="A new title"))
    assert reran == {("report", "")}


def test_evaluation_setting_reruns_evaluate_and_report(finished: Path):
    reran = _change(
        finished,
        lambda c: (c["report"].update(title="A new title"), c["evaluate"].update(batch_size=97)),
    )
    runs = {r["name"] for r in default_config()["runs"]}
    assert reran == {("evaluate", run) for run in runs} | {("report", "")}


def test_download_retries_and_a_runs_priority_and_qos_rerun_nothing(finished: Path):
    reran = _change(
        finished,
        lambda c: (
            c["report"].update(title="A new title"),
            c["evaluate"].update(batch_size=97),
            c["download"].update(retries=9),
            c["runs"][0].update(priority=-5, qos="low"),  # scheduler settings, no result
        ),
    )
    assert reran == set()


def _every_config_change(c):
    """The config changes of all the staleness tests above, the last one included."""
    c["report"].update(title="A new title")
    c["evaluate"].update(batch_size=97)
    c["download"].update(retries=9)
    c["runs"][0].update(priority=-5, qos="low")
    c["runs"][0]["lr"] = 0.02


def test_one_runs_lr_reruns_that_run_and_the_report(finished: Path):
    target = default_config()["runs"][0]["name"]
    reran = _change(finished, _every_config_change)
    assert reran == {("train", target), ("evaluate", target), ("report", "")}


def test_editing_the_training_code_reruns_training_and_what_follows(finished: Path):
    """Planned by a dry run, which changes nothing (a real rerun of edited code: the report's,
    below; training every run again would add a minute and test nothing more)."""
    _write_changed_config(finished, _every_config_change)
    before = stage_mtimes(finished)
    with _edited(checkout_of(finished) / "workflow/clusterbench/train.py"):
        dry = run_local(finished, "--dry-run")
    stages = set(STAGE_DIRS.values())
    planned = {
        (job.rule, job.wildcards.get("run", "")): job.reason
        for job in parse_dry_run(dry.stdout).jobs
        if job.rule in stages
    }
    runs = {r["name"] for r in default_config()["runs"]}
    assert set(planned) == {(stage, run) for stage in ("train", "evaluate") for run in runs} | {
        ("report", "")
    }, dry.stdout
    for run in runs:  # for the code: its stamp, one input of every train job
        assert "Updated input files: .snakemake/clusterbench/code/train" in planned[("train", run)]
    assert stage_mtimes(finished) == before


def test_editing_the_report_code_reruns_only_the_report(finished: Path):
    reran = _change(
        finished,
        _every_config_change,
        edit=checkout_of(finished) / "workflow/clusterbench/report/pages/title.py",
    )
    assert reran == {("report", "")}


# A damaged raw file makes the download run again instead: tests/test_integrity.py.
@pytest.mark.parametrize(
    "damaged, marker",
    [("results/data/digits/train_x.npy", "results/data/digits/meta.json")],
    ids=["array"],
)
def test_a_damaged_file_stops_the_workflow_before_any_job_naming_the_remedy(
    finished: Path, damaged: str, marker: str
):
    path = finished / damaged
    original, stat = path.read_bytes(), path.stat()
    before = stage_mtimes(finished)
    try:
        path.write_bytes(original[: len(original) // 2])  # truncated
        proc = run_local(finished, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert f"{damaged} has {len(original) // 2} bytes" in out, out
        remedy = f"snakemake --forcerun {marker} <your usual options>"
        assert f"Make it again with: {remedy}" in out, out
        assert "Traceback" not in out and "Exception" not in out, out
        after = stage_mtimes(finished)
        for mtimes in (before, after):  # the damaged file itself changed, nothing else
            for files in mtimes.values():
                files.pop(damaged.split("/", 2)[2], None)
        assert after == before  # no job ran, nothing was deleted
        # the command it names makes the file again: the stage reruns, from the marker on
        dry = run_local(finished, "--dry-run", "--forcerun", marker).stdout
        stage = "preprocess" if "data" in marker else "download"
        assert re.search(rf"^rule {stage}:", dry, re.MULTILINE), dry
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "Nothing to be done" in run_local(finished, "--dry-run").stdout


def test_snakefile_parses_without_torch(finished: Path):
    """Every cluster job re-parses the Snakefile: it must not import torch & co."""
    argv = ["snakemake", *snakemake_args(finished, "--dry-run", "--forceall", "--cores", "1")]
    code = (
        "import sys\n"
        "for m in ('torch', 'horovod', 'matplotlib', 'seaborn'):\n"
        "    sys.modules[m] = None  # any import of these now raises ImportError\n"
        "from snakemake.cli import main\n"
        f"sys.argv = {argv!r}\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "train" in proc.stdout


def test_a_run_needing_more_cores_than_local_jobs_get_is_refused_before_any_job(tmp_path: Path):
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    cfg["runs"] = [{**cfg["runs"][0], "name": "wide", "workers": (os.cpu_count() or 1) + 1}]
    write_config(tmp_path, cfg)
    proc = snakemake(tmp_path, "--profile", str(REPO / "profiles" / "local"), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"run 'wide' needs {(os.cpu_count() or 1) + 1} cores" in out, out
    assert not (tmp_path / "results").exists(), out


def test_local_train_jobs_run_in_the_order_of_their_priority(tmp_path: Path):
    """Three tiny runs, one core: the train jobs start highest priority first (the rule's
    priority is the run's), whatever their order in the config; the epochs' timestamps in
    metrics.jsonl agree."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    tiny = {"dataset": "digits", "workers": 1, "epochs": 1}
    cfg["runs"] = [
        {**tiny, "name": "low", "priority": -5, "qos": "ignored-locally"},
        {**tiny, "name": "default"},
        {**tiny, "name": "high", "priority": 7},
    ]
    write_config(tmp_path, cfg)
    targets = [f"results/runs/{r['name']}/run.json" for r in cfg["runs"]]
    proc = snakemake(tmp_path, "--cores", "1", *targets)
    started = re.findall(r"rule train:.*?wildcards: run=(\S+)", proc.stdout + proc.stderr, re.S)
    assert started == ["high", "default", "low"], proc.stdout + proc.stderr

    def trained_at(run: str) -> str:
        lines = (tmp_path / "results" / "runs" / run / "metrics.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["time"]  # ISO 8601, UTC, milliseconds: sorts as text

    assert trained_at("high") < trained_at("default") < trained_at("low")
    for run in cfg["runs"]:  # no scheduler setting reaches the training's own record
        info = json.loads((tmp_path / "results" / "runs" / run["name"] / "run.json").read_text())
        assert "priority" not in info["run"] and "qos" not in info["run"]


def test_invalid_config_stops_before_any_job(tmp_path: Path):
    cfg = default_config()
    cfg["runs"][1]["workers"] = 0
    write_config(tmp_path, cfg)
    proc = snakemake(tmp_path, "--profile", str(REPO / "profiles" / "local"), check=False)
    assert proc.returncode != 0
    assert "runs[1].workers" in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


def test_run_names_are_literal_in_the_wildcard_constraint(tmp_path: Path):
    """``a.b`` is a name, not a pattern: it must not make ``aXb`` a run (the ``run`` wildcard
    matches any file name; the train rule's input names a run the config does not have)."""
    cfg = default_config()
    cfg["runs"][0]["name"], cfg["runs"][1]["name"] = "a.b", "aZb"
    write_config(tmp_path, cfg)
    plan = snakemake(tmp_path, "--dry-run", "--cores", "1").stdout
    assert "results/runs/a.b/model.pt" in plan and "results/runs/aZb/model.pt" in plan
    target = "results/eval/aXb/metrics.json"
    proc = snakemake(tmp_path, "--dry-run", "--cores", "1", target, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "(no run 'aXb' in the config)" in out, out
    assert "Traceback" not in out and "InputFunctionException" not in out, out


def local_rules(workdir: Path, env: dict[str, str]) -> list[str]:
    """The workflow's local rules (run on the submit host), as Snakemake's API parses them."""
    code = (
        "import json\n"
        "from pathlib import Path\n"
        "from snakemake.api import SnakemakeApi\n"
        "from snakemake.settings.types import ConfigSettings, ResourceSettings\n"
        "with SnakemakeApi() as api:\n"
        "    wf = api.workflow(\n"
        "        ResourceSettings(cores=1),\n"
        f"        ConfigSettings(configfiles=[Path({str(workdir / 'config.yaml')!r})]),\n"
        f"        snakefile=Path({str(REPO / 'Snakefile')!r}),\n"
        f"        workdir=Path({str(workdir)!r}),\n"
        "    )\n"
        "    print(json.dumps(sorted(wf._workflow._localrules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=snakemake_env(env),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_download_and_report_run_on_the_submit_host(tmp_path: Path):
    cfg = default_config()
    cfg["evaluate"]["every_minutes"] = 5  # a watch job beside each training: a job of its own
    write_config(tmp_path, cfg)
    # (best copies the best run's files into results/best, history appends to the store: no
    # compute node needed either)
    assert local_rules(tmp_path, {"CLUSTERBENCH_REMOTE_DOWNLOAD": ""}) == [
        "best",
        "download",
        "history",
        "report",
    ]
    # the switch for sites whose compute nodes have internet: the download becomes a job
    remote = local_rules(tmp_path, {"CLUSTERBENCH_REMOTE_DOWNLOAD": "1"})
    assert remote == ["best", "history", "report"]
    # and a dry run under the Slurm profile plans every job
    proc = snakemake(tmp_path, "--profile", str(REPO / "profiles" / "slurm"), "--dry-run")
    for rule in ("download", "preprocess", "train", "evaluate", "history", "report", "best"):
        assert f"rule {rule}:" in proc.stdout, proc.stdout
    # each run's watch job: sized to outlast its training (runtime 30 + 30 min), ending first
    watch = proc.stdout.split("rule watch:")[1].split("\nrule ")[0]
    assert re.search(r"resources: .*mem_mb=2000.*runtime=60", watch), watch
    assert "--deadline-minutes 55 " in watch


def test_remote_download_switch_rejects_other_values(tmp_path: Path):
    write_config(tmp_path, default_config())
    proc = snakemake(
        tmp_path,
        "--dry-run",
        "--cores",
        "1",
        check=False,
        env={"CLUSTERBENCH_REMOTE_DOWNLOAD": "yes"},
    )
    assert proc.returncode != 0
    assert "CLUSTERBENCH_REMOTE_DOWNLOAD='yes'" in proc.stdout + proc.stderr


#: User text with markup in each free-text field of the config, each of which, if it ran as
#: script, would set window.cbInjected or open a dialog (names cannot carry markup: the config
#: refuses them, tests/bad_configs/*-script.yaml).
INJECTED = {
    "title": "</script><script>window.cbInjected='title';alert('title')</script>"
    "<img src=x onerror=\"window.cbInjected='img'\">",
    "author": "<!--<script>window.cbInjected='author'</script>--> & <b>A. N. Author</b>",
}


#: The tables the report rule registers with the HTML report (rules/report.smk).
TABLES = ("runs.csv", "results.csv", "epochs.csv", "scaling_model.csv", "benchmarks.csv")


def _inject(c):
    c["report"].update(INJECTED)
    # a run this machine cannot hold: skipped, with its reason among the report's params
    c["runs"].append({"name": "digits-cnn-64w", "dataset": "digits", "workers": 64})


def test_the_html_report_shows_every_result_in_a_browser_and_runs_no_user_text(finished: Path):
    """Snakemake's HTML report of the finished pipeline, with markup in the title and author
    and a skipped run, opened in Debian's chromium by Playwright (tests/html_report.py): it
    shows every figure, table and report.pdf, logs no error, and runs no injected script."""
    executable = html_report.chromium()
    if executable is None:
        pytest.skip("no chromium on PATH (make test installs Debian's chromium package)")
    cfg = yaml.safe_load((finished / "config.yaml").read_text())  # as the tests above left it
    _inject(cfg)
    write_config(finished, cfg)
    before = stage_mtimes(finished)
    run_local(finished)
    assert rerun_stages(before, stage_mtimes(finished)) == {("report", "")}
    html = finished / "injected.html"
    run_local(finished, "--report", str(html))
    text = html.read_text()
    for markup in ("<script>window", "<!--<script>", "<img src=x", "<b>A. N."):
        assert markup not in text  # the user text is all escaped
    shown = html_report.browse(html, executable)
    assert (shown.errors, shown.dialogs, shown.injected) == ([], [], None)
    report = finished / "results" / "report"
    figures = {f"results/report/figures/{p.name}": p for p in (report / "figures").glob("*.png")}
    tables = {f"results/report/{name}": report / name for name in TABLES}
    assert len(figures) >= 8 and sorted(shown.results) == sorted(
        [*figures, *tables, "results/report/report.pdf"]
    )
    assert sorted(shown.figures) == sorted(figures)
    assert all(width > 100 and height > 100 for width, height in shown.figures.values())
    assert all("<strong>" in shown.captions[path] for path in figures)
    assert shown.tables == {path: file.read_bytes() for path, file in tables.items()}
    assert shown.documents == {"results/report/report.pdf": (report / "report.pdf").read_bytes()}
    # the settings the report job got, shown as text: the title and author as they were written
    settings = cbconfig.script_safe_json(cbconfig.validate(cfg)["report"])
    assert all(settings.replace('"', '\\"') in text for text in shown.info.values())
    assert all("digits-cnn-64w" in text for text in shown.info.values())
