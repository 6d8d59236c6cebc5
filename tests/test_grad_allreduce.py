"""``grad_allreduce``: the Horovod backend's gradients as views of flat buffers, allreduced in
one buffer after backward or in buckets during it, and the rule that picks one (issue 27).

Unit tests check the buffers (views in the parameters' own memory format, zeroed in place, a
foreign gradient copied in), what each path hands a fake Horovod and when (every bucket during
backward), and the measured ``auto`` rule; the slow one trains with two real Horovod ranks both
ways: the same weights (within floating-point reordering), the step-time breakdown's exposed
communication, and Horovod's summary lines printed and in run.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_compression import FakeHorovod, bn_net
from test_train import make_dataset, run_config
from torch import nn

REPO = Path(__file__).resolve().parent.parent


def test_buckets_are_views_cut_from_the_last_layer_in_each_parameters_format():
    from clusterbench.backends._grads import GradBuckets

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3), nn.Linear(4, 2))
    model[1].to(memory_format=torch.channels_last)
    params = list(model.parameters())
    model[0].weight.grad = torch.ones_like(model[0].weight)  # a gradient made before
    # 300 values per bucket at most: the last layer's first, a parameter never split
    buckets = GradBuckets(params, cap_mb=300 * 4 / 2**20, tail=5)
    assert [[tuple(p.shape) for p in b.params] for b in buckets.buckets] == [
        [(2,), (2, 4), (8,)],
        [(8, 8, 3, 3)],
        [(8,), (8, 3, 3, 3)],
    ]
    assert buckets.last.buffer.numel() == 8 + 8 * 27 + 5 and buckets.buckets[0].tail.numel() == 0
    conv = model[1].weight
    assert conv.grad.stride() == conv.stride() != torch.empty(conv.shape).stride()
    for bucket in buckets.buckets:
        base = bucket.buffer.data_ptr()
        for p in bucket.params:
            assert base <= p.grad.data_ptr() < base + bucket.buffer.numel() * 4
    assert torch.equal(model[0].weight.grad, torch.ones_like(model[0].weight))  # copied in
    model[0].weight.grad = torch.full_like(model[0].weight, 2.0)  # replaced: attach copies it
    buckets.last.attach()
    assert buckets.last.buffer[8 : 8 + 216].eq(2).all()
    buckets.zero()
    assert all(b.buffer.eq(0).all() for b in buckets.buckets)
    assert model[0].weight.grad.data_ptr() == buckets.last.buffer.data_ptr() + 8 * 4


def fake_step(mode: str, timed: bool = False):
    """One step of ``bn_net`` under a fake Horovod of two ranks: (the optimiser, the fake, the
    collectives called before synchronize, the gradients and BN statistics after it)."""
    from clusterbench.backends._grads import ReadyClock
    from clusterbench.backends.horovod import GradAllreduceOptimizer
    from clusterbench.bn._blocks import RunningStatsAggregator

    model = bn_net()
    hvd = FakeHorovod()
    aggregator = RunningStatsAggregator(model)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = ReadyClock(False) if timed else None
    step = GradAllreduceOptimizer(
        inner, SimpleNamespace(size=2, hvd=hvd), aggregator, "none", mode, clock
    )
    step.zero_grad()
    torch.manual_seed(1)
    model(torch.randn(8, 3) * 3 + 5).square().sum().backward()
    during = list(hvd.calls)
    step.synchronize()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    stats = torch.cat([model[1].running_mean, model[1].running_var])
    return step, hvd, during, grads, stats


def test_buckets_are_handed_to_horovod_during_backward_and_average_as_one_buffer(monkeypatch):
    monkeypatch.setenv("CLUSTERBENCH_HOROVOD_BUCKET_MB", str(10 / 2**20))  # a bucket per tensor
    _, one_hvd, one_during, one_grads, one_stats = fake_step("one")
    step, hvd, during, grads, stats = fake_step("buckets", timed=True)
    assert one_during == [] and one_hvd.calls == [("step", torch.float32, 34 + 9)]
    # every bucket left during backward: 6 parameter tensors, the BN statistics (9 values: a
    # count, 4 means, 4 variances) at the end of the first layer's weight's bucket
    assert during == hvd.calls and len(during) == 6
    assert sorted(n for _, _, n in during) == [2, 4, 4, 4, 8, 12 + 9]
    assert {name for name, _, _ in during} == {f"grad.{i}" for i in range(6)}
    assert torch.equal(grads, one_grads) and torch.equal(stats, one_stats)
    assert isinstance(step.gradients_ready(), float)  # when the last bucket left
    step.zero_grad()
    assert step.gradients_ready() is None


def test_auto_follows_the_measured_rule():
    from clusterbench.backends import Identity
    from clusterbench.backends.horovod import HorovodRuntime

    rt = HorovodRuntime(Identity(0, 2, 0, 2, 0, 1), "cpu", hvd=None)
    model = nn.Linear(1000, 1000)  # 3.8 MiB of gradients
    assert rt.choose_grad_allreduce("auto", model, "cpu") == (
        "one",
        "auto: 3.8 MiB of gradients on the CPU: one buffer after backward",
    )
    assert rt.choose_grad_allreduce("auto", model, "cuda")[0] == "buckets"
    for big in (43 * 2**20, 90 * 2**20):  # ResNet-18, ResNet-50: one buffer on the CPU too
        assert rt.auto_grad_allreduce(big, "cpu")[0] == "one"
    assert rt.choose_grad_allreduce("buckets", model, "cpu") == (
        "buckets",
        "grad_allreduce: buckets",
    )
    alone = HorovodRuntime(Identity(0, 1, 0, 1, 0, 1), "cpu", hvd=None)
    assert alone.choose_grad_allreduce("buckets", model, "cpu")[0] == "none"  # nothing to send


@pytest.mark.slow
def test_two_horovod_ranks_train_the_same_weights_in_one_buffer_and_in_buckets(tmp_path):
    data = make_dataset(tmp_path / "data")
    weights, logs = {}, {}
    for mode in ("one", "buckets"):
        run = run_config(name=mode, epochs=2, grad_allreduce=mode)
        out, dump = tmp_path / mode, tmp_path / "dump"
        cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--", sys.executable]
        cmd += [str(REPO / "scripts" / "train.py"), "--data-dir", str(data)]
        cmd += ["--run", json.dumps(run), "--out-dir", str(out), "--dump-final-weights", str(dump)]
        env = {**__import__("os").environ, "CLUSTERBENCH_HOROVOD_BUCKET_MB": "0.001"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        logs[mode] = proc.stdout
        ranks = [torch.load(dump / mode / f"rank-{r}.pt", weights_only=True) for r in (0, 1)]
        assert all(torch.equal(ranks[0][k], ranks[1][k]) for k in ranks[0])
        weights[mode] = ranks[0]
        info = json.loads((out / "run.json").read_text())
        assert info["effective"]["grad_allreduce"] == mode
        # small_cnn's 11 gradient tensors: one buffer, or 7 buckets of at most 0.001 MiB (a
        # tensor larger than that is a bucket of its own)
        assert info["effective"]["grad_buffers"] == (1 if mode == "one" else 7)
        metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        for m in metrics:  # the exposed communication is measured on both paths
            assert (
                m["step_seconds"]["comm"]["mean"] > 0 and m["step_seconds"]["compute"]["mean"] > 0
            )
        summary = info["throughput"]  # Horovod's summary over the epochs after the first
        per_worker = metrics[1]["images_per_second"] / 2
        assert summary["timed_epochs"] == [2] and summary["per_device"] == pytest.approx(per_worker)
        assert summary["total"] == pytest.approx(2 * per_worker) and summary["per_device_ci95"] == 0
        assert summary["lines"] == [
            f"Img/sec per CPU worker: {per_worker:.1f} +-0.0",
            f"Total img/sec on 2 CPU worker(s): {2 * per_worker:.1f} +-0.0",
        ]
        assert all(line in proc.stdout for line in summary["lines"])
    for key, value in weights["one"].items():  # 2 ranks: a + b, whatever the buckets
        torch.testing.assert_close(weights["buckets"][key], value, rtol=1e-6, atol=1e-7)
