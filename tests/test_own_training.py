"""Your own loss and optimiser (``loss:`` / ``optimizer: "package.module:callable"``), in one
process: found before any job without importing them, checked when the run starts with one
line naming the key, ``module:callable`` and the cause, a failure in their code while training
named as theirs, and their modules' digest kept with every checkpoint. The real 2-rank runs
with them: tests/test_uneven_workers.py."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from clusterbench import config as cbconfig
from clusterbench.models import ModelError, custom_training
from clusterbench.training import checkpoints
from clusterbench.training.network import user_code_error
from clusterbench.training.objectives import objective
from torch import nn

CODE = textwrap.dedent(
    """\
    import sys

    import torch
    import torch.nn.functional as F


    def summed(outputs, targets):
        return F.cross_entropy(outputs, targets, reduction="sum")


    def mean(outputs, targets):
        return F.cross_entropy(outputs, targets)[None]


    def detached(outputs, targets):
        return F.cross_entropy(outputs, targets, reduction="sum").detach()


    def exits(outputs, targets):
        sys.exit("no")


    def nan_at_training(outputs, targets):
        raise ValueError("a bad target")


    def adam(parameters, lr):
        return torch.optim.Adam(parameters, lr=lr)


    def first_only(parameters, lr):
        return torch.optim.SGD(parameters[:1], lr=lr)


    def no_optimizer(parameters, lr):
        return "sgd"
    """
)


@pytest.fixture
def mine(tmp_path: Path, monkeypatch) -> str:
    """``mytrain.py`` in the working directory, as a job finds your own code."""
    (tmp_path / "mytrain.py").write_text(CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mytrain", None)
    return "mytrain"


def batch() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    return net, net(torch.zeros(2, 3)), torch.zeros(2, dtype=torch.long)


def test_a_loss_and_an_optimizer_are_found_before_any_job_naming_the_key(mine):
    run = {"loss": "mytrain:summed", "optimizer": "mytrain:adam"}
    assert custom_training.problems(run, "runs[0]") == []
    bad = {"loss": "mytrain.summed", "optimizer": "nosuch.mod:adam"}
    problems = custom_training.problems(bad, "runs[0]")
    assert problems[0].startswith("runs[0].loss: your own loss is written 'package.module:")
    assert problems[1].startswith("runs[0].optimizer: optimizer 'nosuch.mod:adam': no module")
    with pytest.raises(cbconfig.ConfigError, match=r"runs\[0\]\.optimizer: optimizer 'x:y'"):
        cfg = {"runs": [{"name": "a", "dataset": "digits", "optimizer": "x:y"}]}
        cbconfig.validate(cfg)


@pytest.mark.parametrize(
    "name, message",
    [
        ("mytrain:exits", r"calling it as exits\(outputs \[2, 2\], targets \[2\]\) failed: it "),
        ("mytrain:mean", r"returned \[1\], not a scalar tensor: it must return the loss summed"),
        ("mytrain:detached", r"its value has no gradient"),
        ("mytrain:nosuch", r"module 'mytrain' \(\S+mytrain\.py\) has no 'nosuch'"),
    ],
)
def test_a_loss_that_cannot_train_is_one_line_naming_it(mine, name, message):
    net, outputs, targets = batch()
    with pytest.raises(ModelError, match=rf"^loss '{name}': .*{message}"):
        custom_training.build_loss(name, objective("classification"), outputs, targets)


def test_a_loss_is_the_tasks_objective_with_your_loss_sum(mine):
    net, outputs, targets = batch()
    task = objective("classification")
    own = custom_training.build_loss("mytrain:summed", task, outputs, targets)
    assert torch.equal(own.loss_sum(outputs, targets), task.loss_sum(outputs, targets))
    assert own.correct is task.correct


@pytest.mark.parametrize(
    "name, message",
    [
        ("mytrain:no_optimizer", r"returned str, not a torch\.optim\.Optimizer"),
        ("mytrain:first_only", r"leaves 3 trainable parameter\(s\) out of its param groups "),
        ("mytrain:summed", r"calling it as summed\(parameters \(4 tensors\), lr=0\.1\) failed"),
    ],
)
def test_an_optimizer_that_cannot_train_is_one_line_naming_it(mine, name, message):
    net, _, _ = batch()
    with pytest.raises(ModelError, match=rf"^optimizer '{name}': {message}"):
        custom_training.build_optimizer(name, net, 0.1)
    adam = custom_training.build_optimizer("mytrain:adam", net, 0.1)
    assert isinstance(adam, torch.optim.Adam) and adam.param_groups[0]["lr"] == 0.1


def test_a_failure_in_your_losss_code_while_training_is_named_as_the_losss(mine):
    import mytrain

    run = {"model": "small_cnn", "loss": "mytrain:nan_at_training", "optimizer": None}
    try:
        mytrain.nan_at_training(None, None)
    except ValueError as exc:
        told = user_code_error(run["model"], exc, run=run)
    assert told is not None and told.startswith("loss 'mytrain:nan_at_training' failed in its own")
    assert "mytrain.py:" in told and told.endswith(
        "while the run trained: ValueError: a bad target"
    )
    assert user_code_error("small_cnn", ValueError("x")) is None  # nothing of yours: not told


def test_a_checkpoint_of_other_loss_or_optimizer_code_is_not_continued(mine, tmp_path):
    run = {"loss": "mytrain:summed", "optimizer": "mytrain:adam"}
    before = custom_training.code_digest(run)
    assert custom_training.code_digest({"loss": None}) is None
    (tmp_path / "mytrain.py").write_text(CODE + "\n# edited\n")
    after = custom_training.code_digest(run)
    assert before != after
    net = nn.Linear(2, 2)
    ckpt = {"model": net.state_dict(), "training_code": before}
    assert checkpoints.model_problem(ckpt, net, None, before) is None
    assert checkpoints.model_problem(ckpt, net, None, after) == (
        "made with other code of the loss's or the optimizer's module (edited since)"
    )
