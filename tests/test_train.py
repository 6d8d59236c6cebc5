"""Stage 3: data-parallel training with real Horovod ranks (horovodrun --gloo) and one process.

The end-to-end runs use a small synthetic dataset in the preprocess stage's format: 8x8
single-channel images whose class is the bright quadrant, plus noise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from clusterbench.config import EXIT_BAD_SETTINGS, ConfigError
from clusterbench.data.order import epoch_permutation, global_batches, shard_bounds, shard_sizes
from clusterbench.models import build_model
from clusterbench.train import main, validate_run
from clusterbench.training.device import DeviceError, check_device
from clusterbench.training.record import epoch_line
from clusterbench.training.schedule import PROGRESS_INTERVAL, progress_due, progress_line
from clusterbench.training.steps import non_finite_message

REPO = Path(__file__).resolve().parent.parent
HOROVODRUN = Path(sys.executable).parent / "horovodrun"
METRIC_FIELDS = {
    "epoch",
    "train_loss",
    "val_loss",
    "val_accuracy",
    "epoch_seconds",
    "images_per_second",
    "workers",
    "world_size",
    "global_batch",
    "lr",
    "time",
    "step_seconds",  # the step-time breakdown (clusterbench.training.step_times)
}


def make_dataset(path: Path, n_train: int = 205, n_val: int = 40, seed: int = 0) -> Path:
    """A preprocessed data dir (``{split}_{x,y}.npy`` + ``meta.json``) of 4-class 8x8 images."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, n in (("train", n_train), ("val", n_val), ("test", n_val)):
        y = rng.integers(0, 4, size=n)
        x = rng.normal(60, 30, size=(n, 8, 8, 1))
        for i, label in enumerate(y):
            r, c = divmod(int(label), 2)
            x[i, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] += 120
        splits[split] = x.clip(0, 255).astype(np.uint8)
        np.save(path / f"{split}_x.npy", splits[split])
        np.save(path / f"{split}_y.npy", y.astype(np.int64))
    train = splits["train"] / 255.0
    meta = {
        "dataset": "digits",
        "image_shape": [8, 8, 1],
        "num_classes": 4,
        "class_names": ["nw", "ne", "sw", "se"],
        "mean": [float(train.mean())],
        "std": [float(train.std())],
        "counts": {"train": n_train, "val": n_val, "test": n_val},
    }
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def run_config(**overrides) -> dict:
    run = {
        "name": "test",
        "dataset": "digits",
        "model": "small_cnn",
        "workers": 2,
        "nodes": 1,
        "gpus_per_node": 0,
        "epochs": 2,
        "minutes": None,
        "batch_size": 25,  # 2 ranks: 13 + 12 per step; the last global batch of 205 is 5: 3 + 2
        "lr": 0.05,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "warmup_epochs": 0,
        "lr_schedule": "constant",
        "lr_min": 0,
        "lr_step_size": None,
        "lr_gamma": 0.1,
        "lr_decay": None,
        "seed": 3,
        "backend": "horovod",
        "bn": "aggregate",
        "batch_scaling": "global",
        "deterministic": False,
        "precision": "fp32",
        "channels_last": False,
        "grad_compression": "none",
        "min_workers": None,  # no elastic run
        "max_workers": None,
    }
    return {**run, **overrides}


def train_cmd(data: Path, run: dict, out: Path, *extra: str) -> list[str]:
    script = str(REPO / "scripts" / "train.py")
    args = ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out), *extra]
    if run["workers"] == 1:
        return [sys.executable, script, *args]
    np_ = str(run["workers"])
    if run["backend"] != "horovod":  # started as in the workflow
        return [
            sys.executable,
            "-m",
            "clusterbench.launch",
            "--np",
            np_,
            "--",
            sys.executable,
            script,
            *args,
        ]
    return [
        str(HOROVODRUN),
        "-np",
        np_,
        "-H",
        f"localhost:{np_}",
        "--gloo",
        sys.executable,
        script,
        *args,
    ]


def run_training(data: Path, run: dict, out: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        train_cmd(data, run, out, *extra), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_provenance(info: dict, ranks: list[int]) -> None:
    """run.json's provenance of a run whose ``ranks`` all ran on this machine: one host entry
    holding them, this machine's facts, the commit of this checkout, rank 0's versions."""
    from clusterbench.core import provenance

    prov = info["provenance"]
    here = provenance.collect()
    assert len(prov["hosts"]) == 1, prov["hosts"]
    host = prov["hosts"][0]
    assert host["ranks"] == ranks
    assert host["host"] == here["host"] and host["node"] in info["world"]["hosts"]
    for key in ("cpu_model", "cpu_cores", "gpus", "gpu_driver", "platform"):
        assert host[key] == here[key], key
    assert "differs_from_rank0" not in host
    assert prov["git"] == here["git"] and prov["versions"] == here["versions"]
    assert prov["versions"]["torch"] == torch.__version__ and info["versions"] == prov["versions"]
    assert prov["date"][:4].isdigit() and "T" in prov["date"]


# --------------------------------------------------------------------------------------------
# Pure helpers


@pytest.mark.parametrize(
    "batch, workers, sizes",
    [(10, 3, [4, 3, 3]), (11, 3, [4, 4, 3]), (9, 3, [3, 3, 3]), (2, 2, [1, 1]), (5, 1, [5])],
)
def test_shard_sizes_spread_the_remainder_over_the_first_ranks(batch, workers, sizes):
    assert shard_sizes(batch, workers) == sizes
    bounds = [shard_bounds(batch, workers, r) for r in range(workers)]
    assert [hi - lo for lo, hi in bounds] == sizes
    assert bounds[0][0] == 0 and bounds[-1][1] == batch
    assert all(bounds[r][1] == bounds[r + 1][0] for r in range(workers - 1))  # contiguous


def test_global_batches_drop_only_a_last_batch_smaller_than_the_workers():
    assert global_batches(10, 4, 2) == [(0, 4), (4, 8), (8, 10)]
    assert global_batches(10, 4, 3) == [(0, 4), (4, 8)]  # 2 samples cannot feed 3 ranks
    assert global_batches(8, 4, 3) == [(0, 4), (4, 8)]
    assert global_batches(2, 4, 3) == []


def test_epoch_permutation_reproducible_by_seed_and_different_per_epoch():
    a = epoch_permutation(100, seed=5, epoch=0)
    assert sorted(a) == list(range(100))
    np.testing.assert_array_equal(a, epoch_permutation(100, seed=5, epoch=0))
    assert not np.array_equal(a, epoch_permutation(100, seed=5, epoch=1))
    assert not np.array_equal(a, epoch_permutation(100, seed=6, epoch=0))


def test_progress_is_due_every_interval_and_at_least_once_per_epoch():
    assert PROGRESS_INTERVAL == 10

    def due(now, last=100.0, step=5, steps=400, printed=False):
        return progress_due(now, last, step, steps, printed)

    assert not due(109.9) and due(110.0) and due(250.0)  # 10 s after the last line (or start)
    assert not due(109.9, printed=True) and due(110.0, printed=True)
    # the last step of an epoch without any line yet always logs one, however short the epoch
    assert due(100.1, step=400) and due(100.0, step=1, steps=1)
    assert not due(100.1, step=400, printed=True)  # but never twice within 10 s

    def logged_steps(steps, seconds_per_step):
        last, printed, logged = 0.0, False, []
        for step in range(1, steps + 1):
            now = step * seconds_per_step
            if progress_due(now, last, step, steps, printed):
                last, printed = now, True
                logged.append(step)
        return logged

    assert logged_steps(100, 0.25) == [40, 80]  # a 25 s epoch: at 10 s and 20 s
    assert logged_steps(100, 0.375) == [27, 54, 81]  # 10.125 s, 20.25 s, 30.375 s
    assert logged_steps(10, 0.25) == [10]  # a 2.5 s epoch: its last step, once


def test_progress_line_shows_step_rate_and_eta_on_one_plain_line():
    line = progress_line(epoch=3, step=120, steps=400, images=120 * 128, seconds=12.0)
    assert line == "train: epoch 3 step 120/400 (30%), 1280 images/s, ETA 28 s"
    assert progress_line(1, 7, 7, 700, 0.5).endswith("(100%), 1400 images/s, ETA 0 s")
    assert "\r" not in line and "\n" not in line
    # a language model's lines: its sequences' tokens per second
    assert progress_line(1, 7, 7, 700, 0.5, tokens=32).endswith("44800 tokens/s, ETA 0 s")
    record = {"epoch": 2, "train_loss": 3.0, "val_loss": 3.1, "val_accuracy": 0.2, "lr": 0.1}
    record.update(epoch_seconds=2.0, images_per_second=100.0)
    assert epoch_line(record).endswith(", 2.00 s, 100 images/s, lr 0.1")
    assert epoch_line({**record, "tokens_per_second": 3200.0}).endswith(" 3200 tokens/s, lr 0.1")


@pytest.mark.parametrize(
    "scaling, workers, global_batch, lr, shards",
    [
        ("global", 1, 128, 0.05, [128]),
        ("global", 2, 128, 0.05, [64, 64]),  # lr NOT rescaled: the same optimisation problem
        ("global", 3, 128, 0.05, [43, 43, 42]),
        ("per_worker", 1, 128, 0.05, [128]),
        ("per_worker", 2, 256, 0.1, [128, 128]),  # Horovod's convention: LR x workers
    ],
)
def test_batch_and_lr_conventions(scaling, workers, global_batch, lr, shards):
    from clusterbench.config.lr import learning_rate, lr_schedule
    from clusterbench.training.schedule import effective_settings, global_batch_size

    run = run_config(batch_scaling=scaling, workers=workers, batch_size=128, lr=0.05)
    assert global_batch_size(run) == global_batch
    assert effective_settings(run) == {
        "batch_scaling": scaling,
        "global_batch": global_batch,
        "per_worker_batch": shards,
        "lr": pytest.approx(lr),
        "grad_compression": "none",
    }
    # under "global" the warm-up setting has nothing to ramp: the LR is lr from the first step
    rates = [learning_rate(lr_schedule({**run, "warmup_epochs": 2.0}), 0, s, 10) for s in range(10)]
    if scaling == "global":
        assert rates == [0.05] * 10
    else:
        assert rates[0] == pytest.approx(0.05) and rates[-1] < lr or workers == 1


# --------------------------------------------------------------------------------------------
# Input checks: clear errors before any training


@pytest.mark.parametrize(
    "change, match",
    [
        ({"lr": None}, r"run\.lr"),
        ({"model": "vgg"}, r"run\.model"),
        ({"batch_size": 1, "workers": 2}, r"run\.batch_size.*smaller than workers=2"),
        ({"epochs": None, "minutes": None}, "'epochs' or 'minutes'"),
        ({"bogus": 1}, "bogus"),
        ({"backend": "mpi"}, r"run\.backend.*'mpi' is not one of"),
        ({"bn": "fancy"}, r"run\.bn.*'fancy' is not one of"),
        ({"batch_scaling": "auto"}, r"run\.batch_scaling.*'auto' is not one of"),
        ({"precision": "fp16"}, r"run\.precision"),
        ({"deterministic": "yes"}, r"run\.deterministic"),
    ],
)
def test_validate_run_names_the_bad_key(change, match):
    with pytest.raises(ConfigError, match=match):
        validate_run(run_config(**change))


def test_validate_run_names_a_missing_key():
    run = run_config()
    del run["momentum"]
    with pytest.raises(ConfigError, match="'momentum' is a required property"):
        validate_run(run)


def test_main_rejects_bad_run_config_before_training(tmp_path, capsys):
    data = make_dataset(tmp_path / "data")
    out = tmp_path / "out"
    bad = json.dumps(run_config(batch_size=1))
    args = ["--data-dir", str(data), "--out-dir", str(out), "--run"]
    assert main([*args, bad]) == EXIT_BAD_SETTINGS
    assert "--run.batch_size: global batch 1 is smaller than workers=2" in capsys.readouterr().err
    assert main([*args, "{nope"]) == EXIT_BAD_SETTINGS
    assert "--run is not valid JSON" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "damage, error, match",
    [
        (lambda d: (d / "meta.json").unlink(), FileNotFoundError, "meta.json"),
        (lambda d: (d / "val_y.npy").unlink(), FileNotFoundError, "val_y.npy"),
        (lambda d: np.save(d / "train_y.npy", np.zeros(3, np.int64)), ValueError, "train_y.npy"),
        (
            lambda d: (d / "meta.json").write_text(
                json.dumps({**json.loads((d / "meta.json").read_text()), "dataset": "mnist"})
            ),
            ValueError,
            "run.dataset",
        ),
    ],
    ids=["no-meta", "no-val-labels", "short-labels", "other-dataset"],
)
def test_main_rejects_missing_or_bad_data_before_training(tmp_path, damage, error, match):
    data = make_dataset(tmp_path / "data")
    damage(data)
    out = tmp_path / "out"
    with pytest.raises(error, match=match):
        main(["--data-dir", str(data), "--run", json.dumps(run_config()), "--out-dir", str(out)])
    assert not out.exists()


@pytest.mark.horovod
def test_main_refuses_fewer_processes_than_run_workers(tmp_path):
    data = make_dataset(tmp_path / "data")
    out = tmp_path / "out"
    args = ["--data-dir", str(data), "--run", json.dumps(run_config()), "--out-dir", str(out)]
    with pytest.raises(RuntimeError, match="run.workers=2 but the horovod backend has 1 process"):
        main(args)  # plain python: one process
    assert not out.exists()


def test_gpus_asked_for_without_a_gpu_is_an_error_naming_the_run(tmp_path, monkeypatch, capsys):
    """Never a silent CPU run: refused before the data is read or any backend starts."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    data = make_dataset(tmp_path / "data")
    out = tmp_path / "out"
    run = run_config(name="wants-gpu", workers=1, gpus_per_node=1)
    args = ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)]
    assert main(args) == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert re.search(r"run 'wants-gpu' asks for gpus_per_node=1, but .* no usable CUDA GPU", err)
    with pytest.raises(DeviceError, match="run 'wants-gpu'"):
        check_device(run)
    assert not out.exists()


def test_zero_gpus_trains_on_the_cpu_even_where_a_gpu_is_visible(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert check_device(run_config(gpus_per_node=0)) == "cpu"
    assert check_device(run_config(gpus_per_node=1)) == "cuda"


def test_bf16_on_a_gpu_without_bfloat16_is_an_error_naming_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    run = run_config(name="old-gpu", gpus_per_node=1, precision="bf16")
    with pytest.raises(DeviceError, match=r"run 'old-gpu' asks for precision bf16, but .*V100"):
        check_device(run)
    assert check_device({**run, "precision": "fp32"}) == "cuda"
    assert check_device({**run, "gpus_per_node": 0}) == "cpu"  # the CPU runs bf16 autocast
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert check_device(run) == "cuda"


# --------------------------------------------------------------------------------------------
# End to end with real ranks


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """One 2-rank horovodrun training; every rank dumps its final weights."""
    root = tmp_path_factory.mktemp("train2")
    data = make_dataset(root / "data")
    run = run_config()
    proc = run_training(data, run, root / "out", "--dump-final-weights", str(root / "dump"))
    return {"root": root, "data": data, "run": run, "out": root / "out", "proc": proc}


@pytest.mark.slow
def test_two_workers_end_with_identical_weights(two_workers):
    dump = two_workers["root"] / "dump" / two_workers["run"]["name"]
    assert sorted(p.name for p in dump.iterdir()) == ["rank-0.pt", "rank-1.pt"]
    w0 = torch.load(dump / "rank-0.pt", weights_only=True)
    w1 = torch.load(dump / "rank-1.pt", weights_only=True)
    assert w0.keys() == w1.keys() and any("running_var" in k for k in w0)
    for key in w0:
        assert torch.equal(w0[key], w1[key]), key
    final = torch.load(two_workers["out"] / "model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(final[k], w0[k]) for k in w0)


@pytest.mark.slow
def test_two_workers_rank0_writes_the_outputs(two_workers):
    out, run = two_workers["out"], two_workers["run"]
    # exactly these files, no temporaries, one TensorBoard event file: rank 0 alone wrote them
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    events = [f for f in files if f.startswith("tensorboard/")]
    assert len(events) == 1 and "events.out.tfevents" in events[0]
    # the checkpoints are gone once model.pt is written: nothing is left to resume from
    assert [f for f in files if f not in events] == [
        "checksums.json",
        "metrics.jsonl",
        "model.pt",
        "run.json",
    ]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard")).Reload()
    assert {"loss/train", "loss/val", "accuracy/val", "lr"} <= set(events.Tags()["scalars"])
    assert [e.step for e in events.Scalars("accuracy/val")] == [1, 2]

    metrics = read_metrics(out)
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert [e.value for e in events.Scalars("accuracy/val")] == pytest.approx(
        [m["val_accuracy"] for m in metrics]
    )
    for m in metrics:
        assert set(m) == METRIC_FIELDS
        assert m["workers"] == m["world_size"] == 2 and m["lr"] == pytest.approx(0.05)
        assert m["global_batch"] == 25
        assert m["images_per_second"] > 0 and 0 <= m["val_accuracy"] <= 1
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]
    assert metrics[-1]["val_accuracy"] >= 0.9  # the quadrant task is easy

    info = json.loads((out / "run.json").read_text())
    # the run as given, with the defaults the trainer filled in: the data keys', and how two
    # workers allreduce their gradients
    assert info["run"] == {
        "augment": "auto",
        "on_bad_file": "fail",
        "grad_allreduce": "auto",
        "compile": "auto",
        "decode": "auto",
        **dict.fromkeys(("shares", "loss", "optimizer", "iface", "log_level")),
        **run,
    }
    assert info["epochs_completed"] == 2
    assert info["world"]["size"] == 2 and info["world"]["device"] == "cpu"
    assert info["world"]["backend"] == "horovod"
    assert info["effective"] == {
        "batch_scaling": "global",
        "global_batch": 25,
        "per_worker_batch": [13, 12],
        "lr": 0.05,
        "grad_compression": "none",
        "memory_format": "contiguous",
        "memory_format_reason": "channels_last: false",
        "unused_parameters": [],  # trainable parameters a step leaves without a gradient
        "grad_allreduce": "one",  # auto on the CPU: one buffer after backward
        "grad_allreduce_reason": "auto: 0.2 MiB of gradients on the CPU: one buffer after backward",
        "grad_buffers": 1,
        "compile": False,
        "compile_reason": "auto: small_cnn not measured faster compiled on cpu",
    }
    assert info["compile_seconds"] == 0.0
    # the model's FLOPs, counted once, and each rank's device's peak, measured
    flops = info["flops"]
    assert flops["per_sample"]["forward"] > 0 and flops["per_sample"]["counted_on"] == "meta"
    assert flops["per_sample"]["backward"] > flops["per_sample"]["forward"]
    assert flops["units_per_sample"] == 1 and flops["peak"]["devices"] == 2
    assert flops["peak"]["per_device"] > 0
    assert flops["peak"]["source"].startswith("measured: fp32 512x512 matrix product")
    assert info["world"]["hosts"] and info["versions"]["torch"] == torch.__version__
    assert_provenance(info, ranks=[0, 1])

    model_file = torch.load(out / "model.pt", weights_only=True)
    assert model_file["arch"] == {"model": "small_cnn", "num_classes": 4, "input_shape": [1, 8, 8]}
    net = build_model(**model_file["arch"])
    net.load_state_dict(model_file["state_dict"])  # strict: same keys as a plain model


@pytest.mark.slow
@pytest.mark.parametrize("bn", ["aggregate", "sync", "local"])
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_channels_last_trains_on_two_workers_with_identical_weights(backend, bn, tmp_path):
    """Channels-last weights and inputs under both backends and every BN mode: Horovod's
    broadcasts take the non-contiguous weights, DDP's buckets match the gradients' strides (no
    stride warning: ResNet's 1x1 shortcut convolutions have ambiguous strides), and both ranks
    end with the same weights."""
    data = make_dataset(tmp_path / "data", n_train=100, n_val=20)
    run = run_config(model="resnet", epochs=1, backend=backend, bn=bn, channels_last="auto")
    proc = run_training(data, run, tmp_path / "out", "--dump-final-weights", str(tmp_path / "d"))
    assert "Grad strides do not match" not in proc.stdout + proc.stderr
    w0, w1 = (
        torch.load(tmp_path / "d" / run["name"] / f"rank-{r}.pt", weights_only=True) for r in (0, 1)
    )
    for key in w0:  # bn local: each rank keeps its own shard's running statistics
        if bn != "local" or not key.endswith(("running_mean", "running_var")):
            assert torch.equal(w0[key], w1[key]), key
    effective = json.loads((tmp_path / "out" / "run.json").read_text())["effective"]
    assert effective["memory_format"] == "channels_last"
    assert effective["memory_format_reason"] == "auto: a convolutional model (resnet) on cpu"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_one_worker_matches_two_workers_with_the_same_lr_under_sync_bn(backend, tmp_path):
    """Plain ``python`` (size 1) == 2 ranks with the same lr and global batch: the split global
    batch, the loss scaling and the synchronised BatchNorm reproduce full-batch training."""
    data = make_dataset(tmp_path / "data")
    run = run_config(backend=backend, bn="sync")
    run_training(data, run, tmp_path / "two")
    run_training(data, {**run, "workers": 1}, tmp_path / "out")
    one = torch.load(tmp_path / "out" / "model.pt", weights_only=True)["state_dict"]
    two = torch.load(tmp_path / "two" / "model.pt", weights_only=True)["state_dict"]
    for key in one:
        torch.testing.assert_close(one[key], two[key], rtol=1e-4, atol=1e-4, msg=key)
    m1, m2 = read_metrics(tmp_path / "out"), read_metrics(tmp_path / "two")
    assert [m["workers"] for m in m1] == [1, 1]
    # provenance gathered over the backend's allgather: both ranks on this host
    assert_provenance(json.loads((tmp_path / "two" / "run.json").read_text()), ranks=[0, 1])
    assert_provenance(json.loads((tmp_path / "out" / "run.json").read_text()), ranks=[0])
    for a, b in zip(m1, m2, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["val_accuracy"] == b["val_accuracy"]


@pytest.mark.slow
def test_time_box_stops_at_the_step_in_which_it_ran_out_reproducibly(tmp_path):
    """A box that runs out in the first step: the run stops after it (its first check), its
    partial epoch validated and recorded as such; the same weights every time."""
    data = make_dataset(tmp_path / "data")
    run = run_config(workers=1, epochs=50, minutes=1e-5)
    finals = []
    for out in (tmp_path / "a", tmp_path / "b"):
        # in this process (one worker): hvd.init() and hvd.shutdown() inside main()
        args = ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)]
        assert main(args) == 0
        (record,) = read_metrics(out)
        assert record["epoch"] == 1 and record["partial"] == {"steps": 1, "of": 9}
        info = json.loads((out / "run.json").read_text())
        assert info["epochs_completed"] == 0
        assert info["time_box"]["partial"] == {"epoch": 1, "steps": 1, "of": 9}
        finals.append(torch.load(out / "model.pt", weights_only=True)["state_dict"])
    # same seed, same result, bit for bit
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


def test_cpu_threads_share_the_node_and_treat_omp_as_the_job_total(monkeypatch):
    from clusterbench.training.device import cpu_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpu_threads(2, {}) == 2
    assert cpu_threads(2, {"OMP_NUM_THREADS": "2"}) == 1  # Snakemake: the job's threads
    assert cpu_threads(1, {"OMP_NUM_THREADS": "8"}) == 4  # never more than the CPUs
    assert cpu_threads(8, {}) == 1


def test_non_finite_message_names_the_first_bad_step_over_the_ranks():
    msg = non_finite_message("r1", 3, [-1, 7, 5], steps=20, lr=0.5)
    assert "run 'r1'" in msg and "epoch 3, step 6/20 (rank 2)" in msg and "lr" in msg


@pytest.mark.horovod
def test_a_loss_that_becomes_non_finite_stops_the_run_naming_epoch_and_step(tmp_path, capsys):
    data = make_dataset(tmp_path / "data")
    run = run_config(workers=1, epochs=3, lr=1e30, momentum=0.0)
    out = tmp_path / "out"
    args = ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)]
    assert main(args) == 1  # in this process: one worker; the message alone (no traceback)
    assert re.search(r"non-finite .* at epoch 1, step \d+/\d+", capsys.readouterr().err)
    assert not (out / "model.pt").exists()
