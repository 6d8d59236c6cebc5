"""clusterbench.launch: argument and allocation errors (in-process), then real Horovod ranks.

The slow tests start the launcher as a subprocess with real ranks (hvd.init + allreduce over
Gloo) and check what each rank sees and how a failing rank ends the run. The ``slurm`` / ``sge``
tests submit jobs to the test clusters (``slurm_cluster`` / ``sge_cluster`` fixtures from
``tests.clusters.fixtures``) that run the launcher inside a 2-node allocation / a ``-pe mpi``
job.
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
import time
from pathlib import Path

import psutil
import pytest
from clusterbench import launch
from clusterbench.launch import runner
from clusterbench.launch.cli import parse_args
from clusterbench.launch.fixed import prepare
from clusterbench.launch.schedulers import Allocation, Host, local, sge, slurm
from clusterbench.launch.schedulers.slurm import parse_scontrol_job
from clusterbench.launch.slots import assign
from conftest import REPO
from test_schedulers import SCONTROL_JOB_GPUS, SCONTROL_JOB_UNEVEN

PY = sys.executable
TIMEOUT = 90  # seconds: a hanging launcher fails the test instead of hanging it

needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the local scheduler offers one slot per CPU"
)

# Prints one RESULT line per rank with what Horovod and the environment say.
CHECK = r"""
import json, os, sys
import psutil
import torch
import horovod.torch as hvd

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
keys = ["HOROVOD_HOSTNAME", "HOROVOD_GLOO_IFACE", "HOROVOD_GLOO_TIMEOUT_SECONDS",
        "HOROVOD_LOG_LEVEL", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS",
        "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME", "JOB_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
        "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "GLOO_SOCKET_IFNAME"]
print("RESULT " + json.dumps({
    "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
    "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
    "cross_size": hvd.cross_size(), "sum": total, "argv": sys.argv[1:], "cwd": os.getcwd(),
    "env": {k: os.environ.get(k) for k in keys},
    "ancestors": [p.name() for p in psutil.Process().parents()],
}), flush=True)
"""

# Rank 1 prints 25 numbered lines, then exits 3 after a delay; rank 0 waits in an allreduce.
EXIT_3 = r"""
import os, sys, time
import torch
import horovod.torch as hvd

hvd.init()
for i in range(25):
    print(f"rank {hvd.rank()} line {i}", flush=True)
if hvd.rank() == 1:
    time.sleep(1)
    print("rank 1 about to fail", file=sys.stderr, flush=True)
    os._exit(3)
hvd.allreduce(torch.zeros(1))
time.sleep(300)
"""

# Rank 1 is killed by SIGKILL while rank 0 loops over allreduce.
SIGKILLED = r"""
import os, signal, time
import torch
import horovod.torch as hvd

hvd.init()
if hvd.rank() == 1:
    time.sleep(1)
    print("rank 1 killing itself", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
while True:
    hvd.allreduce(torch.zeros(1))
    time.sleep(0.05)
"""

# Rank 0 sleeps forever outside any collective (reporting SIGTERM); rank 1 exits 5.
SLEEPER = r"""
import os, signal, sys, time
import horovod.torch as hvd

hvd.init()
if hvd.rank() == 0:
    def on_term(sig, frame):
        print("rank 0 got SIGTERM", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("rank 0 sleeping", flush=True)
    while True:
        time.sleep(1)
time.sleep(1)
print("rank 1 failing", flush=True)
sys.exit(5)
"""

# Rank 0 ignores SIGTERM (so only SIGKILL stops it) and records its pid; rank 1 exits 7.
STUBBORN = r"""
import os, signal, sys, time
from pathlib import Path
import horovod.torch as hvd

hvd.init()
if hvd.rank() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(sys.argv[1]).write_text(str(os.getpid()))
    while True:
        time.sleep(1)
time.sleep(1)
sys.exit(7)
"""

# Every rank records its pid, then sleeps.
IDLE = r"""
import os, sys, time
from pathlib import Path
import horovod.torch as hvd

hvd.init()
Path(sys.argv[1], f"rank{hvd.rank()}.pid").write_text(str(os.getpid()))
time.sleep(300)
"""


# No Horovod: each rank writes ready<rank> once it handles SIGUSR1, then exits 0 when it has got
# two SIGUSR1 (1 if not within 60 s), printing how many it got and where.
USR1_TWICE = r"""
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda sig, frame: got.append(sig))
rank = os.environ["HOROVOD_RANK"]
open(os.path.join(sys.argv[1], "ready%s" % rank), "w").close()
deadline = time.time() + 60
while len(got) < 2 and time.time() < deadline:
    time.sleep(0.05)
where = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
print("rank %s got %d SIGUSR1 on %s" % (rank, len(got), where), flush=True)
sys.exit(0 if len(got) == 2 else 1)
"""


def _usr1_twice(launcher: str, ready_dir: Path, np: int = 2) -> str:
    """A job script: ``launcher`` in the background; once every rank is ready, SIGUSR1 to the
    launcher twice; then its exit code (``launcher-exit=N``)."""
    return f"""{launcher} &
pid=$!
for i in $(seq 600); do
  [ "$(ls {ready_dir} | grep -c ready)" -ge {np} ] && break
  sleep 0.1
done
kill -USR1 $pid
sleep 1
kill -USR1 $pid
wait $pid
echo launcher-exit=$?"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERBENCH_")}
    env.update(extra)
    return env


def _launch_cmd(np: int, script: Path, *args: str, options: tuple[str, ...] = ()) -> list[str]:
    return [
        PY,
        "-m",
        "clusterbench.launch",
        "--np",
        str(np),
        *options,
        "--",
        PY,
        str(script),
        *args,
    ]


def _run_local(
    tmp_path: Path,
    code: str,
    *args: str,
    np: int = 2,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "rank.py"
    script.write_text(code)
    return subprocess.run(
        _launch_cmd(np, script, *args, options=("--scheduler", "local", *options)),
        cwd=tmp_path,
        env=env or _clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _results(stdout: str) -> dict[int, dict]:
    """RESULT lines by rank; each must come from the rank its ``[rank]`` prefix names."""
    results = {}
    for m in re.finditer(r"^\[(\d+)\]<stdout>:RESULT (.*)$", stdout, re.M):
        data = json.loads(m.group(2))
        assert data["rank"] == int(m.group(1))
        results[data["rank"]] = data
    return results


def _failure_report(stderr: str, rank: int, code: int) -> tuple[str, list[str]]:
    """The launcher's failure message for ``rank`` and the log lines it quotes."""
    m = re.search(rf"rank {rank} of \d+ on host (\S+) exited with code {code};.*", stderr)
    assert m, stderr
    quoted = re.findall(r"^    (.*)$", stderr[m.end() :], re.M)
    return m.group(1), quoted


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ------------------------------------------------------------------------------------------
# errors before any rank starts (in-process)


def _main(monkeypatch, argv: list[str], **env: str) -> int:
    for key in list(os.environ):
        if key.startswith(("CLUSTERBENCH_", "SLURM_")) or key in ("PE_HOSTFILE", "JOB_ID"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return launch.main(argv)


def _fake_slurm(tmp_path: Path, job_text: str, tools: tuple[str, ...] = ("srun", "squeue")) -> str:
    """A PATH holding only a fake ``scontrol`` (printing ``job_text`` for ``show job`` and both
    nodes at 127.0.0.1 for ``show node``) and ``tools`` that print nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "job.txt").write_text(job_text)
    nodes = "NodeName=node1 NodeAddr=127.0.0.1\n\nNodeName=node2 NodeAddr=127.0.0.1\n"
    scripts = {
        "scontrol": f'#!/bin/sh\nif [ "$2" = job ]; then exec /bin/cat {bin_dir}/job.txt; fi\n'
        f"printf '{nodes}'\n",
        **{tool: "#!/bin/sh\n" for tool in tools},
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def test_np_larger_than_local_cpus_names_both_numbers(monkeypatch, capsys) -> None:
    cpus = len(os.sched_getaffinity(0))
    assert _main(monkeypatch, ["--scheduler", "local", "--np", str(cpus + 1), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert f"--np {cpus + 1} is more than the {cpus} slot(s)" in err


def test_np_larger_than_slurm_allocation(monkeypatch, capsys, tmp_path) -> None:
    path = _fake_slurm(tmp_path, SCONTROL_JOB_UNEVEN)
    rc = _main(monkeypatch, ["--np", "4", "--", "true"], SLURM_JOB_ID="1", PATH=path)
    assert rc == 2
    assert "--np 4 is more than the 3 slot(s) of the allocation (node1:2, node2:1)" in (
        capsys.readouterr().err
    )


def test_too_few_gpus_for_the_ranks_of_a_node(monkeypatch, capsys, tmp_path) -> None:
    path = _fake_slurm(tmp_path, SCONTROL_JOB_GPUS)
    rc = _main(monkeypatch, ["--np", "4", "--", "true"], SLURM_JOB_ID="11", PATH=path)
    assert rc == 2
    assert "node1 runs 3 rank(s) but has only 2 GPU(s) (0,1)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"SLURM_JOB_ID": "1"}, "scontrol"),
        ({"PE_HOSTFILE": "/nonexistent", "JOB_ID": "3"}, "qrsh"),
    ],
)
def test_missing_scheduler_tool(monkeypatch, capsys, tmp_path, env, missing) -> None:
    rc = _main(monkeypatch, ["--np", "1", "--", "true"], PATH=str(tmp_path), **env)
    assert rc == 2
    assert f"needs `{missing}`, which is not on PATH" in capsys.readouterr().err


def test_missing_srun(monkeypatch, capsys, tmp_path) -> None:
    path = _fake_slurm(tmp_path, SCONTROL_JOB_UNEVEN, tools=())
    assert _main(monkeypatch, ["--np", "1", "--", "true"], SLURM_JOB_ID="1", PATH=path) == 2
    assert "needs `srun`" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--np", "1", "true"], {}, "missing '--'"),
        (["--np", "1", "--"], {}, "no command after '--'"),
        (["--scheduler", "mpi", "--np", "1", "--", "true"], {}, "unknown scheduler 'mpi'"),
        # the deprecated old name of --scheduler (a warning: test_schedulers)
        (["--launcher", "mpi", "--np", "1", "--", "true"], {}, "unknown scheduler 'mpi'"),
        (["--np", "1", "--", "true"], {"CLUSTERBENCH_SCHEDULER": "pbs"}, "unknown scheduler 'pbs'"),
        (["--np", "1", "--timeout", "soon", "--", "true"], {}, "positive number of seconds"),
        (["--np", "1", "--", "true"], {"CLUSTERBENCH_GLOO_TIMEOUT": "0"}, "positive number"),
        (["--np", "1", "--log-level", "loud", "--", "true"], {}, "unknown log level 'loud'"),
        (["--scheduler", "slurm", "--np", "1", "--", "true"], {}, "needs SLURM_JOB_ID"),
        (["--scheduler", "sge", "--np", "1", "--", "true"], {}, "needs PE_HOSTFILE"),
        (
            ["--scheduler", "local", "--np", "1", "--iface", "nosuch0", "--", "true"],
            {},
            "network interface 'nosuch0' has no IPv4 address",
        ),
    ],
)
def test_bad_arguments(monkeypatch, capsys, argv, env, message) -> None:
    assert _main(monkeypatch, argv, **env) == 2
    err = capsys.readouterr().err
    assert "clusterbench-launch: error:" in err and message in err


def test_the_log_level_sets_each_librarys_variable_and_the_ranks_learn_where_knobs_came_from(
    monkeypatch,
) -> None:
    """One level for Horovod, NCCL and torch.distributed (a variable the user set keeps its
    value); the interface and the level each with its origin: the flag (the config's, as the
    train rule passes it), the variable, or none."""
    from clusterbench.core.rank_env import network_facts
    from clusterbench.launch.common import log_variables, rank_env
    from clusterbench.launch.placement import IfaceChoice

    assert log_variables("debug") == {
        "HOROVOD_LOG_LEVEL": "debug",
        "NCCL_DEBUG": "INFO",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_CPP_LOG_LEVEL": "INFO",
    }
    assert log_variables("warning")["TORCH_DISTRIBUTED_DEBUG"] == "OFF"
    assert "TORCH_CPP_LOG_LEVEL" not in log_variables("error")
    env = {"CLUSTERBENCH_IFACE": "eth0"}
    args = parse_args(["--np", "2", "--backend", "ddp", "--log-level", "INFO", "--", "x"], env)
    assert args.origins == {"iface": "CLUSTERBENCH_IFACE", "log_level": "--log-level"}
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the user's own: kept (the rank inherits it)
    monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG", raising=False)
    extra = rank_env(args, local.LocalScheduler(), IfaceChoice("eth0", "10.0.0.1", "asked"))
    assert "NCCL_DEBUG" not in extra and extra["TORCH_DISTRIBUTED_DEBUG"] == "INFO"
    facts = network_facts({**os.environ, **extra})
    assert facts["iface"] == "eth0" and facts["iface_from"] == "CLUSTERBENCH_IFACE"
    assert facts["log_level"] == "info" and facts["log_level_from"] == "--log-level"
    assert facts["variables"]["NCCL_DEBUG"] == "WARN"
    quiet = parse_args(["--np", "1", "--", "x"], {})
    assert quiet.origins == {"iface": None, "log_level": None}


# ------------------------------------------------------------------------------------------
# how one slot's command is run (no scheduler needed)


class _Slot:
    def __init__(self, hostname: str, rank: int, local_rank: int, local_size: int):
        self.hostname, self.rank = hostname, rank
        self.local_rank, self.local_size = local_rank, local_size


def _slurm(monkeypatch, job_text: str, tag: str, steps: list[str]) -> slurm.SlurmScheduler:
    """A Slurm scheduler bound to the job of ``job_text``, in which ``steps`` already run."""
    monkeypatch.setattr(slurm, "slurm_steps", lambda job_id, **_: list(steps))
    sched = slurm.SlurmScheduler()
    alloc = parse_scontrol_job(job_text)
    sched.bind(alloc, alloc.slots, tag, set())
    return sched


def test_srun_step_takes_its_share_without_overlap(monkeypatch) -> None:
    monkeypatch.setenv("SLURM_NTASKS", "3")
    monkeypatch.setenv("SLURM_CONF", "/etc/x/slurm.conf")
    executor = _slurm(monkeypatch, SCONTROL_JOB_UNEVEN, "cb-test", steps=[])
    assert not executor.overlap
    argv = shlex.split(executor.shell_command("env A=1 python x.py 'a b'", _Slot("node1", 1, 1, 2)))
    assert argv[:7] == [
        "srun",
        "--jobid=1",
        "--job-name=cb-test.1",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=node1",
        "--cpus-per-task=2",
    ]
    assert {"--exact", "--mem=1000M", "--gres=none", "--input=none"} <= set(argv)
    assert "--overlap" not in argv
    assert argv[-3:] == ["bash", "-c", "env A=1 python x.py 'a b'"]
    # srun must not see the batch step's SLURM_* values (they would override its options).
    env = executor.start_env
    assert "SLURM_NTASKS" not in env and env["SLURM_CONF"] == "/etc/x/slurm.conf"


def test_srun_step_asks_one_gpu_or_overlaps_when_steps_run(monkeypatch) -> None:
    sched = _slurm(monkeypatch, SCONTROL_JOB_GPUS, "t", steps=[])
    gpu = shlex.split(sched.shell_command("x", _Slot("node2", 3, 0, 1)))
    assert "--gres=gpu:1" in gpu and "--mem=500M" in gpu
    # Slurm pins the step's GPU itself (CUDA_VISIBLE_DEVICES of the step): the launcher does not
    assert sched.rank_device(sched.hosts["node2"], 0, 1, None) is None
    assert sched.gpu_note() and "--gres=gpu:1" in sched.gpu_note()
    sched = _slurm(monkeypatch, SCONTROL_JOB_GPUS, "t", steps=["11.0"])
    assert sched.overlap
    over = shlex.split(sched.shell_command("x", _Slot("node1", 0, 0, 3)))
    assert "--overlap" in over and not any(a.startswith(("--mem", "--gres")) for a in over)
    assert sched.rank_device(sched.hosts["node1"], 1, 2, None) == "1"  # pinned by local rank


def test_qrsh_command_survives_qrsh_joining_its_arguments(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    executor = sge.SgeScheduler()
    rank_cmd = "env HOROVOD_RANK=1 python x.py 'a b' 'q\"uote'"
    argv = shlex.split(executor.shell_command(rank_cmd, _Slot("hostB", 1, 0, 1)))
    assert argv[:5] == ["qrsh", "-inherit", "-nostdin", "-V", "hostB"]
    # qrsh joins the rest with spaces; the remote shell parses that string again.
    remote = shlex.split(" ".join(argv[5:]))
    assert remote[:2] == ["bash", "-c"] and len(remote) == 3
    # the remote shell ignores the preemption warnings (SGE's -notify reaches it too)
    assert remote[2].startswith(
        f"trap '' USR1 USR2; cd {shlex.quote(str(tmp_path))} || exit 1; {rank_cmd} & "
    )
    # The rank announces its pid, which the executor takes out of the output.
    assert executor.observe(_Slot("hostB", 1, 0, 1), "[1]<stderr>:" + sge.PID_MARK + "4242\n")
    assert executor.pids == {1: 4242}
    assert not executor.observe(_Slot("hostB", 1, 0, 1), "[1]<stdout>:hello\n")


def test_local_allocation_is_this_host_one_slot_per_cpu() -> None:
    alloc = local.local_allocation()
    assert alloc == Allocation("local", (Host(socket.gethostname(), len(os.sched_getaffinity(0))),))


def assert_torch_env_matches(r: dict) -> None:
    """The torch.distributed variables a rank got agree with what Horovod says it is."""
    env = r["env"]
    got = [int(env[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")]
    assert got == [r["rank"], r["size"], r["local_rank"], r["local_size"]], r
    assert [int(env["GROUP_RANK"]), int(env["GROUP_WORLD_SIZE"])] == [
        r["cross_rank"],
        r["cross_size"],
    ], r
    assert int(env["MASTER_PORT"]) > 0


def test_torch_dist_env_of_a_slot() -> None:
    slots = assign([("node1", 2), ("node2", 1)])
    envs = [runner.torch_dist_env(s, ("10.0.0.1", 4242)) for s in slots]
    assert [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"]) for e in envs] == [
        ("0", "0", "0"),
        ("1", "1", "0"),
        ("2", "0", "1"),
    ]
    assert {(e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {
        ("3", "10.0.0.1", "4242")
    }


# ------------------------------------------------------------------------------------------
# real ranks, local scheduler


@pytest.mark.slow
@needs_two_cpus
def test_local_ranks_see_a_consistent_world(tmp_path) -> None:
    env = _clean_env(CLUSTERBENCH_GLOO_TIMEOUT="45", CUDA_VISIBLE_DEVICES="5,7")
    proc = _run_local(
        tmp_path, CHECK, "two words", 'q"uote', options=("--log-level", "info"), env=env
    )
    assert proc.returncode == 0, proc.stderr
    results = _results(proc.stdout)
    assert sorted(results) == [0, 1], proc.stdout
    for rank, r in results.items():
        assert (r["size"], r["local_rank"], r["local_size"]) == (2, rank, 2)
        assert (r["cross_rank"], r["cross_size"]) == (0, 1)
        assert r["sum"] == 3.0  # the allreduce really ran across both ranks
        assert r["argv"] == ["two words", 'q"uote']
        assert r["cwd"] == str(tmp_path)
        assert r["env"]["HOROVOD_HOSTNAME"] == socket.gethostname()
        assert r["env"]["HOROVOD_GLOO_IFACE"] == "lo"
        assert r["env"]["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "45"
        assert r["env"]["HOROVOD_LOG_LEVEL"] == "info"
        assert r["env"]["HOROVOD_CONTROLLER"] == r["env"]["HOROVOD_CPU_OPERATIONS"] == "gloo"
        # torch.distributed's view of the same world (backend: ddp)
        assert_torch_env_matches(r)
        assert r["env"]["MASTER_ADDR"] == "127.0.0.1" and r["env"]["GLOO_SOCKET_IFNAME"] == "lo"
    assert len({r["env"]["MASTER_PORT"] for r in results.values()}) == 1
    # GPU pinned by local rank, within the inherited list.
    assert [results[r]["env"]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == ["5", "7"]
    assert "Gloo interface lo" in proc.stderr and "on this machine" in proc.stderr


@pytest.mark.slow
@needs_two_cpus
def test_rank_exit_code_and_last_lines_are_reported(tmp_path) -> None:
    proc = _run_local(tmp_path, EXIT_3)
    assert proc.returncode == 3, proc.stderr
    host, quoted = _failure_report(proc.stderr, rank=1, code=3)
    assert host == socket.gethostname()
    assert len(quoted) == 20
    assert quoted[-1] == "[1]<stderr>:rank 1 about to fail"
    assert quoted[-2] == "[1]<stdout>:rank 1 line 24"
    assert "[1]<stdout>:rank 1 line 5" not in quoted  # only the last 20 lines
    assert all(line.startswith("[1]") for line in quoted)


@pytest.mark.slow
@needs_two_cpus
def test_rank_killed_by_sigkill_during_allreduce(tmp_path) -> None:
    proc = _run_local(tmp_path, SIGKILLED)
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    _, quoted = _failure_report(proc.stderr, rank=1, code=137)
    assert "[1]<stdout>:rank 1 killing itself" in quoted


@pytest.mark.slow
@needs_two_cpus
def test_sleeping_rank_gets_sigterm_when_another_fails(tmp_path) -> None:
    proc = _run_local(tmp_path, SLEEPER)
    assert proc.returncode == 5, proc.stderr
    _, quoted = _failure_report(proc.stderr, rank=1, code=5)
    assert quoted == ["[1]<stdout>:rank 1 failing"]
    assert "[0]<stdout>:rank 0 got SIGTERM" in proc.stdout


@pytest.mark.slow
@needs_two_cpus
def test_rank_ignoring_sigterm_is_killed(tmp_path) -> None:
    pid_file = tmp_path / "rank0.pid"
    proc = _run_local(tmp_path, STUBBORN, str(pid_file))
    assert proc.returncode == 7, proc.stderr
    _failure_report(proc.stderr, rank=1, code=7)
    assert not _alive(int(pid_file.read_text()))


@pytest.mark.slow
@needs_two_cpus
def test_sigterm_to_the_launcher_stops_every_rank(tmp_path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(IDLE)
    proc = subprocess.Popen(
        _launch_cmd(2, script, str(tmp_path), options=("--scheduler", "local")),
        cwd=tmp_path,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(list(tmp_path.glob("rank*.pid"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "the launcher received SIGTERM: all ranks were stopped" in stderr
    assert not [pid for pid in pids if _alive(pid)]


# ------------------------------------------------------------------------------------------
# real clusters


def _sbatch(cluster, tmp_path: Path, *args: str, script: str) -> tuple[str, str]:
    """Run ``script`` as a batch job to its end, in whatever state; return (job id, its
    output)."""
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    job, _ = cluster.batch(
        [f"--chdir={tmp_path}", "--output=slurm-%j.out", "--time=5", *args, str(path)],
        timeout=240,
    )
    return job, (tmp_path / f"slurm-{job}.out").read_text()


def _jobstep_like(np: int, script: Path, *args: str) -> str:
    """The launcher as Snakemake's jobstep executor runs it: SLURM_* stripped but the job id, and
    this checkout's package first on PYTHONPATH (as rules/common.smk puts it for every job; the
    venv's editable install may be another checkout's)."""
    launcher = shlex.join(_launch_cmd(np, script, *args))
    return (
        'env -i PATH="$PATH" HOME="$HOME" SLURM_JOB_ID="$SLURM_JOB_ID" SLURM_CONF="$SLURM_CONF" '
        f"PYTHONPATH={shlex.quote(str(REPO / 'workflow'))} "
        f"{launcher}\necho launcher-exit=$?"
    )


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_ranks_on_two_nodes_uneven(slurm_cluster, tmp_path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(CHECK)
    _, out = _sbatch(slurm_cluster, tmp_path, "-N2", "-n3", "-c2", script=_jobstep_like(3, script))
    assert "launcher-exit=0" in out, out
    results = _results(out)
    got = {
        rank: (
            r["env"]["HOROVOD_HOSTNAME"],
            r["env"]["SLURMD_NODENAME"],
            r["local_rank"],
            r["local_size"],
            r["cross_rank"],
            r["cross_size"],
            r["size"],
            r["sum"],
        )
        for rank, r in results.items()
    }
    for r in results.values():  # each rank is a task of a step, not a child of the launcher
        assert "slurmstepd" in r["ancestors"], r
        assert_torch_env_matches(r)
    assert len({(r["env"]["MASTER_ADDR"], r["env"]["MASTER_PORT"]) for r in results.values()}) == 1
    assert got == {
        0: ("node1", "node1", 0, 2, 0, 2, 3, 6.0),
        1: ("node1", "node1", 1, 2, 0, 1, 3, 6.0),
        2: ("node2", "node2", 0, 1, 1, 2, 3, 6.0),
    }, out


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_failing_rank_stops_the_other_step(slurm_cluster, tmp_path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SLEEPER)
    check_steps = 'squeue --steps --noheader --format="%i %j" --jobs="$SLURM_JOB_ID"'
    job, out = _sbatch(
        slurm_cluster,
        tmp_path,
        "-N2",
        "-n2",
        script=_jobstep_like(2, script) + f"\necho steps-left:\n{check_steps}",
    )
    assert "launcher-exit=5" in out, out
    host, quoted = _failure_report(out, rank=1, code=5)
    assert host == "node2"
    assert "[1]<stdout>:rank 1 failing" in quoted
    assert "[0]<stdout>:rank 0 got SIGTERM" in out  # SIGTERM reached the task through Slurm
    steps = out.split("steps-left:", 1)[1].split()
    assert steps == [f"{job}.batch", "batch"], out


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_usr1_reaches_every_rank_step_and_stops_nothing(slurm_cluster, tmp_path) -> None:
    """SIGUSR1 to the launcher in a 2-node job: passed on to each rank's step (scancel --signal),
    twice; every rank keeps running and exits 0, and so does the launcher."""
    script = tmp_path / "rank.py"
    script.write_text(USR1_TWICE)
    ready = tmp_path / "ready"
    ready.mkdir()
    launcher = _jobstep_like(2, script, str(ready)).split("\n")[0]  # without its echo
    _, out = _sbatch(slurm_cluster, tmp_path, "-N2", "-n2", script=_usr1_twice(launcher, ready))
    assert "launcher-exit=0" in out, out
    assert "[0]<stdout>:rank 0 got 2 SIGUSR1 on node1" in out, out
    assert "[1]<stdout>:rank 1 got 2 SIGUSR1 on node2" in out, out
    assert out.count("received SIGUSR1: passing it on to every rank") == 2, out
    assert "stopping" not in out, out


def _qsub(cluster, tmp_path: Path, *args: str, script: str) -> str:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    out = tmp_path / "job.out"
    res = cluster.run(
        ["qsub", "-sync", "y", "-wd", str(tmp_path), "-j", "y", "-o", str(out), *args, str(path)],
        check=False,
        timeout=240,
    )
    assert out.exists(), res
    return out.read_text()


@pytest.mark.slow
@pytest.mark.sge
def test_sge_ranks_through_qrsh_inherit(sge_cluster, tmp_path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(CHECK)
    launcher = shlex.join(_launch_cmd(2, script, "two words"))
    out = _qsub(
        sge_cluster, tmp_path, "-pe", "mpi", "2", script=f"{launcher}\necho launcher-exit=$?"
    )
    assert "launcher-exit=0" in out, out
    results = _results(out)
    assert sorted(results) == [0, 1], out
    host = sge_cluster.nodes[0]
    for rank, r in results.items():
        assert (r["size"], r["local_rank"], r["local_size"], r["sum"]) == (2, rank, 2, 3.0)
        assert r["env"]["HOROVOD_HOSTNAME"] == host
        assert "sge_shepherd" in r["ancestors"], r  # a task started through qrsh -inherit
        assert r["argv"] == ["two words"] and r["cwd"] == str(tmp_path)


@pytest.mark.slow
@pytest.mark.sge
def test_sge_failing_rank_stops_the_other_and_the_job_survives(sge_cluster, tmp_path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SLEEPER)
    launcher = shlex.join(_launch_cmd(2, script))
    out = _qsub(
        sge_cluster,
        tmp_path,
        "-pe",
        "mpi",
        "2",
        script=f"{launcher}\necho launcher-exit=$?\necho job-still-running",
    )
    assert "launcher-exit=5" in out, out
    _, quoted = _failure_report(out, rank=1, code=5)
    assert "[1]<stdout>:rank 1 failing" in quoted
    assert "[0]<stdout>:rank 0 got SIGTERM" in out
    # SGE kills the whole job when a task's qrsh is killed; the launcher must not do that.
    assert "job-still-running" in out


@pytest.mark.slow
@pytest.mark.sge
def test_sge_usr1_reaches_every_rank_and_stops_nothing(sge_cluster, tmp_path) -> None:
    """SIGUSR1 to the launcher in a `-pe mpi 2` job: passed on to each rank started through
    qrsh -inherit (its pid), twice; the ranks keep running and exit 0, the job survives."""
    script = tmp_path / "rank.py"
    script.write_text(USR1_TWICE)
    ready = tmp_path / "ready"
    ready.mkdir()
    launcher = shlex.join(_launch_cmd(2, script, str(ready)))
    out = _qsub(sge_cluster, tmp_path, "-pe", "mpi", "2", script=_usr1_twice(launcher, ready))
    assert "launcher-exit=0" in out, out
    for rank in (0, 1):
        assert f"[{rank}]<stdout>:rank {rank} got 2 SIGUSR1" in out, out
    assert out.count("received SIGUSR1: passing it on to every rank") == 2, out
    assert "stopping" not in out, out


@pytest.mark.slow
def test_single_rank_in_an_sge_job_starts_locally(monkeypatch, capfd, tmp_path) -> None:
    """A one-slot job (e.g. `-pe smp 1`, no control_slaves) needs no qrsh -inherit."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    qrsh = bin_dir / "qrsh"
    qrsh.write_text("#!/bin/sh\necho 'qrsh must not be used' >&2\nexit 1\n")
    qrsh.chmod(0o755)
    hostfile = tmp_path / "pe_hostfile"
    hostfile.write_text(f"{socket.gethostname()} 1 all.q@{socket.gethostname()} UNDEFINED\n")
    code = "import horovod.torch as hvd; hvd.init(); print('identity', hvd.rank(), hvd.size())"
    rc = _main(
        monkeypatch,
        ["--np", "1", "--", sys.executable, "-c", code],
        PE_HOSTFILE=str(hostfile),
        JOB_ID="5",
        PATH=f"{bin_dir}:/usr/bin:/bin",
    )
    out, err = capfd.readouterr()
    assert rc == 0, out + err
    assert "identity 0 1" in out and "qrsh must not be used" not in out + err
    assert "sge scheduler (one local process): 1 rank(s)" in out + err


def test_single_rank_in_a_gpu_slurm_job_keeps_its_environment(monkeypatch, tmp_path) -> None:
    """One rank runs in the job's own step: no step lookup, no GPU re-pinning (Slurm may have
    renumbered the step's devices; the inherited CUDA_VISIBLE_DEVICES is already right)."""
    path = _fake_slurm(tmp_path, SCONTROL_JOB_GPUS)
    (Path(path) / "squeue").write_text("#!/bin/sh\necho 11.0 busy\n")  # a step holds the CPUs
    env = {"SLURM_JOB_ID": "11", "PATH": path, "CUDA_VISIBLE_DEVICES": "1"}
    monkeypatch.setenv("PATH", path)
    args = parse_args(["--np", "1", "--", "true"], env)
    plan = prepare(args, env)
    assert plan.devices == {0: None}
    assert plan.scheduler.name == "slurm" and plan.starter.name == "local"
    assert plan.env["CLUSTERBENCH_SCHEDULER"] == "slurm"
