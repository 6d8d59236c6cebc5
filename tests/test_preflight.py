"""The pre-flight checks, each behind its scheduler's ``unavailable``: Slurm jobs larger than
their partition, SGE jobs ``qsub -w v`` refuses, and local runs needing more cores (or GPUs)
than local jobs get are refused up front; ``clusterbench.pipeline.preflight`` asks the
executor's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from clusterbench.launch.schedulers import LaunchError, PreflightContext, PreflightError, sge, slurm
from clusterbench.launch.schedulers.local import (
    LocalScheduler,
    count_gpus,
    local_problems,
)
from clusterbench.launch.schedulers.sge import SgeScheduler
from clusterbench.launch.schedulers.slurm import (
    SlurmScheduler,
    parse_sinfo,
    slurm_problems,
)
from clusterbench.pipeline import preflight
from clusterbench.pipeline.resources import train_resources

# sinfo -h -o '%P|%D|%c|%G' on a site with a heterogeneous GPU partition
SINFO = """\
cpu*|10|64|(null)
gpu|4|32|gpu:a100:4(S:0-1)
gpu|2|48|gpu:h100:8,shard:16
debug|1|8+|(null)
"""


def run(**kw):
    base = dict(name="r", workers=2, nodes=1, gpus_per_node=0, cpus_per_worker=1)
    return {**base, "mem_mb": 1000, "runtime": 10, **kw}


def test_parse_sinfo_aggregates_node_groups():
    parts = parse_sinfo(SINFO)
    assert parts["cpu"].default and not parts["gpu"].default
    assert (parts["cpu"].nodes, parts["cpu"].cpus, parts["cpu"].max_cpus_per_node) == (10, 640, 64)
    gpu = parts["gpu"]
    assert (gpu.nodes, gpu.cpus, gpu.max_cpus_per_node, gpu.max_gpus_per_node) == (6, 224, 48, 8)
    assert parts["debug"].max_cpus_per_node == 8


@pytest.mark.parametrize(
    "request_, partition, ok",
    [
        (run(workers=64, nodes=1), None, True),
        (run(workers=640, nodes=10), None, True),
        (run(workers=641, nodes=10), None, False),  # more CPUs than the partition
        (run(workers=11, nodes=11), None, False),  # more nodes
        (run(workers=66, nodes=1), None, False),  # more than one node holds
        (run(workers=8, nodes=1, cpus_per_worker=8), None, True),
        (run(workers=8, nodes=1, cpus_per_worker=9), None, False),
        (run(workers=16, nodes=2, gpus_per_node=8), "gpu", True),
        (run(workers=18, nodes=2, gpus_per_node=9), "gpu", False),  # GPUs per node
        (run(workers=2, nodes=1, gpus_per_node=1), None, False),  # no GPUs in cpu
        (run(workers=1, nodes=1), "nonexistent", False),
        (run(workers=64, nodes=1, priority=-5, qos="low"), None, True),  # --nice is no size
    ],
)
def test_slurm_problems(request_, partition, ok):
    resources = train_resources(request_)
    if partition:
        resources["slurm_partition"] = partition
    problems = slurm_problems("r", resources, parse_sinfo(SINFO))
    assert (problems == []) == ok, problems


def test_local_problems_refuse_a_run_needing_more_cores_than_local_jobs_get():
    assert local_problems("r", workers=2, cpus_per_worker=1, cores=2) == []
    (problem,) = local_problems("big", workers=4, cpus_per_worker=1, cores=2)
    assert "run 'big' needs 4 cores (4 workers x cpus_per_worker=1)" in problem
    assert "local jobs get 2" in problem
    assert local_problems("r", workers=2, cpus_per_worker=2, cores=3) != []


@pytest.mark.parametrize(
    ("visible", "listing", "gpus"),
    [
        (None, None, 0),  # no nvidia-smi, or it failed
        (None, "GPU 0: NVIDIA H100 (UUID: GPU-1)\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n", 2),
        ("0", "GPU 0: A (UUID: GPU-1)\nGPU 1: B (UUID: GPU-2)\n", 1),
        ("", "GPU 0: A (UUID: GPU-1)\n", 0),
        ("-1", "GPU 0: A (UUID: GPU-1)\n", 0),
        ("0,1,2", "GPU 0: A (UUID: GPU-1)\n", 1),
        (None, "No devices were found\n", 0),
    ],
)
def test_count_gpus_from_nvidia_smi_and_cuda_visible_devices(visible, listing, gpus):
    assert count_gpus(visible, listing) == gpus


def test_local_problems_name_gpus_asked_where_none_is_usable():
    assert local_problems("g", 1, 1, cores=2, gpus_per_node=1, gpus=1) == []
    (problem,) = local_problems("g", 1, 1, cores=2, gpus_per_node=1, gpus=0)
    assert "run 'g' asks for 1 GPU(s) per node (gpus_per_node)" in problem
    assert "none usable" in problem
    both = local_problems("g", 4, 1, cores=2, gpus_per_node=2, gpus=1)
    assert len(both) == 2 and "1 usable" in both[0] and "needs 4 cores" in both[1]


# ------------------------------------------------------------------ behind the scheduler interface
def resolved(**kw):
    """A resolved run, as rules/common.smk holds them (RUNS)."""
    return {**run(**kw), "min_workers": None, "max_workers": None, "on_unavailable": "skip"}


def context(runs, cores=None, settings=None, asked=None):
    """What rules/common.smk hands a scheduler: the runs, and each train job's resources as
    they would be submitted (here: clusterbench.pipeline.resources', and a record of the keys
    asked)."""

    def resources(name, keys):
        if asked is not None:
            asked.append((name, tuple(keys)))
        return train_resources(runs[name])

    return PreflightContext(runs, resources, cores=cores, executor_settings=settings)


def test_the_slurm_scheduler_asks_sinfo_once_and_names_each_run_too_big(monkeypatch):
    calls = []
    monkeypatch.setattr(slurm, "sinfo", lambda: calls.append("sinfo") or SINFO)
    runs = {"fine": resolved(workers=4), "huge": resolved(workers=1000, nodes=10)}
    asked = []
    reasons = SlurmScheduler.unavailable(context(runs, asked=asked))
    assert list(reasons) == ["huge"] and calls == ["sinfo"]
    assert "'huge' asks for 1000 workers x 1 CPU(s) = 1000 CPUs" in reasons["huge"]
    assert "partition 'cpu' (10 node(s), 640 CPUs" in reasons["huge"]
    assert "fine" not in reasons["huge"]
    assert asked == [(name, slurm.SLURM_RESOURCE_KEYS) for name in runs]
    assert preflight.unavailable("slurm", context(runs)) == reasons


def test_the_slurm_scheduler_without_sinfo_cannot_decide(monkeypatch):
    def no_sinfo():
        raise PreflightError("cannot ask Slurm for its partitions (sinfo): not found")

    monkeypatch.setattr(slurm, "sinfo", no_sinfo)
    with pytest.raises(PreflightError, match="sinfo"):
        preflight.unavailable("slurm", context({"r": resolved()}))


def test_the_sge_scheduler_verifies_each_job_in_the_executors_pe(monkeypatch):
    seen = []

    def sge_problems(name, resources, default_pe):
        seen.append((name, default_pe))
        return [f"run {name!r}: SGE would never run its job"] if name == "huge" else []

    monkeypatch.setattr(sge, "sge_problems", sge_problems)
    runs = {"fine": resolved(), "huge": resolved(workers=64)}
    asked = []
    reasons = SgeScheduler.unavailable(
        context(runs, settings=SimpleNamespace(pe="threads"), asked=asked)
    )
    assert reasons == {"huge": "run 'huge': SGE would never run its job"}
    assert seen == [("fine", "threads"), ("huge", "threads")]
    assert asked == [(name, ("runtime", *sge.VERIFY_KEYS)) for name in runs]
    SgeScheduler.unavailable(context({"r": resolved()}))  # no executor settings: smp
    assert seen[-1] == ("r", "smp")


def test_the_sge_scheduler_without_a_qmaster_cannot_decide(monkeypatch):
    def down(*args):
        raise LaunchError("`qsub -w v ...` failed: unable to send message to qmaster")

    monkeypatch.setattr(sge, "sge_problems", down)
    with pytest.raises(PreflightError, match="unable to send message to qmaster"):
        preflight.unavailable("sge", context({"r": resolved()}))


def test_the_local_scheduler_counts_the_cores_local_jobs_get(monkeypatch):
    from clusterbench.launch.schedulers import local

    monkeypatch.setattr(local.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(local, "local_gpus", lambda: 0)
    runs = {"four": resolved(workers=4), "gpu": resolved(workers=1, gpus_per_node=1)}
    runs["elastic"] = {**resolved(workers=2), "max_workers": 6}  # sized for its most ranks
    assert list(LocalScheduler.unavailable(context(runs, cores=3))) == ["four", "gpu", "elastic"]
    # a dry run (cores unknown) plans with the machine's 8 cores
    reasons = LocalScheduler.unavailable(context(runs))
    assert list(reasons) == ["gpu"] and "none usable" in reasons["gpu"]
    assert "needs 6 cores (6 workers" in LocalScheduler.unavailable(context(runs, 5))["elastic"]


def test_an_executor_without_a_scheduler_checks_nothing():
    assert preflight.unavailable("kubernetes", context({"r": resolved(workers=10**6)})) == {}


# ------------------------------------------------------------------ SGE: the GPU complex
# `qconf -sc` of SGE 8.1.9 (a few rows), with a site's consumable `gpu`
QCONF_SC = """\
#name               shortcut   type        relop requestable consumable default  urgency
#----------------------------------------------------------------------------------------
arch                a          RESTRING    ==    YES         NO         NONE     0
gpu                 gpu        INT         <=    YES         JOB        0        0
h_vmem              h_vmem     MEMORY      <=    YES         NO         0        0
hostname            h          HOST        ==    YES         NO         NONE     0
slots               s          INT         <=    YES         YES        1        1000
tmem                tmem       MEMORY      <=    YES         NO         0        0
# >#< starts a comment but comments are not saved across edits --------
"""


def test_parse_complexes_and_what_can_carry_a_gpu_count():
    complexes = sge.parse_complexes(QCONF_SC)
    assert set(complexes) == {"arch", "gpu", "h_vmem", "hostname", "slots", "tmem"}
    assert complexes["gpu"] == sge.Complex("gpu", "gpu", "INT", "YES", "JOB")
    assert sge.complex_problem("r", "gpu", complexes) is None
    assert sge.complex_problem("r", "s", complexes) is None  # a shortcut names it too
    missing = sge.complex_problem("r", "gpus", complexes)
    assert "run 'r': sge_gpu_complex 'gpus' is no complex of this SGE cell" in missing
    assert "its consumable ones: gpu, slots" in missing
    wrong = sge.complex_problem("r", "arch", complexes)
    assert "cannot be requested as a GPU count (`qconf -sc`: type RESTRING" in wrong


def test_the_sge_scheduler_checks_the_gpu_complex_once_before_qsub(monkeypatch):
    """A run naming a complex the cell lacks is refused without its `qsub -w v` (which would
    fail on the unknown resource); `qconf -sc` is asked once, and only for runs with GPUs."""
    asked, verified = [], []
    complexes = sge.parse_complexes(QCONF_SC)
    monkeypatch.setattr(sge, "sge_complexes", lambda: asked.append(1) or complexes)
    monkeypatch.setattr(sge, "sge_problems", lambda name, *_: verified.append(name) or [])
    runs = {
        "cpu": {**resolved(), "sge_gpu_complex": "nope"},  # no GPUs: the complex is unused
        "gpu": {**resolved(gpus_per_node=2), "sge_gpu_complex": "gpu"},
        "typo": {**resolved(gpus_per_node=2), "sge_gpu_complex": "gpus"},
        "other": {**resolved(gpus_per_node=1), "sge_gpu_complex": "gpu"},
    }
    reasons = SgeScheduler.unavailable(context(runs))
    assert list(reasons) == ["typo"] and "'gpus' is no complex" in reasons["typo"]
    assert verified == ["cpu", "gpu", "other"] and asked == [1]
    assert SgeScheduler.unavailable(context({"cpu": runs["cpu"]})) == {} and asked == [1]
