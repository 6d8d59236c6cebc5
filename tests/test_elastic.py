"""Horovod elastic training: ranks that fail or join while a run trains.

The slow tests run the real launcher (``clusterbench-launch --min-np/--max-np``, Horovod's Gloo
elastic driver) and real Horovod ranks: on this machine, and in a 2-node job of the real Slurm
test cluster.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from clusterbench import config as cbconfig
from clusterbench.launch.cli import parse_args
from clusterbench.launch.schedulers import AllocationError, LaunchError
from clusterbench.launch.schedulers.local import LocalScheduler, slot_hosts, slot_index
from clusterbench.pipeline.resources import train_resources
from conftest import REPO
from test_train import make_dataset, read_metrics, run_config

# --------------------------------------------------------------------------------------------
# pure parts


def test_each_local_slot_is_a_host_of_its_own():
    """Horovod elastic blacklists the host of a failed rank: locally each slot is one host,
    so a failed rank takes out its slot, not the machine."""
    assert slot_hosts({"localhost": 3}) == {
        "localhost-slot0": 1,
        "localhost-slot1": 1,
        "localhost-slot2": 1,
    }
    assert slot_hosts({"a": 1, "b": 2}) == {"a-slot0": 1, "b-slot0": 1, "b-slot1": 1}
    assert slot_index("my-host-slot12") == 12
    assert slot_index("localhost") is None


def test_a_slot_host_gets_its_own_gpu_of_the_inherited_list():
    local = LocalScheduler()
    slot = SimpleNamespace(hostname="localhost-slot1", local_rank=0, local_size=1)
    assert local.elastic_device(slot, ("4", "5")) == "5"
    assert local.elastic_device(slot, None) is None
    with pytest.raises(AllocationError, match="slot 1 has no GPU: CUDA_VISIBLE_DEVICES lists 1"):
        local.elastic_device(slot, ("4",))


def test_the_hosts_file_drives_local_discovery(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    local = LocalScheduler()
    local.allocation({"CLUSTERBENCH_HOSTS_FILE": str(hosts)})
    assert local.elastic_hosts() == {"localhost-slot0": 1, "localhost-slot1": 1}
    hosts.write_text("localhost slots=3  # one more\n")
    assert len(local.elastic_hosts()) == 3


def test_a_rank_stopped_because_its_host_left_is_no_failure():
    """A rank Horovod stopped (its host left the discovery: the hosts file's `:0`) does not
    count as failed: its host is not taken out for good and may come back; a rank that failed
    on its own does, and its host is taken out."""
    from clusterbench.launch.elastic import ElasticRankRunner, SchedulerDiscovery
    from clusterbench.launch.runner import RankResult

    local = LocalScheduler()
    runner = ElasticRankRunner(local, None, threading.Event())
    slot = SimpleNamespace(hostname="extra-slot0", rank=2, local_rank=0)
    runner.ended(RankResult(2, "extra-slot0", 143, 0.0, True, []), slot)
    assert runner.failures == [] and local.failed_hosts == set()
    runner.ended(RankResult(2, "extra-slot0", 137, 0.0, False, []), slot)
    assert [r.exit_code for r in runner.failures] == [137]
    assert local.failed_hosts == {"extra-slot0"}
    # a rank that ends itself once its host left the hosts offered (Horovod aborts it: "has
    # been removed from elastic job") did not fail either
    found = SchedulerDiscovery(LocalScheduler())
    runner = ElasticRankRunner(found.scheduler, None, threading.Event(), found)
    found.offered = {"localhost-slot0": 1, "localhost-slot1": 1}
    runner.ended(RankResult(2, "extra-slot0", 134, 0.0, False, []), slot)
    assert runner.failures == [] and found.scheduler.failed_hosts == set()
    runner.ended(RankResult(1, "localhost-slot1", 134, 0.0, False, []), slot)
    assert len(runner.failures) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--np", "2", "--min-np", "1"], "needs both --min-np and --max-np"),
        (["--np", "4", "--min-np", "1", "--max-np", "3"], r"--np \(4\) <= --max-np \(3\)"),
        (["--np", "2", "--min-np", "3", "--max-np", "4"], r"--min-np \(3\) <= --np \(2\)"),
    ],
)
def test_launcher_refuses_bad_elastic_bounds(argv, message):
    with pytest.raises(LaunchError, match=message):
        parse_args([*argv, "--", "true"], {})


def test_an_elastic_run_is_sized_for_its_most_workers():
    run = {**run_config(workers=2, min_workers=1, max_workers=4), "mem_mb": 4000, "runtime": 10}
    run["cpus_per_worker"] = 1
    assert cbconfig.worker_bounds(run) == (1, 4)
    assert cbconfig.allocated_workers(run) == 4
    assert train_resources(run)["tasks"] == 4
    fixed = {**run, "min_workers": None, "max_workers": None}
    assert not cbconfig.is_elastic(fixed)
    assert cbconfig.allocated_workers(fixed) == 2


def test_elastic_combinations_that_cannot_work_are_refused_naming_the_key():
    run = run_config(workers=2, min_workers=1, max_workers=3)
    assert cbconfig.elastic_problems(run) == []
    bad = {**run, "backend": "ddp", "bn": "sync", "batch_size": 2}
    problems = "\n".join(cbconfig.elastic_problems(bad, "runs[0]"))
    assert "runs[0].min_workers/max_workers: backend 'ddp' has no elastic mode" in problems
    assert "use backend: horovod" in problems
    assert "runs[0].bn: 'sync'" in problems
    assert "runs[0].batch_size: global batch 2 is smaller than max_workers=3" in problems


@pytest.mark.horovod
def test_the_train_job_launches_elastic_with_its_bounds(tmp_path):
    """A dry run shows the launcher's --min-np/--max-np, and the job takes max_workers cores."""
    cfg = {
        "runs": [{"name": "el", "dataset": "digits", "workers": 2, "min_workers": 1}],
        "run_defaults": {"max_workers": 2, "epochs": 1},
        "report": {"title": "t"},
    }
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(json.dumps(cfg))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-n", "-p"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "clusterbench.launch --np 2 --backend horovod --min-np 1 --max-np 2 --" in proc.stdout


# --------------------------------------------------------------------------------------------
# real elastic runs on this machine


def elastic_cmd(data: Path, run: dict, out: Path) -> list[str]:
    low, high = cbconfig.worker_bounds(run)
    return [
        sys.executable,
        "-m",
        "clusterbench.launch",
        "--np",
        str(run["workers"]),
        "--min-np",
        str(low),
        "--max-np",
        str(high),
        "--",
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "--data-dir",
        str(data),
        "--run",
        json.dumps(run),
        "--out-dir",
        str(out),
    ]


def elastic_env(hosts: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CLUSTERBENCH_HOSTS_FILE": str(hosts),
        # a failed peer shows in a collective within this many seconds (Horovod's default: 30)
        "CLUSTERBENCH_GLOO_TIMEOUT": "10",
        "CLUSTERBENCH_CHECKPOINTS": json.dumps({"elastic_commit_steps": 3}),
    }


def when_epochs(out: Path, epochs: int, action, timeout: float = 240) -> threading.Thread:
    """Call ``action()`` once metrics.jsonl holds ``epochs`` lines (in a thread)."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            path = out / "metrics.jsonl"
            if path.exists() and len(path.read_text().splitlines()) >= epochs:
                action()
                return
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def rank_pid(out: Path, variable: str) -> int | None:
    """The rank training into ``out`` whose environment holds ``variable`` (``NAME=value``)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        mine = any(part.endswith(b"train.py") for part in cmd) and str(out).encode() in cmd
        if mine and variable.encode() in env:
            return int(proc.name)
    return None


def train_elastic(data: Path, run: dict, out: Path, hosts: Path, watcher) -> str:
    """The elastic launch of ``run`` on the slots of ``hosts`` (it must succeed), while
    ``watcher`` (a thread) acts on it; its output."""
    proc = subprocess.run(
        elastic_cmd(data, run, out),
        env=elastic_env(hosts),
        capture_output=True,
        text=True,
        timeout=420,
    )
    watcher.join()
    logs = proc.stdout + proc.stderr
    assert proc.returncode == 0, logs[-4000:]
    return logs


def assert_complete(out: Path, epochs: int) -> list[dict]:
    metrics = read_metrics(out)
    assert [m["epoch"] for m in metrics] == list(range(1, epochs + 1))  # none lost or twice
    assert (out / "model.pt").exists()
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").rglob("*.pt"))
    return metrics


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("elastic") / "data")


@pytest.mark.slow
def test_a_killed_rank_leaves_and_training_finishes_on_the_others(data, tmp_path):
    """3 ranks, one SIGKILLed after the first epoch: the other 2 reset and finish the run;
    metrics.jsonl records the world size of each epoch and the reset."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:3\n")
    run = run_config(workers=3, min_workers=2, max_workers=3, epochs=4, batch_size=24)
    out = tmp_path / "out"
    killed: list[int] = []

    def kill_rank_2() -> None:
        pid = rank_pid(out, "HOROVOD_RANK=2")
        if pid is not None:
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    logs = train_elastic(data, run, out, hosts, when_epochs(out, 1, kill_rank_2))
    assert killed, "rank 2 was not found to kill"
    assert "exited with code 137: Horovod elastic goes on without" in logs
    metrics = assert_complete(out, 4)
    assert metrics[0]["world_size"] == 3
    assert [m["world_size"] for m in metrics[2:]] == [2, 2]
    resets = [r for m in metrics for r in m["resets"]]
    assert len(resets) == 1 and resets[0]["why"] == "a rank failed"
    assert (resets[0]["from"], resets[0]["to"]) == (3, 2)
    info = json.loads((out / "run.json").read_text())
    assert info["world"]["size"] == 2
    assert info["world"]["hosts"] == ["localhost"]  # the slot hosts are the hosts file's host
    assert info["site"] == socket.gethostname().split(".")[0]
    assert info["world"]["elastic"]["sizes"][0] == 3
    assert info["world"]["elastic"]["sizes"][-1] == 2
    assert info["epochs_completed"] == 4
    # what the report reads of it: the world size of each epoch, and the sizes the run had
    from clusterbench.report.inputs import read_epochs
    from clusterbench.report.tables import experiment_columns

    epochs = read_epochs(out / "metrics.jsonl")
    assert epochs["world_size"].tolist()[0] == 3 and epochs["world_size"].tolist()[2:] == [2, 2]
    columns = experiment_columns(info)
    assert columns["elastic"] and columns["world_sizes"] == "3 2" and columns["resets"] == 1
    print(
        f"FIGURE elastic reset after a rank's death: {resets[0]['seconds']:.2f} s reset, "
        f"{resets[0]['stalled_seconds']:.2f} s stalled since the last commit "
        "(Gloo timeout 10 s)"
    )


@pytest.mark.slow
def test_a_slot_added_to_the_hosts_file_joins_at_the_next_commit(data, tmp_path):
    """2 ranks; after the first epoch the hosts file gains a slot: a third rank starts,
    joins at the next commit (every 3 steps here), and the run finishes on 3. 15 epochs of
    about a second: with one torch thread a rank (make test's workers), 3 and then 6 epochs
    had ended before the new rank started."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    # channels-last weights: the joining rank gets them through the runtime's broadcast
    run = run_config(
        workers=2, min_workers=1, max_workers=3, epochs=15, batch_size=24, channels_last=True
    )
    out = tmp_path / "out"
    train_elastic(
        data, run, out, hosts, when_epochs(out, 1, lambda: hosts.write_text("localhost:3\n"))
    )
    metrics = assert_complete(out, 15)
    assert metrics[0]["world_size"] == 2
    assert metrics[-1]["world_size"] == 3
    resets = [r for m in metrics for r in m["resets"]]
    assert [(r["from"], r["to"], r["why"]) for r in resets] == [(2, 3, "hosts changed")]
    assert resets[0]["step"] % 3 == 0  # at a commit
    print(f"FIGURE elastic reset when a rank joins: {resets[0]['seconds']:.2f} s")


@pytest.mark.slow
def test_an_elastic_run_starts_on_every_slot_and_a_slot_taken_out_leaves(data, tmp_path):
    """3 slots for `workers: 2`, `max_workers: 3`: the run starts on all 3 (Horovod's driver
    waits for `workers` slots, then takes every slot the discovery offers up to max_workers).
    After the first epoch the hosts file takes host `extra` out (`extra:0`): its rank ends
    (Horovod aborts it: "removed from elastic job"), which is no failure (nothing is blamed),
    and the other 2 finish the run."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\nextra:1\n")
    run = run_config(workers=2, min_workers=1, max_workers=3, epochs=4, batch_size=24)
    out = tmp_path / "out"

    def take_extra_out() -> None:
        hosts.write_text("localhost:2\nextra:0  # taken out\n")

    logs = train_elastic(data, run, out, hosts, when_epochs(out, 1, take_extra_out))
    metrics = assert_complete(out, 4)
    assert metrics[0]["world_size"] == 3, metrics[0]
    assert metrics[-1]["world_size"] == 2
    resets = [r for m in metrics for r in m["resets"]]
    assert [(r["from"], r["to"]) for r in resets] == [(3, 2)], resets
    assert "): extra-slot0 left the hosts the job may use" in logs, logs[-3000:]
    assert "Horovod elastic goes on without" not in logs  # no rank failed
    assert "(0 rank failure(s) survived)" in logs
    print(
        f"FIGURE elastic start on 3 slots for workers=2, then extra:0 -> "
        f"{resets[0]['from']} -> {resets[0]['to']} ({resets[0]['why']}) in "
        f"{resets[0]['seconds']:.2f} s"
    )


@pytest.mark.slow
def test_a_preempted_elastic_run_continues_from_its_checkpoint(data, tmp_path):
    """USR1 to the launcher: the ranks checkpoint and exit 75; the same command again
    continues from the checkpoint and ends with every epoch once."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    run = run_config(workers=2, min_workers=1, max_workers=2, epochs=3, batch_size=8)
    out = tmp_path / "out"
    cmd, env = elastic_cmd(data, run, out), elastic_env(hosts)
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watcher = when_epochs(out, 1, lambda: launcher.send_signal(signal.SIGUSR1))
    logs, _ = launcher.communicate(timeout=420)
    watcher.join()
    assert launcher.returncode == 75, logs.decode()[-4000:]
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    # mid-epoch ("epoch 2, after step 12"), or at an epoch's end ("after epoch 1") when the
    # warning came in an epoch's last steps or at its end
    resumed = re.search(
        r"continuing from the checkpoint (epoch \d+, after step \d+|after epoch \d+)",
        again.stdout + again.stderr,
    )
    assert resumed, (logs.decode()[-3000:], (again.stdout + again.stderr)[-3000:])
    assert_complete(out, 3)


def slurm_job_script(launcher: list[str], *env: str) -> str:
    """A batch script running the elastic ``launcher`` as Snakemake's jobstep executor runs a
    job: SLURM_* stripped but the job id, this checkout's package first (as the pipeline puts
    it for every job), commits every 3 steps, ``env`` (``NAME=value``) added; it echoes the
    launcher's exit code."""
    settings = json.dumps({"elastic_commit_steps": 3})
    return (
        'env -i PATH="$PATH" HOME="$HOME" SLURM_JOB_ID="$SLURM_JOB_ID" SLURM_CONF="$SLURM_CONF" '
        f"PYTHONPATH={shlex.quote(str(REPO / 'workflow'))} "
        f"CLUSTERBENCH_GLOO_TIMEOUT=10 CLUSTERBENCH_CHECKPOINTS={shlex.quote(settings)} "
        f"{' '.join(env)} {shlex.join(launcher)}\necho launcher-exit=$?"
    )


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_rank_on_node2_killed_training_finishes_on_node1(slurm_cluster, data, tmp_path):
    """A 2-node Slurm job, one rank per node (srun steps, no ssh): the rank on node2 is
    SIGKILLed after the first epoch; Horovod drops node2 (and so does the Slurm discovery) and
    the training finishes on node1 alone."""
    from test_launch import _sbatch

    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    run = run_config(workers=2, min_workers=1, max_workers=2, epochs=3, batch_size=24)
    out = tmp_path / "out"
    script = slurm_job_script(elastic_cmd(data, run, out))
    killed: list[int] = []

    def kill_node2_rank() -> None:
        pid = rank_pid(out, "SLURMD_NODENAME=node2")
        if pid is not None:
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    watcher = when_epochs(out, 1, kill_node2_rank)
    _, log = _sbatch(slurm_cluster, tmp_path, "-N2", "-n2", script=script)
    watcher.join()
    assert killed, log[-3000:]
    assert "launcher-exit=0" in log, log[-4000:]
    assert "on node2 exited with code 137: Horovod elastic goes on without node2" in log, log
    metrics = assert_complete(out, 3)
    assert metrics[0]["world_size"] == 2
    assert metrics[-1]["world_size"] == 1
    info = json.loads((out / "run.json").read_text())
    assert info["world"]["hosts"] == ["node1"]
    assert info["world"]["scheduler"] == "slurm"
    assert info["site"] == "clusterbench"  # the test cluster's ClusterName
    resets = info["world"]["elastic"]["resets"]
    assert [(r["from"], r["to"], r["why"]) for r in resets] == [(2, 1, "a rank failed")]
    print(
        f"FIGURE slurm elastic: node2's rank killed -> training went on on node1 after "
        f"{resets[0]['stalled_seconds']:.2f} s stalled ({resets[0]['seconds']:.2f} s reset)"
    )


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_elastic_run_starts_on_every_node_and_the_hosts_file_shrinks_and_grows_it(
    slurm_cluster, data, tmp_path
):
    """A 2-node Slurm job (2 tasks) for `workers: 1`, `max_workers: 2`: the run starts on both
    nodes (the allocation's slots, not `workers`). The hosts file, which Slurm's discovery also
    reads (limited to the job's nodes), then takes node2 out (`node2:0`): its rank's step is
    stopped (no failure) and training goes on on node1; put back (`node2:1`), node2 joins
    again at the next commit. A Slurm run grows, not only shrinks after a failure."""
    from test_launch import _sbatch

    assert slurm_cluster.nested_srun_ok, "another Slurm owns /etc/slurm/slurm.conf"
    hosts = tmp_path / "hosts"
    hosts.write_text("node1:1\nnode2:1\n")
    # 26 steps per epoch, 30 epochs: long enough (about 10 s at full size here) for the
    # discovery (every second) to see both edits and for node2's rank to start again
    run = run_config(workers=1, min_workers=1, max_workers=2, epochs=30, batch_size=8)
    out = tmp_path / "out"
    script = slurm_job_script(
        elastic_cmd(data, run, out), f"CLUSTERBENCH_HOSTS_FILE={shlex.quote(str(hosts))}"
    )
    steps: list[str] = []

    def steer() -> None:  # node2 out after the first epoch, back once an epoch ended without it
        deadline = time.monotonic() + 400
        for when, text in (
            (lambda m: len(m) >= 1, "node1:1\nnode2:0\n"),
            (lambda m: any(e["world_size"] == 1 for e in m), "node1:1\nnode2:1\n"),
        ):
            while time.monotonic() < deadline:
                path = out / "metrics.jsonl"
                lines = path.read_text().splitlines() if path.exists() else []
                if when([json.loads(line) for line in lines]):
                    hosts.write_text(text)
                    steps.append(text)
                    break
                time.sleep(0.2)

    watcher = threading.Thread(target=steer, daemon=True)
    watcher.start()
    _, log = _sbatch(slurm_cluster, tmp_path, "-N2", "-n2", script=script)
    watcher.join()
    assert len(steps) == 2, log[-3000:]
    assert "launcher-exit=0" in log, log[-4000:]
    assert "): node2 left the hosts the job may use" in log, log[-4000:]
    assert "Horovod elastic goes on without" not in log  # no rank failed
    metrics = assert_complete(out, 30)
    assert metrics[0]["world_size"] == 2
    assert metrics[-1]["world_size"] == 2
    info = json.loads((out / "run.json").read_text())
    resets = info["world"]["elastic"]["resets"]
    assert [(r["from"], r["to"]) for r in resets] == [(2, 1), (1, 2)], resets
    assert resets[1]["why"] == "hosts changed"
    assert sorted(info["world"]["hosts"]) == ["node1", "node2"]
    print(
        f"FIGURE slurm elastic by the hosts file: started on 2 nodes (workers=1); node2:0 -> "
        f"2 -> 1 ({resets[0]['why']}, {resets[0]['seconds']:.2f} s); node2:1 -> 1 -> 2 "
        f"({resets[1]['seconds']:.2f} s)"
    )
