"""Tests of stage 4 (clusterbench.evaluate) on real files: a synthetic preprocessed data dir and
model.pt files saved with torch.save, evaluated through main() and through scripts/evaluate.py."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from clusterbench import evaluate
from clusterbench.config import EXIT_BAD_SETTINGS
from clusterbench.evaluate import main
from clusterbench.models import build_model
from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

REPO = Path(__file__).resolve().parent.parent
CLASSES = ["circle", "square", "triangle"]
SHAPE = (8, 8, 1)
MEAN, STD = [0.4], [0.25]
ARCH = {"model": "small_cnn", "num_classes": 3, "input_shape": [1, 8, 8]}
PARAMS = json.dumps({"batch_size": 16, "split": "test"})


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A preprocessed data dir per the stage-2 contract: 45 test and 30 val images, 3 classes."""
    d = tmp_path / "data" / "shapes"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("test", 45), ("val", 30)):
        y = np.arange(n, dtype=np.int64) % 3
        rng.shuffle(y)
        # class-dependent brightness so that a trained or random net does not predict one class
        x = rng.integers(0, 80, size=(n, *SHAPE)) + (y * 80)[:, None, None, None]
        np.save(d / f"{split}_x.npy", x.astype(np.uint8))
        np.save(d / f"{split}_y.npy", y)
    meta = {
        "dataset": "shapes",
        "image_shape": list(SHAPE),
        "num_classes": 3,
        "class_names": CLASSES,
        "mean": MEAN,
        "std": STD,
        "counts": {"train": 0, "val": 30, "test": 45},
    }
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def save_model(path: Path, net: torch.nn.Module, arch=ARCH, mean=MEAN, std=STD) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"arch": dict(arch), "state_dict": net.state_dict(), "mean": mean, "std": std}, path)
    return path


def random_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = build_model(**ARCH)
    # Non-trivial BN statistics so that the eval-mode network really depends on its input.
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.05, 0.2)
    return net


def run_eval(data_dir: Path, model: Path, out_dir: Path, params: str = PARAMS) -> int:
    """The stage on these files; a refusal raised as the stage meets it (``main`` prints it
    alone: test_a_refusal_is_one_line_naming_the_fix)."""
    args = evaluate.parse_args(
        ["--data-dir", str(data_dir), "--model", str(model), "--params", params]
        + ["--out-dir", str(out_dir)]
    )
    return evaluate.evaluate(args, evaluate.parse_params(params))


def reference_predictions(net, data_dir: Path, split: str = "test"):
    """Logits computed here independently of evaluate.py: own normalisation and layout."""
    x = np.load(data_dir / f"{split}_x.npy").astype(np.float32) / 255.0
    x = (x - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    with torch.no_grad():
        logits = net.eval()(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()))
    return logits, np.load(data_dir / f"{split}_y.npy")


def test_metrics_match_sklearn_reference(data_dir: Path, tmp_path: Path):
    net = random_model()
    model = save_model(tmp_path / "runs" / "run-a" / "model.pt", net)
    logits, y = reference_predictions(net, data_dir)
    pred = logits.argmax(1).numpy()
    assert len(set(pred)) > 1, "test is only meaningful if the network predicts several classes"

    out = tmp_path / "eval" / "run-a"
    assert run_eval(data_dir, model, out) == 0

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["run"] == "run-a"
    assert metrics["split"] == "test"
    assert metrics["n"] == 45
    assert metrics["accuracy"] == pytest.approx(np.mean(pred == y))
    assert metrics["loss"] == pytest.approx(F.cross_entropy(logits, torch.from_numpy(y)).item())

    cm = pd.read_csv(out / "confusion.csv", index_col=0)
    assert list(cm.index) == CLASSES and list(cm.columns) == CLASSES
    np.testing.assert_array_equal(cm.to_numpy(), confusion_matrix(y, pred, labels=[0, 1, 2]))
    assert cm.to_numpy().sum() == 45
    assert metrics["accuracy"] == pytest.approx(np.trace(cm.to_numpy()) / 45)

    per_class = pd.read_csv(out / "per_class.csv")
    assert list(per_class.columns) == ["class", "precision", "recall", "f1", "support"]
    assert list(per_class["class"]) == CLASSES
    p, r, f, s = precision_recall_fscore_support(y, pred, labels=[0, 1, 2], zero_division=0)
    np.testing.assert_allclose(per_class["precision"], p)
    np.testing.assert_allclose(per_class["recall"], r)
    np.testing.assert_allclose(per_class["f1"], f)
    np.testing.assert_array_equal(per_class["support"], s)
    assert metrics["macro_precision"] == pytest.approx(p.mean())
    assert metrics["macro_recall"] == pytest.approx(r.mean())


def test_constant_model_gives_exact_values(data_dir: Path, tmp_path: Path):
    """All weights zero, output bias b: every image is predicted argmax(b), loss known exactly."""
    net = build_model(**ARCH)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
        last.bias.copy_(torch.tensor([0.5, 2.0, -1.0]))
    model = save_model(tmp_path / "runs" / "const" / "model.pt", net)
    out = tmp_path / "eval"
    assert run_eval(data_dir, model, out, json.dumps({"batch_size": 7, "split": "val"})) == 0

    y = np.load(data_dir / "val_y.npy")
    b = np.array([0.5, 2.0, -1.0])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["split"] == "val" and metrics["n"] == 30
    assert metrics["accuracy"] == pytest.approx(np.mean(y == 1))
    log_z = np.log(np.exp(b).sum())
    assert metrics["loss"] == pytest.approx(np.mean(log_z - b[y]), rel=1e-5)

    cm = pd.read_csv(out / "confusion.csv", index_col=0).to_numpy()
    np.testing.assert_array_equal(cm[:, 1], np.bincount(y, minlength=3))
    assert cm[:, [0, 2]].sum() == 0
    per_class = pd.read_csv(out / "per_class.csv").set_index("class")
    assert per_class.loc["square", "precision"] == pytest.approx(np.mean(y == 1))
    assert per_class.loc["square", "recall"] == 1.0
    # nothing predicted as circle/triangle: precision, recall and F1 defined as 0
    assert (per_class.loc[["circle", "triangle"], ["precision", "recall", "f1"]] == 0).all().all()


def test_diverged_model_records_null_loss(data_dir: Path, tmp_path: Path):
    """NaN weights (a diverged run) still give a strict-JSON metrics.json, with loss null."""
    net = random_model()
    with torch.no_grad():
        [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1].bias.fill_(float("nan"))
    model = save_model(tmp_path / "runs" / "nan" / "model.pt", net)
    out = tmp_path / "eval"
    assert run_eval(data_dir, model, out) == 0
    metrics = json.loads(
        (out / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"JSON has {c}")
    )
    assert metrics["loss"] is None
    assert pd.read_csv(out / "confusion.csv", index_col=0).to_numpy().sum() == 45


def test_batch_size_does_not_change_results(data_dir: Path, tmp_path: Path):
    model = save_model(tmp_path / "runs" / "r" / "model.pt", random_model(1))
    outs = []
    for bs in (1, 1000):
        out = tmp_path / f"eval-{bs}"
        assert run_eval(data_dir, model, out, json.dumps({"batch_size": bs, "split": "test"})) == 0
        outs.append(out)
    a, b = (json.loads((o / "metrics.json").read_text()) for o in outs)
    assert a["accuracy"] == b["accuracy"]
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert (outs[0] / "confusion.csv").read_text() == (outs[1] / "confusion.csv").read_text()


def test_model_file_is_only_read(data_dir: Path, tmp_path: Path):
    model = save_model(tmp_path / "runs" / "r" / "model.pt", random_model())
    before = hashlib.sha256(model.read_bytes()).hexdigest()
    listing = sorted(p.name for p in model.parent.iterdir())
    assert run_eval(data_dir, model, tmp_path / "eval") == 0
    assert hashlib.sha256(model.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in model.parent.iterdir()) == listing


class _Exploit:
    """Unpickling this object (without weights_only) would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def assert_no_outputs(out: Path) -> None:
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())


def test_non_allowlisted_object_is_refused(data_dir: Path, tmp_path: Path):
    marker = tmp_path / "pwned"
    path = tmp_path / "runs" / "evil" / "model.pt"
    path.parent.mkdir(parents=True)
    ckpt = {"arch": ARCH, "state_dict": random_model().state_dict(), "mean": MEAN, "std": STD}
    ckpt["extra"] = _Exploit(marker)
    torch.save(ckpt, path)
    out = tmp_path / "eval"
    with pytest.raises(ValueError, match=r"weights_only=True") as err:
        run_eval(data_dir, path, out)
    assert str(path) in str(err.value)
    assert "Unsupported global: GLOBAL" in str(err.value) and "add_safe_globals" not in str(
        err.value
    )
    assert str(err.value).endswith(f"Train the run again with: snakemake --forcerun {path}")
    assert not marker.exists(), "the pickled payload must never run"
    assert_no_outputs(out)


#: What evaluate says about a damaged model.pt: the file, torch's (non-empty) reason, and the
#: command that trains the run again.
UNREADABLE = r"(not a readable torch checkpoint \([\d,]+ bytes; damaged or not a model file\): "
UNREADABLE += r"torch\.load says: \S.*|empty file \(0 bytes\), not a torch checkpoint .*)"


def assert_unreadable(err: pytest.ExceptionInfo, path: Path, command_path: str) -> str:
    """The error names ``path``, gives a non-empty reason and the retraining command."""
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    assert re.fullmatch(
        rf"{re.escape(str(path))}: {UNREADABLE}\. Train the run again with: snakemake "
        rf"--forcerun {re.escape(command_path)}",
        message,
    ), message
    reason = re.search(r"torch\.load says: (.*)\. Train the run again", message)
    assert reason is None or reason.group(1).strip(" :."), message
    return message


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"this is not a torch checkpoint\n" * 10,
        b"PK\x03\x04" + bytes(200),
        np.random.default_rng(7).bytes(4096),
        b"\x80\x02",  # a pickle's first opcode, then nothing
    ],
    ids=["empty", "text", "broken-zip", "random-bytes", "cut-pickle"],
)
def test_corrupt_model_file(data_dir: Path, tmp_path: Path, content: bytes):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        run_eval(data_dir, path, tmp_path / "eval")
    message = assert_unreadable(err, path, str(path))
    if not content:
        assert "empty file (0 bytes)" in message
    # torch's reason, not its advice to load the file without weights_only
    assert "weights_only" not in message and "Re-running" not in message
    assert_no_outputs(tmp_path / "eval")


def test_truncated_model_file(data_dir: Path, tmp_path: Path):
    path = save_model(tmp_path / "model.pt", random_model())
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError) as err:
        run_eval(data_dir, path, tmp_path / "eval")
    message = assert_unreadable(err, path, str(path))
    assert "failed finding central directory" in message  # torch's reason, in full
    assert_no_outputs(tmp_path / "eval")


def test_damaged_model_names_the_retraining_command_relative_to_the_workflow(
    data_dir: Path, tmp_path: Path, monkeypatch
):
    """Snakemake matches --forcerun files against its relative output paths: the command uses
    the path relative to the working directory (where the rule runs), as the rule passes it."""
    path = tmp_path / "results" / "runs" / "r1" / "model.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(np.random.default_rng(1).bytes(999))
    monkeypatch.chdir(tmp_path)
    for given in (path, Path("results/runs/r1/model.pt")):
        with pytest.raises(ValueError) as err:
            run_eval(data_dir, given, tmp_path / "eval")
        assert_unreadable(err, given, "results/runs/r1/model.pt")


def test_missing_model_file(data_dir: Path, tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nowhere.pt: model file missing"):
        run_eval(data_dir, tmp_path / "nowhere.pt", tmp_path / "eval")


@pytest.mark.parametrize(
    ("arch_change", "message"),
    [
        ({"num_classes": 4}, "num_classes 4 != data's 3"),
        ({"input_shape": [3, 8, 8]}, r"input_shape \[3, 8, 8\] != data's \[1, 8, 8\]"),
        ({"input_shape": [1, 28, 28]}, r"input_shape \[1, 28, 28\] != data's \[1, 8, 8\]"),
        # an older model.pt's arch: the same check
        (
            {"input_shape": None, "in_channels": 3, "image_size": 8},
            r"input_shape \[3, 8, 8\] != data's \[1, 8, 8\]",
        ),
    ],
)
def test_arch_does_not_fit_data(data_dir: Path, tmp_path: Path, arch_change, message):
    arch = {k: v for k, v in {**ARCH, **arch_change}.items() if v is not None}
    from clusterbench.models import arch_from

    channels = arch_from(arch)["input_shape"][0]
    net = build_model(**arch_from(arch))
    path = save_model(
        tmp_path / "model.pt", net, arch=arch, mean=MEAN * channels, std=STD * channels
    )
    with pytest.raises(ValueError, match=message):
        run_eval(data_dir, path, tmp_path / "eval")
    assert_no_outputs(tmp_path / "eval")


def test_weights_do_not_match_arch(data_dir: Path, tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.save(
        {
            "arch": {**ARCH, "model": "resnet"},
            "state_dict": random_model().state_dict(),
            "mean": MEAN,
            "std": STD,
        },
        path,
    )
    with pytest.raises(ValueError, match="its weights do not fit the network model 'resnet'"):
        run_eval(data_dir, path, tmp_path / "eval")
    # the stage itself: one line, the command that trains the run again, no traceback
    assert (
        main(
            ["--data-dir", str(data_dir), "--model", str(path), "--params", PARAMS]
            + ["--out-dir", str(tmp_path / "eval")]
        )
        == 1
    )


def test_checkpoint_without_arch(data_dir: Path, tmp_path: Path):
    path = tmp_path / "model.pt"
    torch.save({"model": random_model().state_dict(), "epoch": 3}, path)  # a resume checkpoint
    with pytest.raises(ValueError, match=r"lacks key\(s\) \['arch', 'state_dict', 'mean', 'std'\]"):
        run_eval(data_dir, path, tmp_path / "eval")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("not json", "--params is not valid JSON"),
        ("[16]", "--params must be a JSON object"),
        ('{"split": "train"}', r"--params.split: 'train' is not one of \['test', 'val'\]"),
        ('{"batch_size": 0}', "--params.batch_size: 0 is less than the minimum of 1"),
        ('{"batch_size": 2.5}', "--params.batch_size: 2.5 is not of type 'integer'"),
        ('{"batch_size": 8, "epochs": 3}', r"\('epochs' was unexpected\)"),
    ],
)
def test_bad_params(data_dir: Path, tmp_path: Path, params: str, message: str, capsys):
    model = save_model(tmp_path / "model.pt", random_model())
    argv = ["--data-dir", str(data_dir), "--model", str(model), "--params", params]
    assert main([*argv, "--out-dir", str(tmp_path / "eval")]) == EXIT_BAD_SETTINGS
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "eval").exists()


def test_bad_data_dir(data_dir: Path, tmp_path: Path):
    model = save_model(tmp_path / "model.pt", random_model())
    out = tmp_path / "eval"

    np.save(data_dir / "test_y.npy", np.full(45, 3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\)"):
        run_eval(data_dir, model, out)

    np.save(data_dir / "test_y.npy", np.zeros(44, dtype=np.int64))
    with pytest.raises(ValueError, match=r"expected \(45,\)"):
        run_eval(data_dir, model, out)

    (data_dir / "test_x.npy").unlink()
    with pytest.raises(FileNotFoundError, match="test_x.npy: missing"):
        run_eval(data_dir, model, out)

    (data_dir / "meta.json").unlink()
    with pytest.raises(FileNotFoundError, match="meta.json: missing"):
        run_eval(data_dir, model, out)
    assert_no_outputs(out)


def test_script_entry_point(data_dir: Path, tmp_path: Path):
    model = save_model(tmp_path / "runs" / "cli" / "model.pt", random_model())
    cmd = [sys.executable, str(REPO / "scripts" / "evaluate.py"), "--data-dir", str(data_dir)]
    ok = subprocess.run(
        [*cmd, "--model", str(model), "--params", PARAMS, "--out-dir", str(tmp_path / "e")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "accuracy" in ok.stdout
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["run"] == "cli"

    bad = subprocess.run(
        [*cmd, "--model", str(tmp_path / "missing.pt"), "--params", PARAMS, "--out-dir", "x"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0
    assert "missing.pt: model file missing" in bad.stderr
