"""Unit tests of the schedulers' pure parts: scheduler text in, hosts/slots/interfaces out.

Slurm (hostlists, ``scontrol``, ``squeue``), SGE (``$PE_HOSTFILE``), local (hosts files), the
registry that picks the scheduler, each scheduler's ``discover_hosts`` on sample input, GPU
lists, and the generic placement of ranks and choice of the network interface
(:mod:`clusterbench.launch.placement`). The Slurm sample texts are real output of Slurm 22.05.8
(`scontrol show job -d`, `scontrol show node`, `squeue --steps`) from the two-node test cluster
(node1 and node2 on one machine).
"""

from __future__ import annotations

import os
import re
import socket

import pytest
from clusterbench.launch import schedulers
from clusterbench.launch.placement import (
    choose_iface,
    local_nodes,
    rank_hosts,
    spread_ranks,
)
from clusterbench.launch.schedulers import (
    Allocation,
    AllocationError,
    Host,
    LaunchError,
    node_devices,
    rank_device,
    usable_hosts,
)
from clusterbench.launch.schedulers.local import LocalScheduler, parse_hosts_file
from clusterbench.launch.schedulers.sge import SgeScheduler, parse_pe_hostfile
from clusterbench.launch.schedulers.slurm import (
    SlurmScheduler,
    expand_hostlist,
    expand_ranges,
    parse_scontrol_job,
    parse_scontrol_nodes,
    running_steps,
)
from clusterbench.launch.slots import assign, describe

# `sbatch -N2 -n3 -c2`: node1 got 4 CPUs, node2 2 CPUs, 2 CPUs per task.
SCONTROL_JOB_UNEVEN = """\
JobId=1 JobName=job.sh
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=root QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   DerivedExitCode=0:0
   RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-11-22T14:25:15 EligibleTime=2026-11-22T14:25:15
   AccrueTime=2026-11-22T14:25:15
   StartTime=2026-11-22T14:25:16 EndTime=Unknown Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-22T14:25:16 Scheduler=Main
   Partition=debug AllocNode:Sid=localhost:5722
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=node[1-2]
   BatchHost=node1
   NumNodes=2 NumCPUs=6 NumTasks=3 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   TRES=cpu=6,mem=3000M,node=2,billing=6
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=(null)
     Nodes=node1 CPU_IDs=0-3 Mem=2000 GRES=
     Nodes=node2 CPU_IDs=0-1 Mem=1000 GRES=
   MinCPUsNode=2 MinMemoryCPU=500M MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=/tmp/lt/job.sh
   WorkDir=/tmp/lt
   StdErr=/tmp/lt/job-1.out
   StdIn=/dev/null
   StdOut=/tmp/lt/job-1.out
   Power=

"""

# `sbatch -N2 -n4 --gpus-per-node=2` (excerpt): 3 tasks on node1, 1 on node2, 2 GPUs each.
SCONTROL_JOB_GPUS = """\
JobId=11 JobName=wrap
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=node[1-2]
   BatchHost=node1
   NumNodes=2 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=4,mem=2000M,node=2,billing=4,gres/gpu=4
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:fake:4
     Nodes=node1 CPU_IDs=0-2 Mem=1500 GRES=gpu:fake:2(IDX:0-1)
     Nodes=node2 CPU_IDs=0 Mem=500 GRES=gpu:fake:2(IDX:0-1)
   MinCPUsNode=1 MinMemoryCPU=500M MinTmpDiskNode=0
"""

# `sbatch -N2 -n2 --ntasks-per-node=1` (excerpt): one detail line for both nodes.
SCONTROL_JOB_PER_NODE = """\
JobId=12 JobName=wrap
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=node[1-2]
   NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=*
   JOB_GRES=(null)
     Nodes=node[1-2] CPU_IDs=0 Mem=500 GRES=
   MinCPUsNode=1 MinMemoryCPU=500M MinTmpDiskNode=0
"""

SCONTROL_NODE = """\
NodeName=node1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=4 CPUEfctv=4 CPUTot=4 CPULoad=3.20
   Gres=gpu:fake:2
   NodeAddr=127.0.0.1 NodeHostName=vm Port=28916 Version=22.05.8
   RealMemory=4000 AllocMem=2000 FreeMem=21387 Sockets=4 Boards=1

NodeName=node2 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=2 CPUEfctv=4 CPUTot=4 CPULoad=3.20
   NodeAddr=10.1.2.3 NodeHostName=vm2 Port=28917 Version=22.05.8

"""


# ------------------------------------------------------------------------------------------
# Slurm hostlists


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("a[1-2],b3", ["a1", "a2", "b3"]),
        ("gpu-[001-002]-x", ["gpu-001-x", "gpu-002-x"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("n1,n[3-4],m", ["n1", "n3", "n4", "m"]),
        ("single", ["single"]),
        ("host.example.org", ["host.example.org"]),
    ],
)
def test_expand_hostlist(expr: str, hosts: list[str]) -> None:
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("expr", ["node[1-2", "node1-2]", "node[a-b]", "node[3-1]"])
def test_expand_hostlist_rejects_malformed(expr: str) -> None:
    with pytest.raises(AllocationError, match="hostlist"):
        expand_hostlist(expr)


def test_expand_ranges() -> None:
    assert expand_ranges("0-3,6") == [0, 1, 2, 3, 6]
    assert expand_ranges("") == []


# ------------------------------------------------------------------------------------------
# scontrol show job -d


def test_scontrol_job_uneven_cpus_gives_cpus_per_task_slots() -> None:
    alloc = parse_scontrol_job(SCONTROL_JOB_UNEVEN)
    assert alloc.scheduler == "slurm"
    assert alloc.job_id == "1"
    assert alloc.cpus_per_task == 2
    assert [(h.name, h.slots, h.cpus, h.mem_mb, h.gpus) for h in alloc.hosts] == [
        ("node1", 2, 4, 2000, None),
        ("node2", 1, 2, 1000, None),
    ]
    assert alloc.slots == 3


def test_scontrol_job_gres_indices_per_node() -> None:
    alloc = parse_scontrol_job(SCONTROL_JOB_GPUS)
    assert [(h.name, h.slots, h.gpus) for h in alloc.hosts] == [
        ("node1", 3, ("0", "1")),
        ("node2", 1, ("0", "1")),
    ]


def test_scontrol_job_hostlist_detail_line_and_tasks_per_node() -> None:
    alloc = parse_scontrol_job(SCONTROL_JOB_PER_NODE)
    assert [(h.name, h.slots) for h in alloc.hosts] == [("node1", 1), ("node2", 1)]


def test_scontrol_job_num_tasks_caps_slots_one_per_node_first() -> None:
    # Exclusive nodes: 4 CPUs each, but the job asked for 3 tasks.
    text = SCONTROL_JOB_UNEVEN.replace("CPUs/Task=2", "CPUs/Task=1").replace(
        "CPU_IDs=0-1", "CPU_IDs=0-3"
    )
    alloc = parse_scontrol_job(text)
    assert [(h.name, h.slots) for h in alloc.hosts] == [("node1", 2), ("node2", 1)]


def test_scontrol_job_not_running_is_an_error() -> None:
    with pytest.raises(AllocationError, match="PENDING"):
        parse_scontrol_job(SCONTROL_JOB_UNEVEN.replace("JobState=RUNNING", "JobState=PENDING"))


def test_scontrol_job_without_node_details_is_an_error() -> None:
    text = "\n".join(line for line in SCONTROL_JOB_UNEVEN.splitlines() if "CPU_IDs" not in line)
    with pytest.raises(AllocationError, match="CPU_IDs"):
        parse_scontrol_job(text)


def test_scontrol_heterogeneous_job_is_rejected() -> None:
    with pytest.raises(AllocationError, match="heterogeneous"):
        parse_scontrol_job(SCONTROL_JOB_UNEVEN + "\n" + SCONTROL_JOB_GPUS)


def test_scontrol_nodes_addresses() -> None:
    assert parse_scontrol_nodes(SCONTROL_NODE) == {"node1": "127.0.0.1", "node2": "10.1.2.3"}


def test_running_steps_skips_batch_and_extern_and_filters_names() -> None:
    text = "11.batch batch\n11.extern extern\n11.0 cb-1234.0\n11.1 cb-1234.1\n11.2 other\n"
    assert running_steps(text, "11") == ["11.0", "11.1", "11.2"]
    assert running_steps(text, "11", name="cb-1234.1") == ["11.1"]
    assert running_steps(text, "11", name_prefix="cb-1234.") == ["11.0", "11.1"]
    assert running_steps(text, "12") == []


# ------------------------------------------------------------------------------------------
# SGE


def test_pe_hostfile_several_hosts_uneven_slots() -> None:
    text = (
        "hostA.example.org 4 all.q@hostA.example.org UNDEFINED\n"
        "hostB.example.org 1 all.q@hostB.example.org UNDEFINED\n"
        "hostC.example.org 2 all.q@hostC.example.org 0,1\n"
        "hostA.example.org 2 gpu.q@hostA.example.org UNDEFINED\n"
    )
    alloc = parse_pe_hostfile(text)
    assert alloc.scheduler == "sge"
    assert [(h.name, h.slots) for h in alloc.hosts] == [
        ("hostA.example.org", 6),
        ("hostB.example.org", 1),
        ("hostC.example.org", 2),
    ]


@pytest.mark.parametrize("text", ["", "hostA\n", "hostA two all.q@hostA UNDEFINED\n"])
def test_pe_hostfile_malformed(text: str) -> None:
    with pytest.raises(AllocationError, match="PE_HOSTFILE"):
        parse_pe_hostfile(text)


# ------------------------------------------------------------------------------------------
# ranks on hosts


def test_spread_ranks_one_per_host_first_then_fill() -> None:
    caps = [("a", 2), ("b", 1), ("c", 3)]
    assert spread_ranks(caps, 6) == [("a", 2), ("b", 1), ("c", 3)]
    assert spread_ranks(caps, 4) == [("a", 2), ("b", 1), ("c", 1)]
    assert spread_ranks(caps, 3) == [("a", 1), ("b", 1), ("c", 1)]
    assert spread_ranks(caps, 2) == [("a", 1), ("b", 1)]


def test_spread_ranks_too_many_names_both_numbers() -> None:
    with pytest.raises(AllocationError, match=r"--np 7 .* 6 slot\(s\).*a:2, b:1, c:3"):
        spread_ranks([("a", 2), ("b", 1), ("c", 3)], 7)
    with pytest.raises(AllocationError, match="at least 1"):
        spread_ranks([("a", 2)], 0)


def test_host_assignment_for_uneven_slots() -> None:
    alloc = Allocation("sge", (Host("a", 3), Host("b", 1), Host("c", 2)))
    hosts = rank_hosts(alloc, 6)
    assert hosts == [("a", 3), ("b", 1), ("c", 2)]
    slots = assign(hosts)
    got = [
        (s.hostname, s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size, s.size)
        for s in slots
    ]
    assert got == [
        ("a", 0, 0, 3, 0, 3, 6),
        ("a", 1, 1, 3, 0, 2, 6),
        ("a", 2, 2, 3, 0, 1, 6),
        ("b", 3, 0, 1, 1, 3, 6),
        ("c", 4, 0, 2, 2, 3, 6),
        ("c", 5, 1, 2, 1, 2, 6),
    ]


@pytest.mark.parametrize(
    "hosts",
    [[("a", 3), ("b", 1), ("c", 2)], [("n1", 1)], [("n1", 2), ("n2", 2)], [("x", 1), ("y", 4)]],
)
def test_host_assignment_is_horovodruns(hosts) -> None:
    """The launcher numbers the ranks as horovodrun does for the same host:slots list, so a
    Horovod rank it starts sees the world horovodrun would have made."""
    pytest.importorskip("horovod")
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    theirs = get_host_assignments(parse_hosts(describe(hosts)), sum(n for _, n in hosts))
    assert [vars(s) for s in assign(hosts)] == [
        {k: getattr(t, k) for k in vars(assign(hosts)[0])} for t in theirs
    ]


def test_host_assignment_refuses_a_host_twice_or_without_ranks() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        assign([("a", 1), ("a", 1)])
    with pytest.raises(ValueError, match="at least one rank"):
        assign([("a", 0)])


def test_host_assignment_for_fewer_ranks_than_slots() -> None:
    alloc = parse_scontrol_job(SCONTROL_JOB_UNEVEN)  # node1:2, node2:1
    assert rank_hosts(alloc, 2) == [("node1", 1), ("node2", 1)]
    assert rank_hosts(alloc, 3) == [("node1", 2), ("node2", 1)]
    with pytest.raises(AllocationError, match=r"--np 4 .* 3 slot"):
        rank_hosts(alloc, 4)


# ------------------------------------------------------------------------------------------
# which scheduler: the registry


@pytest.mark.parametrize(
    ("requested", "env", "scheduler"),
    [
        (None, {"SLURM_JOB_ID": "7"}, "slurm"),
        (None, {"SLURM_JOBID": "7"}, "slurm"),
        (None, {"PE_HOSTFILE": "/x", "JOB_ID": "3"}, "sge"),
        (None, {"PE_HOSTFILE": "/x"}, "local"),
        (None, {}, "local"),
        ("auto", {"SLURM_JOB_ID": "7"}, "slurm"),
        ("local", {"SLURM_JOB_ID": "7"}, "local"),
        (None, {"SLURM_JOB_ID": "7", "CLUSTERBENCH_SCHEDULER": "local"}, "local"),
        (None, {"SLURM_JOB_ID": "7", "CLUSTERBENCH_LAUNCHER": "local"}, "local"),  # old name
        (None, {"CLUSTERBENCH_LAUNCHER": "slurm", "CLUSTERBENCH_SCHEDULER": "sge"}, "sge"),
        ("SGE", {}, "sge"),
    ],
)
def test_select_scheduler(requested, env, scheduler) -> None:
    assert schedulers.select(requested, env).name == scheduler


def test_the_old_names_of_the_scheduler_setting_still_work_and_warn(caplog) -> None:
    from clusterbench.launch.cli import parse_args

    with caplog.at_level("WARNING", logger="clusterbench.launch"):
        assert schedulers.select(None, {"CLUSTERBENCH_LAUNCHER": "sge"}).name == "sge"
    assert "CLUSTERBENCH_LAUNCHER is deprecated" in caplog.text
    assert "CLUSTERBENCH_SCHEDULER=sge instead" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="clusterbench.launch"):
        schedulers.select(None, {"CLUSTERBENCH_SCHEDULER": "sge"})
    assert caplog.text == ""
    args = parse_args(["--launcher", "slurm", "--np", "2", "--", "true"], {})
    assert args.scheduler == "slurm"
    assert args.deprecated == [
        "--launcher is deprecated (the launcher is this program, the scheduler what it runs "
        "under): use --scheduler slurm"
    ]
    assert parse_args(["--np", "2", "--", "true"], {}).deprecated == []


def test_select_scheduler_unknown_name() -> None:
    with pytest.raises(AllocationError, match="unknown scheduler 'mpi'"):
        schedulers.select("mpi", {})
    with pytest.raises(AllocationError, match="unknown scheduler 'pbs'"):
        schedulers.select(None, {"CLUSTERBENCH_SCHEDULER": "pbs"})


def test_detection_walks_the_registry_in_order(monkeypatch) -> None:
    """A scheduler added to the registry is detected without any change elsewhere; the first
    that detects wins, local (which always does) is the fallback."""

    class Pbs(schedulers.Scheduler):
        name = "pbs"

        @classmethod
        def detect(cls, env):
            return "PBS_JOBID" in env

    registry = {"pbs": Pbs, **schedulers.SCHEDULERS}
    monkeypatch.setattr(schedulers, "SCHEDULERS", registry)
    assert schedulers.detect({"PBS_JOBID": "1", "SLURM_JOB_ID": "2"}) is Pbs
    assert schedulers.detect({"SLURM_JOB_ID": "2"}) is SlurmScheduler
    assert schedulers.select("pbs", {}) is Pbs
    assert list(schedulers.SCHEDULERS)[-1] == "local"


# ------------------------------------------------------------------------------------------
# GPUs


def test_node_devices_never_widens_the_inherited_list() -> None:
    assert node_devices(None, None) is None
    assert node_devices(("0", "1"), None) == ("0", "1")
    assert node_devices(None, ("3", "5")) == ("3", "5")
    assert node_devices(("0", "1", "2"), ("1", "2", "7")) == ("1", "2")
    assert node_devices(("0", "1"), ()) == ()


def test_rank_device_is_the_local_rank_th_entry() -> None:
    assert rank_device(("3", "5"), 0, 2, "h") == "3"
    assert rank_device(("3", "5"), 1, 2, "h") == "5"
    assert rank_device(None, 1, 2, "h") is None
    assert rank_device((), 0, 2, "h") == ""
    with pytest.raises(AllocationError, match=r"node1 runs 3 rank\(s\) but has only 2 GPU"):
        rank_device(("0", "1"), 0, 3, "node1")


# ------------------------------------------------------------------------------------------
# network interface

IFACES = {"lo": ["127.0.0.1"], "eth0": ["10.1.2.1"], "ib0": ["192.168.5.1"]}


def test_iface_loopback_when_every_node_is_on_this_machine() -> None:
    choice = choose_iface({"node1": "127.0.0.1", "node2": "10.1.2.1"}, IFACES, "vm", "127.0.1.1")
    assert (choice.iface, choice.address) == ("lo", "127.0.0.1")
    assert "node1=127.0.0.1" in choice.reason and "on this machine" in choice.reason


def test_iface_of_the_host_name_address_when_a_node_is_remote() -> None:
    choice = choose_iface({"node1": "10.1.2.1", "node2": "10.1.2.9"}, IFACES, "head", "10.1.2.1")
    assert (choice.iface, choice.address) == ("eth0", "10.1.2.1")
    assert "node2=10.1.2.9" in choice.reason and "'head' resolves to 10.1.2.1" in choice.reason


def test_iface_unresolved_node_counts_as_remote() -> None:
    choice = choose_iface({"node1": None}, IFACES, "head", "192.168.5.1")
    assert choice.iface == "ib0"
    assert "node1=unresolved" in choice.reason


def test_iface_error_when_host_name_resolves_to_loopback_and_nodes_are_remote() -> None:
    with pytest.raises(AllocationError, match=r"node2=10\.1\.2\.9.*--iface"):
        choose_iface({"node2": "10.1.2.9"}, IFACES, "head", "127.0.1.1")


def test_iface_requested_wins_and_must_exist() -> None:
    choice = choose_iface({"node1": "127.0.0.1"}, IFACES, "vm", "127.0.0.1", requested="eth0")
    assert (choice.iface, choice.address) == ("eth0", "10.1.2.1")
    assert "requested" in choice.reason
    with pytest.raises(AllocationError, match="'eth9'.*eth0, ib0, lo"):
        choose_iface({"node1": "127.0.0.1"}, IFACES, "vm", "127.0.0.1", requested="eth9")


def test_local_nodes() -> None:
    addrs = {"a": "127.0.0.1", "b": "10.1.2.1", "c": "10.9.9.9", "d": None, "e": "127.0.1.1"}
    assert local_nodes(addrs, IFACES) == {"a", "b", "e"}


# ------------------------------------------------------------------------------------------
# discover_hosts: the hosts a job could use now (for Horovod elastic)


def test_hosts_file_formats_comments_sums_and_zero() -> None:
    text = "# hosts for the elastic run\na:4\nb slots=2   # MPI style\nc\n\na:2\nd:0\n"
    assert parse_hosts_file(text) == {"a": 6, "b": 2, "c": 1}
    assert parse_hosts_file("") == {}


@pytest.mark.parametrize("text", ["a:two\n", "a b c\n", "a slots=\n", ":3\n"])
def test_hosts_file_malformed_line_is_named(text: str) -> None:
    with pytest.raises(AllocationError, match="hosts file line 1"):
        parse_hosts_file(text)


def test_local_discover_hosts_this_host_or_the_hosts_file(tmp_path) -> None:
    local = LocalScheduler()
    local.allocation({})
    assert local.discover_hosts() == {socket.gethostname(): len(os.sched_getaffinity(0))}
    hosts = tmp_path / "hosts"
    hosts.write_text("node1:2\nnode2:2\n")
    env = {"CLUSTERBENCH_HOSTS_FILE": str(hosts)}
    assert local.discover_hosts(env) == {"node1": 2, "node2": 2}
    hosts.write_text("node1:2\n# node2 taken out\n")  # edited while the job runs
    assert local.discover_hosts(env) == {"node1": 2}
    with pytest.raises(LaunchError, match="cannot read the hosts file"):
        local.discover_hosts({"CLUSTERBENCH_HOSTS_FILE": str(tmp_path / "none")})


def test_usable_hosts_leave_out_a_node_whose_rank_failed() -> None:
    hosts = parse_scontrol_job(SCONTROL_JOB_UNEVEN).host_slots()
    assert usable_hosts(hosts) == {"node1": 2, "node2": 1}
    assert usable_hosts(hosts, {"node2"}) == {"node1": 2}
    assert usable_hosts(hosts, {"node1", "node2"}) == {}
    assert usable_hosts({"a": 0, "b": 1}) == {"b": 1}  # no slot: not usable


def test_slurm_discover_hosts_asks_scontrol_again(monkeypatch) -> None:
    from clusterbench.launch.schedulers import slurm

    asked = []

    def fake_tool(cmd):
        asked.append(cmd)
        return SCONTROL_JOB_UNEVEN

    monkeypatch.setattr(slurm, "run_tool", fake_tool)
    sched = SlurmScheduler()
    assert sched.discover_hosts({"SLURM_JOB_ID": "1"}) == {"node1": 2, "node2": 1}

    class Slot:
        hostname, rank = "node2", 2

    sched.rank_failed(Slot())  # what the rank runner reports when rank 2 fails on its own
    assert sched.discover_hosts({"SLURM_JOB_ID": "1"}) == {"node1": 2}
    assert asked == [["scontrol", "show", "job", "-d", "1"]] * 2
    with pytest.raises(LaunchError, match="needs SLURM_JOB_ID"):
        sched.discover_hosts({})


def test_a_hosts_file_limits_every_schedulers_discovery_to_what_it_lists(
    monkeypatch, tmp_path
) -> None:
    """Under Slurm (and SGE) the hosts file ``CLUSTERBENCH_HOSTS_FILE`` holds back the job's
    hosts and slots: a host taken out (``:0``, or not listed) leaves, put back it joins again;
    it never adds a host or a slot the allocation lacks."""
    from clusterbench.launch.schedulers import slurm, within_hosts_file

    monkeypatch.setattr(slurm, "run_tool", lambda cmd: SCONTROL_JOB_UNEVEN)  # node1:2, node2:1
    hosts = tmp_path / "hosts"
    env = {"SLURM_JOB_ID": "1", "CLUSTERBENCH_HOSTS_FILE": str(hosts)}
    sched = SlurmScheduler()
    hosts.write_text("node1:1\nnode2:0\nnode9:4\n")
    assert sched.discover_hosts(env) == {"node1": 1}
    hosts.write_text("node1:8\nnode2\n")
    assert sched.discover_hosts(env) == {"node1": 2, "node2": 1}
    assert within_hosts_file({"a": 2, "b": 1}, None) == {"a": 2, "b": 1}  # no file: all of it
    assert within_hosts_file({"a": 2, "b": 1}, {"b": 4}) == {"a": 0, "b": 1}
    pe = tmp_path / "pe_hostfile"
    pe.write_text(PE_HOSTFILE)
    sge_env = {"PE_HOSTFILE": str(pe), "CLUSTERBENCH_HOSTS_FILE": str(hosts)}
    hosts.write_text("hostB.cluster:1\n")
    assert SgeScheduler().discover_hosts(sge_env) == {"hostB.cluster": 1}
    hosts.unlink()
    with pytest.raises(LaunchError, match="cannot read the hosts file"):
        sched.discover_hosts(env)


def test_sge_discover_hosts_reads_the_pe_hostfile(tmp_path) -> None:
    hostfile = tmp_path / "pe_hostfile"
    hostfile.write_text("hostA 2 all.q@hostA UNDEFINED\nhostB 1 all.q@hostB UNDEFINED\n")
    sched = SgeScheduler()
    assert sched.discover_hosts({"PE_HOSTFILE": str(hostfile)}) == {"hostA": 2, "hostB": 1}
    with pytest.raises(LaunchError, match="needs PE_HOSTFILE"):
        sched.discover_hosts({})


# `$PE_HOSTFILE` of a `-pe mpi 5` job over three hosts (hostB in two queues).
PE_HOSTFILE = """\
hostA.cluster 2 all.q@hostA.cluster UNDEFINED
hostB.cluster 1 all.q@hostB.cluster UNDEFINED
hostC.cluster 1 all.q@hostC.cluster UNDEFINED
hostB.cluster 1 long.q@hostB.cluster UNDEFINED
"""


@pytest.mark.parametrize("scheduler", ["slurm", "sge"])
def test_a_host_whose_rank_failed_leaves_discovery_under_slurm_and_sge(
    scheduler, monkeypatch, tmp_path
) -> None:
    """Both schedulers' elastic discovery, through the shared interface: the allocation's hosts
    (asked again each time) less the host of a rank that failed on its own."""
    from clusterbench.launch.schedulers import slurm

    if scheduler == "slurm":
        monkeypatch.setattr(slurm, "run_tool", lambda cmd: SCONTROL_JOB_UNEVEN)
        env, failed, rest = {"SLURM_JOB_ID": "1"}, "node2", {"node1": 2}
    else:
        hostfile = tmp_path / "pe_hostfile"
        hostfile.write_text(PE_HOSTFILE)
        env, failed = {"PE_HOSTFILE": str(hostfile), "JOB_ID": "7"}, "hostB.cluster"
        rest = {"hostA.cluster": 2, "hostC.cluster": 1}
    sched = schedulers.SCHEDULERS[scheduler]()
    sched.job_env = env
    before = sched.elastic_hosts()
    assert failed in before and len(before) == len(rest) + 1

    class Slot:
        hostname, rank = failed, 3

    sched.rank_failed(Slot())  # what the rank runner reports when the rank fails on its own
    assert sched.elastic_hosts() == sched.discover_hosts(env) == rest


def test_cluster_name_from_scontrol_show_config() -> None:
    from clusterbench.launch.schedulers.slurm import parse_cluster_name

    text = (
        "Configuration data as of 2026-11-25T04:00:00\n"
        "AccountingStorageBackupHost = (null)\n"
        "ClusterName             = hpc-east\n"
        "CompleteWait            = 0 sec\n"
    )
    assert parse_cluster_name(text) == "hpc-east"
    assert parse_cluster_name("ClusterNameX = y\n") is None


def test_the_sge_site_is_its_cell() -> None:
    from clusterbench.launch.schedulers.sge import SgeScheduler

    sge = SgeScheduler()
    sge.job_env = {"SGE_CELL": "cell7"}
    assert sge.site() == "cell7"
    sge.job_env = {}
    assert sge.site() == "default"


def test_sge_verify_command_sizes_the_job_like_its_submission() -> None:
    from clusterbench.launch.schedulers.sge import verify_command

    resources = {"threads": 4, "sge_pe": "mpi", "sge_resources": "h_vmem=INFINITY", "runtime": 90}
    assert verify_command(resources, "smp") == [
        *("qsub", "-w", "v", "-b", "y", "-N", "clusterbench-verify", "-pe", "mpi", "4"),
        *("-l", "h_rt=01:30:00", "-l", "h_vmem=INFINITY", "true"),
    ]
    assert verify_command({"threads": 2}, "smp")[8:10] == ["smp", "2"]


def test_sge_verify_problem_names_what_qsub_said() -> None:
    from clusterbench.launch.schedulers.sge import verify_command, verify_problem

    cmd = verify_command({"threads": 64, "sge_pe": "mpi"}, "smp")
    assert verify_problem("r", cmd, 0, "verification: found suitable queue(s)\n") is None
    refused = (
        'Unable to run job: Job 5 cannot run in PE "mpi" because it only offers 4 slots\n'
        "verification: no suitable queues\nExiting.\n"
    )
    assert verify_problem("r", cmd, 1, refused) == (
        "run 'r': SGE would never run its job (-pe mpi 64): `qsub -w v` says: Unable to run "
        'job: Job 5 cannot run in PE "mpi" because it only offers 4 slots verification: no '
        "suitable queues Exiting."
    )


def test_sge_verify_without_a_qmaster_is_no_verdict_on_the_job() -> None:
    from clusterbench.launch.schedulers import LaunchError
    from clusterbench.launch.schedulers.sge import verify_command, verify_problem

    cmd = verify_command({"threads": 2, "sge_pe": "mpi"}, "smp")
    down = (
        "error: commlib error: got select error (Connection refused)\nUnable to run job: "
        'unable to send message to qmaster using port 6444 on host "vm": got send error\n'
    )
    with pytest.raises(LaunchError, match="unable to send message to qmaster"):
        verify_problem("r", cmd, 1, down)


# ------------------------------------------------------------------------------------------------
# the launcher's command line (its structure: tests/test_architecture.py)


def test_the_launchers_usage_lines_name_every_option():
    """The usage in the package's docstring lists every option of the launcher's parser."""
    import clusterbench.launch
    from clusterbench.launch.cli import build_parser

    usage = clusterbench.launch.__doc__.split("\n\n")[1]
    options = set(re.findall(r"--[a-z][a-z-]*", build_parser().format_usage())) - {"--help"}
    assert {"--min-np", "--max-np", "--lock"} <= options
    assert sorted(opt for opt in options if opt not in usage) == []


def test_the_gpus_sge_granted_are_read_from_its_resource_map_variable(monkeypatch) -> None:
    """Ranks used `local_rank % device_count`, not the GPUs SGE granted. A grid engine with
    resource maps exports the granted ids as SGE_HGR_<complex>; the launcher's host gets them
    as its GPU list, which every rank is pinned from (one rank included)."""
    from clusterbench.launch.schedulers import sge

    assert sge.granted_gpus({"SGE_HGR_gpu": "2 5"}) == ("2", "5")
    assert sge.granted_gpus({"SGE_HGR_gpu": "gpu1,gpu3"}) == ("1", "3")
    assert sge.granted_gpus({"SGE_HGR_cuda": "GPU-8f2e MIG-a1"}) == ("GPU-8f2e", "MIG-a1")
    two = {"SGE_HGR_fpga": "0", "SGE_HGR_GPUs": "4"}  # several maps: the one named for GPUs
    assert sge.granted_gpus(two) == ("4",)
    assert sge.granted_gpus({"SGE_HGR_a": "0", "SGE_HGR_b": "1"}) is None
    assert sge.granted_gpus({"CUDA_VISIBLE_DEVICES": "0"}) is None
    monkeypatch.setattr(sge.socket, "gethostname", lambda: "node2.cluster")
    alloc = Allocation("sge", (Host("node1", 2), Host("node2", 2)))
    granted = sge.with_grant(alloc, ("2", "5"))
    assert [h.gpus for h in granted.hosts] == [None, ("2", "5")]
    scheduler = SgeScheduler()
    assert scheduler.rank_device(granted.hosts[1], 1, 2, None) == "5"
    assert scheduler.rank_device(granted.hosts[1], 0, 1, ("5", "7")) == "5"  # narrowed
    assert SgeScheduler.pins_single
    assert sge.with_grant(alloc, None) is alloc
