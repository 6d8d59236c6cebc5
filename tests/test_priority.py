"""``python -m clusterbench.priority``: a run's priority changed while it is queued or trains
(with a stand-in scheduler here; on the real test Slurm in tests/test_grow_clusters.py)."""

from __future__ import annotations

import json

import pytest
from clusterbench import priority
from clusterbench.core.priority_changes import changes_of_job, read_changes
from clusterbench.launch.schedulers import LaunchError, Scheduler
from clusterbench.training.record import priority_record
from conftest import REPO


class Queue(Scheduler):
    """A scheduler whose queue holds ``jobs`` (id -> priority)."""

    name = "fake"
    jobs: dict[str, int] = {}
    refuse_above: int | None = None

    @classmethod
    def job_priority(cls, job):
        return cls.jobs.get(job)

    @classmethod
    def change_priority(cls, job, value):
        if cls.refuse_above is not None and value > cls.refuse_above:
            raise LaunchError("`scontrol update` failed: Access/permission denied")
        if job not in cls.jobs:
            return False
        cls.jobs[job] = value
        return True


@pytest.fixture
def run_dir(tmp_path):
    out = tmp_path / "results" / "runs" / "b"
    out.mkdir(parents=True)
    (out / "train.lock").write_text(json.dumps({"holder": {"job": "20", "pid": 1}}))
    workers = [{"job": "21", "end": "2026-12-07T08:00:00+00:00"}, {"job": "22", "end": None}]
    (out / "worker_jobs.json").write_text(json.dumps({"jobs": workers}))
    Queue.jobs, Queue.refuse_above = {"20": 0, "22": 0}, None
    return out


def test_a_change_reaches_the_runs_job_and_its_worker_jobs_and_is_recorded(run_dir):
    done = priority.change(run_dir, 5, Queue)
    assert Queue.jobs == {"20": 5, "22": 5}  # the ended worker job 21 is left alone
    assert (done["from"], done["to"], done["jobs"]) == (0, 5, ["20", "22"])
    priority.change(run_dir, -2, Queue)
    assert [(c["from"], c["to"]) for c in read_changes(run_dir)] == [(0, 5), (5, -2)]
    assert priority.describe("b", done) == (
        "b: priority 0 -> 5: job 20 and worker job(s) 22 (recorded in priority.json)"
    )
    # run.json keeps the changes made to the job it trained in (the lock's holder)
    record = priority_record(run_dir)
    assert record["submitted"] == 0 and [c["to"] for c in record["changes"]] == [5, -2]
    assert changes_of_job(run_dir, "99") == []  # a retry's new job: not its changes


@pytest.mark.parametrize(
    "setup, value, message",
    [
        (lambda d: None, 2000, "priority 2000: out of range -1023..1024"),
        (lambda d: (d / "train.lock").unlink(), 1, r"no job has started .*does not exist"),
        (lambda d: Queue.jobs.pop("20"), 1, "its job 20 is no longer in the queue"),
        (lambda d: setattr(Queue, "refuse_above", 0), 1, "Access/permission denied"),
        (lambda d: (d / "priority.json").write_text("{"), 1, "priority.json: not a priority"),
    ],
)
def test_what_cannot_change_is_refused_naming_why_and_nothing_is_recorded(
    run_dir, setup, value, message
):
    setup(run_dir)
    before = (
        (run_dir / "priority.json").read_text() if (run_dir / "priority.json").exists() else None
    )
    with pytest.raises(priority.PriorityError, match=message):
        priority.change(run_dir, value, Queue)
    after = (
        (run_dir / "priority.json").read_text() if (run_dir / "priority.json").exists() else None
    )
    assert after == before


def test_the_command_names_a_run_that_is_not_here(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(priority, "QUEUE_READERS", {"slurm": lambda where: []})
    assert priority.main(["nope", "3", "--profile", str(REPO / "profiles" / "slurm")]) == 2
    err = capsys.readouterr().err
    assert "run nope: no job of it in the slurm queue, and no job has started" in err
    assert not (tmp_path / "results").exists()


def test_a_queued_run_is_found_in_the_queue_before_it_wrote_anything(tmp_path, monkeypatch):
    """The run's train job in the queue (as make status finds it) is the run's job, also when
    the lock names an earlier job of the run (a retry queued)."""
    from clusterbench.status.queue import TRAIN, WORKER, QueueJob

    queue = [QueueJob("fake", "30", "queued", TRAIN, "b"), QueueJob("fake", "9", "queued", WORKER)]
    monkeypatch.setattr(priority, "QUEUE_READERS", {"fake": lambda where: queue})
    monkeypatch.chdir(tmp_path)
    Queue.jobs, Queue.refuse_above = {"30": -1}, None
    run_dir = tmp_path / "results" / "runs" / "b"
    done = priority.change(run_dir, 2, Queue)
    assert (done["from"], done["to"], done["jobs"], Queue.jobs) == (-1, 2, ["30"], {"30": 2})
    assert read_changes(run_dir) == [done]


def test_the_local_scheduler_has_no_queue_to_change(run_dir):
    from clusterbench.launch.schedulers import SCHEDULERS

    with pytest.raises(priority.PriorityError, match="has no queue of jobs"):
        priority.change(run_dir, 1, SCHEDULERS["local"])
