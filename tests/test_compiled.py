"""``compile`` (clusterbench.training.compiled): the rule, the warm-up's batch sizes, and a
compiled run that is preempted mid-epoch and continued trains to the same losses as an eager
one (within a stated tolerance: Inductor's fused kernels round differently), its compile time
recorded apart from the epochs, its checkpoints and model.pt holding the uncompiled network's
weights.

The runs are one worker in this process (a world of one under DDP), small_cnn on the 8x8
quadrant images of test_train, 200 training images in batches of 25: one batch size, one
compile."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from clusterbench.core import preemption
from clusterbench.data.order import global_batches
from clusterbench.models import build_model
from clusterbench.training import compiled
from clusterbench.training.checkpoints import CHECKPOINTS_ENV
from test_resume import slice_checkpoints, train_here
from test_train import make_dataset, read_metrics, run_config

#: The relative difference allowed between a compiled run's losses and an eager run's.
TOLERANCE = 1e-3


@pytest.mark.parametrize(
    "asked, device, model, want",
    [
        (True, "cpu", "small_cnn", (True, "compile: true")),
        (False, "cuda", "resnet", (False, "compile: false")),
        ("auto", "cpu", "resnet", (False, "auto: resnet not measured faster compiled on cpu")),
    ],
)
def test_compile_true_false_and_auto_by_the_measured_table(asked, device, model, want):
    assert compiled.choose({"compile": asked, "model": model}, device) == want


def test_auto_compiles_what_the_table_says_was_measured_faster(monkeypatch):
    monkeypatch.setattr(compiled, "MEASURED_FASTER", frozenset({("cuda", "gpt-tiny")}))
    assert compiled.choose({"compile": "auto", "model": "gpt-tiny"}, "cuda")[0] is True
    assert compiled.choose({"compile": "auto", "model": "gpt-tiny"}, "cpu")[0] is False


def test_the_warm_up_takes_each_batch_size_a_rank_trains_once():
    # 205 samples in global batches of 25 over 2 ranks: 13 + 12, then the last 5: 3 + 2
    batches = global_batches(205, 25, 2)
    assert compiled.local_sizes(batches, 2, 0) == [13, 3]
    assert compiled.local_sizes(batches, 2, 1) == [12, 2]
    assert compiled.local_sizes(global_batches(200, 25, 1), 1, 0) == [25]


def test_a_compile_error_is_told_in_one_line():
    exc = RuntimeError("InductorError: no C++ compiler\n  long traceback\n" + "x" * 500)
    assert compiled.failure(exc) == "RuntimeError: InductorError: no C++ compiler"


@pytest.fixture(scope="module")
def eager_and_compiled(tmp_path_factory):
    """An eager run of 2 epochs, and the same run compiled, preempted at the second check of
    its first epoch (a checkpoint mid-epoch), then continued compiled to its end."""
    root = tmp_path_factory.mktemp("compiled")
    data = make_dataset(root / "data", n_train=200)
    run = run_config(workers=1, backend="ddp", batch_size=25, epochs=2)
    mp = pytest.MonkeyPatch()
    mp.setenv(CHECKPOINTS_ENV, json.dumps({"keep": 2, "preemption_check_steps": 2}))
    try:
        assert train_here(data, run, root / "eager") == 0
        run = {**run, "compile": True}
        calls = itertools.count()
        mp.setattr(preemption, "warned", lambda: next(calls) >= 2)  # at step 4 of epoch 1
        assert train_here(data, run, root / "compiled") == preemption.EXIT_PREEMPTED
        stopped = slice_checkpoints(root / "compiled", run)[-1]
        mp.setattr(preemption, "warned", lambda: False)
        assert train_here(data, run, root / "compiled") == 0
    finally:
        mp.undo()
    return root, stopped


def test_a_compiled_run_continued_mid_epoch_trains_to_the_eager_losses(eager_and_compiled):
    root, stopped = eager_and_compiled
    assert (stopped.epoch, stopped.step) == (0, 4)  # it did continue from mid-epoch
    eager, comp = read_metrics(root / "eager"), read_metrics(root / "compiled")
    assert [m["epoch"] for m in comp] == [1, 2]
    for key in ("train_loss", "val_loss", "val_accuracy"):
        assert [m[key] for m in comp] == pytest.approx([m[key] for m in eager], rel=TOLERANCE)
    assert comp[-1]["train_loss"] < comp[0]["train_loss"]


def test_a_compiled_run_records_its_compile_apart_and_saves_the_plain_network(eager_and_compiled):
    root, _ = eager_and_compiled
    info = json.loads((root / "compiled" / "run.json").read_text())
    assert info["effective"]["compile"] is True
    assert info["effective"]["compile_reason"] == "compile: true"
    assert info["compile_seconds"] > 0  # the continued launch's compile
    eager = json.loads((root / "eager" / "run.json").read_text())
    assert eager["effective"]["compile"] is False and eager["compile_seconds"] == 0.0
    saved = torch.load(root / "compiled" / "model.pt", weights_only=True)
    net = build_model(**saved["arch"])
    net.load_state_dict(saved["state_dict"])  # strict: the names of an uncompiled network
    assert not any("_orig_mod" in key for key in saved["state_dict"])


def test_the_warm_up_leaves_the_buffers_random_state_and_gradients_as_they_were():
    from types import SimpleNamespace

    from clusterbench.training.objectives import objective

    torch.manual_seed(0)
    model = build_model("small_cnn", 4, [1, 8, 8])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.synchronize = lambda: None  # a world of one: nothing to exchange
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = SimpleNamespace(task="classification", input_shape=[1, 8, 8])
    ctx = SimpleNamespace(
        model=model,
        net=model,  # eager here: what is checked is what the warm-up leaves behind
        optimizer=optimizer,
        data=data,
        device=torch.device("cpu"),
        memory_format=None,
        objective=objective("classification"),
        autocast=lambda: torch.autocast("cpu", enabled=False),
    )
    rng = torch.get_rng_state()
    assert compiled.warm_up(ctx, [5, 3]) >= 0
    assert torch.equal(torch.get_rng_state(), rng)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN buffers
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_a_failed_compile_stops_compile_true_in_one_line_and_auto_trains_eager(monkeypatch):
    from types import SimpleNamespace

    def fails(ctx, sizes):
        raise RuntimeError("InductorError: no C++ compiler found\nlong traceback")

    monkeypatch.setattr(compiled, "compile_module", lambda net: "compiled net")
    monkeypatch.setattr(compiled, "warm_up", fails)
    monkeypatch.setattr(compiled, "MEASURED_FASTER", frozenset({("cpu", "resnet")}))
    rt = SimpleNamespace(rank=0, size=1)
    batches = global_batches(200, 25, 1)
    run = {"name": "r", "model": "resnet", "compile": True}
    ctx = SimpleNamespace(net="eager net", rt=rt)
    with pytest.raises(compiled.CompileError, match="asks for compile: true, and torch.compile"):
        compiled.Compiled(run, "cpu").prepare(ctx, batches)
    auto = compiled.Compiled({**run, "compile": "auto"}, "cpu")
    assert auto.enabled  # measured faster: auto compiles
    auto.prepare(ctx, batches)
    assert ctx.net == "eager net" and not auto.enabled
    assert auto.record()["compile_reason"] == (
        "auto: torch.compile failed (RuntimeError: InductorError: no C++ compiler found): eager"
    )


def test_the_train_stage_says_a_failed_compile_in_one_line(tmp_path, monkeypatch, capsys):
    from clusterbench import train as stage

    def fails(*args, **kwargs):
        raise compiled.CompileError("run 'test' asks for compile: true, and ...")

    monkeypatch.setattr(stage, "train", fails)
    data = make_dataset(tmp_path / "data", n_train=20, n_val=8)
    run = json.dumps(run_config(workers=1, compile=True))
    argv = ["--data-dir", str(data), "--run", run, "--out-dir", str(tmp_path / "out")]
    assert stage.main(argv) == 1
    err = capsys.readouterr().err
    assert err == "train: error: run 'test' asks for compile: true, and ...\n"
