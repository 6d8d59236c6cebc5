"""The comm stage with real ranks: a job through the real launcher (2 local ranks) for each
backend, and the workflow end to end with a tiny 2-worker run (the comm job before the report,
its pages in the PDF). Sizes are capped (``max_bytes``) so that each job takes seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from clusterbench import comm
from clusterbench.config import EXIT_BAD_SETTINGS
from conftest import REPO, SLURM_POLL, TINY_COMM, default_config, snakemake, write_config
from test_report import pdf_text

#: A job's settings that keep it to seconds on a 2-core machine.
TINY = {"max_bytes": 4096, "seconds_per_size": 0.002, "warmup_iterations": 1, "min_iterations": 2}


def launch_comm(
    out: Path, backend: str, workers: int = 2, ranks: int | None = None, **settings
) -> subprocess.CompletedProcess:
    """A comm job of ``workers`` (its params) launched on ``ranks`` (default: as many)."""
    params = {
        "name": f"{workers}w-1n-cpu-{backend}",
        "workers": workers,
        "nodes": 1,
        "gpus_per_node": 0,
        "backend": backend,
        **TINY,
        **settings,
    }
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", str(ranks or workers), "--"]
    cmd += [sys.executable, str(REPO / "scripts" / "comm.py"), "--params", json.dumps(params)]
    cmd += ["--out-dir", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_a_comm_job_times_every_operation_and_size_across_the_ranks(backend, tmp_path):
    proc = launch_comm(tmp_path / "out", backend)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    info = json.loads((tmp_path / "out" / "comm.json").read_text())
    assert (info["backend"], info["library"], info["ranks"]) == (backend, "gloo", 2)
    assert info["environment"] == {"workers": 2, "nodes": 1, "gpus_per_node": 0, "device": "cpu"}
    assert info["settings"] == TINY and info["site"]
    assert [h["ranks"] for h in info["provenance"]["hosts"]] == [[0, 1]]
    sizes = comm.size_ladder(TINY["max_bytes"])  # 8 B .. 4 KiB: 10 sizes
    rows = pd.DataFrame(info["rows"])
    assert list(rows["op"]) == [op for op in comm.OPS for _ in sizes]
    assert list(rows["size"]) == sizes * 3
    assert (rows["iterations"] >= TINY["min_iterations"]).all()
    assert (rows["time_min_s"] <= rows["time_s"]).all() and (
        rows["time_s"] <= rows["time_max_s"]
    ).all()
    assert (rows["busbw_gbps"] > 0).all()
    allreduce = rows[rows["op"] == "allreduce"]  # 2 ranks: busbw = algbw x 2(n-1)/n = algbw
    assert allreduce["busbw_gbps"].tolist() == pytest.approx(allreduce["algbw_gbps"].tolist())
    table = pd.read_csv(tmp_path / "out" / "comm.csv")
    assert list(table.columns) == list(comm.COLUMNS) and len(table) == len(rows)
    assert set(table["name"]) == {f"2w-1n-cpu-{backend}"}


@pytest.mark.slow
def test_a_comm_job_launched_on_other_ranks_than_its_params_say_stops(tmp_path):
    proc = launch_comm(tmp_path / "out", "ddp", workers=3, ranks=2)
    assert proc.returncode != 0
    assert "--params workers=3 but the ddp backend has 2 process(es)" in proc.stderr + proc.stdout
    assert not (tmp_path / "out" / "comm.json").exists()


def test_bad_params_are_refused_before_any_backend_starts(tmp_path, capsys):
    assert comm.main(["--params", '{"name": "x"}', "--out-dir", str(tmp_path)]) == EXIT_BAD_SETTINGS
    assert "comm: error: invalid comm settings" in capsys.readouterr().err


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A tiny config, one run on 1 worker and one on 2 (Horovod), the comm stage capped, run to
    the end on the local profile."""
    workdir = tmp_path_factory.mktemp("comm pipeline")
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["run_defaults"]["epochs"] = 3
    cfg["runs"] = [r for r in cfg["runs"] if r["name"] in ("digits-cnn-1w", "digits-cnn-2w")]
    cfg["comm"] = {"enabled": True, **TINY_COMM}
    write_config(workdir, cfg)
    snakemake(workdir, "--profile", str(REPO / "profiles" / "local"))
    return workdir


@pytest.mark.slow
def test_the_workflow_measures_the_interconnect_before_the_report(pipeline):
    res = pipeline / "results"
    info = json.loads((res / "comm" / "2w-1n-cpu-horovod" / "comm.json").read_text())
    assert info["rows"][-1]["size"] == 2**16 and info["settings"]["seconds_per_size"] == 0.005
    assert sorted(p.name for p in (res / "comm").iterdir()) == ["2w-1n-cpu-horovod"]  # 1w: none
    assert (res / "benchmarks" / "comm" / "2w-1n-cpu-horovod.tsv").is_file()
    run = json.loads((res / "runs" / "digits-cnn-2w" / "run.json").read_text())
    assert run["step_work"]["parameters"] > 0 and run["step_work"]["steps_per_epoch"] > 0
    model = pd.read_csv(res / "report" / "scaling_model.csv").set_index("run")
    two = model.loc["digits-cnn-2w"]
    assert pd.isna(two["note"])  # no reason it is missing: predicted
    assert two["comm_job"] == "2w-1n-cpu-horovod" and two["baseline_run"] == "digits-cnn-1w"
    assert two["gradient_bytes"] == 4 * run["step_work"]["parameters"]
    assert two["predicted_s"] == pytest.approx(two["compute_s"] + two["network_s"])
    text = pdf_text(res / "report" / "report.pdf")
    assert "The interconnect: bus bandwidth and latency" in text
    assert "Scaling model: predicted against measured step time" in text
    assert (res / "report" / "figures" / "interconnect.png").is_file()
    assert (res / "report" / "figures" / "scaling-model.png").is_file()


def job_counts(stdout: str) -> dict[str, int]:
    """A dry run's "Job stats" table: rule -> jobs."""
    table = stdout.split("Job stats:")[1].split("\n\n")[0]
    rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
    return {rule: int(n) for rule, n in rows if rule != "total"}


@pytest.mark.slow
def test_turning_comm_off_drops_its_job_and_trains_nothing_again(pipeline):
    dry = snakemake(pipeline, "-n", "--config", "comm={enabled: false}")
    jobs = job_counts(dry.stdout)
    assert "comm" not in jobs and "train" not in jobs and jobs["report"] == 1, dry.stdout
    dry = snakemake(pipeline, "-n", "--config", "comm={max_bytes: 1024}")
    assert job_counts(dry.stdout)["comm"] == 1  # another ladder: measured again


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_runs_a_comm_job_over_two_nodes_as_it_runs_a_train_job(slurm_cluster, tmp_path):
    """Only the comm job of a 2-node run (its target), through the Slurm executor: its ranks
    start with srun on both nodes as a train job's of that size do."""
    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    workdir = tmp_path / "slurm comm"
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(workdir / "cache")
    cfg["runs"] = [{"name": "two-nodes", "dataset": "digits", "workers": 2, "nodes": 2}]
    cfg["comm"] = {"enabled": True, **TINY}
    write_config(workdir, cfg)
    target = "results/comm/2w-2n-cpu-horovod/comm.json"
    snakemake(
        workdir,
        "--profile",
        str(REPO / "profiles" / "slurm"),
        *SLURM_POLL,
        target,
        env=slurm_cluster.environ(),
        timeout=600,
    )
    info = json.loads((workdir / target).read_text())
    assert info["ranks"] == 2 and len(info["rows"]) == 3 * len(comm.size_ladder(4096))
    nodes = {h["node"]: h["ranks"] for h in info["provenance"]["hosts"]}
    assert sorted(nodes.values()) == [[0], [1]] and len(nodes) == 2  # one rank on each node
    assert not (workdir / "results" / "runs").exists()  # nothing trained for it


def test_the_memory_check_takes_the_jobs_cgroup_limit_and_a_gpus_memory(monkeypatch):
    """`comm.max_bytes` of 4 GiB under a memory limit failed in the allocator. Each rank holds
    up to twice max_bytes (an allgather's input and output): where the node's ranks' buffers
    exceed what the job may use (the node's memory, or its cgroup limit: a Slurm job's --mem)
    or a GPU's memory, the job stops before allocating, naming comm.max_bytes and the sizes.
    A unit test, the limit given as the node would report it: on this machine's 2 local slots
    no valid max_bytes (at most 4 GiB) exceeds its memory, and no cgroup is made here."""
    from types import SimpleNamespace

    from clusterbench.config import ConfigError
    from clusterbench.data import loading

    limit = (3 * 2**30, "the job's cgroup memory limit")
    monkeypatch.setattr(loading, "node_memory", lambda: limit)
    monkeypatch.setattr(loading, "gpu_memory", lambda d: 2**30 if d.type == "cuda" else None)
    cpu = SimpleNamespace(type="cpu")
    comm.check_memory({"max_bytes": 2**29}, 2, cpu)  # 2 x 2 x 512 MiB = 2 GiB: fits
    with pytest.raises(
        ConfigError,
        match=r"2\.0 GiB per rank x 2 rank\(s\) on this node = 4\.0 "
        r"GiB, more than the 3\.0 GiB this job may use \(the job's cgroup",
    ):
        comm.check_memory({"max_bytes": 2**30}, 2, cpu)
    with pytest.raises(ConfigError, match=r"4\.0 GiB per rank, held on its GPU, which has 1\.0"):
        comm.check_memory({"max_bytes": 2**31}, 1, SimpleNamespace(type="cuda"))
