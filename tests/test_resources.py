"""clusterbench.pipeline.resources (and the schedulers' parts of it): the resource dicts, and the
sbatch/qsub lines the real plugins build.

The executor plugins' own command builders (snakemake-executor-plugin-slurm's
``get_submit_command``, the SGE plugin's ``get_submit_command``) are called with a job carrying
our resources, so a plugin upgrade that changes the mapping fails here.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from clusterbench import config as cb
from clusterbench.core import preemption
from clusterbench.launch.schedulers.sge import SGE_MPI_PE
from clusterbench.pipeline.resources import TRAIN_RESOURCE_KEYS, train_resources
from conftest import default_config

REPO = Path(__file__).resolve().parent.parent


def run_config(**overrides):
    run = {
        "name": "r",
        "workers": 1,
        "nodes": 1,
        "gpus_per_node": 0,
        "cpus_per_worker": 1,
        "mem_mb": 2000,
        "runtime": 30,
    }
    run.update(overrides)
    return run


class _Resources(dict):
    """What the plugins see as ``job.resources``: ``.get`` and attribute access."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def fake_job(resources: dict, threads: int = 1):
    return SimpleNamespace(
        resources=_Resources(resources), threads=threads, name="train", is_group=lambda: False
    )


# The executor plugins are imported where a test uses them, not at collection: `pytest -m gpu`
# (make gpu-check) collects this module on a GPU machine that may have no cluster plugin.


def sbatch_line(resources: dict, threads: int = 1) -> list[str]:
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command as slurm_submit
    from snakemake_executor_plugin_slurm.validation import validate_slurm_extra

    job = fake_job(resources, threads)
    validate_slurm_extra(job)
    params = {
        "run_uuid": "u",
        "slurm_logfile": "log",
        "comment_str": "c",
        "account": "",
        "partition": "",
        "workdir": "/w",
    }
    return shlex.split(slurm_submit(job, params))


def qsub_line(resources: dict, tmp_path: Path) -> list[str]:
    from snakemake_executor_plugin_sge.submit_string import get_submit_command as sge_submit

    settings = SimpleNamespace(pe="smp")  # what profiles/sge sets as sge-pe
    cmd = sge_submit(
        fake_job(resources),
        {"run_uuid": "u", "log_dir": str(tmp_path / "logs")},
        settings,
        script_path="/job.sh",
    )
    return shlex.split(cmd)


def last_l(argv: list[str], name: str) -> str | None:
    """The value qsub applies for ``-l name=...``: the last one given wins."""
    values = [
        a.split("=", 1)[1]
        for i, a in enumerate(argv)
        if i and argv[i - 1] == "-l" and a.startswith(f"{name}=")
    ]
    return values[-1] if values else None


def option(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag:
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


# ------------------------------------------------------------------------------------------------
# the dicts


def test_single_worker_is_not_an_mpi_job() -> None:
    res = train_resources(run_config(cpus_per_worker=2))
    assert "mpi" not in res and "tasks" not in res and "sge_pe" not in res
    assert res["cpus_per_task"] == 2
    assert res["threads"] == 2  # SGE slots in the profile's smp PE
    assert set(res) <= set(TRAIN_RESOURCE_KEYS)


def test_multi_worker_is_an_mpi_job_with_one_slot_per_worker() -> None:
    res = train_resources(run_config(workers=4, nodes=2, cpus_per_worker=2, mem_mb=3000))
    assert res["mpi"] == "srun"
    assert res["tasks"] == 4
    assert res["threads"] == 4
    assert res["sge_pe"] == SGE_MPI_PE
    assert res["mem_mb"] == 3000
    assert res["mem_mb_per_cpu"] == 375  # 3000 MB over 4 ranks x 2 CPUs
    assert set(res) <= set(TRAIN_RESOURCE_KEYS)


def test_memory_per_cpu_rounds_up() -> None:
    res = train_resources(run_config(workers=3, mem_mb=1000))
    assert res["mem_mb_per_cpu"] == 334


def refused(**overrides) -> str:
    """The config's refusal of a run with ``overrides`` (clusterbench.pipeline.resources checks
    nothing
    again: a run reaches it through the config's validation)."""
    cfg = default_config()
    cfg["runs"] = [{**cfg["runs"][0], **overrides}]
    with pytest.raises(cb.ConfigError) as err:
        cb.validate(cfg)
    return str(err.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"workers": 0}, r"runs\[0\]\.workers: 0 is less than the minimum of 1"),
        ({"workers": 1, "nodes": 2}, r"runs\[0\]\.nodes: 2 nodes for 1 workers"),
        ({"gpus_per_node": -1}, r"runs\[0\]\.gpus_per_node: -1 is less than the minimum of 0"),
        ({"cpus_per_worker": 1.5}, r"runs\[0\]\.cpus_per_worker: 1.5 is not of type 'integer'"),
        ({"mem_mb": True}, r"runs\[0\]\.mem_mb: True is not of type 'integer'"),
        ({"runtime": None}, r"runs\[0\]\.runtime: None is not of type 'integer'"),
    ],
)
def test_bad_run_is_rejected_naming_the_field(overrides, message) -> None:
    assert re.search(message, refused(**overrides)), refused(**overrides)


def test_a_missing_field_takes_the_schemas_default() -> None:
    """A run built by hand gets the schema's defaults, never a default of this module's own:
    the warning comes ``warning_seconds`` (120 by default) before the job's end."""
    run = run_config(workers=2, nodes=2)
    del run["nodes"]
    res = train_resources(run)
    defaults = cb.load_schema()["$defs"]["run_settings"]["properties"]
    assert res["nodes"] == defaults["nodes"]["default"] == 1
    assert defaults["warning_seconds"]["default"] == 120
    assert option(sbatch_line(res), "--signal") == "B:USR1@120"


# ------------------------------------------------------------------------------------------------
# what the Slurm plugin makes of them


def test_sbatch_two_workers_two_nodes_with_gpus() -> None:
    argv = sbatch_line(train_resources(run_config(workers=2, nodes=2, gpus_per_node=2)))
    assert option(argv, "--nodes") == "2"
    assert option(argv, "--ntasks") == "2"
    assert option(argv, "--ntasks-per-node") == "1"
    assert option(argv, "--gpus-per-node") == "2"
    assert option(argv, "--cpus-per-task") == "1"
    assert option(argv, "--mem-per-cpu") == "1000"
    assert option(argv, "-t") == "30"
    # The traps: no per-job --gpus and no --ntasks-per-gpu, no whole-node --mem.
    assert not any(a.startswith(("--ntasks-per-gpu", "--gpus=", "--gres")) for a in argv)
    assert "--mem" not in argv


def test_sbatch_uneven_workers_have_no_per_node_count() -> None:
    argv = sbatch_line(train_resources(run_config(workers=3, nodes=2)))
    assert option(argv, "--ntasks") == "3"
    assert option(argv, "--ntasks-per-node") is None


def test_sbatch_single_worker() -> None:
    res = train_resources(run_config(cpus_per_worker=2, gpus_per_node=1))
    argv = sbatch_line(res, threads=2)
    assert option(argv, "--ntasks") == "1"
    assert option(argv, "--cpus-per-task") == "2"
    assert option(argv, "--gpus-per-node") == "1"
    assert option(argv, "--mem-per-cpu") == "1000"


# ------------------------------------------------------------------------------------------------
# what the SGE plugin makes of them


def test_qsub_multi_worker_uses_mpi_pe_and_lifts_h_vmem(tmp_path: Path) -> None:
    argv = qsub_line(train_resources(run_config(workers=2, nodes=2, mem_mb=3000)), tmp_path)
    assert argv[argv.index("-pe") + 1 : argv.index("-pe") + 3] == ["mpi", "2"]
    assert last_l(argv, "h_vmem") == "INFINITY"
    assert last_l(argv, "tmem") == "1500M"
    assert last_l(argv, "h_rt") == "00:30:00"


def test_qsub_single_worker_uses_profile_pe(tmp_path: Path) -> None:
    argv = qsub_line(train_resources(run_config(cpus_per_worker=2)), tmp_path)
    assert argv[argv.index("-pe") + 1 : argv.index("-pe") + 3] == ["smp", "2"]
    assert last_l(argv, "h_vmem") == "INFINITY"


# ------------------------------------------------------------------------------------------------
# a run's priority and qos


def test_priority_and_qos_are_resources_only_when_set() -> None:
    res = train_resources(run_config(workers=2))
    assert "qos" not in res and "sge_priority" not in res and "--nice" not in str(res)
    res = train_resources(run_config(workers=2, priority=0, qos=None))
    assert "qos" not in res and "sge_priority" not in res
    res = train_resources(run_config(workers=2, priority=7, qos="high"))
    assert res["qos"] == "high" and res["sge_priority"] == 7
    assert set(res) <= set(TRAIN_RESOURCE_KEYS)


@pytest.mark.parametrize(
    ("priority", "message"),
    [
        (1025, "1025 is greater than the maximum of 1024"),
        (-1024, "-1024 is less than the minimum of -1023"),
        (1.5, "1.5 is not of type 'integer'"),
    ],
)
def test_bad_priority_is_rejected(priority, message) -> None:
    assert f"runs[0].priority: {message}" in refused(priority=priority)


@pytest.mark.parametrize(("priority", "nice"), [(7, "-7"), (-5, "5"), (1024, "-1024")])
def test_sbatch_priority_is_the_opposite_nice_and_qos_is_qos(priority, nice) -> None:
    """Slurm's nice lowers a job's priority: a run's priority P is `--nice=-P`."""
    argv = sbatch_line(train_resources(run_config(workers=2, nodes=2, priority=priority, qos="hi")))
    assert option(argv, "--nice") == nice
    assert option(argv, "--qos") == "hi"
    assert option(argv, "--ntasks-per-node") == "1"  # the other slurm_extra flags stay


def test_sbatch_without_priority_or_qos() -> None:
    argv = sbatch_line(train_resources(run_config(workers=2)))
    assert option(argv, "--nice") is None and option(argv, "--qos") is None


def profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


@pytest.mark.parametrize("priority", [5, -7])
def test_qsub_priority_is_p_and_the_profiles_w_e_and_notify_stay(tmp_path: Path, priority) -> None:
    # profiles/sge default-resources, evaluated as Snakemake evaluates them
    profile_default = {
        "sge_extra": ast.literal_eval(profile("sge")["default-resources"]["sge_extra"])
    }
    res = train_resources(run_config(workers=2, priority=priority, qos="hi"))
    assert "sge_extra" not in res  # so the profile's default reaches train jobs too
    argv = qsub_line({**profile_default, **res}, tmp_path)
    assert option(argv, "-p") == str(priority)
    assert option(argv, "-w") == "e"
    assert "-notify" in argv  # SIGUSR2 before a kill: the preemption warning
    assert "hi" not in argv  # no QOS on SGE


@pytest.mark.parametrize("workers", [1, 2])
def test_sbatch_asks_for_the_warning_and_the_profile_for_requeue(workers) -> None:
    """A run's warning_seconds N is `--signal=B:USR1@N` (to the batch script's process, which
    the profile's precommand makes clusterbench's stand-in for the batch shell: see
    tests/test_slurm_batch.py), for one worker and for an MPI job; 0 asks for none. The profile
    asks for requeue."""
    run = run_config(workers=workers, nodes=workers, warning_seconds=90, priority=3)
    argv = sbatch_line(train_resources(run))
    assert option(argv, "--signal") == "B:USR1@90"
    assert option(argv, "--nice") == "-3"
    assert option(sbatch_line(train_resources({**run, "warning_seconds": 0})), "--signal") is None
    assert profile("slurm")["slurm-requeue"] is True
    assert profile("sge")["precommand"] == preemption.IGNORE_IN_SHELL


def test_qsub_without_priority(tmp_path: Path) -> None:
    assert option(qsub_line(train_resources(run_config(workers=2)), tmp_path), "-p") is None


# ------------------------------------------------------------------------------------------------
# GPUs on SGE: the site's complex a run names


def test_qsub_asks_the_sites_gpu_complex_for_the_gpus_per_node(tmp_path: Path) -> None:
    """A run's `sge_gpu_complex` C and `gpus_per_node` G are `-l C=G` (beside the lifted
    h_vmem); without a complex, or without GPUs, nothing is asked."""
    run = run_config(workers=2, gpus_per_node=2, sge_gpu_complex="gpu")
    argv = qsub_line(train_resources(run), tmp_path)
    assert last_l(argv, "gpu") == "2"
    assert last_l(argv, "h_vmem") == "INFINITY" and last_l(argv, "tmem") == "1000M"
    one = qsub_line(train_resources({**run, "workers": 1}), tmp_path)
    assert last_l(one, "gpu") == "2"
    assert last_l(qsub_line(train_resources({**run, "gpus_per_node": 0}), tmp_path), "gpu") is None
    plain = train_resources({**run, "sge_gpu_complex": None})
    assert plain["sge_resources"] == "h_vmem=INFINITY,tmem=1000M"
    # Slurm asks for them its own way, whatever the SGE complex is
    assert option(sbatch_line(train_resources(run)), "--gpus-per-node") == "2"


def test_the_gpu_request_is_sized_by_how_the_complex_counts(monkeypatch) -> None:
    """SGE multiplies a per-slot (`consumable YES`) complex by the slots on each host: a
    4-rank, 4-GPU node asked 4 x 4 = 16 and was skipped. The request is G per job or host for
    a `JOB` or `HOST` complex, G / slots per node for a per-slot one (a whole number for an INT
    complex, checked before any job), as the cell's `qconf -sc` says."""
    from clusterbench.launch.schedulers import sge

    cell = {
        "gpu": sge.Complex("gpu", "gpu", "INT", "YES", "JOB"),
        "gpu_host": sge.Complex("gpu_host", "gh", "INT", "YES", "HOST"),
        "gpu_slot": sge.Complex("gpu_slot", "gs", "INT", "YES", "YES"),
        "gpu_share": sge.Complex("gpu_share", "gsh", "DOUBLE", "YES", "YES"),
    }
    monkeypatch.setattr(sge, "cell_complexes", lambda: cell)

    def asked(complex_name: str, **keys) -> str:
        run = run_config(gpus_per_node=4, sge_gpu_complex=complex_name, **keys)
        return train_resources(run)["sge_resources"].split(",")[-1]

    assert asked("gpu", workers=4) == "gpu=4"  # once per job
    assert asked("gpu_host", workers=8, nodes=2) == "gpu_host=4"  # once per host
    assert asked("gpu_slot", workers=4) == "gpu_slot=1"  # 4 slots on the node: 1 each
    assert asked("gs", workers=8, nodes=2) == "gs=1"  # by its shortcut too
    assert asked("gpu_slot", workers=2) == "gpu_slot=2"  # 2 ranks, 2 GPUs each
    assert asked("gpu_share", workers=1, cpus_per_worker=8) == "gpu_share=0.5"
    assert asked("nowhere", workers=4) == "nowhere=4"  # no such complex: the pre-flight says
    run = run_config(gpus_per_node=4, sge_gpu_complex="gpu")
    assert train_resources(run)["sge_export_env"] is True  # qsub -V

    def problem(complex_name: str, **keys) -> str | None:
        run = run_config(gpus_per_node=4, sge_gpu_complex=complex_name, **keys)
        threads = train_resources(run)["threads"]
        return sge.sizing_problem(run, {"threads": threads}, cell.get(complex_name))

    assert problem("gpu_slot", workers=4) is None and problem("gpu", workers=4) is None
    assert "cannot reserve GPUs on each of its 2 nodes" in problem("gpu", workers=8, nodes=2)
    assert "cannot be asked as a whole number per slot for its 8 slot(s)" in problem(
        "gpu_slot", workers=1, cpus_per_worker=8
    )
    assert "do not spread evenly over 2 nodes" in problem("gpu_slot", workers=3, nodes=2)
