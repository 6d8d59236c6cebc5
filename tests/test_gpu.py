"""GPU paths: single-GPU training, synchronised BatchNorm on CUDA under both backends, bf16 with
channels_last, and data kept resident on the device. Skipped cleanly without a CUDA GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from test_train import make_dataset, read_metrics, run_config, run_training

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
REPO = Path(__file__).resolve().parent.parent


def gpu_run(**overrides) -> dict:
    return run_config(workers=1, gpus_per_node=1, **overrides)


@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_one_gpu_trains_and_records_the_device(backend, tmp_path):
    data = make_dataset(tmp_path / "data")
    run_training(data, gpu_run(backend=backend), tmp_path / "out")
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["world"]["device"] == "cuda" and info["world"]["gpus"] == 1
    assert info["world"]["backend"] == backend and info["world"]["gpu_names"]
    assert read_metrics(tmp_path / "out")[-1]["val_accuracy"] >= 0.9


def test_bf16_autocast_with_channels_last(tmp_path):
    data = make_dataset(tmp_path / "data")
    run = gpu_run(model="resnet", precision="bf16", channels_last=True, epochs=3)
    run_training(data, run, tmp_path / "out")
    metrics = read_metrics(tmp_path / "out")
    assert all(torch.isfinite(torch.tensor(m["train_loss"])) for m in metrics)
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]
    model = torch.load(tmp_path / "out" / "model.pt", weights_only=True)["state_dict"]
    assert all(v.dtype != torch.bfloat16 for v in model.values())  # weights stay fp32


def test_training_data_stays_on_the_gpu(tmp_path):
    """No per-step host-to-device copy of the data set: the copies are counted by the profiler
    over an epoch of 200 steps; only the per-epoch permutation (and similar) may cross."""
    from clusterbench.train import train, validate_run
    from torch.profiler import ProfilerActivity, profile

    data_dir = make_dataset(tmp_path / "data", n_train=2000)
    run = validate_run(gpu_run(backend="ddp", batch_size=10, epochs=1))
    resident = {"loading": "resident", "loader_workers": None, "staging": {"dir": None}}
    train(run, data_dir, tmp_path / "warm", data_settings=resident)  # CUDA start-up first
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train(run, data_dir, tmp_path / "out", data_settings=resident)
    htod = [e for e in prof.events() if "HtoD" in e.name]
    steps = 2000 // 10
    # the arrays, the model and the optimiser state once, plus a few per epoch: << one per step
    assert len(htod) < steps / 4, [e.name for e in htod][:20]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_two_gpus_sync_batchnorm_and_nccl(backend, tmp_path):
    """hvd.SyncBatchNorm (Horovod) / nn.SyncBatchNorm over nccl (DDP) on two GPUs: both ranks
    end with identical weights."""
    import subprocess

    data = make_dataset(tmp_path / "data")
    run = run_config(workers=2, gpus_per_node=2, backend=backend, bn="sync")
    script = str(REPO / "scripts" / "train.py")
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--", sys.executable, script]
    cmd += ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(tmp_path / "out")]
    cmd += ["--dump-final-weights", str(tmp_path / "dump")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = (
        torch.load(tmp_path / "dump" / run["name"] / f"rank-{r}.pt", weights_only=True)
        for r in range(2)
    )
    for key in a:
        assert torch.equal(a[key], b[key]), key
