"""The proof that a scheduler is added through the registry alone: one new module in
``clusterbench/launch/schedulers/``, no other file edited.

A copy of the checkout (``conftest.copy_checkout``) gets ``schedulers/toy.py``, written the way a
new scheduler's author would write it, and nothing else. That copy's launcher detects the toy
scheduler and starts its ranks under it; the copy's workflow gives its train jobs the toy's
resources, asks the toy's pre-flight check which runs it could never run, and plans its jobs
with the toy's job request (``python -m clusterbench.plan``, planning for the ``toy`` executor).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CHECKOUT_PARTS, REPO, copy_checkout, default_config

#: The new scheduler: one module, the only file added to the copy.
TOY = '''\
"""A toy scheduler: its jobs have TOY_JOB_ID and TOY_SLOTS slots on this host; it asks for
ranks and CPUs with its own resources, and its cluster has 2 slots in all."""

from __future__ import annotations

import socket

from clusterbench.launch.schedulers._base import Allocation, Host, JobRequest, Scheduler

SLOTS = 2  # the toy cluster's slots


class ToyScheduler(Scheduler):
    name = "toy"
    detection_priority = 30  # asked before Slurm, SGE and local
    how = "toy processes"
    resource_keys = ("toy_ranks", "toy_cpus")

    @classmethod
    def detect(cls, env):
        return "TOY_JOB_ID" in env

    def allocation(self, env):
        self.job_env = env
        host = Host(socket.gethostname(), int(env["TOY_SLOTS"]))
        return Allocation("toy", (host,), job_id=env["TOY_JOB_ID"])

    def addresses(self, alloc):
        return {h.name: "127.0.0.1" for h in alloc.hosts}

    def allocated_hosts(self, env):
        return self.allocation(env).host_slots()

    def site(self):
        return "toy-site"

    @classmethod
    def train_resources(cls, run, generic):
        ranks = generic["ranks"]
        return {"toy_ranks": ranks, "toy_cpus": ranks * run["cpus_per_worker"]}

    @classmethod
    def unavailable(cls, context):
        return {
            name: f"run {name!r} asks for {run['workers']} ranks, the toy cluster has {SLOTS}"
            for name, run in context.runs.items()
            if run["workers"] > SLOTS
        }

    @classmethod
    def job_request(cls, resources, threads=1):
        return JobRequest(nodes=1, ranks=resources["toy_ranks"], cpus=resources["toy_cpus"])


SCHEDULER = ToyScheduler
'''

#: What each rank of the launch prints: what started it.
RANK = (
    "import os; print('rank', os.environ['HOROVOD_RANK'], os.environ['CLUSTERBENCH_SCHEDULER'], "
    "os.environ['CLUSTERBENCH_SITE'])"
)


def tree_digest(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file of a checkout's parts (``CHECKOUT_PARTS``) -> its sha256; ``skip`` left out."""
    digests = {}
    for part in CHECKOUT_PARTS:
        base = root / part
        for path in [base] if base.is_file() else sorted(base.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path != skip:
                digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout with the toy scheduler's module added, and nothing else."""
    root = copy_checkout(tmp_path_factory.mktemp("toy") / "checkout")
    module = root / "workflow" / "clusterbench" / "launch" / "schedulers" / "toy.py"
    module.write_text(TOY)
    assert tree_digest(root, skip=module) == tree_digest(REPO)  # no other file edited
    return root


def copy_env(checkout: Path, **extra: str) -> dict[str, str]:
    """The environment of a process that imports the copy's package (not the repository's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CLUSTERBENCH_"))}
    env.pop("PE_HOSTFILE", None)
    env["PYTHONPATH"] = str(checkout / "workflow")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def test_the_copys_registry_and_resources_know_the_toy(checkout):
    code = (
        "import json\n"
        "from clusterbench.launch.schedulers import REGISTRY, SCHEDULERS, select\n"
        "from clusterbench.pipeline.resources import TRAIN_RESOURCE_KEYS, train_resources\n"
        "print(json.dumps({'registry': REGISTRY.names(), 'order': list(SCHEDULERS),\n"
        "  'detected': select(None, {'TOY_JOB_ID': '1', 'SLURM_JOB_ID': '2'}).name,\n"
        "  'keys': TRAIN_RESOURCE_KEYS,\n"
        "  'resources': train_resources({'name': 'r', 'workers': 2, 'cpus_per_worker': 3})}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=copy_env(checkout),
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    # helpers (_base, _slurm_*) are no schedulers; the toy is asked first (its priority)
    assert seen["registry"] == ["local", "sge", "slurm", "ssh", "toy"]
    assert seen["order"] == ["toy", "slurm", "sge", "ssh", "local"]
    assert seen["detected"] == "toy"
    assert {"toy_ranks", "toy_cpus", "tasks", "sge_pe"} <= set(seen["keys"])
    assert seen["resources"]["toy_ranks"] == 2 and seen["resources"]["toy_cpus"] == 6
    assert seen["resources"]["tasks"] == 2  # the other schedulers' parts are all still there


@pytest.mark.slow
def test_the_copys_launcher_detects_the_toy_and_starts_its_ranks_under_it(checkout):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clusterbench.launch",
            "--np",
            "2",
            "--",
            sys.executable,
            "-c",
            RANK,
        ],
        env=copy_env(checkout, TOY_JOB_ID="7", TOY_SLOTS="2"),
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "toy scheduler (toy processes): 2 rank(s)" in out, out
    ranks = sorted(
        line.split("rank ", 1)[1] for line in out.splitlines() if "]<stdout>:rank" in line
    )
    assert ranks == ["0 toy toy-site", "1 toy toy-site"], out


@pytest.mark.slow
def test_the_copys_workflow_sizes_checks_and_plans_its_jobs_with_the_toy(checkout, tmp_path):
    """``make plan``'s command for the ``toy`` executor in the copy: the train jobs carry the
    toy's resources, the run larger than the toy cluster is skipped with the toy's reason, and
    the plan reads the jobs through the toy's job request."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = default_config()
    one = {**cfg["runs"][0], "cpus_per_worker": 1}
    cfg["runs"] = [{**one, "name": "fits", "workers": 2}, {**one, "name": "big", "workers": 3}]
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-m", "clusterbench.plan", "--", "--directory", str(work),
         "--configfile", str(work / "config.yaml")],
        env=copy_env(checkout, CLUSTERBENCH_EXECUTOR="toy"),
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "toy_ranks=2, toy_cpus=2" in out, out[-5000:]  # the dry run's train job resources
    assert "skipping run 'big': run 'big' asks for 3 ranks, the toy cluster has 2" in out, out
    plan = out[out.index("clusterbench plan (toy executor)") :]
    assert "fits      1      2     2     0" in plan, plan
    assert "big: run 'big' asks for 3 ranks" in plan, plan
