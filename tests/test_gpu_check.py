"""`make gpu-check` (benchmarks/gpu_check.py): without a GPU it stops at once saying so; its
config is the synthetic ResNet-50 on every GPU of the machine, under DDP and under Horovod with
each way of allreducing the gradients (one buffer, buckets); ``--cpu-smoke`` runs the same
steps through the real workflow on the CPU at tiny sizes, both Horovod paths included."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest
import torch
from clusterbench import config as cb
from clusterbench.formats import FORMATS
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402

needs_synthetic = pytest.mark.skipif(
    "synthetic" not in FORMATS.names(), reason="the workflow has no synthetic data yet"
)


def test_without_a_gpu_it_stops_at_once_saying_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--work-dir", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err
    assert "make gpu-check needs a CUDA GPU" in err and "torch.cuda.is_available() is False" in err
    assert "GPU_CHECK_ARGS=--cpu-smoke" in err
    assert not (tmp_path / "work").exists()  # nothing started


#: The cluster executor plugins, which a GPU machine's offline set-up may lack.
CLUSTER_PLUGINS = ("snakemake_executor_plugin_", "snakemake_interface_executor_plugins")


def module_level_imports(tree: ast.Module) -> list[str]:
    """The modules a file imports when it is imported: at module level, outside any function
    or class (inside ``if`` and ``try`` too)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        todo += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    return found


def test_collecting_the_gpu_tests_imports_no_cluster_executor_plugin():
    """`pytest -m gpu` collects every test module (the marker selects after collection): none
    of them, nor the modules they import from tests/, may import a cluster plugin at module
    level (the last lent GPU's collection stopped on two that did). tests/clusters/
    steady_polls.py is a script Snakemake runs, never imported at collection."""
    files = [*(REPO / "tests").glob("*.py"), *(REPO / "tests" / "clusters").glob("*.py")]
    offenders = {
        str(path.relative_to(REPO)): name
        for path in files
        if path.name != "steady_polls.py"
        for name in module_level_imports(ast.parse(path.read_text(encoding="utf-8")))
        if name.startswith(CLUSTER_PLUGINS)
    }
    assert len(files) > 80 and offenders == {}


def test_make_gpu_check_is_the_script_with_its_args():
    dry = subprocess.run(
        ["make", "-n", "gpu-check", "GPU_CHECK_ARGS=--minutes 2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "python benchmarks/gpu_check.py --minutes 2" in dry.stdout


def test_the_check_trains_a_synthetic_resnet50_on_every_gpu_in_bf16_channels_last():
    config = gpu_check.check_config(gpus=4, minutes=1.5, cpu_smoke=False)
    (dataset,) = config["datasets"].values()
    assert dataset["format"] == "synthetic" and dataset["shape"] == [3, 224, 224]
    runs = config["run_defaults"]
    assert runs["model"] == "torchvision.resnet50"
    assert (runs["workers"], runs["gpus_per_node"], runs["minutes"]) == (4, 4, 1.5)
    assert runs["precision"] == "bf16" and runs["channels_last"] is True
    runs_by = sorted((r["backend"], r.get("grad_allreduce", "auto")) for r in config["runs"])
    assert runs_by == [("ddp", "auto"), ("horovod", "buckets"), ("horovod", "one")]
    one_gpu = gpu_check.check_config(gpus=1, minutes=0.5, cpu_smoke=False)
    runs_by = sorted((r["backend"], r.get("grad_allreduce", "auto")) for r in one_gpu["runs"])
    assert runs_by == [("ddp", "auto"), ("horovod", "one")]  # on one GPU the two are the same
    smoke = gpu_check.check_config(gpus=0, minutes=1, cpu_smoke=True)
    assert smoke["run_defaults"]["gpus_per_node"] == 0 and smoke["run_defaults"]["epochs"] == 1
    assert smoke["run_defaults"]["model"] == "torchvision.resnet50"  # the same model, smaller
    assert list(smoke["datasets"].values())[0]["shape"] == [3, 32, 32]
    assert smoke["comm"]["max_bytes"] == 2**16  # the interconnect at tiny sizes on the CPU
    assert config.get("comm", {}).get("max_bytes") is None  # on GPUs, the stage's defaults


def test_the_check_reads_a_folder_of_jpegs_in_place_decoding_on_the_gpus(tmp_path):
    config = gpu_check.check_config(gpus=2, minutes=0.5, cpu_smoke=False, jpegs=tmp_path)
    assert config["datasets"]["jpegs"] == {
        "format": "image-folder",
        "path": str(tmp_path),
        "image_size": [224, 224],
    }
    (run,) = [r for r in config["runs"] if r["dataset"] == "jpegs"]
    assert run == {**gpu_check.JPEG_RUN, "decode": "auto"}  # auto: the GPU on GPUs
    assert config["run_defaults"]["model"] == "torchvision.resnet50"
    smoke = gpu_check.check_config(gpus=0, minutes=1, cpu_smoke=True, jpegs=tmp_path)
    assert smoke["datasets"]["jpegs"]["image_size"] == [32, 32]


@needs_synthetic
def test_the_checks_configs_are_valid(tmp_path):
    jpegs = gpu_check.make_jpegs(tmp_path, cpu_smoke=True)
    assert len(list(jpegs.rglob("*.JPEG"))) == gpu_check.JPEGS["cpu"][0]
    for config in (
        gpu_check.check_config(8, 1, False),
        gpu_check.check_config(8, 1, False, jpegs),
        gpu_check.check_config(0, 1, True, jpegs),
        cb.load_file(gpu_check.CONFIG),
    ):
        cb.validate(config)


@pytest.mark.slow
@needs_synthetic
def test_cpu_smoke_runs_the_three_steps_and_prints_images_per_second(tmp_path):
    work = tmp_path / "work"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--cpu-smoke"]
    proc = subprocess.run(
        [*cmd, "--work-dir", str(work)], capture_output=True, text=True, timeout=900, cwd=REPO
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = out[out.index("== make gpu-check: summary") :]
    for step in ("tests", "bench", "workflow"):
        assert f"   {step}" in summary and "FAILED" not in summary
    for run, mode in (
        ("resnet50-horovod-one", "one"),
        ("resnet50-horovod-buckets", "buckets"),
        ("resnet50-ddp", "buckets"),
        ("resnet50-jpegs-ddp", "buckets"),
    ):
        # one line of the table each: images/s, per GPU (here: per rank), MFU, and the rest
        line = next(x for x in summary.splitlines() if f"workflow {run} " in x)
        assert re.search(r" [\d,]+ +[\d,]+ +[\d.]+ %  2 rank\(s\) \(cpu\), 1 epoch\(s\); ", line)
        assert f"gradients allreduced: {mode}, exposed communication " in line, line
        info = json.loads((work / "results" / "runs" / run / "run.json").read_text())
        assert info["run"]["precision"] == "bf16" and info["world"]["size"] == 2
        assert info["effective"]["grad_allreduce"] == mode
        assert info["flops"]["per_sample"]["forward"] > 0  # ResNet-50's, counted once
        assert all(text in summary for text in info["throughput"]["lines"])
    jpegs = next(x for x in summary.splitlines() if "workflow resnet50-jpegs-ddp " in x)
    assert jpegs.endswith("; decoded on the CPU")  # decode: auto, on the CPU
    info = json.loads((work / "results" / "runs" / "resnet50-jpegs-ddp" / "run.json").read_text())
    assert info["data"]["decode_reason"] == "auto: the run trains on the CPU"
    assert "gpu: skipped (no GPU" in summary  # F5 and compile say why they have no figure
    assert "decode: skipped (no GPU" in summary  # and the decode rate
    assert (work / "results" / "report" / "report.pdf").is_file()
