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
    from clusterbench.training.peaks import gpu_peak

    data = make_dataset(tmp_path / "data")
    run_training(data, gpu_run(backend=backend), tmp_path / "out")
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["world"]["device"] == "cuda" and info["world"]["gpus"] == 1
    assert info["world"]["backend"] == backend and info["world"]["gpu_names"]
    assert read_metrics(tmp_path / "out")[-1]["val_accuracy"] >= 0.9
    # the peak MFU divides by: the GPU table's (none for a GPU the table does not know)
    table = gpu_peak(torch.cuda.get_device_name(0), "fp32")
    assert info["flops"]["peak"]["per_device"] == table["flops"]
    assert info["flops"]["peak"]["source"] == table["source"]


def test_a_compiled_run_on_a_gpu_trains_to_the_eager_losses(tmp_path):
    data = make_dataset(tmp_path / "data", n_train=200)
    runs = {
        "eager": gpu_run(backend="ddp", batch_size=25, compile=False),
        "compiled": gpu_run(backend="ddp", batch_size=25, compile=True),
    }
    for name, run in runs.items():
        run_training(data, {**run, "name": name}, tmp_path / name)
    eager, compiled = (read_metrics(tmp_path / name) for name in runs)
    for key in ("train_loss", "val_loss"):  # TF32 convolutions either way: a looser tolerance
        assert [m[key] for m in compiled] == pytest.approx([m[key] for m in eager], rel=1e-2)
    info = json.loads((tmp_path / "compiled" / "run.json").read_text())
    assert info["effective"]["compile"] is True and info["compile_seconds"] > 0


def smooth_jpegs(path: Path, n: int = 24) -> Path:
    """A zip of ``n`` smooth JPEGs (full-resolution colour, quality 95: decoders agree on them
    within a level or two) of two classes and sizes 40..79."""
    import io
    import zipfile

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(n):
            h, w = (int(v) for v in rng.integers(40, 80, 2))
            ramp = np.linspace(0, 255, w, dtype=np.float32)[None, :, None]
            array = (ramp * np.array([1.0, 0.5, 0.2]) + 40 * (i % 2)).clip(0, 255)
            array = np.broadcast_to(array, (h, w, 3)).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(array).save(buf, "JPEG", quality=95, subsampling=0)
            archive.writestr(f"top/c{i % 2}/img{i}.jpg", buf.getvalue())
    return path


def test_jpegs_decoded_and_augmented_on_the_gpu_match_the_cpu_path(tmp_path):
    """The same crops and flips; nvJPEG's pixels and the float resize within a level or two of
    the CPU's (measured as the mean absolute difference in 8-bit levels)."""
    from clusterbench.data.order import global_batches
    from clusterbench.data.source import open_source
    from test_data_sources import data_run, extracted, reading

    data = extracted(tmp_path, make=smooth_jpegs, image_size=[32, 32])
    gpu = torch.device("cuda", 0)
    run = data_run(workers=1, gpus_per_node=1)
    on_cpu = open_source(data, {**run, "decode": "cpu"}, reading("stream", 2), gpu)
    on_gpu = open_source(data, {**run, "decode": "gpu"}, reading("stream", 2), gpu)
    assert on_gpu.describe()["decode"] == "gpu" and on_cpu.describe()["decode"] == "cpu"
    batches = global_batches(on_cpu.train_size, 8, 1)
    std = torch.tensor(on_cpu.normalisation["std"], device=gpu)[None, :, None, None]
    for (a, ya), (b, yb) in zip(
        on_cpu.epoch_batches(0, batches, 0, 0, 1),
        on_gpu.epoch_batches(0, batches, 0, 0, 1),
        strict=True,
    ):
        assert b.is_cuda and torch.equal(ya, yb) and a.shape == b.shape
        levels = ((a - b) * std * 255).abs()
        assert float(levels.mean()) < 2.0, float(levels.mean())
    on_cpu.close()
    on_gpu.close()


def test_a_run_on_a_gpu_decodes_its_image_folder_there_by_default(tmp_path):
    from test_data_sources import extracted

    data = extracted(tmp_path, make=smooth_jpegs, image_size=[32, 32])
    run = gpu_run(dataset="pics", model="resnet", batch_size=8, on_bad_file="skip")
    run_training(data, run, tmp_path / "out")
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["data"]["decode"] == "gpu"
    assert info["data"]["decode_reason"] == "auto: the run trains on a GPU"


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
