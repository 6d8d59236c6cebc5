"""The pre-flight checks: Slurm jobs larger than their partition (the Slurm scheduler's
check) and local runs needing more cores than local jobs get are refused up front."""

from __future__ import annotations

import pytest
from clusterbench.launch.schedulers.slurm import check_slurm, parse_sinfo, slurm_problems
from clusterbench.preflight import PreflightError
from clusterbench.resources import train_resources

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


def test_check_names_every_bad_run():
    jobs = [
        ("fine", train_resources(run(workers=4))),
        ("huge", train_resources(run(workers=1000, nodes=10))),
    ]
    with pytest.raises(PreflightError) as err:
        check_slurm(jobs, SINFO)
    msg = str(err.value)
    assert "'huge' asks for 1000 workers x 1 CPU(s) = 1000 CPUs" in msg
    assert "partition 'cpu' (10 node(s), 640 CPUs" in msg and "fine" not in msg
    check_slurm(jobs[:1], SINFO)  # no error


def test_local_problems_refuse_a_run_needing_more_cores_than_local_jobs_get():
    from clusterbench.preflight import local_problems

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
    from clusterbench.preflight import count_gpus

    assert count_gpus(visible, listing) == gpus


def test_local_problems_name_gpus_asked_where_none_is_usable():
    from clusterbench.preflight import local_problems

    assert local_problems("g", 1, 1, cores=2, gpus_per_node=1, gpus=1) == []
    (problem,) = local_problems("g", 1, 1, cores=2, gpus_per_node=1, gpus=0)
    assert "run 'g' asks for 1 GPU(s) per node (gpus_per_node)" in problem
    assert "none usable" in problem
    both = local_problems("g", 4, 1, cores=2, gpus_per_node=2, gpus=1)
    assert len(both) == 2 and "1 usable" in both[0] and "needs 4 cores" in both[1]
