"""The workloads of issue 17 beyond the toy models: synthetic images and tokens generated on
the training device, text as byte tokens, language models through every stage, your own model's
errors at the run's start; and, end to end through the real workflow at tiny sizes, a gpt-tiny
run on a small text (2 Horovod ranks), a bf16 gpt-tiny run on synthetic tokens, a
torchvision.resnet18 run on synthetic images and a small CNN on the digits, in one report."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from clusterbench import config as cb
from clusterbench import download, evaluate, preprocess
from clusterbench.data import synthetic
from clusterbench.data.order import global_batches
from clusterbench.data.source import Reading, check, open_source
from clusterbench.data.tokens import load_tokens
from clusterbench.formats import FormatError, text
from clusterbench.models import build_model
from conftest import REPO, TINY_COMM, pdf_text

#: The small offline text the tests and the example train on (self-written, 7 KB).
TEXT = REPO / "config" / "examples" / "text" / "cluster-notes.txt"
SPLIT = {"val_fraction": 0.1, "test_fraction": 0.1, "split_seed": 0, "min_split_size": 10}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- synthetic data


def test_synthetic_data_is_a_function_of_seed_split_and_index_alone(monkeypatch):
    x, y = synthetic.images(3, "train", 10, [3, 5, 4], 7, "cpu")
    assert x.shape == (10, 5, 4, 3) and x.dtype == torch.uint8
    assert y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) < 7
    monkeypatch.setattr(synthetic, "CHUNK", 7)  # generated in other pieces: the same bytes
    again, labels = synthetic.images(3, "train", 10, [3, 5, 4], 7, "cpu")
    assert torch.equal(x, again) and torch.equal(y, labels)
    val, _ = synthetic.images(3, "val", 10, [3, 5, 4], 7, "cpu")
    other, _ = synthetic.images(4, "train", 10, [3, 5, 4], 7, "cpu")
    assert not torch.equal(x, val) and not torch.equal(x, other)


def test_synthetic_bytes_and_labels_are_uniform():
    x = synthetic.uniform_bytes(1 << 18, synthetic.stream_key(1, "train", synthetic.BYTES), "cpu")
    counts = torch.bincount(x.long(), minlength=256).double()
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()
    assert float(x.double().mean() / 255) == pytest.approx(synthetic.PIXEL_MEAN, abs=0.005)
    assert float(x.double().std() / 255) == pytest.approx(synthetic.PIXEL_STD, abs=0.005)
    _, y = synthetic.images(1, "train", 4000, [1, 1, 1], 4, "cpu")
    assert torch.bincount(y, minlength=4).min() > 850


def test_synthetic_sequences_hold_their_next_tokens():
    x, y = synthetic.sequences(0, "test", 5, 16, "cpu")
    assert x.shape == y.shape == (5, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])


# --------------------------------------------------------------------------- text


def test_text_windows_overlap_by_one_and_drop_the_tail():
    stream = np.frombuffer(b"abcdefghij", dtype=np.uint8)
    x, y = text.windows(stream, 3)  # (10 - 1) // 3 = 3 windows of 4 bytes
    assert [bytes(r) for r in x] == [b"abc", b"def", b"ghi"]
    assert [bytes(r) for r in y] == [b"bcd", b"efg", b"hij"]
    with pytest.raises(FormatError, match="no window of seq_len \\+ 1 = 11 bytes"):
        text.windows(stream, 10)


def test_a_file_that_is_no_utf8_text_is_named_with_its_line(tmp_path):
    (tmp_path / "a.txt").write_bytes("caf\u00e9\n".encode())
    (tmp_path / "b.txt").write_bytes(b"ok\nline two \xff\n")
    with pytest.raises(
        FormatError, match=r"b\.txt: not UTF-8 text: byte 0xff at offset 12 \(line 2\)"
    ):
        text.tokens([tmp_path / "a.txt", tmp_path / "b.txt"])
    assert bytes(text.tokens([tmp_path / "a.txt"])) == "caf\u00e9\n".encode()


def stage_dataset(tmp_path: Path, name: str, entry: dict, **run_keys) -> Path:
    """Download and preprocess dataset ``name`` (its config entry) as the workflow's rules
    would (its config with one run of ``run_keys``); returns the preprocessed data dir."""
    model = "torchvision.resnet18" if entry["format"] == "synthetic" else "gpt-tiny"
    cfg = cb.validate(
        {
            "datasets": {name: entry},
            "runs": [{"name": "a", "dataset": name, "model": model, **run_keys}],
            "report": {"title": "t"},
        }
    )
    ds = cfg["datasets"][name]
    manifest = tmp_path / "raw" / name / "MANIFEST.json"
    params = {**cb.download_slice(ds), "cache_dir": str(tmp_path / "cache")}
    argv = ["--dataset", name, "--params", json.dumps(params), "--out", str(manifest)]
    assert download.main(argv) == 0
    out = tmp_path / "data" / name
    argv = ["--dataset", name, "--manifest", str(manifest)]
    argv += ["--params", json.dumps(cb.preprocess_slice(ds)), "--out-dir", str(out)]
    assert preprocess.main(argv) == 0
    return out


def text_entry(seq_len: int = 32) -> dict:
    return {
        "format": "text",
        "seq_len": seq_len,
        "files": [{"url": TEXT.as_uri(), "sha256": sha256(TEXT)}],
        **SPLIT,
    }


def test_text_is_preprocessed_into_windows_with_their_checksums(tmp_path):
    out = stage_dataset(tmp_path, "notes", text_entry())
    meta = json.loads((out / "meta.json").read_text())
    n = (TEXT.stat().st_size - 1) // 32
    assert meta["counts"] == {
        "train": n - 2 * round(0.1 * n),
        "val": round(0.1 * n),
        "test": round(0.1 * n),
    }
    assert (meta["task"], meta["vocabulary"], meta["seq_len"]) == ("language-model", 256, 32)
    assert set(meta["files"]) == {f"{s}_{p}.npy" for s in ("train", "val", "test") for p in "xy"}
    raw = np.frombuffer(TEXT.read_bytes(), dtype=np.uint8)
    split = load_tokens(out, "test")
    assert split.x.dtype == np.uint8 and split.x.shape[1] == 32
    windows = {bytes(raw[i * 32 : i * 32 + 33]) for i in range(n)}  # inputs + the next token
    assert {bytes(x) + bytes(y[-1:]) for x, y in zip(split.x, split.y, strict=True)} <= windows
    assert all(np.array_equal(x[1:], y[:-1]) for x, y in zip(split.x, split.y, strict=True))
    with (out / "val_y.npy").open("r+b") as fh:  # damaged after preprocessing: named
        fh.seek(-1, 2)
        fh.write(b"\x00" if fh.read(1) != b"\x00" else b"\x01")
    with pytest.raises(Exception, match="val_y.npy"):
        load_tokens(out, "val")


def test_a_synthetic_dataset_is_a_manifest_of_no_file_and_a_meta_json_alone(tmp_path):
    entry = {"format": "synthetic", "classes": 5, "samples": 100, "shape": [3, 8, 8], **SPLIT}
    out = stage_dataset(tmp_path, "fake", entry)
    assert sorted(p.name for p in out.iterdir()) == ["meta.json"]
    manifest = json.loads((tmp_path / "raw" / "fake" / "MANIFEST.json").read_text())
    assert manifest["files"] == {}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["synthetic"] is True and meta["counts"] == {"train": 80, "val": 10, "test": 10}
    assert meta["class_names"] == ["0", "1", "2", "3", "4"]


def source(data_dir, run):
    """The run's data source on the CPU, as the train stage opens it (checked first)."""
    check(data_dir, run)
    reading = Reading({"loading": "auto", "loader_workers": 0}, 1, 1)
    return open_source(data_dir, run, reading, torch.device("cpu"))


def test_token_batches_are_the_ranks_shares_as_int64(tmp_path):
    out = stage_dataset(tmp_path, "notes", text_entry())
    run = {"dataset": "notes", "workers": 2, "seed": 1, "model": "gpt-tiny", "channels_last": False}
    data = source(out, run)
    assert data.facts["loading"]["decision"] == "resident"
    assert (data.task, data.units_per_sample, data.num_classes) == ("language-model", 32, 256)
    batches = global_batches(data.train_size, 10, 2)
    first = [next(data.epoch_batches(0, batches, 0, rank, 2)) for rank in (0, 1)]
    assert [tuple(x.shape) for x, _ in first] == [(5, 32), (5, 32)]
    assert all(x.dtype == y.dtype == torch.int64 for x, y in first)
    assert sum(len(y) for _, y in data.val_batches(0, 2)) + sum(
        len(y) for _, y in data.val_batches(1, 2)
    ) == len(data.val_x)


def test_synthetic_data_takes_the_models_input_size_unless_it_has_its_own(tmp_path):
    entry = {"format": "synthetic", "classes": 3, "samples": 40, **SPLIT, "min_split_size": 4}
    out = stage_dataset(tmp_path, "fake", entry)
    run = {"dataset": "fake", "workers": 1, "seed": 1, "channels_last": False}
    data = source(out, {**run, "model": "torchvision.inception_v3"})
    assert data.facts["storage"] == "synthetic"
    assert data.input_shape == [3, 299, 299] and tuple(data.train_x.shape[1:]) == (299, 299, 3)
    tokens = stage_dataset(
        tmp_path, "toks", {"format": "synthetic-text", "samples": 40, **SPLIT, "min_split_size": 4}
    )
    data = source(tokens, {**run, "dataset": "toks", "model": "gpt-tiny"})
    assert data.input_shape == [256]


@pytest.mark.horovod
def test_synthetic_data_that_cannot_fit_in_the_nodes_memory_stops_the_run_before_it_is_made(
    tmp_path,
):
    """`shape: [3, 8192, 8192]` with 600 samples made PyTorch try to allocate 84 GB
    (`DefaultCPUAllocator: can't allocate memory`). A CPU run whose ranks' copies exceed what
    the job may use (the node's memory, or its cgroup limit) stops at its start, before
    generating anything, naming the dataset, the samples, the shape and the sizes. (Its config
    was accepted: the GPU run it was staged for has its data on the GPU; a CPU run's is checked
    against its mem_mb before any job, tests/bad_configs/synthetic-*-beyond-mem-mb.yaml.)"""
    from clusterbench.data.loading import node_memory

    limit, _ = node_memory()
    shape = [3, 1024, 1024]
    samples = int(1.5 * limit / (3 * 2**20) / 0.9) + 1  # train + val: 90 %
    entry = {"format": "synthetic", "classes": 3, "samples": samples, "shape": shape, **SPLIT}
    out = stage_dataset(tmp_path, "huge", entry, gpus_per_node=1, workers=1)
    cfg = {"runs": [{"name": "a", "dataset": "digits"}], "report": {"title": "t"}}
    run = cb.train_slice(cb.validate(cfg)["runs"][0])
    run.update(dataset="huge", model="small_cnn", workers=1, epochs=1)
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), "--data-dir", str(out)]
        + ["--run", json.dumps(run), "--out-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    err = proc.stderr
    assert proc.returncode == 1 and "Traceback" not in err, err
    held = samples - round(0.1 * samples)  # all but the test split
    assert f"synthetic: {held} training and validation samples x shape {shape}" in err, err
    assert "this job may use (the node's memory): it cannot fit" in err, err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- evaluate


def test_a_language_models_evaluation_is_per_token(tmp_path):
    out = stage_dataset(tmp_path, "notes", text_entry(16))
    torch.manual_seed(0)
    net = build_model("gpt-tiny", 256, [16])
    arch = {"model": "gpt-tiny", "num_classes": 256, "input_shape": [16]}
    model = tmp_path / "runs" / "lm" / "model.pt"
    model.parent.mkdir(parents=True)
    torch.save({"arch": arch, "state_dict": net.state_dict(), "vocabulary": 256}, model)
    params = json.dumps({"batch_size": 7, "split": "test"})
    argv = ["--data-dir", str(out), "--model", str(model), "--params", params]
    assert evaluate.main([*argv, "--out-dir", str(tmp_path / "eval")]) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    test = load_tokens(out, "test")
    with torch.no_grad():
        logits = net.eval()(torch.from_numpy(test.x).long())
    y = torch.from_numpy(test.y).long()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    assert metrics["task"] == "language-model" and metrics["tokens"] == test.y.size
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
    assert metrics["accuracy"] == pytest.approx(float((logits.argmax(-1) == y).double().mean()))
    assert pd.read_csv(tmp_path / "eval" / "per_class.csv").empty  # classes do not apply


# --------------------------------------------------------------------------- your own model


BAD_MODELS = {  # badnet.py -> what the one error line says
    "import": (
        "import nowhere_to_be_found\n",
        r"importing module 'badnet' failed \(ModuleNotFoundError: No module named 'nowhere_to",
    ),
    "call": (
        "def build(n, s):\n    raise RuntimeError('needs a GPU')\n",
        r"calling it as build\(num_classes=4, input_shape=\[1, 8, 8\]\) failed: RuntimeError",
    ),
    "shape": (
        "from torch import nn\n\n\ndef build(n, s):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, n + 1))\n",
        r"gives output shape \[2, 5\] in evaluation mode, expected \[2, 4\]",
    ),
}


@pytest.mark.horovod
@pytest.mark.parametrize("fault", sorted(BAD_MODELS))
def test_your_own_model_that_cannot_be_built_stops_the_run_at_its_start_in_one_line(
    tmp_path, fault
):
    from test_train import make_dataset, run_config

    code, message = BAD_MODELS[fault]
    (tmp_path / "badnet.py").write_text(code)  # importable from the working directory
    data = make_dataset(tmp_path / "data")
    run = run_config(model="badnet:build", workers=2, epochs=1)
    train = [sys.executable, str(REPO / "scripts" / "train.py"), "--data-dir", str(data)]
    train += ["--run", json.dumps(run), "--out-dir", str(tmp_path / "out")]
    proc = subprocess.run(  # 2 Horovod ranks, started as the workflow starts them
        [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--", *train],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "train: error: " in line]
    assert errors and all("model 'badnet:build'" in line for line in errors), out
    assert re.search(message, errors[0]), errors[0]
    assert not (tmp_path / "out" / "run.json").exists()


# --------------------------------------------------------------------------- end to end

#: The end-to-end config: each run a few seconds of training.
WORKLOADS = {
    "datasets": {
        "notes": text_entry(32),
        "tokens": {"format": "synthetic-text", "seq_len": 32, "samples": 120, **SPLIT},
        "fake": {
            "format": "synthetic",
            "shape": [3, 32, 32],
            "classes": 4,
            "samples": 48,
            **SPLIT,
            "min_split_size": 4,
        },
        "digits": {"val_fraction": 0.1, "test_fraction": 0.2},
    },
    "run_defaults": {"epochs": 2, "workers": 1, "lr": 0.01, "runtime": 10},
    "runs": [
        {
            "name": "gpt-notes",
            "dataset": "notes",
            "model": "gpt-tiny",
            "workers": 2,
            "batch_size": 16,
        },
        {
            "name": "gpt-tokens-bf16",
            "dataset": "tokens",
            "model": "gpt-tiny",
            "batch_size": 16,
            "precision": "bf16",
            "backend": "ddp",
        },
        {
            "name": "resnet18-fake",
            "dataset": "fake",
            "model": "torchvision.resnet18",
            "batch_size": 8,
        },
        {"name": "cnn-digits", "dataset": "digits", "model": "small_cnn", "batch_size": 64},
    ],
    "report": {"title": "Workloads"},
    "comm": TINY_COMM,  # its defaults took about 60 s of this module's run
    # evaluating while training: a watch job beside each training, asking at its start, then
    # every 6 s (about one more point in the longest runs)
    "evaluate": {"every_minutes": 0.1},
}


@pytest.fixture(scope="module")
def workloads(tmp_path_factory) -> Path:
    """The config above, run to the end by the real workflow on the local profile (ranks'
    final weights dumped); its working directory."""
    from conftest import snakemake, write_config

    workdir = tmp_path_factory.mktemp("workloads")
    cfg = json.loads(json.dumps(WORKLOADS))
    cfg["download"] = {"cache_dir": str(workdir / "cache")}
    write_config(workdir, cfg)
    env = {"CLUSTERBENCH_DUMP_WEIGHTS": str(workdir / "weights")}
    snakemake(
        workdir,
        "--profile",
        str(REPO / "profiles" / "local"),
        "--envvars",
        "CLUSTERBENCH_DUMP_WEIGHTS",
        env=env,
    )
    return workdir


@pytest.mark.slow
def test_synthetic_datasets_have_a_manifest_and_a_meta_json_alone(workloads):
    res = workloads / "results"
    for name in ("tokens", "fake"):
        assert sorted(p.name for p in (res / "data" / name).iterdir()) == ["meta.json"]
        assert json.loads((res / "raw" / name / "MANIFEST.json").read_text())["files"] == {}


@pytest.mark.slow
def test_language_models_train_and_are_evaluated_per_token(workloads):
    res = workloads / "results"
    for run, sequences in (("gpt-notes", None), ("gpt-tokens-bf16", 12)):
        epochs = [json.loads(line) for line in (res / "runs" / run / "metrics.jsonl").open()]
        assert len(epochs) == 2
        assert all(
            e["tokens_per_second"] == pytest.approx(32 * e["images_per_second"]) for e in epochs
        )
        assert all(math.isfinite(e["val_perplexity"]) for e in epochs)
        metrics = json.loads((res / "eval" / run / "metrics.json").read_text())
        assert metrics["task"] == "language-model"
        assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]))
        assert sequences is None or metrics["n"] == sequences
        arch = torch.load(res / "runs" / run / "model.pt", weights_only=True)["arch"]
        assert arch == {"model": "gpt-tiny", "num_classes": 256, "input_shape": [32]}
    info = json.loads((res / "runs" / "gpt-tokens-bf16" / "run.json").read_text())
    assert info["run"]["precision"] == "bf16"
    notes = [json.loads(line) for line in (res / "runs" / "gpt-notes" / "metrics.jsonl").open()]
    assert notes[-1]["train_loss"] < math.log(256)  # it learns the text
    a, b = (torch.load(workloads / "weights" / "gpt-notes" / f"rank-{r}.pt") for r in (0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)  # two ranks, one model


@pytest.mark.slow
def test_every_run_is_evaluated_while_it_trains_and_the_report_draws_it(workloads):
    """Each run's watch job ends with its training; its points (the newest weights, lent
    between two steps or at an epoch's end) were taken while the training waited (one machine:
    they share it), in training-time order; a language model's per token."""
    res = workloads / "results"
    points = {}
    for run in WORKLOADS["runs"]:
        record = json.loads((res / "watch" / run["name"] / "watch.json").read_text())
        assert record["ended"] == "trained" and record["split"] == "test", record
        points[run["name"]] = record["points"]
        times = [p["train_seconds"] for p in record["points"]]
        assert times == sorted(times) and all(p["pause"] for p in record["points"])
        assert all(0 <= p["accuracy"] <= 1 and p["n"] > 0 for p in record["points"])
        lm = run["model"] == "gpt-tiny"
        assert {p["task"] for p in record["points"]} <= {
            "language-model" if lm else "classification"
        }
    assert all(points.values()), points  # the first at once: the weights it starts from
    text = " ".join(pdf_text(res / "report" / "report.pdf").split())
    assert "Evaluating while training" in text and "every 0.1 min while it trained" in text
    # a language model's log lines say tokens/s
    log = (res / "logs" / "train" / "gpt-notes.log").read_text()
    assert re.search(r"train: epoch 1: .* tokens/s, lr", log) and " images/s" not in log


@pytest.mark.slow
def test_a_torchvision_model_trains_on_synthetic_images(workloads):
    res = workloads / "results"
    arch = torch.load(res / "runs" / "resnet18-fake" / "model.pt", weights_only=True)["arch"]
    assert arch == {"model": "torchvision.resnet18", "num_classes": 4, "input_shape": [3, 32, 32]}
    metrics = json.loads((res / "eval" / "resnet18-fake" / "metrics.json").read_text())
    assert metrics["synthetic"] is True and metrics["n"] == 5


@pytest.mark.slow
def test_the_report_shows_each_workload_for_what_it_is(workloads):
    report = workloads / "results" / "report"
    runs = pd.read_csv(report / "runs.csv")
    results = pd.read_csv(report / "results.csv")
    assert list(results["run"]) == ["cnn-digits", "gpt-notes", "resnet18-fake", "gpt-tokens-bf16"]
    lm = runs.set_index("run").loc[["gpt-notes", "gpt-tokens-bf16"]]
    assert (lm["task"] == "language-model").all() and lm["final_val_perplexity"].notna().all()
    assert runs.set_index("run").loc["resnet18-fake", "synthetic"]
    assert (report / "figures" / "language_models.png").is_file()
    text = pdf_text(report / "report.pdf")
    text = " ".join(text.split())  # lines wrapped as drawn
    assert "synthetic: accuracy not meaningful" in text
    assert "Accuracy, per-class tables and the confusion matrix do not apply" in text
    assert "Language-model runs (gpt-notes and gpt-tokens-bf16) are left out" in text
    assert "tok/s" in text


# --------------------------------------------------------------------------- report


def as_language_model(root: Path, name: str, synthetic: bool = False) -> None:
    """Turn fake run ``name`` (tests/test_report.py) into a gpt-tiny run on 64-token windows:
    tokens/s and perplexity per epoch, an evaluation per token without classes."""
    run_dir, eval_dir = root / "results" / "runs" / name, root / "results" / "eval" / name
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    for e in epochs:
        e["tokens_per_second"] = 64 * e["images_per_second"]
        e["val_perplexity"] = math.exp(e["val_loss"])
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in epochs))
    info = json.loads((run_dir / "run.json").read_text())
    info["run"]["model"] = "gpt-tiny"
    (run_dir / "run.json").write_text(json.dumps(info))
    (eval_dir / "per_class.csv").write_text("class,precision,recall,f1,support\n")
    (eval_dir / "confusion.csv").write_text("true\n")
    metrics = {"run": name, "dataset": "digits", "split": "test", "task": "language-model"}
    metrics.update(synthetic=synthetic, n=30, tokens=30 * 64, accuracy=0.4, loss=2.0)
    (eval_dir / "metrics.json").write_text(json.dumps({**metrics, "perplexity": math.exp(2.0)}))


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_the_report_of_language_models_alone_draws_no_empty_chart(tmp_path):
    from test_report import FAKE_RUNS, make_fake_results, pdf_text, run_report

    fake = make_fake_results(tmp_path, FAKE_RUNS[:2], epochs=3)
    for spec in FAKE_RUNS[:2]:
        as_language_model(tmp_path, spec["name"])
    assert run_report(fake, tmp_path / "report") == 0
    text = " ".join(pdf_text(tmp_path / "report" / "report.pdf").split())
    assert "Confusion matrix" not in text and "per class" not in text.lower()
    assert "Validation accuracy does not apply" in text
    assert "Highest token rate" in text and "Highest throughput" not in text
    assert "chosen on validation loss" in text
    # the runs table's throughput is in tokens/s, said in its header once, not in each cell
    assert "(tokens/s;" in text and "(images/s" not in text and " tok/s" not in text
    figures = sorted(p.name for p in (tmp_path / "report" / "figures").iterdir())
    assert "language_models.png" in figures and "throughput.png" not in figures


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_a_mixed_report_marks_each_run_for_what_it_is(tmp_path):
    from test_report import FAKE_RUNS, make_fake_results, pdf_text, run_report

    fake = make_fake_results(tmp_path, FAKE_RUNS[:3], epochs=3)
    as_language_model(tmp_path, FAKE_RUNS[1]["name"])
    metrics = tmp_path / "results" / "eval" / FAKE_RUNS[2]["name"] / "metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "synthetic": True}))
    assert run_report(fake, tmp_path / "report") == 0
    results = pd.read_csv(tmp_path / "report" / "results.csv")
    order = [FAKE_RUNS[0]["name"], FAKE_RUNS[1]["name"], FAKE_RUNS[2]["name"]]
    assert list(results["run"]) == order  # images, then the language model, then synthetic
    text = " ".join(pdf_text(tmp_path / "report" / "report.pdf").split())
    assert "synthetic: accuracy not meaningful" in text
    assert f"Language-model runs ({FAKE_RUNS[1]['name']}) are left out" in text
    assert "tok/s" in text and "ppl " in text


# --------------------------------------------------------------------------- resume


@pytest.mark.slow
def test_a_preempted_language_model_on_synthetic_tokens_continues_exactly(tmp_path, monkeypatch):
    """Synthetic data is generated again at the resume, and a GPT has nothing random to
    carry: the run ends bit for bit as one never stopped."""
    import os

    from clusterbench.core import preemption
    from clusterbench.training.checkpoints import CHECKPOINTS_ENV
    from test_resume import assert_same_training, signal_when, slice_checkpoints, train_here
    from test_train import run_config

    monkeypatch.setenv(CHECKPOINTS_ENV, json.dumps({"keep": 2, "preemption_check_steps": 2}))
    entry = {"format": "synthetic-text", "seq_len": 16, "samples": 2400, **SPLIT}
    data = stage_dataset(tmp_path, "toks", entry)
    run = run_config(dataset="toks", model="gpt-tiny", workers=1, epochs=2, batch_size=4)
    assert train_here(data, run, tmp_path / "full") == 0
    out = tmp_path / "out"
    send = lambda: os.kill(os.getpid(), preemption.WARNING_SIGNAL)  # noqa: E731
    watcher = signal_when(out / "metrics.jsonl", 1, send, delay=0.2)
    assert train_here(data, run, out) == preemption.EXIT_PREEMPTED
    watcher.join()
    stopped_at = slice_checkpoints(out, run)[-1]
    assert stopped_at.epoch == 1 and 0 < stopped_at.step < 480, stopped_at  # mid-epoch
    assert train_here(data, run, out) == 0
    assert_same_training(out, tmp_path / "full")
