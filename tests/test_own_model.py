"""Your own model (``model: "package.module:callable"``) when its code goes wrong or changes
(issue 28, section 2), with real training ranks on real files:

- each fault of the user's code stops the run with one line naming ``module:callable`` and what
  went wrong, no traceback (sys.exit at import or in build, KeyboardInterrupt, no or only frozen
  parameters, a forward hard-coding the batch size or giving another number of logits in
  training, a forward failing on real data, ranks building different networks);
- parameters a step leaves without a gradient train under DDP as under Horovod, said in the log
  and recorded in run.json;
- a non-finite loss is its message alone;
- after an edit of the module: a checkpoint of the old network is passed over, saying why; the
  workflow retrains the run (the module is a rerun trigger) and the evaluate stage names the
  command that trains it again.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clusterbench.core import preemption
from clusterbench.training import checkpoints
from conftest import REPO, snakemake, write_config
from test_resume import signal_when
from test_train import make_dataset, read_metrics, run_config

HEAD = "import os\nimport sys\n\nimport torch\nfrom torch import nn\n\n\n"

#: A network that trains on the 8x8 digits: build(n, shape), with ``WIDTH`` hidden units.
GOOD = HEAD + textwrap.dedent(
    """\
    WIDTH = 16


    def build(num_classes, shape):
        return nn.Sequential(
            nn.Flatten(), nn.Linear(64, WIDTH), nn.ReLU(), nn.Linear(WIDTH, num_classes)
        )
    """
)

#: fault -> (badnet.py, workers, what the one error line says)
FAULTS = {
    "exit-at-import": (
        HEAD + "sys.exit(3)\n",
        1,
        r"importing module 'badnet' failed \(it called sys\.exit\(3\)\)",
    ),
    "exit-in-build": (
        HEAD + "def build(n, s):\n    sys.exit('bye')\n",
        1,
        r"calling it as build\(num_classes=4, input_shape=\[1, 8, 8\]\) failed: it called "
        r"sys\.exit\('bye'\)",
    ),
    "interrupt-in-build": (
        HEAD + "def build(n, s):\n    raise KeyboardInterrupt\n",
        1,
        r"failed: it raised KeyboardInterrupt",
    ),
    "no-parameters": (
        HEAD
        + "class Net(nn.Module):\n    def forward(self, x):\n        return x.flatten(1)[:, :4]"
        "\n\n\ndef build(n, s):\n    return Net()\n",
        1,
        r"has no parameter to train \(no parameters at all\)",
    ),
    "frozen": (
        HEAD + "def build(n, s):\n    net = nn.Sequential(nn.Flatten(), nn.Linear(64, n))\n"
        "    net.requires_grad_(False)\n    return net\n",
        1,
        r"has no parameter to train \(2 parameter\(s\), all frozen",
    ),
    "batch-hard-coded": (
        HEAD + "class Net(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.fc = nn.Linear(64, n)\n\n    def forward(self, x):\n"
        "        return self.fc(x.reshape(2, 64))\n\n\ndef build(n, s):\n    return Net(n)\n",
        1,
        r"a batch of shape \[3, 1, 8, 8\] fails in forward \(evaluation mode\): RuntimeError: "
        r"shape '\[2, 64\]' is invalid for input of size 192 \(a batch of 2 went through: a model "
        r"must take any batch size",
    ),
    "logits-in-training": (
        HEAD + "class Net(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.fc = nn.Linear(64, n + 1)\n\n    def forward(self, x):\n"
        "        out = self.fc(x.flatten(1))\n"
        "        return out if self.training else out[:, :-1]\n\n\n"
        "def build(n, s):\n    return Net(n)\n",
        1,
        r"a batch of shape \[2, 1, 8, 8\] gives output shape \[2, 5\] in training mode, "
        r"expected \[2, 4\]",
    ),
    "forward-fails-on-data": (
        HEAD + "class Net(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.fc = nn.Linear(64, n)\n\n    def forward(self, x):\n"
        "        if x.abs().sum() > 0:\n            raise ValueError('only zeros, please')\n"
        "        return self.fc(x.flatten(1))\n\n\ndef build(n, s):\n    return Net(n)\n",
        1,
        r"failed in its own code \(\S+/badnet\.py:\d+, in forward\) while the run trained: "
        r"ValueError: only zeros, please",
    ),
    "ranks-differ-horovod": (
        HEAD + "def build(n, s):\n    width = 8 + 8 * int(os.environ['RANK'])\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.Linear(width, n))\n",
        2,
        r"model 'badnet:build' built a different network on different ranks \(rank 0: 4 "
        r"tensors, 556 values; rank 1: 4 tensors, 1,108 values\)",
    ),
}
FAULTS["ranks-differ-ddp"] = FAULTS["ranks-differ-horovod"]


def train(
    tmp_path: Path, code: str, workers: int, **keys
) -> tuple[subprocess.CompletedProcess, Path]:
    """``badnet.py`` (``code``) trained on a small 4-class data set as the workflow's train
    step would (``workers`` ranks through the launcher), in ``tmp_path``; its out dir."""
    (tmp_path / "badnet.py").write_text(code)
    data = tmp_path / "data"
    if not data.exists():
        make_dataset(data)
    run = run_config(model="badnet:build", workers=workers, epochs=1, **keys)
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), "--data-dir", str(data)]
    cmd += ["--run", json.dumps(run), "--out-dir", str(out)]
    if workers > 1:
        cmd = [sys.executable, "-m", "clusterbench.launch", "--np", str(workers), "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return proc, out


@pytest.mark.slow  # a training process (and 2 ranks for the last two) per fault
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_of_your_own_models_code_is_one_line_naming_it(tmp_path, fault):
    code, workers, message = FAULTS[fault]
    backend = "ddp" if fault.endswith("ddp") else "horovod"
    proc, out = train(tmp_path, code, workers, backend=backend)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    assert "Traceback" not in said, said
    errors = [line for line in said.splitlines() if "train: error: " in line]
    assert errors and all("model 'badnet:build'" in line for line in errors), said
    assert re.search(message, errors[0]), errors[0]
    assert not (out / "run.json").exists()


@pytest.mark.slow  # 2 ranks training for an epoch, each backend
@pytest.mark.parametrize("backend", ["ddp", "horovod"])
def test_parameters_without_a_gradient_train_under_both_backends_and_are_said(tmp_path, backend):
    """DDP failed with "Expected to have finished reduction ... find_unused_parameters=True",
    which no key could set; Horovod trained. Found at the run's start, they are told to DDP
    (at the cost of a walk of the autograd graph per step, said in the log) and recorded."""
    code = HEAD + textwrap.dedent(
        """\
        class Net(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.used = nn.Linear(64, n)
                self.unused = nn.Linear(3, 3)

            def forward(self, x):
                return self.used(x.flatten(1))


        def build(n, s):
            return Net(n)
        """
    )
    proc, out = train(tmp_path, code, 2, backend=backend, bn="local")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-4000:]
    assert "leaves 2 trainable parameter(s) without a gradient in a training step" in said
    assert ("find_unused_parameters=True" in said) == (backend == "ddp"), said
    info = json.loads((out / "run.json").read_text())
    assert info["effective"]["unused_parameters"] == ["unused.weight", "unused.bias"]


@pytest.mark.slow  # 2 ranks
def test_a_non_finite_loss_is_its_message_alone(tmp_path):
    """The clear NonFiniteLossError came at the end of a 53-line traceback."""
    data = make_dataset(tmp_path / "data")
    run = run_config(workers=2, epochs=3, lr=1e30, momentum=0.0)
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--", sys.executable]
    cmd += [str(REPO / "scripts" / "train.py"), "--data-dir", str(data)]
    cmd += ["--run", json.dumps(run), "--out-dir", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "Traceback" not in said, said
    assert re.search(r"train: error: run 'test': the training loss became non-finite", said)
    assert "Lower the run's lr" in said


@pytest.mark.slow  # a training preempted, then continued after the edit
def test_a_checkpoint_of_the_networks_old_code_is_passed_over_saying_why(tmp_path, monkeypatch):
    """Editing the model's module after an interrupted run made every rerun fail with
    `size mismatch` in load_state_dict until the checkpoints were deleted by hand."""
    monkeypatch.setenv(checkpoints.CHECKPOINTS_ENV, json.dumps({"preemption_check_steps": 2}))
    make_dataset(tmp_path / "data", n_train=4000)  # about a second an epoch
    (tmp_path / "badnet.py").write_text(GOOD)
    run = run_config(model="badnet:build", workers=1, epochs=2, batch_size=4)
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), "--data-dir", "data"]
    cmd += ["--run", json.dumps(run), "--out-dir", "out"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watcher = signal_when(
        tmp_path / "out" / "metrics.jsonl",
        1,
        lambda: os.kill(proc.pid, preemption.WARNING_SIGNAL),
    )
    proc.communicate(timeout=300)
    watcher.join()
    assert proc.returncode == preemption.EXIT_PREEMPTED
    (tmp_path / "badnet.py").write_text(GOOD.replace("WIDTH = 16", "WIDTH = 24"))
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    said = "made for another network (the model's code changed since?): 1.weight is [16, 64] "
    assert said + "there, [24, 64] now, and 2 more" in again.stdout, again.stdout
    assert "continuing from" not in again.stdout
    assert [m["epoch"] for m in read_metrics(tmp_path / "out")] == [1, 2]


def test_a_checkpoint_of_the_same_shapes_but_other_code_is_not_taken_for_this_one(tmp_path):
    """An edit that keeps every shape (another activation) is another network too: the digest
    of the module's files is kept with each checkpoint."""
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(4, 2))
    ckpt = {"model": net.state_dict(), "model_code": "a" * 64}
    assert checkpoints.model_problem(ckpt, net, "a" * 64) is None
    assert checkpoints.model_problem(ckpt, net, "b" * 64) == (
        "made with other code of the model's module (edited since)"
    )
    assert checkpoints.model_problem({**ckpt, "model_code": None}, net, "b" * 64) is None
    other = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Linear(2, 2))
    assert "it lacks 1.bias, 1.weight" in checkpoints.model_problem(ckpt, other, None)


@pytest.mark.slow  # the workflow: a training, then dry runs
def test_editing_the_models_module_retrains_the_run_and_evaluate_names_the_fix(tmp_path):
    """The dry run said "Nothing to be done" after an edit of the module, and the report showed
    results of the old code; the evaluate step failed with `weights do not match arch` in a
    traceback."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "mynet.py").write_text(GOOD)
    cfg = {
        "datasets": {"digits": {}},
        "runs": [
            {
                "name": "own",
                "dataset": "digits",
                "model": "mynet:build",
                "workers": 1,
                "epochs": 1,
                "batch_size": 64,
            }
        ],
        "comm": {"enabled": False},
        "report": {"title": "t"},
    }
    write_config(work, cfg)
    model = work / "results" / "runs" / "own" / "model.pt"
    snakemake(work, "--cores", "2", str(model.relative_to(work)))
    dry = snakemake(work, "-n", "--cores", "2", str(model.relative_to(work)))
    assert "Nothing to be done" in dry.stdout + dry.stderr
    stamp = work / ".snakemake" / "clusterbench" / "code" / "model-mynet.sha256"
    assert str(work / "mynet.py") in stamp.read_text()

    (work / "mynet.py").write_text(GOOD.replace("WIDTH = 16", "WIDTH = 24"))
    dry = snakemake(work, "-n", "--cores", "2", str(model.relative_to(work)))
    said = dry.stdout + dry.stderr
    assert re.search(r"rule train:\s.*\n(.*\n)*?\s*wildcards: run=own", said), said

    # the evaluate step of the old model.pt, as the rule runs it: one line naming the fix
    argv = ["--data-dir", "results/data/digits", "--model", "results/runs/own/model.pt"]
    argv += ["--params", json.dumps({"batch_size": 64, "split": "test"}), "--out-dir", "ev"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "evaluate.py"), *argv],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "was trained with other code of model 'mynet:build'" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith(
        "train the run again: snakemake --forcerun results/runs/own/model.pt"
    ), proc.stderr
    assert not (work / "ev").exists()


def test_the_modules_files_are_found_without_importing_it(tmp_path, monkeypatch):
    """Before any job the module is looked up as the import would, but nothing is imported:
    a package's __init__.py (on the way), a namespace package (no file), the module's file."""
    import sys

    from clusterbench.models import ModelError
    from clusterbench.models.custom import code_digest, module_files

    (tmp_path / "ns" / "pkg").mkdir(parents=True)  # ns: a namespace package
    (tmp_path / "ns" / "pkg" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (tmp_path / "ns" / "pkg" / "nets.py").write_text("raise SystemExit('imported!')\n")
    monkeypatch.chdir(tmp_path)
    found = module_files("ns.pkg.nets:build")
    assert found == [tmp_path / "ns" / "pkg" / "__init__.py", tmp_path / "ns" / "pkg" / "nets.py"]
    assert "ns" not in sys.modules and "ns.pkg" not in sys.modules
    digest = code_digest("ns.pkg.nets:build")
    (tmp_path / "ns" / "pkg" / "nets.py").write_text("WIDTH = 2\n")
    assert code_digest("ns.pkg.nets:build") != digest
    with pytest.raises(ModelError, match=r"no module 'ns\.pkg\.other' to import"):
        module_files("ns.pkg.other:build")


#: A network whose build() and forward() change the working directory (to ``elsewhere/``).
WANDERS = GOOD.replace(
    "def build(num_classes, shape):\n",
    textwrap.dedent(
        """\
        class Wander(nn.Sequential):
            def forward(self, x):
                os.chdir(os.environ["ELSEWHERE"])
                return super().forward(x)


        def build(num_classes, shape):
            os.chdir(os.environ["ELSEWHERE"])
            return Wander(
                nn.Flatten(), nn.Linear(64, WIDTH), nn.ReLU(), nn.Linear(WIDTH, num_classes)
            )


        def unused(num_classes, shape):
        """
    ),
)


@pytest.mark.slow  # a training and an evaluation
def test_an_own_model_that_changes_directory_sends_no_output_elsewhere(tmp_path):
    """Issue 42: os.chdir in build() sent run.json, model.pt, metrics.jsonl and the
    TensorBoard events to the other folder, and Snakemake then reported missing outputs. The
    stages take the paths given them as they were when they started."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "wander.py").write_text(WANDERS)
    make_dataset(tmp_path / "data")
    run = run_config(model="wander:build", workers=1, epochs=2)
    env = {**os.environ, "ELSEWHERE": str(elsewhere)}
    train = [sys.executable, str(REPO / "scripts" / "train.py"), "--data-dir", "data"]
    train += ["--run", json.dumps(run), "--out-dir", "out"]
    proc = subprocess.run(train, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    for name in ("run.json", "metrics.jsonl", "model.pt", "checksums.json"):
        assert (out / name).is_file(), name
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    evaluate = [sys.executable, str(REPO / "scripts" / "evaluate.py"), "--data-dir", "data"]
    evaluate += ["--model", "out/model.pt", "--out-dir", "ev"]
    evaluate += ["--params", json.dumps({"batch_size": 64, "split": "test"})]
    proc = subprocess.run(
        evaluate, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "ev" / "metrics.json").is_file()
    assert sorted(p.name for p in elsewhere.iterdir()) == []
