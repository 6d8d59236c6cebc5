"""The distributed runtime (clusterbench.backends, clusterbench.backends) with real ranks of both
backends.

Run as a script (by ``clusterbench.launch`` in the tests below) this file is the worker.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from clusterbench.bn._blocks import RunningStatsAggregator
from torch import nn

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ["horovod", "ddp"]
SIZES = [5, 3]  # uneven shards: the weights f_i = n_i / N matter


def launch(np_: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", str(np_), "--", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def two_bn_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1), nn.BatchNorm2d(2)
    )


def aggregate_formula(
    counts: list[int], means: list[torch.Tensor], variances: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The issue's formula, written out: the ``f_i = n_i / N`` weighted mixture of the
    workers' means and variances."""
    total = float(sum(counts))
    mean = sum(n / total * m for n, m in zip(counts, means, strict=True))
    var = sum(
        n / total * (v + (m - mean) ** 2) for n, m, v in zip(counts, means, variances, strict=True)
    )
    return mean, var


def rank_batch(rank: int, n: int) -> torch.Tensor:
    """Each rank's shard, from distributions that differ by rank (so the statistics do)."""
    gen = torch.Generator().manual_seed(100 + rank)
    return torch.randn(n, 3, 6, 6, generator=gen) * (1 + 2 * rank) + 3 * rank


def bn_stats(model: nn.Module) -> dict[str, np.ndarray]:
    return {
        f"{i}.{key}": getattr(m, key).detach().numpy().copy()
        for i, m in enumerate(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
        for key in ("running_mean", "running_var")
    }


def aggregate_worker(backend: str, out_dir: str, compression: str = "none") -> None:
    """Two optimiser steps with ``bn: aggregate``; saves, per step, the aggregated running
    statistics and the ones this rank alone would have had (same weights, own shard)."""
    from clusterbench import backends

    torch.set_num_threads(1)
    rt = backends.init(backend, "cpu")
    model = two_bn_net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rt.broadcast_state(model, optimizer)
    net, dist_optimizer = rt.wrap(model, optimizer, "aggregate", compression)
    out = {}
    for step in range(2):
        x = rank_batch(rt.rank, SIZES[rt.rank]) + step
        local = copy.deepcopy(model)  # before the step: this rank's own statistics
        local.train()(x)
        out.update({f"step{step}.local.{k}": v for k, v in bn_stats(local).items()})
        dist_optimizer.zero_grad()
        net.train()(x).square().mean().backward()
        dist_optimizer.step()
        out.update({f"step{step}.agg.{k}": v for k, v in bn_stats(model).items()})
    np.savez(Path(out_dir) / f"rank-{rt.rank}.npz", **out)
    rt.finish()


# --------------------------------------------------------------------------------------------
# bn: aggregate


def test_aggregator_reproduces_the_formula_in_one_process():
    """Fake workers in one process: contributions summed by hand, as an allreduce would."""
    nets = [two_bn_net() for _ in SIZES]
    aggs = [RunningStatsAggregator(net) for net in nets]
    assert len(aggs[0]) == (1 + 2 * 4) + (1 + 2 * 2)
    for rank, net in enumerate(nets):
        net.train()(rank_batch(rank, SIZES[rank]))
    locals_ = [bn_stats(net) for net in nets]
    summed = sum(agg.contribution() for agg in aggs)
    for agg in aggs:
        agg.apply(summed)
    for layer in ("0", "1"):
        mean, var = aggregate_formula(
            SIZES,
            [torch.from_numpy(s[f"{layer}.running_mean"]) for s in locals_],
            [torch.from_numpy(s[f"{layer}.running_var"]) for s in locals_],
        )
        for net in nets:
            got = bn_stats(net)
            np.testing.assert_allclose(got[f"{layer}.running_mean"], mean.numpy(), rtol=1e-5)
            np.testing.assert_allclose(got[f"{layer}.running_var"], var.numpy(), rtol=1e-5)


def test_aggregate_formula_is_the_weighted_mixture():
    mean, var = aggregate_formula(
        [3, 1],
        [torch.tensor([0.0]), torch.tensor([4.0])],
        [torch.tensor([1.0]), torch.tensor([2.0])],
    )
    assert mean.item() == pytest.approx(1.0)  # 3/4 * 0 + 1/4 * 4
    assert var.item() == pytest.approx(0.75 * (1 + 1) + 0.25 * (2 + 9))


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, compression",
    [*((b, "none") for b in BACKENDS), ("horovod", "fp16"), ("ddp", "bf16")],
)
def test_aggregate_running_stats_identical_on_all_ranks_and_equal_the_formula(
    backend, compression, tmp_path
):
    """Also with the gradients' allreduce compressed: the statistics stay exact (within the
    float32 tolerance below, which a 16-bit trip would miss by a factor of 100)."""
    launch(2, sys.executable, __file__, "aggregate", backend, str(tmp_path), compression)
    ranks = [dict(np.load(tmp_path / f"rank-{r}.npz")) for r in range(2)]
    for step in range(2):
        for layer in ("0", "1"):
            agg = [f"step{step}.agg.{layer}.running_{k}" for k in ("mean", "var")]
            for key in agg:  # identical bit for bit on every rank
                assert np.array_equal(ranks[0][key], ranks[1][key]), key
            loc = [f"step{step}.local.{layer}.running_{k}" for k in ("mean", "var")]
            mean, var = aggregate_formula(
                SIZES,
                [torch.from_numpy(r[loc[0]]) for r in ranks],
                [torch.from_numpy(r[loc[1]]) for r in ranks],
            )
            np.testing.assert_allclose(ranks[0][agg[0]], mean.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ranks[0][agg[1]], var.numpy(), rtol=1e-5, atol=1e-6)
            # and it is not simply rank 0's own statistics
            assert not np.allclose(ranks[0][agg[0]], ranks[0][loc[0]])


# --------------------------------------------------------------------------------------------
# the two backends agree


def make_run(backend: str, bn: str, **overrides) -> dict:
    from test_train import run_config

    return run_config(**{"backend": backend, "bn": bn, "epochs": 1, **overrides})


@pytest.mark.slow
@pytest.mark.parametrize("bn", ["aggregate", "sync", "local"])
def test_backends_produce_the_same_first_step_weights(bn, tmp_path):
    from test_train import make_dataset

    data = make_dataset(tmp_path / "data")
    weights = {}
    for backend in BACKENDS:
        run = make_run(backend, bn, name=f"first-{backend}")
        dump = tmp_path / "dump"
        launch(
            2,
            sys.executable,
            str(REPO / "scripts" / "train.py"),
            "--data-dir",
            str(data),
            "--run",
            json.dumps(run),
            "--out-dir",
            str(tmp_path / backend),
            "--max-steps",
            "1",
            "--dump-final-weights",
            str(dump),
        )
        ranks = [torch.load(dump / run["name"] / f"rank-{r}.pt") for r in range(2)]
        if bn != "local":  # local BN: running statistics differ by rank, by design
            for key in ranks[0]:
                assert torch.equal(ranks[0][key], ranks[1][key]), (backend, key)
        weights[backend] = ranks[0]
        info = json.loads((tmp_path / backend / "run.json").read_text())
        assert info["world"]["backend"] == backend and info["world"]["size"] == 2
    initial = {k: v for k, v in two_start_weights().items()}
    for key, value in weights["horovod"].items():
        torch.testing.assert_close(weights["ddp"][key], value, rtol=1e-5, atol=1e-6, msg=key)
        if key.endswith("weight") and value.dtype.is_floating_point and key in initial:
            assert not torch.equal(value, initial[key]), f"{key} did not change in the step"


# --------------------------------------------------------------------------------------------
# every BN mode trains the demo


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """The demo's digits data, made by the real download and preprocess stages (offline)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_data import build_digits

    return build_digits(tmp_path_factory.mktemp("digits"))


@pytest.mark.slow
@pytest.mark.parametrize("bn", ["aggregate", "sync", "local"])
def test_each_bn_mode_trains_the_demo_to_95_percent(bn, digits, tmp_path):
    """The demo's settings (global batch 128, lr 0.05, 15 epochs) on 2 workers."""
    from clusterbench import evaluate

    run = make_run(
        "horovod",
        bn,
        name=f"demo-{bn}",
        batch_size=128,
        epochs=15,
        lr=0.05,
        momentum=0.9,
        warmup_epochs=1,
        seed=1,
    )
    meta = json.loads((digits / "meta.json").read_text())
    run["dataset"] = meta["dataset"]
    launch(
        2,
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "--data-dir",
        str(digits),
        "--run",
        json.dumps(run),
        "--out-dir",
        str(tmp_path / "run"),
        timeout=600,
    )
    evaluate.main(
        [
            "--data-dir",
            str(digits),
            "--model",
            str(tmp_path / "run" / "model.pt"),
            "--params",
            json.dumps({"batch_size": 512, "split": "test"}),
            "--out-dir",
            str(tmp_path / "eval"),
        ]
    )
    accuracy = json.loads((tmp_path / "eval" / "metrics.json").read_text())["accuracy"]
    assert accuracy >= 0.95, (bn, accuracy)


def two_start_weights() -> dict[str, torch.Tensor]:
    """The weights both backends start from (seed 3, as run_config)."""
    from clusterbench.models import build_model

    torch.manual_seed(3)
    return build_model("small_cnn", 4, [1, 8, 8]).state_dict()


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"aggregate": aggregate_worker}[mode](*rest)


# --------------------------------------------------------------------------------------------
# a world of one


def test_a_world_of_one_answers_collectives_without_the_backend():
    """One rank has nothing to exchange: the runtime answers every collective itself (a
    Horovod collective would still wait for its background cycle, about 2 ms, every epoch)."""
    from clusterbench.backends import Identity, Runtime

    calls: list[str] = []

    class Counting(Runtime):
        name = "counting"

        @classmethod
        def start(cls, device_type):
            return cls(Identity(0, size, 0, size, 0, 1), device_type)

        def shutdown(self):
            pass

        def sync_batchnorm(self, device):
            raise NotImplementedError

        def wrap(self, model, optimizer, bn):
            raise NotImplementedError

        def _allreduce_sum(self, tensor, name):
            calls.append(name)
            return tensor * self.size

        def _allreduce_sum_autograd(self, tensor, name):
            calls.append(name)
            return tensor * self.size

        def _broadcast_tensors_(self, tensors, root):
            calls.append("broadcast")

        def _broadcast_object(self, obj, root, name):
            calls.append(name)
            return obj

        def _allgather_object(self, obj, name):
            calls.append(name)
            return [obj] * self.size

    size = 1
    one = Counting.start("cpu")
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    summed = one.allreduce_sum(x, "a")
    assert torch.equal(summed, x.detach()) and summed is not x and not summed.requires_grad
    grad_through = one.allreduce_sum_autograd(x, "b")
    grad_through.sum().backward()
    assert torch.equal(x.grad, torch.ones(2))
    one.broadcast_tensors_({"w": x})
    assert one.broadcast_object({"k": 1}, name="c") == {"k": 1}
    assert one.allgather_object(7, name="d") == [7]
    assert calls == []
    size = 2  # a world of two goes through the backend, every time
    two = Counting.start("cpu")
    assert torch.equal(two.allreduce_sum(torch.ones(1), "a"), torch.full((1,), 2.0))
    two.allreduce_sum_autograd(torch.ones(1), "b")
    two.broadcast_tensors_({})
    two.broadcast_object(1, name="c")
    assert two.allgather_object(7, name="d") == [7, 7]
    assert calls == ["a", "b", "broadcast", "c", "d"]


# --------------------------------------------------------------------------------------------
# ddp: a rank's exit after its last collective


def test_shutdown_waits_until_gloo_has_let_go_of_the_last_collectives_tensors():
    """A Gloo worker lets go of a collective's tensors a moment after it completed; held by
    Python until then, they need no GIL to be released (a worker that wants the GIL while the
    interpreter finalizes aborts the rank: exit 134 after a successful DDP training, seen once
    in about 20 2-rank runs). `released` waits for that moment, and gives up after its timeout.
    Another holder stands in for the worker here: an autograd graph that saved the tensor."""
    from clusterbench.backends import ddp as torch_runtime

    tensor = torch.ones(2)
    weight = torch.ones(2, requires_grad=True)
    graph = [(tensor * weight).sum()]  # saves `tensor`: a second holder
    assert tensor._use_count() == 2
    assert not torch_runtime.released([tensor], timeout=0.05)

    letting_go = threading.Timer(0.2, graph.clear)
    letting_go.start()
    start = time.monotonic()
    assert torch_runtime.released([tensor], timeout=5.0)
    assert time.monotonic() - start >= 0.15 and tensor._use_count() == 1
    letting_go.join()


def test_the_tensors_handed_to_gloo_are_kept_for_shutdown(monkeypatch):
    """Every all_reduce of the ddp runtime (a sum, the differentiable sum, the BatchNorm
    aggregation) keeps its tensor, the last two of them, for shutdown to wait on."""
    import torch.distributed as dist
    from clusterbench.backends import ddp as torch_runtime

    monkeypatch.setattr(dist, "all_reduce", lambda tensor: tensor.mul_(2))
    monkeypatch.setattr(torch_runtime, "_HANDED", torch_runtime.deque(maxlen=2))
    rt = torch_runtime.TorchRuntime(torch_runtime.Identity(0, 2, 0, 2, 0, 1), "cpu")
    summed = rt.allreduce_sum(torch.ones(1), "a")
    assert list(torch_runtime._HANDED) == [summed] and summed.item() == 2.0
    differentiable = rt.allreduce_sum_autograd(torch.ones(1, requires_grad=True), "b")
    assert torch_runtime._HANDED[-1] is differentiable
    model = nn.Sequential(nn.BatchNorm1d(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch_runtime.AggregatingOptimizer(optimizer, RunningStatsAggregator(model), None)
    model(torch.randn(4, 1)).sum().backward()
    step.step()
    assert len(torch_runtime._HANDED) == 2 and torch_runtime._HANDED[0] is differentiable
