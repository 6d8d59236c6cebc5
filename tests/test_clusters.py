"""Smoke tests of the test clusters themselves (tests/clusters): real Slurm and SGE jobs.

The pid-file machinery is unit-tested with plain ``sleep`` processes; the cluster tests submit
real jobs to the session's clusters (fixtures from ``tests.clusters.fixtures``).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SGE_POLL, SLURM_POLL, SNAKEMAKE

from tests.clusters import fixtures
from tests.clusters.common import (
    ClusterError,
    ClusterUnavailable,
    Daemon,
    State,
    free_ports,
    missing_packages,
    wait_until,
)
from tests.clusters.slurm import SYSTEM_SLURM_CONF

REPO = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------------------------
# pid files and recorded state (no cluster needed)


def _sleeper(tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], Daemon]:
    proc = subprocess.Popen(["sleep", "300"])
    pidfile = tmp_path / f"{name}.pid"
    pidfile.write_text(f"{proc.pid}\n")
    daemon = Daemon(name, str(pidfile), "sleep")
    # Until the child has exec'd, /proc shows it under the parent's name.
    wait_until(daemon.pid, timeout=10, what="sleep to start", interval=0.01)
    return proc, daemon


def test_daemon_stop_kills_the_process_in_its_pid_file(tmp_path: Path) -> None:
    proc, daemon = _sleeper(tmp_path, "a")
    assert daemon.pid() == proc.pid
    daemon.stop(timeout=5)
    assert proc.wait(timeout=5) is not None
    assert daemon.pid() is None


def test_daemon_with_other_process_name_is_left_alone(tmp_path: Path) -> None:
    proc, _ = _sleeper(tmp_path, "b")
    try:
        impostor = Daemon("slurmd", str(tmp_path / "b.pid"), "slurmd")  # pid now reused by sleep
        assert impostor.pid() is None
        impostor.stop(timeout=1)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_state_undo_stops_daemons_and_removes_only_its_own_symlink(tmp_path: Path) -> None:
    state = State(tmp_path)
    proc, daemon = _sleeper(tmp_path, "c")
    state.add_daemon(daemon)
    target = tmp_path / "slurm.conf"
    target.write_text("x")
    ours, foreign = tmp_path / "etc" / "ours.conf", tmp_path / "etc" / "foreign.conf"
    foreign.parent.mkdir()
    foreign.write_text("someone else's")
    assert state.add_symlink_if_free(ours, target)
    assert not state.add_symlink_if_free(foreign, target)
    dangling = tmp_path / "etc" / "dangling.conf"
    dangling.symlink_to(tmp_path / "gone" / "slurm.conf")  # left by a crashed cluster
    assert state.add_symlink_if_free(dangling, target)

    # What was recorded survives a crash: a fresh State loaded from disk undoes it.
    State.load(tmp_path).undo()
    assert proc.wait(timeout=5) is not None
    assert not os.path.lexists(ours) and not os.path.lexists(dangling)
    assert foreign.read_text() == "someone else's"


def test_a_link_left_by_a_dead_cluster_is_taken_over_but_not_a_live_ones(tmp_path: Path) -> None:
    """A dev cluster's directory restored without its daemons (a snapshot, a crash) is stale."""
    link = tmp_path / "etc" / "slurm.conf"
    old = State(tmp_path / "old")
    old.base.mkdir()
    (old.base / "etc").mkdir()
    (old.base / "etc" / "slurm.conf").write_text("old cluster")
    proc, daemon = _sleeper(old.base, "slurmctld")
    old.add_daemon(daemon)
    assert old.add_symlink_if_free(link, old.base / "etc" / "slurm.conf")
    new = State(tmp_path / "new")
    new.base.mkdir()
    try:
        assert not new.add_symlink_if_free(link, new.base / "slurm.conf")  # its daemon runs
    finally:
        proc.kill()
        proc.wait()
    assert new.add_symlink_if_free(link, new.base / "slurm.conf")  # now nothing of it runs
    assert os.readlink(link) == str(new.base / "slurm.conf")
    # ...while a link that no test cluster recorded is never taken over, live or not
    foreign = tmp_path / "etc" / "foreign.conf"
    foreign.symlink_to(old.base / "etc" / "slurm.conf")
    assert not new.add_symlink_if_free(foreign, new.base / "slurm.conf")


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_wait_until_names_what_it_waited_for() -> None:
    with pytest.raises(ClusterError, match="the moon"):
        wait_until(lambda: False, timeout=0.3, what="the moon", interval=0.1)


def test_missing_packages_names_only_the_missing_ones() -> None:
    assert missing_packages(["dpkg", "clusterbench-no-such-package"]) == [
        "clusterbench-no-such-package"
    ]


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_uninstallable_cluster_fails_under_ci_and_skips_otherwise(monkeypatch, ci, outcome):
    def no_apt(kinds):
        raise ClusterUnavailable("no apt-get here")

    monkeypatch.setattr(fixtures, "install", no_apt)
    monkeypatch.delenv("CLUSTERBENCH_SLURM_DIR", raising=False)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="slurm test cluster unavailable: no apt-get here"):
        next(fixtures.cluster_session("slurm"))


# ------------------------------------------------------------------------------------------------
# Slurm


def _sbatch(cluster, tmp_path: Path, *args: str, script: str) -> tuple[str, str]:
    """Run ``script`` as a batch job to its end (it must complete); return (job id, its
    output)."""
    out = tmp_path / "slurm-%j.out"
    job, state = cluster.batch([f"--output={out}", "--time=5", *args, f"--wrap={script}"])
    text = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", f"job {job} ended {state}: {text}"
    return job, text


@pytest.mark.slurm
def test_slurm_two_nodes_one_task_each(slurm_cluster, tmp_path: Path) -> None:
    job, out = _sbatch(
        slurm_cluster,
        tmp_path,
        "-N2",
        "-n2",
        script="srun bash -c 'echo task $SLURM_PROCID on $SLURMD_NODENAME'",
    )
    lines = sorted(line for line in out.splitlines() if line.startswith("task"))
    assert lines == ["task 0 on node1", "task 1 on node2"], out

    def listed() -> str:
        """The job's sacct line once it has its final state: slurmdbd may still hold it as
        RUNNING after squeue has shown it ended (slurmctld tells it the end later)."""
        res = slurm_cluster.run(
            ["sacct", "-a", "-X", "-n", "-P", "-j", job, "-o", "JobID,State,NNodes"], check=False
        )
        line = res.stdout.strip()
        state = line.split("|")[1] if line.count("|") == 2 else ""
        return "" if state in ("", "PENDING", "RUNNING", "COMPLETING") else line

    assert wait_until(listed, timeout=30, what=f"job {job} in sacct") == f"{job}|COMPLETED|2"


@pytest.mark.slurm
def test_slurm_fake_gpus_set_cuda_visible_devices(slurm_cluster, tmp_path: Path) -> None:
    _, out = _sbatch(
        slurm_cluster, tmp_path, "-N1", "--gpus-per-node=2", script="echo CVD=$CUDA_VISIBLE_DEVICES"
    )
    assert "CVD=0,1" in out, out


@pytest.mark.slurm
def test_slurm_nested_srun_without_slurm_conf(slurm_cluster, tmp_path: Path) -> None:
    """Snakemake's jobstep strips SLURM_CONF; nested srun must still reach our cluster."""
    if not slurm_cluster.nested_srun_ok:
        pytest.skip(f"{SYSTEM_SLURM_CONF} belongs to something else; nested srun cannot use it")
    _, out = _sbatch(
        slurm_cluster,
        tmp_path,
        "-N2",
        "-n2",
        script="env -u SLURM_CONF srun --jobid $SLURM_JOB_ID -N1 -n1 --nodelist node2 "
        "--overlap bash -c 'echo nested on $SLURMD_NODENAME'",
    )
    assert "nested on node2" in out, out


# ------------------------------------------------------------------------------------------------
# SGE


def _qsub(cluster, tmp_path: Path, *args: str, script: str) -> tuple[str, str, int]:
    """Submit ``script`` with ``qsub -sync y``; return (job id, output, qsub's exit code)."""
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    out = tmp_path / "job.out"
    res = cluster.run(
        ["qsub", "-sync", "y", "-terse", "-cwd", "-j", "y", "-o", str(out), *args, str(path)],
        check=False,
        timeout=180,
    )
    job = res.stdout.split()[0] if res.stdout.split() else ""
    assert job.isdigit(), res
    return job, out.read_text(), res.returncode


@pytest.mark.sge
def test_sge_job_runs_and_is_accounted(sge_cluster, tmp_path: Path) -> None:
    job, out, rc = _qsub(
        sge_cluster, tmp_path, "-N", "smoke", script="echo job=$JOB_ID on $(hostname); exit 3"
    )
    assert rc == 3
    assert out.strip() == f"job={job} on {sge_cluster.nodes[0]}"

    def accounted() -> str:
        res = sge_cluster.run(["qacct", "-j", job], check=False)
        return res.stdout if res.returncode == 0 else ""

    fields = dict(
        line.split(None, 1)
        for line in wait_until(accounted, timeout=30, what="qacct").splitlines()
        if len(line.split(None, 1)) == 2
    )
    assert fields["jobname"].strip() == "smoke"
    assert fields["exit_status"].strip() == "3"


@pytest.mark.sge
def test_sge_mpi_pe_allows_qrsh_inherit(sge_cluster, tmp_path: Path) -> None:
    _, out, rc = _qsub(
        sge_cluster,
        tmp_path,
        "-pe",
        "mpi",
        "2",
        script="echo slots=$NSLOTS pe=$PE\nqrsh -inherit $(hostname) echo inherited '$JOB_ID'",
    )
    assert rc == 0, out
    lines = out.splitlines()
    assert "slots=2 pe=mpi" in lines
    assert any(line.startswith("inherited ") and line.split()[1].isdigit() for line in lines), out


@pytest.mark.sge
def test_sge_qstat_sees_a_running_job(sge_cluster, tmp_path: Path) -> None:
    script = tmp_path / "wait.sh"
    flag = tmp_path / "go"
    script.write_text(f"#!/bin/bash\nwhile [ ! -e {flag} ]; do sleep 0.2; done\n")
    job = sge_cluster.run(
        ["qsub", "-terse", "-cwd", "-o", "/dev/null", "-j", "y", str(script)]
    ).stdout.strip()
    try:

        def running() -> bool:
            res = sge_cluster.run(["qstat", "-s", "r"], check=False).stdout
            return any(line.split()[:1] == [job] for line in res.splitlines())

        wait_until(running, timeout=30, what=f"job {job} running in qstat")
    finally:
        flag.touch()
    wait_until(
        lambda: sge_cluster.run(["qstat", "-j", job], check=False).returncode != 0,
        timeout=30,
        what=f"job {job} to finish",
    )


# ------------------------------------------------------------------------------------------------
# profiles/{slurm,sge} + clusterbench.pipeline.resources through the real executor plugins

TOY_SNAKEFILE = """\
from clusterbench.pipeline.resources import train_resources

rule train:
    output: "out.txt"
    resources: **train_resources({run!r})
    shell: {shell!r}
"""


def _run_toy(
    cluster, kind: str, workdir: Path, run: dict, shell: str, *args: str, env: dict | None = None
) -> list[str]:
    """Run a one-rule workflow with ``--profile profiles/<kind>`` (as shipped), Snakemake in
    the cluster's environment and ``env``; return its output lines."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "Snakefile").write_text(TOY_SNAKEFILE.format(run=run, shell=shell))
    proc = subprocess.run(
        [
            *SNAKEMAKE,
            "--profile",
            str(REPO / "profiles" / kind),
            "--directory",
            str(workdir),
            "--snakefile",
            str(workdir / "Snakefile"),
            *args,
        ],
        env={**cluster.environ(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    print(proc.stdout, proc.stderr)  # TMPDEBUG
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return (workdir / "out.txt").read_text().splitlines()


def _toy_run(workers: int, nodes: int, gpus_per_node: int = 0) -> dict:
    return {
        "name": "toy",
        "workers": workers,
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "cpus_per_worker": 1,
        "mem_mb": 1000,
        "runtime": 10,
    }


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_profile_runs_two_node_mpi_rule_with_nested_srun(slurm_cluster, tmp_path):
    if not slurm_cluster.nested_srun_ok:
        pytest.skip(f"{SYSTEM_SLURM_CONF} belongs to something else; nested srun cannot use it")
    shell = (
        "echo cvd=$CUDA_VISIBLE_DEVICES on $SLURMD_NODENAME > {output}; "
        "srun --jobid $SLURM_JOB_ID -N1 -n1 --nodelist node2 --overlap "
        "bash -c 'echo nested on $SLURMD_NODENAME' >> {output}"
    )
    lines = _run_toy(
        slurm_cluster,
        "slurm",
        tmp_path / "wf",
        _toy_run(2, 2, gpus_per_node=2),
        shell,
        *SLURM_POLL,
    )
    assert lines == ["cvd=0,1 on node1", "nested on node2"]


@pytest.mark.slow
@pytest.mark.sge
def test_sge_profile_runs_mpi_pe_rule_with_qrsh_inherit(sge_cluster, tmp_path):
    shell = (
        "(echo slots=$NSLOTS pe=$PE vmem=$(ulimit -v); "
        "qrsh -inherit $(hostname) echo inherited) > {output}"
    )
    lines = _run_toy(
        sge_cluster,
        "sge",
        tmp_path / "wf",
        _toy_run(2, 1),
        shell,
        *SGE_POLL,
        "--verbose",
    )
    assert lines == ["slots=2 pe=mpi vmem=unlimited", "inherited"]


@pytest.mark.slow
@pytest.mark.sge
def test_sge_gpu_complex_is_checked_before_submission_and_asked_for(
    sge_cluster, tmp_path, monkeypatch
):
    """A run's `sge_gpu_complex` on the SGE cell, which has a per-job consumable `gpu` (2 on its
    host): the pre-flight (`qconf -sc`, then `qsub -w v`) refuses a complex the cell lacks and
    more GPUs than a host has, and passes the run that fits; that run's job, through the SGE
    profile, asks `-l gpu=2` and runs (qacct records the request)."""
    from clusterbench.launch.schedulers import PreflightContext
    from clusterbench.launch.schedulers.sge import SgeScheduler
    from clusterbench.pipeline.resources import train_resources

    for key, value in sge_cluster.env.items():
        monkeypatch.setenv(key, value)
    gpu = sge_cluster.gpu_complex
    fits = {**_toy_run(2, 1, gpus_per_node=2), "sge_gpu_complex": gpu}
    runs = {
        "fits": fits,
        "too-many": {**fits, "gpus_per_node": 3},
        "typo": {**fits, "sge_gpu_complex": "gpus"},
    }
    context = PreflightContext(runs, lambda name, keys: train_resources(runs[name]))
    reasons = SgeScheduler.unavailable(context)
    assert set(reasons) == {"too-many", "typo"}, reasons
    assert "`qsub -w v` says" in reasons["too-many"], reasons
    assert "sge_gpu_complex 'gpus' is no complex of this SGE cell" in reasons["typo"]
    assert f"its consumable ones: {gpu}, {sge_cluster.gpu_slot_complex}, slots" in reasons["typo"]

    (job,) = _run_toy(
        sge_cluster,
        "sge",
        tmp_path / "wf",
        fits,
        "echo $JOB_ID > {output}",
        *SGE_POLL,
    )

    def accounted() -> str:
        res = sge_cluster.run(["qacct", "-j", job], check=False)
        return res.stdout if res.returncode == 0 else ""

    record = wait_until(accounted, timeout=30, what=f"qacct -j {job}")
    category = next(line for line in record.splitlines() if line.startswith("category"))
    assert f"{gpu}=2" in category and "-pe mpi 2" in category, record
    print(f"\nFIGURE sge gpu complex: {category}; refused: {reasons['too-many']}")


def _accounted_category(cluster, job: str) -> str:
    """The `category` line of ``job``'s accounting record (its resource requests)."""

    def accounted() -> str:
        res = cluster.run(["qacct", "-j", job], check=False)
        return res.stdout if res.returncode == 0 else ""

    record = wait_until(accounted, timeout=30, what=f"qacct -j {job}")
    return next(line for line in record.splitlines() if line.startswith("category"))


@pytest.mark.slow
@pytest.mark.sge
@pytest.mark.parametrize("kind", ["per-job", "per-slot"])
def test_sge_gpu_request_is_sized_by_the_complexs_kind(sge_cluster, tmp_path, monkeypatch, kind):
    """2 ranks on a node with 2 GPUs ask `gpu=2` of the cell's per-job complex and `gpu_slot=1`
    of its per-slot one (SGE multiplies that by the 2 slots), and each job runs through the
    SGE profile as shipped. Asked as before, `gpu_slot=2` x 2 slots = 4 GPUs, more than the
    host's 2: `qsub -w v` (what the profile's `qsub -w e` does) refuses it."""
    from clusterbench.launch.schedulers import PreflightContext, sge
    from clusterbench.pipeline.resources import train_resources

    for key, value in sge_cluster.env.items():
        monkeypatch.setenv(key, value)
    name = {"per-job": sge_cluster.gpu_complex, "per-slot": sge_cluster.gpu_slot_complex}[kind]
    run = {**_toy_run(2, 1, gpus_per_node=2), "sge_gpu_complex": name}
    resources = train_resources(run)
    asked = {"per-job": f"{name}=2", "per-slot": f"{name}=1"}[kind]
    assert resources["sge_resources"].split(",")[-1] == asked, resources
    context = PreflightContext({"toy": run}, lambda _, keys: resources)
    assert sge.SgeScheduler.unavailable(context) == {}
    if kind == "per-slot":
        as_before = {**resources, "sge_resources": resources["sge_resources"][:-1] + "2"}
        (refused,) = sge.sge_problems("toy", as_before, "smp")
        assert "SGE would never run its job" in refused, refused

    (job,) = _run_toy(
        sge_cluster,
        "sge",
        tmp_path / "wf",
        run,
        "echo $JOB_ID > {output}",
        *SGE_POLL,
    )
    category = _accounted_category(sge_cluster, job)
    assert asked in category and "-pe mpi 2" in category, category
    print(f"\nFIGURE sge {kind} gpu complex: {category}")


@pytest.mark.slow
@pytest.mark.sge
@pytest.mark.parametrize(
    ("ranks", "granted", "expected"),
    [
        (2, {"SGE_HGR_gpu_slot": "3 1"}, ["3", "1"]),  # a resource map's grant
        (1, {"SGE_HGR_gpu_slot": "gpu2"}, ["2"]),  # one rank: pinned too
        (2, {"CUDA_VISIBLE_DEVICES": "6,7"}, ["6", "7"]),  # set for the job by the site
    ],
)
def test_sge_ranks_are_pinned_to_the_gpus_the_job_was_granted(
    sge_cluster, tmp_path, ranks, granted, expected
):
    """Ranks used `local_rank % device_count`, not the GPUs SGE granted. In an SGE job of the
    cell (the profile as shipped, the launcher starting its ranks with `qrsh -inherit`), each
    rank gets the GPU of its local rank among those the job was granted: `SGE_HGR_<complex>`
    where the grid engine has resource maps, else the job's `CUDA_VISIBLE_DEVICES` (a site's
    prolog or starter). SoGE 8.1.9 has no resource maps: the variable reaches the job from the
    submitting environment here (qsub -V), as the grid engine would set it."""
    shell = (
        f"{sys.executable} -m clusterbench.launch --np {ranks} -- "
        "bash -c 'echo cvd=$CUDA_VISIBLE_DEVICES' > {output} 2>&1"
    )
    lines = _run_toy(
        sge_cluster,
        "sge",
        tmp_path / "wf",
        {**_toy_run(ranks, 1, gpus_per_node=ranks), "sge_gpu_complex": "gpu_slot"},
        shell,
        *SGE_POLL,
        env=granted,
    )
    pinned = dict(re.findall(r"^\[(\d+)\]<stdout>:cvd=(\S*)$", "\n".join(lines), re.M))
    assert [pinned.get(str(r)) for r in range(ranks)] == expected, lines
