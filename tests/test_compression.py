"""``grad_compression``: the gradients' allreduce in 16 bits, under both backends.

Unit tests check what each backend hands its collective (a fake Horovod) and that DDP's timed
communication hook (the step-time breakdown) wraps the compress hook; the slow ones train with
real ranks: every rank ends with the same weights, the loss falls, the weights differ from an
uncompressed run's (so the compression did take place), and every epoch has its step times.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from clusterbench import config as cb
from clusterbench.backends import grad_compression_problems, runtime_class
from clusterbench.training.schedule import effective_settings
from test_train import make_dataset, read_metrics, run_config
from torch import nn

REPO = Path(__file__).resolve().parent.parent


def test_each_backend_names_what_it_can_compress_to():
    assert runtime_class("horovod").GRAD_COMPRESSIONS == ("none", "fp16")
    assert runtime_class("ddp").GRAD_COMPRESSIONS == ("none", "fp16", "bf16")
    schema = cb.load_schema()["$defs"]["run_settings"]["properties"]["grad_compression"]
    assert set(schema["enum"]) == {"none", "fp16", "bf16"}


def test_bf16_on_horovod_is_refused_before_any_job_naming_the_key_and_the_way_out():
    from clusterbench.train import validate_run

    with pytest.raises(cb.ConfigError) as err:
        validate_run(run_config(backend="horovod", grad_compression="bf16"))
    message = str(err.value)
    assert "run.grad_compression: backend 'horovod' cannot compress gradients to bf16" in message
    assert "use backend ddp for bf16" in message
    for backend, compression in (("horovod", "fp16"), ("ddp", "fp16"), ("ddp", "bf16")):
        run = run_config(backend=backend, grad_compression=compression)
        assert grad_compression_problems(run) == []
        assert validate_run(run)["grad_compression"] == compression


def test_run_json_records_the_compression_in_effect():
    assert effective_settings(run_config(grad_compression="fp16"))["grad_compression"] == "fp16"
    one = run_config(workers=1, grad_compression="fp16")
    assert effective_settings(one)["grad_compression"] == "none"  # one worker exchanges none
    older = {k: v for k, v in run_config().items() if k != "grad_compression"}
    assert effective_settings(older)["grad_compression"] == "none"


class FakeHorovod:
    """What Horovod's step hands its collective: each allreduce's tensor, averaged over two
    ranks whose second holds ``other`` times the first's values."""

    Average = "average"

    @property
    def Compression(self):  # noqa: N802 - horovod.torch's name
        from horovod.torch.compression import Compression

        return Compression

    def __init__(self, other: float = 3.0) -> None:
        self.calls: list[tuple[str, torch.dtype, int]] = []
        self.other = other

    def allreduce_async_(self, tensor, op, name):
        self.calls.append((name, tensor.dtype, tensor.numel()))
        tensor.mul_((1 + self.other) / 2)
        return name

    def synchronize(self, handle):
        return None

    def allreduce_(self, tensor, op, name):
        self.allreduce_async_(tensor, op, name)


def bn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


@pytest.mark.horovod
@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_horovods_step_compresses_the_gradients_and_keeps_the_bn_statistics_exact(compression):
    from clusterbench.backends.horovod import GradAllreduceOptimizer
    from clusterbench.bn._blocks import RunningStatsAggregator

    model = bn_net()
    hvd = FakeHorovod()
    runtime = SimpleNamespace(size=2, hvd=hvd)
    aggregator = RunningStatsAggregator(model)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    step = GradAllreduceOptimizer(inner, runtime, aggregator, compression)
    model(torch.randn(8, 3) * 3 + 5).square().sum().backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
    contribution = aggregator.contribution().clone()
    step.synchronize()
    n_grads, n_stats = grads.numel(), len(aggregator)
    if compression == "none":  # today's one fused buffer, float32
        assert hvd.calls == [("step", torch.float32, n_grads + n_stats)]
    else:  # the gradients in float16, the statistics in float32 beside them
        assert hvd.calls == [("step", torch.float16, n_grads), ("step.bn", torch.float32, n_stats)]
    averaged = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert averaged.dtype == torch.float32
    expected = grads * 2  # the fake's average of x and 3x
    if compression == "none":
        assert torch.equal(averaged, expected)
    else:  # rounded to float16 on the way
        assert torch.equal(averaged, (grads.half() * 2).float())
        assert not torch.equal(averaged, expected)
    # the statistics went through exact: the layer got the formula of the exact sums
    exact = RunningStatsAggregator(bn_net())
    exact.apply(contribution * 2)
    layer = model[1]
    assert torch.equal(layer.running_mean, exact.layers[0].running_mean)
    assert torch.equal(layer.running_var, exact.layers[0].running_var)


def test_ddp_registers_pytorchs_own_compress_hooks():
    from clusterbench.backends.ddp import compress_hook
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    assert compress_hook("none") is None
    assert compress_hook("fp16") is default_hooks.fp16_compress_hook
    assert compress_hook("bf16") is default_hooks.bf16_compress_hook
    with pytest.raises(ValueError, match="ddp backend compresses to none or fp16 or bf16"):
        compress_hook("int8")


@pytest.fixture
def world_of_one():
    """A Gloo process group of one rank in this process (DDP's hooks run in it)."""
    import torch.distributed as dist

    mine = not dist.is_initialized()
    if mine:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if mine:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "compression,timing", [("none", "on"), ("fp16", "on"), ("bf16", "on"), ("fp16", "off")]
)
def test_ddps_step_timing_wraps_the_compress_hook(compression, timing, world_of_one):
    """DDP takes one communication hook: with steps timed and compression asked for, the
    timed hook notes when each bucket was ready and the bucket is still exchanged in 16 bits
    (the gradients come back rounded to the 16-bit type), i.e. both are in effect."""
    from clusterbench.backends import Identity
    from clusterbench.backends.ddp import TorchRuntime

    # a runtime that believes in two ranks (so it wraps in DDP) over the group of one
    rt = TorchRuntime(Identity(0, 2, 0, 2, 0, 1), "cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    x = torch.randn(16, 5) / 3
    exact = torch.autograd.grad(model(x).square().sum(), list(model.parameters()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    module, optimizer = rt.wrap(model, optimizer, "local", compression, timed=timing == "on")
    assert optimizer.gradients_ready() is None  # no backward yet
    module(x).square().sum().backward()
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    want = torch.cat([g.reshape(-1) for g in exact])
    if compression == "none":
        torch.testing.assert_close(got, want)
    else:
        wire = {"fp16": torch.float16, "bf16": torch.bfloat16}[compression]
        assert torch.equal(got, want.to(wire).float()), "the bucket did not travel compressed"
        assert not torch.equal(got, want)
    ready = optimizer.gradients_ready()
    if timing == "on":
        assert isinstance(ready, float), "the step timing's hook did not run"
    else:
        assert ready is None


# --------------------------------------------------------------------------------------------
# Real ranks


def train_two_ranks(data: Path, run: dict, out: Path, dump: Path) -> dict[str, torch.Tensor]:
    """Two ranks as the workflow starts them; returns rank 0's final weights after checking
    that rank 1's are identical."""
    import subprocess

    script = str(REPO / "scripts" / "train.py")
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--", sys.executable, script]
    cmd += ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)]
    cmd += ["--dump-final-weights", str(dump)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [torch.load(dump / run["name"] / f"rank-{r}.pt", weights_only=True) for r in range(2)]
    for key in ranks[0]:
        assert torch.equal(ranks[0][key], ranks[1][key]), (run["name"], key)
    return ranks[0]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_compressed_ranks_end_equal_train_and_differ_from_uncompressed(backend, tmp_path):
    data = make_dataset(tmp_path / "data")
    compressions = ["none", "fp16"] + (["bf16"] if backend == "ddp" else [])
    weights = {}
    for compression in compressions:
        name = f"{backend}-{compression}"
        run = run_config(name=name, backend=backend, grad_compression=compression, epochs=3)
        out = tmp_path / name
        weights[compression] = train_two_ranks(data, run, out, tmp_path / "dump")
        metrics = read_metrics(out)
        losses = [m["train_loss"] for m in metrics]
        assert losses[-1] < losses[0], (name, losses)
        for m in metrics:  # the step-time breakdown is in effect beside the compression
            times = m["step_seconds"]
            assert times["ranks"] == 2 and times["steps"] > 0, (name, times)
            assert times["comm"]["mean"] > 0 and times["compute"]["mean"] > 0, (name, times)
        info = json.loads((out / "run.json").read_text())
        assert info["run"]["grad_compression"] == compression
        assert info["effective"]["grad_compression"] == compression
    plain = weights.pop("none")
    for compression, mine in weights.items():
        conv = next(k for k in plain if k.endswith("weight") and plain[k].dim() == 4)
        assert not torch.equal(mine[conv], plain[conv]), f"{compression}: nothing was rounded"
        torch.testing.assert_close(mine[conv], plain[conv], rtol=0.1, atol=0.05)
