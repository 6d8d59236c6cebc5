"""An elastic run that grows through worker jobs (``grow: jobs``): the launcher's grower, the
Slurm and SGE worker jobs' text, the config's checks and the workflow's refusal, the world
size over time. The runs on the real test Slurm and SGE are in tests/test_grow_clusters.py.
"""

from __future__ import annotations

import json
import subprocess
import threading
from types import SimpleNamespace

import pytest
from clusterbench import config as cbconfig
from clusterbench.launch import grow
from clusterbench.launch.cli import parse_args
from clusterbench.launch.schedulers import (
    ENDED,
    ENDING,
    PENDING,
    RUNNING,
    SCHEDULERS,
    SUSPENDED,
    TAKEN_BACK,
    JobStatus,
    LaunchError,
)
from clusterbench.launch.schedulers import _sge_grow as sge_grow
from clusterbench.launch.schedulers import _slurm_grow as slurm_grow
from clusterbench.launch.schedulers._slurm_partitions import parse_sinfo
from clusterbench.launch.schedulers.slurm import worker_job_problems
from clusterbench.pipeline.commands import train_command
from clusterbench.pipeline.resources import train_resources
from clusterbench.training import world
from test_train import run_config

# --------------------------------------------------------------------------------------------
# the grower, over a scheduler of our own


class FakeQueue:
    """Worker jobs the test moves from state to state (a WorkerQueue)."""

    how = "by hand"

    def __init__(self, refuse: int = 0) -> None:
        self.states: dict[str, JobStatus] = {}
        self.cancelled: list[str] = []
        self.refuse = refuse  # submissions to refuse first
        self.next = 100

    def submit(self) -> str:
        if self.refuse:
            self.refuse -= 1
            raise LaunchError("sbatch: error: invalid partition specified: nope")
        self.next += 1
        self.states[str(self.next)] = JobStatus(PENDING)
        return str(self.next)

    def status(self, jobs):
        return {j: self.states[j] for j in jobs if j in self.states}

    def cancel(self, jobs):
        self.cancelled += list(jobs)
        for job in jobs:
            if self.states.get(job, JobStatus(ENDED)).state != ENDED:
                self.states[job] = JobStatus(ENDED, self.states[job].node, None, 50.0, "cancelled")

    def run(self, job: str, node: str) -> None:
        self.states[job] = JobStatus(RUNNING, node, 10.0)

    def end(self, job: str, why: str) -> None:
        self.states[job] = JobStatus(ENDED, self.states[job].node, 10.0, 20.0, why)


def grower(queue: FakeQueue, slots: int = 2, **kwargs) -> grow.Grower:
    g = grow.Grower(queue, slots, clock=lambda: 1000.0, **kwargs)
    g.fill()
    return g


def test_the_grower_keeps_one_worker_job_per_slot_and_offers_those_that_run():
    queue = FakeQueue()
    g = grower(queue, slots=2)
    assert g.active() == ["101", "102"] and g.hosts() == {}
    queue.run("101", "node2")
    g.poll()
    # a host of one slot per worker job, its node and job in the name
    assert g.hosts() == {"node2.job101": 1}
    assert g.job_of("node2.job101").node == "node2"
    assert g.left("node2.job101") is None
    # it ends (preempted): it leaves the offer, and a new one is queued in its place
    queue.end("101", "preempted")
    assert g.left("node2.job101") == "preempted"
    g.poll()
    assert g.hosts() == {} and g.active() == ["102", "103"]
    record = g.describe()
    assert [(j["job"], j["state"], j["why"]) for j in record["jobs"]] == [
        ("101", ENDED, "preempted"),
        ("102", PENDING, None),
        ("103", PENDING, None),
    ]
    assert record["jobs"][0]["start"] == "1970-01-01T00:00:10.000+00:00"


def test_a_running_worker_job_the_scheduler_suspended_is_deleted_and_replaced():
    """Taken back (SGE suspended it for another job): deleted at once, so that its rank dies
    (a stopped rank holds the others until their timeout), and replaced once gone."""
    queue = FakeQueue()
    g = grower(queue, slots=1)
    queue.run("101", "node2")
    g.poll()
    queue.states["101"] = JobStatus(SUSPENDED, "node2", 10.0, why=TAKEN_BACK)
    assert g.left("node2.job101") == TAKEN_BACK
    assert queue.cancelled == ["101"] and g.hosts() == {}
    g.poll()
    assert g.active() == ["102"]  # gone (FakeQueue's cancel ends it): replaced
    (record, _) = g.describe()["jobs"]
    assert (record["job"], record["state"], record["why"]) == ("101", ENDED, TAKEN_BACK)


def test_a_worker_job_suspended_before_its_rank_ran_waits_as_queued():
    """Dispatched into a queue that is suspended at once (SGE's slot-wise subordination does
    that): it holds no rank, so it is neither deleted nor replaced (no dispatch-suspend-delete
    loop of new worker jobs); it joins once the scheduler resumes it."""
    queue = FakeQueue()
    g = grower(queue, slots=1)
    queue.states["101"] = JobStatus(SUSPENDED, "node2", 10.0, why=TAKEN_BACK)
    g.poll()
    assert queue.cancelled == [] and g.active() == ["101"] and g.jobs["101"].state == PENDING
    queue.run("101", "node2")
    g.poll()
    assert g.hosts() == {"node2.job101": 1}


def test_a_worker_job_that_is_ending_leaves_at_once_and_is_replaced_once_ended():
    queue = FakeQueue()
    g = grower(queue, slots=1)
    queue.run("101", "node2")
    g.poll()
    queue.states["101"] = JobStatus(ENDING, "node2", 10.0, 19.0)
    g.poll()
    assert g.hosts() == {} and g.active() == ["101"]  # it still holds its resources
    assert g.left("node2.job101") == "its job is ending"
    queue.end("101", "cancelled")
    g.poll()
    assert g.active() == ["102"] and g.jobs["101"].why == "cancelled"


def test_stopping_cancels_every_worker_job_queued_or_running_and_records_why(tmp_path):
    queue = FakeQueue()
    record = tmp_path / "worker_jobs.json"
    g = grower(queue, slots=2, record_path=record)
    queue.run("101", "node2")
    g.poll()
    g.stop()
    assert sorted(queue.cancelled) == ["101", "102"]
    saved = json.loads(record.read_text())
    assert {j["job"]: (j["state"], j["why"]) for j in saved["jobs"]} == {
        "101": (ENDED, grow.RUN_ENDED),
        "102": (ENDED, grow.RUN_ENDED),
    }
    g.fill()
    assert g.active() == []  # nothing is queued once stopped


def test_the_launchers_stop_signal_cancels_the_worker_jobs_at_once():
    queue = FakeQueue()
    shutdown = threading.Event()
    g = grow.Grower(queue, 1, shutdown=shutdown, poll_s=60)
    g.start()
    shutdown.set()
    g._thread.join(timeout=5)
    assert not g._thread.is_alive()
    assert queue.cancelled == ["101"]
    assert g.jobs["101"].why == "the launcher was stopped"


def test_a_refused_submission_is_tried_again_then_given_up_naming_why():
    queue = FakeQueue(refuse=5)
    now = [0.0]
    g = grow.Grower(queue, 1, clock=lambda: now[0])
    for _ in range(grow.MAX_SUBMIT_FAILURES):
        g.fill()
        now[0] += grow.SUBMIT_RETRY_S
    assert g.active() == []
    assert g.problem.startswith("worker jobs could not be submitted: sbatch: error: invalid")
    g.fill()
    assert queue.refuse == 5 - grow.MAX_SUBMIT_FAILURES  # no more tries


def test_worker_jobs_that_fail_at_once_are_not_replaced_forever():
    queue = FakeQueue()
    g = grower(queue, slots=1)
    for _ in range(grow.MAX_FAILED_IN_A_ROW):
        job = g.active()[0]
        queue.run(job, "node2")
        g.poll()
        queue.end(job, "failed")
        g.poll()
    assert g.active() == [] and "in a row failed" in g.problem


def test_a_requeued_worker_job_is_a_tenure_that_ended_and_is_replaced():
    queue = FakeQueue()
    g = grower(queue, slots=1)
    queue.run("101", "node2")
    g.poll()
    queue.states["101"] = JobStatus(PENDING)
    g.poll()
    assert g.jobs["101"].why == "requeued by the scheduler" and queue.cancelled == ["101"]
    assert g.active() == ["102"]


def test_a_job_the_scheduler_forgot_has_ended():
    queue = FakeQueue()
    g = grower(queue, slots=1)
    del queue.states["101"]
    g.poll()
    assert g.jobs["101"].why == "gone from the scheduler's queue"


def test_the_scheduler_offers_its_own_hosts_and_the_running_worker_jobs():
    from clusterbench.launch.schedulers.slurm import SlurmScheduler

    queue = FakeQueue()
    g = grower(queue, slots=1)
    queue.run("101", "node1")
    g.poll()
    slurm = SlurmScheduler()
    slurm.discover_hosts = lambda env=None: {"node1": 1}
    slurm.grower = g
    assert slurm.elastic_hosts() == {"node1": 1, "node1.job101": 1}
    assert slurm.node_of("node1.job101") == "node1" and slurm.node_of("node1") == "node1"
    slurm.rank_failed(SimpleNamespace(hostname="node1.job101"))
    assert slurm.elastic_hosts() == {"node1": 1}


# --------------------------------------------------------------------------------------------
# Slurm's worker jobs (text of the real Slurm 22.05 test cluster)

SCONTROL_JOB = """\
JobId=3 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901754 Nice=3 Account=root QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:01 TimeLimit=00:15:00 TimeMin=N/A
   SubmitTime=2026-11-27T11:18:12 EligibleTime=2026-11-27T11:18:12
   StartTime=2026-11-27T11:18:13 EndTime=2026-11-27T11:33:13 Deadline=N/A
   Partition=debug AllocNode:Sid=localhost:4822
   NodeList=node1
   BatchHost=node1
   NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   TRES=cpu=2,mem=600M,node=1,billing=2,gres/gpu=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:fake:1
     Nodes=node1 CPU_IDs=2-3 Mem=600 GRES=gpu:fake:1(IDX:0)
   MinCPUsNode=2 MinMemoryCPU=300M MinTmpDiskNode=0
   TresPerNode=gres:gpu:1
"""


def test_a_slurm_worker_job_is_one_worker_of_the_runs_job():
    import datetime as dt

    now = dt.datetime.fromisoformat("2026-11-27T11:20:13").timestamp()  # 13 min left
    spec = slurm_grow.worker_spec(SCONTROL_JOB, {}, now)
    assert spec == slurm_grow.WorkerSpec(
        run_job="3",
        partition="debug",
        qos="normal",
        account="root",
        nice=3,
        cpus_per_task=2,
        mem_mb=600,
        gpus=1,
        minutes=13,
    )
    cmd = slurm_grow.sbatch_command(spec, None, "/w")
    for flag in ("--job-name=cbgrow-3", "--ntasks=1", "--cpus-per-task=2", "--no-requeue"):
        assert flag in cmd
    for flag in ("--mem=600M", "--gres=gpu:1", "--time=13", "--nice=3", "--partition=debug"):
        assert flag in cmd
    assert "--output=/dev/null" in cmd and "--account=root" in cmd
    other = slurm_grow.worker_spec(SCONTROL_JOB, {"slurm_partition": "scavenger", "qos": "q"}, now)
    assert (other.partition, other.qos) == ("scavenger", "q")


def test_the_slurm_worker_jobs_script_is_bash_that_watches_the_runs_job():
    script = slurm_grow.worker_script("42")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "scontrol show job 42" in script and "exit 0" in script


SQUEUE = """\
2|COMPLETED|node2|2026-11-27T11:17:43|2026-11-27T11:18:03
1|PREEMPTED|node2|2026-11-27T11:17:40|2026-11-27T11:17:43
4|COMPLETING|node1|2026-11-27T11:20:37|2026-11-27T11:20:38
5|FAILED|node1|2026-11-27T11:20:42|2026-11-27T11:20:42
6|RUNNING|node1|2026-11-27T11:21:00|2026-11-27T12:21:00
7|PENDING||N/A|N/A
8|CANCELLED|node1|2026-11-27T11:20:37|2026-11-27T11:20:38
"""


def test_squeue_says_how_each_slurm_worker_job_stands_and_why_it_ended():
    found = slurm_grow.parse_status(SQUEUE)
    assert {j: (s.state, s.why) for j, s in found.items()} == {
        "2": (ENDED, "the run's job ended"),
        "1": (ENDED, "preempted"),
        "4": (ENDING, None),
        "5": (ENDED, "failed"),
        "6": (RUNNING, None),
        "7": (PENDING, None),
        "8": (ENDED, "cancelled"),
    }
    assert found["6"].node == "node1" and found["6"].start is not None
    assert found["7"].node is None


SINFO = "debug*|2|4|gpu:fake:2\nscavenger|2|4|gpu:fake:2\n"


def test_the_slurm_preflight_checks_the_worker_jobs_partition():
    partitions = parse_sinfo(SINFO)
    run = {"grow": "jobs", "grow_resources": {"slurm_partition": "nope"}, "gpus_per_node": 0}
    train_job = {"cpus_per_task": 1}
    (problem,) = worker_job_problems("r", run, train_job, partitions)
    assert problem.startswith("its worker jobs (grow: jobs, grow_resources.slurm_partition)")
    assert "partition 'nope' does not exist" in problem
    run["grow_resources"] = {"slurm_partition": "scavenger"}
    assert worker_job_problems("r", run, train_job, partitions) == []
    (problem,) = worker_job_problems("r", run, {"cpus_per_task": 8}, partitions)
    assert "1 workers x 8 CPU(s)" in problem


# --------------------------------------------------------------------------------------------
# SGE's worker jobs (text of the real SGE 8.1.9 test cell)

QSTAT_J = """\
==============================================================
job_number:                 4
owner:                      root
cwd:                        /tmp/sgetest
hard resource_list:         h_rt=900,h_vmem=INFINITY,tmem=500M,gpu=2
priority:                   -3
hard_queue_list:            all.q
parallel environment:  mpi range: 2
usage         1:            cpu=00:00:00, mem=0.00000 GB s, io=0.00061 GB
"""

QSTAT_XML = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>10</JB_job_number>
      <JB_name>cbgrow-77</JB_name>
      <state>dr</state>
      <JAT_start_time>2026-11-27T11:38:03</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
    </job_list>
    <job_list state="running">
      <JB_job_number>11</JB_job_number>
      <JB_name>blocker</JB_name>
      <state>r</state>
      <JAT_start_time>2026-11-27T11:38:04</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
    </job_list>
    <job_list state="running">
      <JB_job_number>13</JB_job_number>
      <JB_name>cbgrow-77</JB_name>
      <state>r</state>
      <JAT_start_time>2026-11-27T11:38:05</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>12</JB_job_number>
      <JB_name>cbgrow-77</JB_name>
      <state>qw</state>
      <queue_name></queue_name>
    </job_list>
  </job_info>
</job_info>"""


def test_an_sge_worker_job_is_one_slot_of_the_runs_job():
    spec = sge_grow.worker_spec("4", QSTAT_J, {"sge_gpu_complex": "gpu"}, "mpi")
    assert spec == sge_grow.SgeWorkerSpec(
        run_job="4",
        pe="mpi",
        resources="h_rt=900,h_vmem=INFINITY,tmem=500M,gpu=1",  # one GPU per worker
        priority=-3,
        queue="all.q",
    )
    cmd = sge_grow.qsub_command(spec, None, "/w")
    assert cmd[:8] == ["qsub", "-terse", "-V", "-N", "cbgrow-4", "-pe", "mpi", "1"]
    assert ["-p", "-3"] == cmd[cmd.index("-p") : cmd.index("-p") + 2]
    assert sge_grow.worker_spec("4", QSTAT_J, {"sge_queue": "low.q"}, "mpi").queue == "low.q"
    script = sge_grow.worker_script("4")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


#: qstat -xml on the test cell (SGE 8.1.9): worker jobs 38 and 40 ran in grow.q, suspended (S)
#: when job 42 filled all.q, grow.q's superordinate queue; 40 was also suspended by hand (s);
#: 43, queued after, waits (a suspended queue takes no job).
QSTAT_XML_TAKEN_BACK = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>38</JB_job_number>
      <JAT_prio>0.25076</JAT_prio>
      <JB_name>cbgrow-77</JB_name>
      <JB_owner>root</JB_owner>
      <state>S</state>
      <JAT_start_time>2026-12-07T07:26:26</JAT_start_time>
      <queue_name>grow.q@vm</queue_name>
      <slots>1</slots>
    </job_list>
    <job_list state="running">
      <JB_job_number>40</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>cbgrow-77</JB_name>
      <JB_owner>root</JB_owner>
      <state>Ss</state>
      <JAT_start_time>2026-12-07T07:26:26</JAT_start_time>
      <queue_name>grow.q@vm</queue_name>
      <slots>1</slots>
    </job_list>
    <job_list state="running">
      <JB_job_number>41</JB_job_number>
      <JAT_prio>0.25076</JAT_prio>
      <JB_name>train</JB_name>
      <JB_owner>root</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-12-07T07:26:26</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
      <slots>1</slots>
    </job_list>
    <job_list state="running">
      <JB_job_number>42</JB_job_number>
      <JAT_prio>0.75000</JAT_prio>
      <JB_name>holder</JB_name>
      <JB_owner>root</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-12-07T07:26:33</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
      <slots>3</slots>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>43</JB_job_number>
      <JAT_prio>0.25000</JAT_prio>
      <JB_name>cbgrow-77</JB_name>
      <JB_owner>root</JB_owner>
      <state>qw</state>
      <JB_submission_time>2026-12-07T07:26:37</JB_submission_time>
      <queue_name></queue_name>
      <slots>1</slots>
    </job_list>
  </job_info>
</job_info>"""


def test_qstat_says_how_each_sge_worker_job_stands():
    found = sge_grow.parse_qstat_xml(QSTAT_XML, "cbgrow-77")
    assert {j: (s.state, s.node) for j, s in found.items()} == {
        "10": (ENDING, "vm"),
        "13": (RUNNING, "vm"),
        "12": (PENDING, None),
    }
    found = sge_grow.parse_qstat_xml(QSTAT_XML_TAKEN_BACK, "cbgrow-77")
    assert {j: (s.state, s.node, s.why) for j, s in found.items()} == {
        "38": (SUSPENDED, "vm", TAKEN_BACK),
        "40": (SUSPENDED, "vm", TAKEN_BACK),
        "43": (PENDING, None, None),
    }
    # qdel of a suspended job: dSs (seen on the cell) is ending
    deleted = QSTAT_XML_TAKEN_BACK.replace("<state>Ss</state>", "<state>dSs</state>")
    assert sge_grow.parse_qstat_xml(deleted, "cbgrow-77")["40"].state == ENDING


# --------------------------------------------------------------------------------------------
# the config, the launcher's options, the workflow


def grow_run(**overrides) -> dict:
    return {
        **run_config(workers=1, min_workers=1, max_workers=3, batch_size=24),
        "grow": "jobs",
        "grow_resources": {},
        "cpus_per_worker": 2,
        "mem_mb": 3000,
        **overrides,
    }


def test_a_run_that_grows_through_jobs_holds_its_workers_in_its_own_job():
    run = grow_run()
    assert cbconfig.allocated_workers(run) == 1  # not max_workers
    resources = train_resources(run)
    assert resources["ranks"] == 1 and "tasks" not in resources  # one Slurm task
    assert resources["sge_pe"] == "mpi"  # its ranks start with qrsh -inherit
    within = {**run, "grow": "none"}
    assert cbconfig.allocated_workers(within) == 3 and train_resources(within)["tasks"] == 3


def test_the_train_command_tells_the_launcher_to_grow(tmp_path):
    from clusterbench.pipeline.resources import resolved

    run = resolved(grow_run(grow_resources={"slurm_partition": "scavenger"}))
    cfg = {"staging": {"dir": None}}
    command = train_command(run, cfg, "d/meta.json", "results/runs/r/run.json")
    assert "--np 1 --backend horovod --min-np 1 --max-np 3 --grow jobs" in command.launch
    assert "--grow-record results/runs/r/worker_jobs.json" in command.launch
    assert """--grow-resources '{"slurm_partition":"scavenger"}'""" in command.launch
    plain = train_command({**run, "grow": "none"}, cfg, "d/meta.json", "results/runs/r/run.json")
    assert "--grow" not in plain.launch


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"min_workers": None, "max_workers": None},
            "runs[0].grow: 'jobs' grows an elastic run, and this run is not elastic",
        ),
        ({"max_workers": 1}, "runs[0].grow: 'jobs' adds worker jobs beyond the run's own job"),
        (
            {"grow": "none", "grow_resources": {"qos": "low"}},
            "runs[0].grow_resources: set for a run that does not grow through worker jobs",
        ),
    ],
)
def test_grow_settings_that_cannot_work_are_refused_naming_the_key(overrides, message):
    problems = cbconfig.grow_problems(grow_run(**overrides), "runs[0]")
    assert len(problems) == 1 and problems[0].startswith(message)


def test_grow_jobs_on_ddp_is_refused_as_an_elastic_ddp_run():
    run = grow_run(backend="ddp")
    assert any("backend 'ddp' has no elastic mode" in p for p in cbconfig.elastic_problems(run))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--np", "1", "--grow", "jobs"], "--grow jobs grows an elastic launch"),
        (["--np", "2", "--min-np", "1", "--max-np", "2", "--grow", "jobs"], "none to add"),
        (["--np", "1", "--grow-record", "x"], "go with --grow jobs"),
        (
            ["--np", "1", "--min-np", "1", "--max-np", "2", "--grow", "jobs", "--grow-resources",
             "[1]"],
            "must be an object of strings",
        ),
    ],
)  # fmt: skip
def test_the_launcher_refuses_grow_options_that_do_not_fit(argv, message):
    with pytest.raises(LaunchError, match=message):
        parse_args([*argv, "--", "true"], {})


GROWS = ["--np", "1", "--min-np", "1", "--max-np", "2", "--grow", "jobs"]


def test_the_profiles_place_for_worker_jobs_is_used_unless_the_run_names_its_own():
    """The train rule passes the profile's grow_* resources as --grow-site (empty: unset);
    a run's grow_resources wins key by key; a non-growing launch checks and ignores them."""
    site = ["--grow-site", "slurm_partition=scavenger", "--grow-site", "qos=", "--grow-site",
            "sge_queue=grow.q"]  # fmt: skip
    args = parse_args([*GROWS, *site, "--", "true"], {})
    assert args.grow_resources == {"slurm_partition": "scavenger", "sge_queue": "grow.q"}
    own = ["--grow-resources", '{"slurm_partition": "low"}']
    args = parse_args([*GROWS, *site, *own, "--", "true"], {})
    assert args.grow_resources == {"slurm_partition": "low", "sge_queue": "grow.q"}
    assert parse_args(["--np", "1", *site, "--", "true"], {}).grow_resources == {}
    with pytest.raises(LaunchError, match=r"--grow-site 'partition=x': expected KEY=VALUE"):
        parse_args(["--np", "1", "--grow-site", "partition=x", "--", "true"], {})


def test_only_schedulers_that_start_ranks_in_other_jobs_grow():
    assert SCHEDULERS["slurm"].grow_problem() is None
    assert SCHEDULERS["sge"].grow_problem() is None
    local = SCHEDULERS["local"].grow_problem()
    assert "one job runs at a time" in local and "Slurm (--profile profiles/slurm)" in local


def test_the_local_executor_refuses_a_growing_run_before_any_job_and_a_plan_warns():
    from clusterbench.pipeline.runs import RunPlan

    class Adapter:
        is_main_process = True

        def __init__(self, executor):
            self.name, self.warnings = executor, []

        def executor(self):
            return self.name

        def warn(self, text):
            self.warnings.append(text)

    runs = {"grows": grow_run(), "plain": run_config()}
    adapter = Adapter("local")
    (refusal,) = RunPlan(runs, {}, {}, adapter, env={}).grow_refusals(["grows", "plain"])
    assert refusal.startswith("run(s) 'grows' set grow: jobs, and under the local executor")
    assert "Slurm (--profile profiles/slurm)" in refusal and "slurm, sge" in refusal
    planning = Adapter("dryrun")
    assert RunPlan(runs, {}, {}, planning, env={}).grow_refusals(["grows"]) == []
    assert "this plan is for the local executor" in planning.warnings[0]
    slurm = Adapter("slurm")
    assert RunPlan(runs, {}, {}, slurm, env={}).grow_refusals(["grows"]) == []


# --------------------------------------------------------------------------------------------
# the world over time


def test_the_rank_hours_integrate_the_world_size_over_the_training_time():
    timeline = [
        {"time": "2026-01-01T00:00:00+00:00", "size": 1, "why": "started"},
        {"time": "2026-01-01T00:30:00+00:00", "size": 2, "why": "hosts changed"},
        {"time": "2026-01-01T01:00:00+00:00", "size": 2, "why": "finished"},
    ]
    assert world.rank_hours(timeline, 4) == (1.5, 4.0)
    # stopped after the epoch that ended at 00:40, resumed at 02:00: the gap is no training
    resumed = [
        *timeline[:2],
        {"time": "2026-01-01T02:00:00+00:00", "size": 1, "why": "resumed"},
        {"time": "2026-01-01T02:30:00+00:00", "size": 1, "why": "finished"},
    ]
    records = [{"time": "2026-01-01T00:40:00+00:00"}, {"time": "2026-01-01T02:20:00+00:00"}]
    used, fixed = world.rank_hours(resumed, 2, records)
    assert used == pytest.approx(0.5 + 2 * 10 / 60 + 0.5)
    assert fixed == pytest.approx(2 * (1 + 10 / 60))


def test_the_worker_jobs_events_of_an_epoch_and_their_state_at_the_end():
    record = {
        "jobs": [
            {"job": "7", "node": "n2", "state": "ended", "start": "2026-01-01T00:00:10+00:00",
             "end": "2026-01-01T00:00:30+00:00", "why": "preempted"},
            {"job": "9", "node": "n2", "state": "running", "start": "2026-01-01T00:00:40+00:00",
             "end": None, "why": None},
            {"job": "11", "node": None, "state": "pending", "start": None, "end": None,
             "why": None},
        ]
    }  # fmt: skip
    events = world.worker_job_events(
        record, "2026-01-01T00:00:20+00:00", "2026-01-01T00:00:40+00:00"
    )
    assert [(e["job"], e["event"], e.get("why")) for e in events] == [
        ("7", "ended", "preempted"),
        ("9", "started", None),
    ]
    end = world.worker_jobs_at_end(record, "2026-01-01T00:01:00+00:00")
    assert [(j["job"], j["state"], j["end"], j["why"]) for j in end] == [
        ("7", "ended", "2026-01-01T00:00:30+00:00", "preempted"),
        ("9", "ended", "2026-01-01T00:01:00+00:00", world.RUN_ENDED),
        ("11", "ended", "2026-01-01T00:01:00+00:00", world.RUN_ENDED),
    ]


# --------------------------------------------------------------------------------------------
# the report


def test_the_report_draws_ranks_over_time_and_the_device_hours_against_max_workers(tmp_path):
    """An elastic run that grew through worker jobs (run.json's timeline and worker jobs, as
    the training writes them): the world-size page draws its ranks over time, the runs table
    and runs.csv its CPU-hours used against a fixed run of max_workers, and the one-clock page
    draws it on the wall clock."""
    import pandas as pd
    from clusterbench.report import main
    from test_report import PARAMS, make_fake_results, pdf_text

    runs = [
        {"name": "fixed", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 900, "acc": 0.9},
        {"name": "grew", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 1500, "acc": 0.95},
    ]
    fake = make_fake_results(tmp_path, runs=runs, epochs=4, benchmarks=False)
    run_json = tmp_path / "results" / "runs" / "grew" / "run.json"
    info = json.loads(run_json.read_text())
    timeline = [
        {"time": "2026-01-01T00:00:00+00:00", "size": 1, "why": "started"},
        {"time": "2026-01-01T00:00:30+00:00", "size": 2, "why": "hosts changed"},
        {"time": "2026-01-01T00:01:00+00:00", "size": 1, "why": "a rank failed"},
        {"time": "2026-01-01T00:02:00+00:00", "size": 1, "why": "finished"},
    ]
    used, fixed = world.rank_hours(timeline, 2)
    info["world"]["elastic"] = {
        "min_workers": 1, "max_workers": 2, "sizes": [1, 2, 1, 1], "resets": [],
        "timeline": timeline, "rank_hours": used, "max_workers_rank_hours": fixed,
        "cpus_per_rank": 4, "grow": "jobs",
        "worker_jobs": [{"job": "7", "node": "node2", "state": "ended", "why": "preempted",
                         "start": "2026-01-01T00:00:20+00:00", "end": "2026-01-01T00:01:00+00:00"}],
    }  # fmt: skip
    run_json.write_text(json.dumps(info))
    out = tmp_path / "report"
    dirs = ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    argv = ["--params", json.dumps(PARAMS), "--config-hash", "abc", *dirs, "--out-dir", str(out)]
    assert main(argv) == 0
    table = pd.read_csv(out / "runs.csv").set_index("run")
    # 2.5 rank-minutes of 4 CPUs = 10 CPU-minutes, against 2 x 2 minutes x 4 CPUs
    assert table.loc["grew", "device_hours"] == pytest.approx(10 / 60)
    assert table.loc["grew", "fixed_device_hours"] == pytest.approx(16 / 60)
    assert table.loc["grew", "device_hours_unit"] == "CPU" and table.loc["grew", "grow"] == "jobs"
    assert pd.isna(table.loc["fixed", "device_hours"])
    text = pdf_text(out / "report.pdf")
    assert "Elastic runs: ranks over time" in text and "minutes since the run started" in text
    assert "grew (0 reset(s); 0.17 of 0.27 CPU-h, 62%)" in text
    assert "CPU-h used/max: the GPU-hours" in text
    # the one-clock page: the run on the wall clock, with its CPU-hours against max_workers'
    clock = next(page for page in text.split("\f") if "One clock:" in page)
    assert "all runs together" in clock and "0.17 of 0.27 CPU-h, 62%" in " ".join(clock.split())


@pytest.mark.slow  # a real Snakemake (about 15 s)
def test_the_local_profile_refuses_a_growing_run_before_any_job_naming_slurm(tmp_path):
    """`snakemake --profile profiles/local` with a run that grows through jobs: stopped before
    any job (no download even), naming the run, the key and the profiles that can."""
    from conftest import REPO, snakemake

    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "config.yaml").write_text(
        json.dumps(
            {
                "download": {"cache_dir": str(tmp_path / "cache")},
                "runs": [{"name": "grows", "dataset": "digits", "workers": 1, "max_workers": 2,
                          "grow": "jobs", "epochs": 1}],
                "report": {"title": "t"},
            }
        )
    )  # fmt: skip
    proc = snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "run(s) 'grows' set grow: jobs, and under the local executor" in said, said
    assert "grow: jobs needs Slurm (--profile profiles/slurm) or SGE" in said
    assert "Traceback" not in said
    assert not (workdir / "results").exists()  # nothing ran


def test_a_host_offered_and_not_taken_is_offered_anew():
    """Horovod's driver tells the ranks of a new host only once rank 0 listens: a host (a
    worker job) offered for REOFFER_S without a rank started on it is left out of one answer,
    then offered again as new; one whose rank runs stays."""
    from clusterbench.launch.elastic import REOFFER_S, SchedulerDiscovery

    now = [0.0]
    used: set[str] = set()
    scheduler = SimpleNamespace(elastic_hosts=lambda: {"node1": 1, "node2.job7": 1})
    found = SchedulerDiscovery(scheduler, lambda: set(used), clock=lambda: now[0])
    assert found.find_available_hosts_and_slots() == {"node1": 1, "node2.job7": 1}
    used.add("node1")  # rank 0 runs there; nothing started on the worker job's host
    now[0] = REOFFER_S
    assert found.find_available_hosts_and_slots() == {"node1": 1}
    assert found.left("node2.job7")
    now[0] = REOFFER_S + 1
    assert found.find_available_hosts_and_slots() == {"node1": 1, "node2.job7": 1}
    used.add("node2.job7")  # its rank started: it stays
    now[0] = 5 * REOFFER_S
    assert found.find_available_hosts_and_slots() == {"node1": 1, "node2.job7": 1}
