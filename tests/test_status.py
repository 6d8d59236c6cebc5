"""``python -m clusterbench.status``: the queue readers on Slurm's and SGE's text, each run's
state from its files and the queue, the lines it prints, and the command itself (its errors,
and that it writes nothing). The status of real trainings: a finished local workflow in
tests/test_workflow.py, a running and a failed local and Slurm training in
tests/test_cluster_workflow.py (kill_rank_during_training), a running SGE one there too."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterbench.status import collect, render, sge, slurm
from clusterbench.status.cli import main
from clusterbench.status.files import RunFiles, read_run
from clusterbench.status.queue import QUEUED, RUNNING, TRAIN, WORKER, QueueJob
from conftest import REPO, default_config, default_sigint, write_config

# ------------------------------------------------------------------------------- the command


def status_of(workdir: Path, env: dict | None = None, *args: str) -> dict[str, list[str]]:
    """``python -m clusterbench.status --configfile config.yaml`` run in ``workdir`` (as the
    tests write their configs): run name -> the values of its line (the columns of
    :data:`clusterbench.status.render.HEADER`), and ``"note:"`` -> its note lines. It must exit
    0 and print the header first."""
    proc = subprocess.run(
        [sys.executable, "-m", "clusterbench.status", "--configfile", "config.yaml", *args],
        cwd=workdir,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == list(render.HEADER), proc.stdout
    rows = [re.split(r"\s{2,}", line) for line in lines[1:] if not line.startswith("note: ")]
    notes = [line for line in lines if line.startswith("note: ")]
    return {row[0]: row for row in rows} | {"note:": notes}


def tree(folder: Path) -> dict[str, tuple]:
    """Every file and folder under ``folder``: its size and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def test_a_missing_or_bad_config_is_one_line_naming_the_file(tmp_path, capsys):
    assert main(["--directory", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"status: error: {tmp_path / 'config/config.yaml'}: no such config"), err
    assert main(["--directory", str(tmp_path), "--configfile", "nope.yaml"]) == 2
    assert f"{tmp_path / 'nope.yaml'}: no such config file" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("runs: [{name: a}]\n")
    assert main(["--directory", str(tmp_path), "--configfile", "bad.yaml"]) == 2
    assert "runs[0].dataset: required" in capsys.readouterr().err
    assert main(["--directory", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_the_status_of_runs_on_disk_writes_nothing(tmp_path, capsys):
    """Three runs: one done, one whose launcher was killed, one not started; the command reads
    their files (the config and the runs' files) and leaves every file and folder as it was."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")  # never made, not even tried
    write_config(tmp_path, cfg)
    names = [r["name"] for r in cfg["runs"]]
    runs = tmp_path / "results" / "runs"
    (runs / names[0]).mkdir(parents=True)
    (runs / names[0] / "checksums.json").write_text("{}")
    (runs / names[0] / "metrics.jsonl").write_text(
        json.dumps({"epoch": 1, "images_per_second": 812.4, "world_size": 1}) + "\n"
    )
    (runs / names[1]).mkdir()
    lock = {"holder": {"host": "gone", "pid": 1, "job": "77"}, "started": time.time() - 60}
    (runs / names[1] / "train.lock").write_text(json.dumps({**lock, "ended": None, "exit": None}))
    (tmp_path / ".snakemake" / "slurm_logs").mkdir(parents=True)  # Slurm has run here
    before = tree(tmp_path)
    env = {"PATH": str(tmp_path / "no-tools")}  # no squeue: the queue cannot be read
    old = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    try:
        assert main(["--directory", str(tmp_path), "--configfile", "config.yaml"]) == 0
    finally:
        os.environ["PATH"] = old
    out = capsys.readouterr().out
    assert tree(tmp_path) == before
    assert not (tmp_path / "cache").exists()
    rows = {r[0]: r for r in (re.split(r"\s{2,}", line) for line in out.splitlines()[1:])}
    epochs = cfg["run_defaults"]["epochs"]
    assert rows[names[0]][1:6] == ["done", "-", "1", f"1/{epochs}", "812 images/s"], out
    # its job is not in a queue that could not be read: how it stands is not known
    assert rows[names[1]][1:3] == ["unknown", "job 77"], out
    assert rows[names[2]][1:3] == ["waiting", "-"], out
    assert "note: the slurm queue could not be read: squeue: not found on PATH" in out, out


# ------------------------------------------------------------------------------- Slurm

#: ``squeue --noheader --format '%i|%T|%j|%k|%Z'``: a train job pending and one running (their
#: comments by snakemake-executor-plugin-slurm), a worker job, an evaluation, another
#: workflow's train job.
SQUEUE = """\
41|PENDING|5f0c1c9e-3b2a-4c1e-9d7a-2f0e9a0b1c2d|rule_train_wildcards_digits-cnn-2w|/w/flow
40|RUNNING|5f0c1c9e-3b2a-4c1e-9d7a-2f0e9a0b1c2d|rule_train_wildcards_big|/w/flow
42|PENDING|cbgrow-40|(null)|/w/flow
39|COMPLETING|5f0c1c9e-3b2a-4c1e-9d7a-2f0e9a0b1c2d|rule_evaluate_wildcards_small|/w/flow
38|RUNNING|0a0a0a0a-0000-4000-8000-000000000000|rule_train_wildcards_big|/w/other
"""


def test_squeue_says_which_jobs_of_the_workflow_train_which_run(tmp_path, monkeypatch):
    flow = tmp_path / "flow"
    flow.mkdir()
    (tmp_path / "other").mkdir()
    text = SQUEUE.replace("/w/", f"{tmp_path}/")
    jobs = {j.id: j for j in slurm.parse_squeue(text, flow)}
    assert set(jobs) == {"39", "40", "41", "42"}
    assert (jobs["41"].kind, jobs["41"].run, jobs["41"].state) == (TRAIN, "digits-cnn-2w", QUEUED)
    assert (jobs["40"].kind, jobs["40"].run, jobs["40"].state) == (TRAIN, "big", RUNNING)
    assert (jobs["42"].kind, jobs["42"].run_job) == (WORKER, "40")
    assert (jobs["39"].kind, jobs["39"].state) == ("other", "ending")
    # a module's train rule, renamed
    (job,) = slurm.parse_squeue(f"5|RUNNING|u|rule_cb_train_wildcards_a_b|{flow}", flow)
    assert (job.kind, job.run) == (TRAIN, "a_b")
    monkeypatch.chdir(flow)  # the status run in the workflow's directory
    assert {j.id for j in slurm.parse_squeue(text, Path("."))} == set(jobs)


# ------------------------------------------------------------------------------- SGE

QSTAT_XML = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>12</JB_job_number>
      <JAT_prio>0.55500</JAT_prio>
      <JB_name>train_9c1d2e3f</JB_name>
      <JB_owner>root</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-12-07T08:01:02</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
      <slots>2</slots>
      <tasks>2</tasks>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>13</JB_job_number>
      <JB_name>train_9c1d2e3f</JB_name>
      <state>qw</state>
      <queue_name></queue_name>
      <slots>1</slots>
      <tasks>3</tasks>
    </job_list>
    <job_list state="pending">
      <JB_job_number>14</JB_job_number>
      <JB_name>cbgrow-12</JB_name>
      <state>qw</state>
      <slots>1</slots>
    </job_list>
  </job_info>
</job_info>"""

QSTAT_J = """\
==============================================================
job_number:                 13
exec_file:                  job_scripts/13
submission_time:            Mon Dec  7 08:01:05 2026
owner:                      root
sge_o_home:                 /root
sge_o_log_name:             root
sge_o_path:                 /usr/bin:/bin
sge_o_shell:                /bin/bash
sge_o_workdir:              /w/flow
sge_o_host:                 vm
account:                    sge
cwd:                        /w/flow/.snakemake/sge_logs/9c1d2e3f_chunk2_1_1
job_name:                   train_9c1d2e3f
priority:                   0
job-array tasks:            3-3:1
"""


def test_qstat_and_the_plugins_manifest_say_which_sge_job_trains_which_run(tmp_path):
    listed = {j.id: j for j in sge.parse_qstat_xml(QSTAT_XML)}
    assert listed["13"] == sge.Listed("13", "train_9c1d2e3f", "qw", "3")
    assert [sge.state_of(c) for c in ("qw", "hqw", "r", "t", "dr", "s", "Eqw")] == [
        QUEUED,
        QUEUED,
        RUNNING,
        RUNNING,
        "ending",
        "suspended",
        QUEUED,
    ]
    flow = tmp_path / "flow"
    meta = flow / ".snakemake" / "sge_logs" / ".meta" / "rule_train"
    meta.mkdir(parents=True)
    (meta / "task_manifest_9c1d2e3f_chunk2.json").write_text(
        json.dumps({"3": {"snakemake_jobid": 4, "wildcards": {"run": "urgent"}}})
    )
    fields = sge.parse_qstat_j(QSTAT_J.replace("/w/", f"{tmp_path}/"))
    job = sge.classify(listed["13"], fields, flow)
    assert (job.kind, job.run, job.state, job.id) == (TRAIN, "urgent", QUEUED, "13")
    assert sge.classify(listed["13"], fields, tmp_path / "other") is None
    worker = sge.classify(listed["14"], {"sge_o_workdir": str(flow)}, flow)
    assert (worker.kind, worker.run_job) == (WORKER, "12")
    assert sge.rule_of("train_9c1d2e3f") == "train" and sge.rule_of("blocker") is None


# ------------------------------------------------------------------------------- states


RUN = {"name": "r", "workers": 2, "epochs": 10, "minutes": None}


def lock(**fields) -> dict:
    record = {"holder": {"host": "node1", "pid": 99999999, "job": "40"}, "started": 1000.0}
    return {**record, "ended": None, "exit": None, **fields}


def epochs(*times: float, rate: float = 500.0) -> list[dict]:
    iso = [time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t)) for t in times]
    return [
        {"epoch": i + 1, "time": t, "images_per_second": rate, "world_size": 2, "epoch_seconds": 9}
        for i, t in enumerate(iso)
    ]


@pytest.mark.parametrize(
    "files, jobs, asked, state, job",
    [
        (RunFiles(), [], True, "waiting", "-"),
        (RunFiles(), [QueueJob("slurm", "41", QUEUED, TRAIN, "r")], True, "queued", "slurm 41"),
        (RunFiles(lock=lock()), [QueueJob("sge", "40", RUNNING, TRAIN)], True, "running", "sge 40"),
        (RunFiles(lock=lock(exit=75, ended=1100.0)), [], True, "preempted", "job 40"),
        (RunFiles(lock=lock(exit=1, ended=1100.0)), [], True, "failed", "job 40"),
        (RunFiles(lock=lock()), [], True, "stopped", "job 40"),
        (RunFiles(lock=lock()), [], False, "unknown", "job 40"),
        (RunFiles(lock=lock(exit=0, ended=1100.0), done=True), [], True, "done", "job 40"),
        # trained, then its outputs removed (a rerun): it waits to be trained again
        (RunFiles(lock=lock(exit=0, ended=1100.0)), [], True, "waiting", "-"),
    ],
)
def test_each_state_from_the_files_and_the_queue(files, jobs, asked, state, job):
    status = collect.run_status(RUN, files, jobs, asked, now=1200.0)
    assert (status.state, render.fields(status)[2]) == (state, job)


def test_a_local_launcher_that_lives_is_running_one_that_is_gone_stopped(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "clusterbench.launch"]
    )
    try:
        while b"clusterbench.launch" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            time.sleep(0.01)  # until it has started
        holder = {"host": socket.gethostname(), "pid": proc.pid, "job": None}
        files = RunFiles(lock={"holder": holder, "started": 1.0, "ended": None, "exit": None})
        status = collect.run_status(RUN, files, [], False, now=2.0)
        assert (status.state, status.job) == ("running", f"pid {proc.pid}")
    finally:
        proc.kill()
        proc.wait()
    assert collect.run_status(RUN, files, [], False, now=2.0).state == "stopped"
    mine = dict(holder, pid=os.getpid())  # a live pid that is no launcher
    files.lock["holder"] = mine
    assert collect.run_status(RUN, files, [], False, now=2.0).state == "stopped"


def test_a_running_line_estimates_the_time_left_from_its_epochs_or_its_box():
    files = RunFiles(lock=lock(), epochs=epochs(1060.0, 1080.0, 1100.0))
    status = collect.run_status(RUN, files, [QueueJob("slurm", "40", RUNNING, TRAIN)], True, 1110.0)
    # 3 of 10 epochs at 20 s each (after the first), the 4th under way for 10 s: 130 s left
    assert (status.elapsed, status.left) == (110.0, 130.0)
    assert render.fields(status) == (
        "r", "running", "slurm 40", "2", "3/10", "500 images/s", "0:01:50", "0:02:10", "-",
    )  # fmt: skip
    boxed = dict(RUN, epochs=None, minutes=1.0, min_workers=1, max_workers=4, grow="jobs")
    files.worker_jobs = [{"job": "42", "state": "pending"}, {"job": "43", "state": "ended"}]
    jobs = [QueueJob("slurm", "40", RUNNING, TRAIN), QueueJob("slurm", "42", RUNNING, WORKER)]
    status = collect.run_status(boxed, files, jobs, True, 1110.0)
    assert status.left == 60 - 27 - 10  # 3 epochs of 9 s trained, 10 s into the 4th
    assert render.fields(status)[3:5] == ("2 (1-4)", "3 (1 min box)")
    assert render.fields(status)[8] == "42 running"
    lm = [dict(r, tokens_per_second=9876.5) for r in files.epochs]
    assert render.fields(collect.run_status(RUN, RunFiles(epochs=lm), [], True, 0))[5] == (
        "9876 tokens/s"
    )


def test_a_file_being_written_or_damaged_is_a_note_not_a_failure(tmp_path):
    (tmp_path / "train.lock").write_text("")  # a launcher is writing it
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\n{"epo')
    files = read_run(tmp_path)
    assert files.lock is None and [r["epoch"] for r in files.epochs] == [1]
    assert files.problems == [f"{tmp_path / 'metrics.jsonl'}, line 2: not JSON"]
    text = render.table([collect.run_status(RUN, files, [], True, 0)])
    assert text.splitlines()[-1] == f"note: {tmp_path / 'metrics.jsonl'}, line 2: not JSON"


def test_make_status_runs_the_command():
    out = subprocess.run(
        ["make", "-n", "status", "STATUS_ARGS=--watch 2"], cwd=REPO, capture_output=True, text=True
    ).stdout
    assert "python -m clusterbench.status --watch 2" in out, out


def test_watch_redraws_until_ctrl_c(tmp_path):
    """``--watch 0.2`` clears the screen and draws the status again and again; Ctrl-C (SIGINT)
    ends it with exit 0 and no traceback."""
    write_config(tmp_path, default_config())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clusterbench.status",
            "--configfile",
            "config.yaml",
            "--watch",
            "0.2",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    seen = ""
    while seen.count("\033[H\033[2J") < 2:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, seen + proc.stderr.read()
        seen += line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "", err
    draw = (seen + out).split("\033[H\033[2J")[1].splitlines()
    assert draw[0].endswith("every 0.2 s, Ctrl-C ends") and draw[1].startswith("RUN  "), draw
    assert len(draw) == 2 + len(default_config()["runs"]), draw
