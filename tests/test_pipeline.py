"""The workflow's own logic (clusterbench.pipeline) without a Snakemake run: a fake adapter stands
for Snakemake's ``workflow`` object. The real workflow's behaviour (the same decisions under the
real Snakemake CLI, in a module too) is tested in test_workflow.py, test_integrity.py,
test_experiments_workflow.py, test_module.py and test_preflight_workflow.py."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from clusterbench import config as cbconfig
from clusterbench.core import integrity
from clusterbench.pipeline import (
    Adapter,
    Pipeline,
    PlannedJob,
    SnakemakeAdapter,
    commands,
    layout,
    preflight,
)
from clusterbench.pipeline.adapter import RULES
from clusterbench.pipeline.resources import train_resources
from conftest import REPO, default_config


class Stopped(Exception):
    """What the fake adapter's stop raises (Snakemake's: SystemExit after logging)."""


class FakeAdapter(Adapter):
    """An :class:`Adapter` whose answers a test sets, recording warnings and forced files."""

    def __init__(self, executor="local", cores=2, main=True, prefix=""):
        self._executor, self._cores, self.prefix = executor, cores, prefix
        self.is_main_process, self.remote_exec = main, not main
        self.warnings: list[str] = []
        self.forced_rules: set[str] = set()
        self.forced_files: set[str] | None = set()  # None: this Snakemake cannot force
        self.planned: list[PlannedJob] | None = []
        self.runs: dict = {}

    def in_workdir(self, path):
        return f"{self.prefix}{path}"

    def executor(self):
        return self._executor

    def cores(self):
        return self._cores

    def train_job_resources(self, run, keys):
        return train_resources(self.runs[run])

    def forced(self, rule, outputs):
        files = self.forced_files or set()
        return rule in self.forced_rules or not files.isdisjoint(outputs)

    def force(self, path):
        if self.forced_files is None:
            return False
        self.forced_files.add(path)
        return True

    def planned_jobs(self):
        return self.planned

    def warn(self, message):
        self.warnings.append(message)

    def stop(self, message):
        raise Stopped(message)


def config(*runs: dict, **top) -> dict:
    cfg = default_config()
    cfg["runs"] = list(runs) or [{"name": "a", "dataset": "digits", "workers": 1}]
    cfg.update(top)
    return cbconfig.validate(cfg)


def pipeline(adapter: FakeAdapter, cfg: dict | None = None, env=None, digests=None) -> Pipeline:
    cfg = cfg or config()
    found = Pipeline(cfg, adapter, REPO, env=env if env is not None else {}, digests=digests)
    adapter.runs = found.runs
    return found


@pytest.fixture
def scheduler(monkeypatch):
    """The executor's pre-flight check, answered by the test: ``scheduler.reasons`` (run ->
    reason) or ``scheduler.error`` (a PreflightError); ``scheduler.asked`` counts the calls."""
    answer = SimpleNamespace(reasons={}, error=None, asked=[])

    def unavailable(executor, context):
        answer.asked.append((executor, context.cores))
        if answer.error:
            raise preflight.PreflightError(answer.error)
        return dict(answer.reasons)

    monkeypatch.setattr(preflight, "unavailable", unavailable)
    return answer


def wc(**wildcards) -> SimpleNamespace:
    return SimpleNamespace(**wildcards)


# ------------------------------------------------------------------ the executor and the skips
def test_a_real_executor_decides_and_a_dry_run_plans_for_the_one_named(scheduler):
    assert pipeline(FakeAdapter("slurm")).plan.executor() == ("slurm", False)
    assert pipeline(FakeAdapter("dryrun")).plan.executor() == ("local", True)
    env = {"CLUSTERBENCH_EXECUTOR": "sge"}
    assert pipeline(FakeAdapter("touch"), env=env).plan.executor() == ("sge", True)
    assert pipeline(FakeAdapter(None), env=env).plan.executor() == ("sge", True)
    with pytest.raises(Stopped, match="CLUSTERBENCH_EXECUTOR='kube': expected one of "):
        pipeline(FakeAdapter("dryrun"), env={"CLUSTERBENCH_EXECUTOR": "kube"}).plan.executor()


def test_skipped_runs_are_decided_once_warned_about_and_left_out(scheduler):
    cfg = config(*({"name": n, "dataset": "digits", "workers": 1} for n in ("a", "b", "c")))
    scheduler.reasons = {"b": "run 'b' needs 64 cores"}
    adapter = FakeAdapter("local", cores=3)
    pipe = pipeline(adapter, cfg)
    assert pipe.available_runs() == ["a", "c"]
    assert pipe.available_runs() == ["a", "c"]
    assert scheduler.asked == [("local", 3)]  # once, with the cores local jobs get
    assert adapter.warnings == ["skipping run 'b': run 'b' needs 64 cores"]
    assert pipe.skipped_runs() == [
        {
            "run": "b",
            "experiment": None,
            "environment": None,
            "point": None,
            "reason": "run 'b' needs 64 cores",
        }
    ]
    # a dry run plans with the machine's cores (its own --cores is 1)
    pipeline(FakeAdapter("dryrun", cores=1), cfg).available_runs()
    assert scheduler.asked[-1] == ("local", None)


def test_a_cluster_jobs_snakemake_asks_nothing(scheduler):
    scheduler.reasons = {"a": "never"}
    pipe = pipeline(FakeAdapter("slurm", main=False))
    assert pipe.available_runs() == ["a"] and scheduler.asked == []


def test_a_config_none_of_whose_runs_can_run_stops_naming_each(scheduler):
    cfg = config(*({"name": n, "dataset": "digits", "workers": 1} for n in ("a", "b")))
    scheduler.reasons = {"a": "reason a", "b": "reason b"}
    with pytest.raises(Stopped) as stop:
        pipeline(FakeAdapter("local"), cfg).available_runs()
    assert str(stop.value) == "no run can run under the local executor here:\nreason a\nreason b"
    # without an executor (--report) nothing runs, so nothing stops
    assert pipeline(FakeAdapter(None), cfg).available_runs() == []


def test_a_fail_run_stays_in_and_is_refused_only_when_its_training_would_run(scheduler):
    cfg = config(
        {"name": "a", "dataset": "digits", "workers": 1},
        {"name": "gpu", "dataset": "digits", "workers": 1, "on_unavailable": "fail"},
    )
    scheduler.reasons = {"gpu": "run 'gpu' asks for 1 GPU(s) per node, none usable"}
    pipe = pipeline(FakeAdapter("local"), cfg)
    assert pipe.available_runs() == ["a", "gpu"] and pipe.skipped_runs() == []
    assert pipe.plan.refusals(["a"]) == []  # trained already: nothing to refuse
    (refusal,) = pipe.plan.refusals(["a", "gpu"])
    assert refusal == (
        "run 'gpu' asks for 1 GPU(s) per node, none usable\n(on_unavailable: fail for 'gpu'; "
        "with skip, such a run is left out and the rest goes on)"
    )


def test_a_skipped_run_a_target_asks_for_is_refused(scheduler):
    cfg = config(
        {"name": "a", "dataset": "digits", "workers": 1},
        {"name": "big", "dataset": "digits", "workers": 1},
    )
    scheduler.reasons = {"big": "run 'big' needs 64 cores"}
    pipe = pipeline(FakeAdapter("local"), cfg)
    assert pipe.plan.refusals(["big"]) == [
        "run 'big' needs 64 cores\n(run 'big' is skipped here, and a target asks for it)"
    ]


def test_a_scheduler_that_cannot_be_asked_stops_only_a_training_job_to_submit(scheduler):
    scheduler.error = "cannot ask Slurm for its partitions (sinfo): not found"
    adapter = FakeAdapter("slurm")
    pipe = pipeline(adapter)
    assert pipe.available_runs() == ["a"] and pipe.skipped_runs() == []  # nothing skipped
    assert "cannot ask Slurm for its partitions (sinfo)" in adapter.warnings[0]
    assert pipe.plan.refusals([]) == []  # nothing to train: nothing to stop
    (refusal,) = pipe.plan.refusals(["a"])
    assert refusal.startswith("cannot ask Slurm for its partitions (sinfo): not found\n")
    assert "1 training job(s) are to be submitted: 'a'" in refusal
    # a dry run planned for Slurm only warns
    adapter = FakeAdapter("dryrun")
    pipe = pipeline(adapter, env={"CLUSTERBENCH_EXECUTOR": "slurm"})
    assert pipe.plan.refusals(["a"]) == [] and pipe.available_runs() == ["a"]
    assert adapter.warnings == [
        "the plan cannot check the slurm limits: "
        "cannot ask Slurm for its partitions (sinfo): not found"
    ]


def test_cores_of_this_machine_are_refused_for_a_cluster(scheduler):
    cfg = default_config()
    cfg["runs"] = []
    cfg["experiments"] = {"s": {"dataset": "digits", "epochs": 1, "environments": ["cpu-parallel"]}}
    cfg = cbconfig.validate(cfg)
    with pytest.raises(Stopped, match="environment_defaults.cores_per_node: null takes the cores"):
        pipeline(FakeAdapter("sge"), cfg).available_runs()
    pipeline(FakeAdapter("local"), cfg).available_runs()  # right for local jobs


# ------------------------------------------------------------------ before any job: the gate
def test_the_priority_function_checks_once_and_gives_the_runs_priority(scheduler):
    cfg = config({"name": "a", "dataset": "digits", "workers": 1, "priority": 7})
    adapter = FakeAdapter("local")
    pipe = pipeline(adapter, cfg)
    calls = []
    pipe.checks.consumed = calls.append
    adapter.planned = [PlannedJob("train", {"run": "a"})]
    assert pipe.priority("train")(wc(run="a")) == 7
    assert pipe.priority("report")(wc()) == 0
    assert calls == [adapter.planned]  # once per process


@pytest.mark.parametrize(
    "adapter",
    [FakeAdapter(None), FakeAdapter("touch"), FakeAdapter("local", main=False)],
    ids=["no executor", "touch", "cluster job"],
)
def test_nothing_is_checked_where_nothing_runs(scheduler, adapter):
    pipe = pipeline(adapter)
    scheduler.error = "unreachable"
    adapter.planned = None  # would fail if asked
    pipe.checks.consumed = lambda planned: pytest.fail("checked")
    assert pipe.priority("train")(wc(run="a")) == 0


def test_a_planned_training_job_that_may_not_run_stops_before_any_job(scheduler):
    scheduler.error = "the sge scheduler needs `qsub`, which is not on PATH"
    adapter = FakeAdapter("sge")
    pipe = pipeline(adapter)
    pipe.available_runs()
    adapter.planned = [PlannedJob("train", {"run": "a"}), PlannedJob("report")]
    with pytest.raises(Stopped, match=r"needs `qsub`.*\n\(the sge scheduler decides"):
        pipe.priority("report")(wc())


def test_a_jobs_own_check_runs_only_when_that_job_is_planned(scheduler):
    """check_before_jobs: the check of a rule (the history store's) runs before any job only
    when a job of that rule is planned, and what it says stops the workflow."""
    asked = []

    def check():
        asked.append(1)
        return "history store /x/h.sqlite cannot be created: /x is not a directory"

    adapter = FakeAdapter("dryrun")
    pipe = pipeline(adapter)
    pipe.check_before_jobs("history", check)
    adapter.planned = [PlannedJob("report")]
    assert pipe.priority("report")(wc()) == 0 and asked == []
    adapter = FakeAdapter("local")
    pipe = pipeline(adapter)
    pipe.check_before_jobs("history", check)
    adapter.planned = [PlannedJob("history"), PlannedJob("report")]
    with pytest.raises(Stopped, match=r"^history store /x/h\.sqlite cannot be created"):
        pipe.priority("report")(wc())
    assert asked == [1]


# ------------------------------------------------------------------ files and their records
def write_recorded(folder: Path, names, content=b"x") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(content * 100 + name.encode())
    return integrity.write_checksums(folder, names)


def finished_run(root: Path, run: str) -> None:
    write_recorded(root / layout.run_dir(run), integrity.RUN_FILES)
    write_recorded(root / layout.eval_dir(run), integrity.EVAL_FILES)


def report_job(run: str, prefix: str = "") -> PlannedJob:
    files = [f"{layout.run_dir(run)}/{n}" for n in ("run.json", "metrics.jsonl")]
    files += [f"{layout.eval_dir(run)}/{n}" for n in integrity.EVAL_FILES]
    return PlannedJob("report", {}, tuple(prefix + f for f in files), (f"{prefix}report.pdf",))


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_planned_job_reading_a_damaged_output_stops_naming_it_and_the_command(in_tmp):
    finished_run(in_tmp, "a")
    finished_run(in_tmp, "b")
    cfg = config(*({"name": n, "dataset": "digits", "workers": 1} for n in ("a", "b")))
    pipe = pipeline(FakeAdapter("local"), cfg)
    pipe.checks.consumed([report_job("a"), report_job("b")])  # intact: nothing to say
    metrics = in_tmp / layout.run_dir("b") / "metrics.jsonl"
    metrics.write_text('{"epoch": 1, "loss": garbage')
    before = sorted(p for p in in_tmp.rglob("*") if ".snakemake" not in p.parts)
    with pytest.raises(Stopped) as stop:
        pipe.checks.consumed([report_job("a"), report_job("b")])
    assert str(stop.value) == (
        f"results/runs/b/metrics.jsonl has {len(metrics.read_bytes())} bytes, "
        f"{100 + len('metrics.jsonl')} were written (checked against "
        "results/runs/b/checksums.json)\nNothing was run or deleted. Make them again with: "
        "snakemake --forcerun results/runs/b/metrics.jsonl <your usual options>"
    )
    assert sorted(p for p in in_tmp.rglob("*") if ".snakemake" not in p.parts) == before
    # the job that makes it again is planned: the damaged file is no input of the plan
    train_b = PlannedJob("train", {"run": "b"}, (), (f"{layout.run_dir('b')}/metrics.jsonl",))
    pipe.checks.consumed([train_b, report_job("a"), report_job("b")])


def test_outputs_without_their_record_or_with_a_garbled_one_stop(in_tmp):
    finished_run(in_tmp, "a")
    cfg = config({"name": "a", "dataset": "digits", "workers": 1})
    pipe = pipeline(FakeAdapter("local"), cfg)
    (in_tmp / layout.eval_dir("a") / integrity.CHECKSUMS).unlink()
    (in_tmp / layout.run_dir("a") / integrity.CHECKSUMS).write_text("not json")
    best = PlannedJob("best", {}, (f"{layout.run_dir('a')}/model.pt",), ())
    with pytest.raises(Stopped) as stop:
        pipe.checks.consumed([report_job("a"), best])
    lines = str(stop.value).splitlines()
    assert lines[0] == (
        "results/eval/a/checksums.json is missing: confusion.csv, metrics.json, per_class.csv "
        "beside it cannot be checked (checked against results/eval/a/checksums.json)"
    )
    assert lines[1] == (
        "results/runs/a/checksums.json records no 'files' (not the JSON the step wrote) "
        "(checked against results/runs/a/checksums.json)"
    )
    assert lines[-1].endswith(
        "snakemake --forcerun results/eval/a/checksums.json results/runs/a/checksums.json "
        "<your usual options>"
    )


def test_the_checks_look_under_a_modules_prefix(in_tmp):
    finished_run(in_tmp / "bench", "a")
    (in_tmp / "bench" / layout.run_dir("a") / "model.pt").write_bytes(b"cut")
    adapter = FakeAdapter("local", prefix="bench/")
    pipe = pipeline(adapter, config({"name": "a", "dataset": "digits", "workers": 1}))
    best = PlannedJob("best", {}, (f"bench/{layout.run_dir('a')}/model.pt",), ())
    with pytest.raises(Stopped, match=r"^bench/results/runs/a/model.pt has 3 bytes") as stop:
        pipe.checks.consumed([best])
    assert "--forcerun bench/results/runs/a/model.pt <your usual options>" in str(stop.value)


def recorded_arrays(root: Path, dataset: str = "digits") -> list[Path]:
    folder = root / layout.data_dir(dataset)
    folder.mkdir(parents=True)
    for name in layout.RECORDED["arrays"]:
        (folder / name).write_bytes(name.encode() * 10)
    files = {name: integrity.record(folder / name) for name in layout.RECORDED["arrays"]}
    (folder / "meta.json").write_text(json.dumps({"dataset": dataset, "files": files}))
    return [root / path for path in layout.stored_files(dataset)]


def test_damaged_arrays_or_arrays_without_their_record_stop(in_tmp):
    files = recorded_arrays(in_tmp)
    pipeline(FakeAdapter("local")).arrays_intact(wc(dataset="digits"))  # intact
    files[0].write_bytes(b"cut")
    with pytest.raises(Stopped) as stop:
        pipeline(FakeAdapter("dryrun")).arrays_intact(wc(dataset="digits"))
    assert str(stop.value) == (
        "results/data/digits/train_x.npy has 3 bytes, 110 were written (checked against "
        "results/data/digits/meta.json). Nothing was run or deleted. Make it again with: "
        "snakemake --forcerun results/data/digits/meta.json <your usual options>"
    )
    files[-1].unlink()  # meta.json: the arrays would never be checked again
    with pytest.raises(Stopped, match=r"^results/data/digits/meta.json is missing: train_x"):
        pipeline(FakeAdapter("local")).arrays_intact(wc(dataset="digits"))
    # the command it names forces preprocess, whose files are then not checked
    adapter = FakeAdapter("local")
    adapter.forced_files = {"results/data/digits/meta.json"}
    pipeline(adapter).arrays_intact(wc(dataset="digits"))
    adapter = FakeAdapter("local")
    adapter.forced_rules = {"preprocess"}  # --forcerun preprocess, --forceall
    pipeline(adapter).arrays_intact(wc(dataset="digits"))
    for path in files[:-1]:  # none made yet (or all gone): Snakemake makes them when needed
        path.unlink()
    pipeline(FakeAdapter("local")).arrays_intact(wc(dataset="digits"))


def test_a_dataset_stored_as_files_is_its_folder_and_index_checked_against_meta(in_tmp):
    cfg = config()
    cfg["datasets"]["digits"]["storage"] = "files"  # as clusterbench.config.storage decides
    folder = layout.data_dir("digits")
    want = [f"{folder}/index.npz", f"{folder}/meta.json"]  # read in place: no files/
    assert pipeline(FakeAdapter(None), cfg).run_data(wc(run="a")) == want
    (in_tmp / folder).mkdir(parents=True)
    index, meta = in_tmp / folder / "index.npz", in_tmp / folder / "meta.json"
    index.write_text("{}")
    meta.write_text(
        json.dumps({"storage": "files", "files": {"index.npz": integrity.record(index)}})
    )
    pipeline(FakeAdapter("local"), cfg).arrays_intact(wc(dataset="digits"))  # intact
    index.write_text("{ }x")
    with pytest.raises(Stopped, match=rf"^{folder}/index.npz has 4 bytes, 2 were written"):
        pipeline(FakeAdapter("local"), cfg).arrays_intact(wc(dataset="digits"))
    adapter = FakeAdapter("local")
    adapter.forced_rules = {"preprocess_files"}  # its own rule makes it again
    pipeline(adapter, cfg).arrays_intact(wc(dataset="digits"))
    meta.unlink()
    with pytest.raises(Stopped, match=rf"^{folder}/meta.json is missing: index.npz beside it"):
        pipeline(FakeAdapter("local"), cfg).arrays_intact(wc(dataset="digits"))


def test_a_cluster_job_checks_no_file(in_tmp):
    recorded_arrays(in_tmp)[0].write_bytes(b"cut")
    pipeline(FakeAdapter("local", main=False)).arrays_intact(wc(dataset="digits"))


def raw_download(root: Path) -> tuple[Path, Path]:
    folder = root / "results" / "raw" / "digits"
    folder.mkdir(parents=True)
    data = folder / "digits.csv.gz"
    data.write_bytes(b"the bytes")
    record = {"size": 9, "sha256": hashlib.sha256(b"the bytes").hexdigest()}
    manifest = folder / "MANIFEST.json"
    manifest.write_text(json.dumps({"dataset": "digits", "files": {data.name: record}}))
    return data, manifest


def test_a_damaged_raw_file_plans_the_download_in_a_dry_run_and_changes_nothing(in_tmp):
    data, manifest = raw_download(in_tmp)
    data.write_bytes(b"other")
    adapter = FakeAdapter("dryrun")
    pipeline(adapter).raw_files_intact(wc(dataset="digits"))
    assert adapter.forced_files == {"results/raw/digits/MANIFEST.json"}
    assert adapter.warnings == [
        "results/raw/digits/digits.csv.gz has 5 bytes, 9 were written (checked against "
        "results/raw/digits/MANIFEST.json): a real run sets results/raw/digits/MANIFEST.json "
        "aside (as results/raw/digits/MANIFEST.json.damaged) and downloads digits again, and "
        "runs what follows; this run changes nothing"
    ]
    assert manifest.exists() and not integrity.set_aside_copies(manifest)


def test_a_damaged_raw_file_sets_the_manifest_aside_and_forces_the_download(in_tmp):
    data, manifest = raw_download(in_tmp)
    data.unlink()
    recorded_bytes = manifest.read_bytes()
    adapter = FakeAdapter("local")
    pipeline(adapter).raw_files_intact(wc(dataset="digits"))
    (aside,) = integrity.set_aside_copies(manifest)
    assert aside.read_bytes() == recorded_bytes and not manifest.exists()
    assert adapter.forced_files == {"results/raw/digits/MANIFEST.json"}
    assert "set results/raw/digits/MANIFEST.json aside as" in adapter.warnings[0]
    # until a download makes it again, every run forces it
    adapter = FakeAdapter("local")
    pipeline(adapter).raw_files_intact(wc(dataset="digits"))
    assert adapter.forced_files == {"results/raw/digits/MANIFEST.json"}
    assert "no download has made it again yet" in adapter.warnings[0]


def test_where_the_download_cannot_be_forced_a_real_run_names_the_command(in_tmp):
    raw_download(in_tmp)[0].write_bytes(b"other")
    adapter = FakeAdapter("local")
    adapter.forced_files = None
    with pytest.raises(Stopped, match="Make it again with: snakemake --forcerun results/raw"):
        pipeline(adapter).raw_files_intact(wc(dataset="digits"))


# ------------------------------------------------------------------ parse-time helpers
def test_an_unknown_run_is_a_missing_input_naming_it():
    pipe = pipeline(FakeAdapter(None))
    assert pipe.known_run(wc(run="a")) == []
    assert pipe.known_run(wc(run="aXb")) == ["(no run 'aXb' in the config)"]
    assert pipe.run_data(wc(run="a")) == layout.stored_files("digits")
    assert pipe.run_data(wc(run="aXb")) == []


def test_your_own_loss_and_optimizers_modules_are_code_stamps_of_the_train_job(
    tmp_path, monkeypatch
):
    """Editing the module of a run's own loss or optimiser retrains the run, as its own
    model's does: each module's stamp is an input of the run's train job."""
    from clusterbench.pipeline import code

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mylosses.py").write_text("def summed(o, t):\n    return o.sum()\n")
    (tmp_path / "myopt.py").write_text("def adam(p, lr):\n    return None\n")
    run = {"name": "a", "dataset": "digits", "workers": 1}
    run.update(loss="mylosses:summed", optimizer="myopt:adam")
    pipe = pipeline(FakeAdapter(None), config(run))
    stamps = pipe.known_run(wc(run="a"))
    assert stamps == sorted(str(code.model_stamp(n)) for n in ("mylosses:x", "myopt:x"))
    assert all(
        "mylosses.py" in Path(s).read_text() or "myopt.py" in Path(s).read_text() for s in stamps
    )


def test_the_data_input_is_a_plain_list_for_one_dataset_and_a_function_for_several():
    """Snakemake parses every file an input function returns again in every job: a sweep on
    one dataset gives its files as a list."""
    assert pipeline(FakeAdapter(None)).data_input() == layout.stored_files("digits")
    fake = {"format": "synthetic", "classes": 5, "samples": 1000, "shape": [3, 8, 8]}
    cfg = config(
        {"name": "a", "dataset": "digits", "workers": 1},
        {"name": "b", "dataset": "fake", "workers": 1, "model": "torchvision.resnet18"},
        datasets={**default_config()["datasets"], "fake": fake},
    )
    pipe = pipeline(FakeAdapter(None), cfg)
    function = pipe.data_input()
    assert function == pipe.run_data
    assert function(wc(run="a")) == layout.stored_files("digits")
    assert function(wc(run="b")) == layout.stored_files("fake", "synthetic")


def test_the_jobs_get_this_pythons_path_first_once():
    pipe = pipeline(FakeAdapter(None), env={"PATH": f"/usr/bin{os.pathsep}/venv/bin"})
    env = pipe.environment(python="/venv/bin/python")
    assert env["PATH"] == f"/venv/bin{os.pathsep}/usr/bin"
    assert env["PYTHONPATH"] == str(REPO / "workflow")
    assert json.loads(env["CLUSTERBENCH_DOWNLOAD"])["retries"] == 4
    assert "CLUSTERBENCH_SITE" not in env
    cfg = config(site="lab")
    assert pipeline(FakeAdapter(None), cfg).environment()["CLUSTERBENCH_SITE"] == "lab"


def test_the_remote_download_switch():
    assert not pipeline(FakeAdapter(None)).remote_download()
    env = {"CLUSTERBENCH_REMOTE_DOWNLOAD": "1"}
    assert pipeline(FakeAdapter(None), env=env).remote_download()
    with pytest.raises(Stopped, match="CLUSTERBENCH_REMOTE_DOWNLOAD='yes'"):
        pipeline(FakeAdapter(None), env={"CLUSTERBENCH_REMOTE_DOWNLOAD": "yes"}).remote_download()


def test_stage_code_is_one_stamp_of_the_module_or_every_module_of_the_package(in_tmp):
    from clusterbench.pipeline import code

    adapter = FakeAdapter("local", prefix="sub/")
    pipe = pipeline(adapter)
    stamp = Path(pipe.stage_code("train", "training"))  # not under the module's prefix
    assert stamp == code.STAMPS / "train+training.sha256"  # in the working directory
    lines = (in_tmp / stamp).read_text().splitlines()
    paths = [line.split("  ", 1)[1] for line in lines]
    assert paths[0] == "workflow/clusterbench/train.py"
    assert "workflow/clusterbench/training/loop.py" in paths and len(paths) > 5
    loop = REPO / "workflow" / "clusterbench" / "training" / "loop.py"
    digest = hashlib.sha256(loop.read_bytes()).hexdigest()
    assert f"{digest}  workflow/clusterbench/training/loop.py" in lines
    report = (in_tmp / pipe.stage_code("report")).read_text()
    assert "workflow/clusterbench/report/pages/" in report  # sub-packages are the stage's too
    assert pipe.script("train") == str(REPO / "scripts" / "train.py")
    # a cluster job's Snakemake writes nothing: it reads the stamp the main process wrote
    other = pipeline(FakeAdapter("slurm", main=False, prefix="job/"))
    assert not (in_tmp / other.stage_code("evaluate")).exists()


def test_a_stamp_is_written_when_the_code_changes_with_the_newest_files_time(tmp_path):
    from clusterbench.pipeline import code

    root = tmp_path / "checkout"
    (root / "pkg").mkdir(parents=True)
    a, b = root / "pkg" / "a.py", root / "pkg" / "b.py"
    a.write_text("A = 1\n")
    b.write_text("B = 1\n")
    os.utime(a, ns=(10**18, 10**18))
    os.utime(b, ns=(15 * 10**17, 15 * 10**17))
    stamp = tmp_path / "stamps" / "pkg.sha256"
    assert code.write_stamp(stamp, [a, b], root)
    assert stamp.stat().st_mtime_ns == 15 * 10**17  # the newest file's
    assert stamp.read_text().endswith("  pkg/b.py\n")
    assert not code.write_stamp(stamp, [a, b], root)  # unchanged: left alone
    a.write_text("A = 2\n")  # an edit: another content, a newer time
    assert code.write_stamp(stamp, [a, b], root)
    assert stamp.stat().st_mtime_ns == a.stat().st_mtime_ns > 15 * 10**17
    a.write_text("A = 1\n")  # restored, with its old time: as old as before
    os.utime(a, ns=(10**18, 10**18))
    assert code.write_stamp(stamp, [a, b], root)
    assert stamp.stat().st_mtime_ns == 15 * 10**17


def test_train_resources_are_computed_once_per_run_when_asked(monkeypatch):
    from clusterbench.pipeline import core

    computed = []
    monkeypatch.setattr(
        core, "train_resources", lambda run: computed.append(run["name"]) or {"nodes": 1}
    )
    pipe = pipeline(FakeAdapter(None))
    assert computed == []  # not at parse time
    assert pipe.train_resource("nodes")(wc(run="a")) == 1
    assert pipe.train_resource("qos")(wc(run="a")) is None
    assert computed == ["a"]


def test_comm_jobs_are_sized_as_train_jobs_when_asked_and_follow_the_reported_runs(monkeypatch):
    """The comm jobs (one per multi-worker environment and backend), each one's resources a
    train job's of its size, computed once when a job first asks; the report takes the comm
    results and benchmark files of the jobs of the runs it reports only."""
    from clusterbench.pipeline import comm_jobs, core

    computed = []
    monkeypatch.setattr(
        core, "train_resources", lambda run: computed.append(run) or {"nodes": run["nodes"]}
    )
    runs = [
        {"name": "one", "dataset": "digits", "workers": 1},
        {"name": "two", "dataset": "digits", "workers": 2, "cpus_per_worker": 2},
        {"name": "two-again", "dataset": "digits", "workers": 2, "lr": 0.1},
        {"name": "four", "dataset": "digits", "workers": 4, "nodes": 2, "backend": "ddp"},
    ]
    pipe = pipeline(FakeAdapter(None), config(*runs, comm={"max_bytes": 2**20}))
    assert list(pipe.comm_jobs) == ["2w-1n-cpu-horovod", "4w-2n-cpu-ddp"]
    assert pipe.comm_jobs["2w-1n-cpu-horovod"].runs == ("two", "two-again")
    assert computed == []  # not at parse time
    job = wc(comm="2w-1n-cpu-horovod")
    assert pipe.comm_resource("nodes")(job) == 1 and pipe.comm_resource("qos")(job) is None
    assert pipe.comm_resource("nodes")(wc(comm="4w-2n-cpu-ddp")) == 2
    sized = comm_jobs.job_run(
        pipe.comm_jobs["2w-1n-cpu-horovod"], pipe.runs["two"], {"max_bytes": 2**20}
    )
    assert computed[0] == sized and len(computed) == 2  # once per job
    assert pipe.comm_threads(job) == 2 * 2  # ranks x the first run's cpus_per_worker
    assert pipe.comm_files("results/comm/{name}/comm.json", ["one", "two-again"]) == [
        "results/comm/2w-1n-cpu-horovod/comm.json"
    ]
    reported = pipe.report_benchmarks(["one", "four"])
    assert "results/benchmarks/comm/4w-2n-cpu-ddp.tsv" in reported
    assert not any("2w-1n-cpu-horovod" in path for path in reported)
    off = pipeline(FakeAdapter(None), config(*runs, comm={"enabled": False}))
    assert off.comm_jobs == {} and off.comm_files("{name}", ["two"]) == []


# ------------------------------------------------------------------ the Snakemake adapter
class Rule:
    """A Snakemake rule as the adapter sees it: a name, hashed by identity."""

    def __init__(self, name: str) -> None:
        self.name = name


def fake_workflow(dag=None, executor=None):
    """What SnakemakeAdapter reads of Snakemake's ``workflow`` and ``rules`` (9.27's names); the
    rules under a module's names."""
    workflow = SimpleNamespace(
        is_main_process=True,
        remote_exec=False,
        modifier=SimpleNamespace(path_modifier=SimpleNamespace(replace_prefix=lambda p: p)),
        executor_plugin=None if executor is None else SimpleNamespace(name=executor),
        resource_settings=SimpleNamespace(cores=4),
        dag=dag,
    )
    names = RULES
    rules = SimpleNamespace(**{n: SimpleNamespace(rule=Rule(f"bench_{n}")) for n in names})
    return workflow, rules


def test_the_snakemake_adapter_reads_forced_and_planned_jobs_from_the_dag():
    workflow, rules = fake_workflow(executor="slurm")
    adapter = SnakemakeAdapter(workflow, rules)
    assert adapter.executor() == "slurm" and adapter.cores() == 4
    assert not adapter.forced("preprocess", ["m"]) and not adapter.force("m")  # no graph yet
    assert adapter.planned_jobs() is None
    job = SimpleNamespace(
        rule=rules.train.rule, wildcards_dict={"run": "a"}, input=["i"], output=["o"]
    )
    workflow.dag = SimpleNamespace(
        forcerules={rules.preprocess.rule}, forcefiles=set(), needrun_jobs=lambda: iter([job])
    )
    assert adapter.forced("preprocess", ["m"]) and not adapter.forced("train", ["m"])
    assert adapter.force("x") and adapter.forced("train", ["x"])
    assert adapter.planned_jobs() == [PlannedJob("train", {"run": "a"}, ("i",), ("o",))]


def test_the_snakemake_adapter_stops_with_the_message_alone(capsys):
    adapter = SnakemakeAdapter(*fake_workflow())
    with pytest.raises(SystemExit) as stop:
        adapter.stop("our message")
    assert stop.value.code == 1


# ------------------------------------------------------------------ the jobs' command options
def test_a_train_jobs_options_come_from_its_run_and_its_own_paths_quoted():
    cfg = config({"name": "a", "dataset": "digits", "workers": 2})
    got = commands.train_command(
        cfg["runs"][0], cfg, "pre/results/data/digits/meta.json", "my runs/a/run.json"
    )
    assert got.launch == "--np 2 --backend horovod --lock 'my runs/a/train.lock'"
    want_settings = cbconfig.canonical_json(cbconfig.data_settings(cfg["runs"][0], cfg))
    assert shlex.split(got.stage) == [
        "--data-dir",
        "pre/results/data/digits",
        "--data-settings",
        want_settings,
        "--out-dir",
        "my runs/a",
    ]


def test_an_elastic_train_job_gives_the_launcher_its_bounds():
    cfg = config(
        {"name": "e", "dataset": "digits", "workers": 2, "min_workers": 1, "max_workers": 3}
    )
    got = commands.train_command(cfg["runs"][0], cfg, "d/meta.json", "o/run.json")
    assert got.launch == "--np 2 --backend horovod --min-np 1 --max-np 3 --lock o/train.lock"


def test_an_evaluate_jobs_directories_are_its_data_and_output_folders_quoted():
    got = commands.evaluate_dirs("results/data/digits/meta.json", "x y/metrics.json")
    assert shlex.split(got) == ["--data-dir", "results/data/digits", "--out-dir", "x y"]


# ------------------------------------------------------------------------ the config's scheduler
def test_the_configs_scheduler_reaches_the_checks_and_the_jobs():
    """profiles/ssh's `config:` entry (scheduler=ssh) selects the ssh scheduler by itself: for
    the workflow's checks and, through the jobs' environment, for their launchers."""
    found = pipeline(FakeAdapter(), config(scheduler="ssh"), env={"PATH": "/bin"})
    assert found.env["CLUSTERBENCH_SCHEDULER"] == "ssh"
    assert found.environment()["CLUSTERBENCH_SCHEDULER"] == "ssh"
    assert found.plan.scheduler("local").name == "ssh"
    # auto: the environment as it is (the variable still works), nothing added
    plain = pipeline(FakeAdapter(), config(), env={"CLUSTERBENCH_SCHEDULER": "ssh"})
    assert plain.plan.scheduler("local").name == "ssh"
    assert "CLUSTERBENCH_SCHEDULER" not in pipeline(FakeAdapter(), config()).environment()


def test_a_scheduler_the_variable_contradicts_is_refused_naming_both():
    with pytest.raises(Stopped, match=r"scheduler: ssh .* CLUSTERBENCH_SCHEDULER=local disagree"):
        pipeline(FakeAdapter(), config(scheduler="ssh"), env={"CLUSTERBENCH_SCHEDULER": "local"})
    same = pipeline(FakeAdapter(), config(scheduler="ssh"), env={"CLUSTERBENCH_SCHEDULER": "SSH"})
    assert same.env["CLUSTERBENCH_SCHEDULER"] == "ssh"


def test_a_scheduler_clusterbench_has_not_is_refused_naming_the_key_and_those_it_has():
    with pytest.raises(Stopped, match=r"scheduler: 'pbs' is not a scheduler .*\(auto, .*ssh"):
        pipeline(FakeAdapter(), config(scheduler="pbs"))
