"""Stage 4: evaluate a trained model on a held-out split.

```
python scripts/evaluate.py --data-dir results/data/NAME --model results/runs/RUN/model.pt \
    --params '{"batch_size": 512, "split": "test"}' --out-dir results/eval/RUN
```

Only reads the model (``torch.load(..., weights_only=True)``: a checkpoint holding anything but
tensors and plain containers is refused, nothing in it is executed), rebuilds it with
:func:`clusterbench.models.build_model` and runs it in one process on the GPU when there is one,
else on the CPU. Writes ``per_class.csv``, ``confusion.csv``, ``metrics.json`` and, last, their
``checksums.json`` (:func:`clusterbench.core.integrity.write_checksums`).

A language model (:func:`evaluate_tokens`) is measured per token: ``metrics.json`` holds its
loss (cross-entropy per token), perplexity (``exp`` of the loss) and token accuracy (the
next token predicted exactly); classes do not apply, so ``per_class.csv`` and
``confusion.csv`` hold their header alone (the report recognises them by ``metrics.json``'s
``task``). Synthetic data (:mod:`clusterbench.data.synthetic`) is generated again here, the
same as the training's; its ``metrics.json`` says ``synthetic: true``.

Every input is checked (params, ``meta.json``, the split's arrays, the model file, the model's
architecture against the data) before any inference runs. An image folder stored as files
(``storage: files``) is read through its index, each image decoded as the model was trained
to take it; an unreadable one stops the evaluation naming it, or (the run's ``on_bad_file:
skip``) is left out and counted (``skipped_files``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterbench.config import ConfigError, bad_settings, stage_params
from clusterbench.core import integrity
from clusterbench.core.atomic import atomic_open, write_json
from clusterbench.core.integrity import forcerun_command
from clusterbench.core.interrupted import one_line
from clusterbench.core.params import read_json_object
from clusterbench.data.arrays import SplitData, load_split
from clusterbench.data.images import input_shape

#: ``model.pt``'s ``arch`` (clusterbench.models.architecture); an older file's has
#: ``in_channels`` and ``image_size`` instead of ``input_shape`` (read as the same network).
ARCH_KEYS = ("model", "num_classes", "input_shape")
OLD_ARCH_KEYS = ("model", "in_channels", "num_classes", "image_size")


@dataclass(frozen=True)
class EvalParams:
    batch_size: int
    split: str


def parse_params(text: str) -> EvalParams:
    """The ``--params`` JSON, checked against the config schema's ``evaluate`` settings."""
    return EvalParams(**stage_params("evaluate", text))


def torch_load_reason(exc: BaseException) -> str:
    """What ``torch.load`` said about a file it could not read, in one line: every line of its
    message (an empty first line does not hide the rest), the ``WeightsUnpickler error`` part
    alone where there is one (the rest is torch's advice to load without ``weights_only``,
    which this stage never does), and the exception's type where the message is empty."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1].split("Check the documentation of torch.load", 1)[0]
    reason = " ".join(text.split())
    name = type(exc).__name__
    if not reason:
        if isinstance(exc, EOFError):
            return f"{name}, without a message (the file ends before the checkpoint: cut short?)"
        return f"{name} (torch gave no message)"
    return reason if marker in str(exc) else f"{name}: {reason}"


def load_model_file(path: Path) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` with the checkpoint's structure checked.

    Every refusal names the file, says why (torch's own reason for an unreadable file) and
    gives the command that trains the run again (:func:`forcerun_command`).
    """
    import pickle

    import torch

    if not path.is_file():
        raise FileNotFoundError(f"{path}: model file missing")
    retrain = f"Train the run again with: {forcerun_command(path)}"
    # what the train step recorded beside it, if it did (run by hand, it may not have)
    remedy = integrity.remake_command(path)
    integrity.check(path.parent / integrity.CHECKSUMS, "files", remedy, prefix=path.name)
    size = path.stat().st_size
    if size == 0:
        raise ValueError(
            f"{path}: empty file (0 bytes), not a torch checkpoint (damaged or emptied after "
            f"training). {retrain}"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # Raised for a refused global and for some garbage; torch's long message names the
        # offending global (or the unreadable byte) after "WeightsUnpickler error:".
        reason = torch_load_reason(exc)
        if "global" in reason.lower():  # its first sentence; the rest is how to allow it
            raise ValueError(
                f"{path}: refused by torch.load(weights_only=True), which accepts only tensors "
                f"and plain containers: {reason.split('. ')[0].rstrip('.')}. {retrain}"
            ) from None
        raise ValueError(
            f"{path}: not a readable torch checkpoint ({size:,} bytes; damaged or not a model "
            f"file): torch.load says: {reason.rstrip('.')}. {retrain}"
        ) from None
    except Exception as exc:  # truncated/garbage files fail anywhere inside torch's unpickler
        raise ValueError(
            f"{path}: not a readable torch checkpoint ({size:,} bytes; damaged or not a model "
            f"file): torch.load says: {torch_load_reason(exc).rstrip('.')}. {retrain}"
        ) from None
    if not isinstance(ckpt, dict):
        raise ValueError(
            f"{path}: expected a dict checkpoint, got {type(ckpt).__name__}. {retrain}"
        )
    # a language model's inputs are token ids: no mean and std to normalise them with
    required = ("arch", "state_dict") + (() if is_language_model(ckpt) else ("mean", "std"))
    missing = [k for k in required if k not in ckpt]
    if missing:
        raise ValueError(
            f"{path}: checkpoint lacks key(s) {missing} (is it a training checkpoint?). {retrain}"
        )
    arch = ckpt["arch"]
    if not isinstance(arch, dict) or not (
        all(k in arch for k in ARCH_KEYS) or all(k in arch for k in OLD_ARCH_KEYS)
    ):
        raise ValueError(
            f"{path}: 'arch' must be a dict with keys {list(ARCH_KEYS)}, got {arch!r}. {retrain}"
        )
    from clusterbench.models import arch_from

    return {**ckpt, "arch": arch_from(arch)}


def is_language_model(ckpt: dict[str, Any]) -> bool:
    """Whether the checkpoint's ``arch`` names a language model (:data:`clusterbench.models.
    TASKS`); False for anything else, an unknown model included (its build names it)."""
    from clusterbench.models import ModelError, resolve

    arch = ckpt.get("arch")
    if not isinstance(arch, dict) or not isinstance(arch.get("model"), str):
        return False
    try:
        return resolve(arch["model"]).task == "language-model"
    except ModelError:
        return False


def synthetic_split(meta: dict[str, Any], split: str, arch: dict[str, Any]) -> SplitData:
    """A synthetic dataset's ``split``, generated again (on the CPU: the same bytes as on any
    device) at the shape the model was trained for."""
    from clusterbench.data import synthetic

    channels, height, width = arch["input_shape"]
    x, y = synthetic.images(
        int(meta["seed"]),
        split,
        int(meta["counts"][split]),
        arch["input_shape"],
        int(meta["num_classes"]),
        "cpu",
    )
    return SplitData(x.numpy(), y.numpy(), {**meta, "image_shape": [height, width, channels]})


def image_split(data_dir: Path, split: str, arch: dict[str, Any]) -> SplitData:
    """The preprocessed ``split`` of ``data_dir``, or a synthetic dataset's, generated again."""
    meta = read_json_object(data_dir / "meta.json", f"is {data_dir} a preprocessed data dir?")
    if meta.get("synthetic"):
        return synthetic_split(meta, split, arch)
    return load_split(data_dir, split)


def check_compatible(ckpt: dict[str, Any], meta: dict[str, Any], model_path: Path) -> None:
    """Reject a model whose architecture does not fit the data described by ``meta``."""
    arch = ckpt["arch"]
    channels = meta["image_shape"][2]
    problems = []
    if arch["num_classes"] != meta["num_classes"]:
        problems.append(f"num_classes {arch['num_classes']} != data's {meta['num_classes']}")
    data_shape = input_shape(meta["image_shape"])
    if list(arch["input_shape"]) != data_shape:
        problems.append(f"input_shape {list(arch['input_shape'])} != data's {data_shape} [C, H, W]")
    for key in ("mean", "std"):
        if len(ckpt[key]) != channels:
            problems.append(f"{key} has {len(ckpt[key])} values for {channels} channels")
    if any(s <= 0 for s in ckpt["std"]):
        problems.append(f"std {list(ckpt['std'])} has a value <= 0")
    if problems:
        raise ValueError(
            f"{model_path} does not fit dataset {meta.get('dataset', '?')!r}: "
            + "; ".join(problems)
        )


def build(ckpt: dict[str, Any], model_path: Path):
    """Rebuild the network from ``arch`` and load its weights (strictly). Your own model's
    module edited since the training (its code digest, or weights of another network) is
    named with the command that trains the run again."""
    from clusterbench.models import ModelError, build_model
    from clusterbench.models.custom import code_digest

    retrain = f"train the run again: {forcerun_command(model_path)}"
    name = ckpt["arch"]["model"]
    trained = ckpt.get("model_code")
    try:
        now = code_digest(name) if trained else None
    except ModelError as exc:
        raise ValueError(f"{model_path}: {exc}") from None
    if trained and now != trained:
        raise ValueError(
            f"{model_path} was trained with other code of model {name!r}: its module was "
            f"edited since, and these weights would meet the new code; {retrain}"
        )
    try:
        model = build_model(**ckpt["arch"])
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        reason = " ".join(str(exc).split())
        if len(reason) > 400:
            reason = reason[:400] + " ..."
        raise ValueError(
            f"{model_path}: its weights do not fit the network model {name!r} builds now (was "
            f"the model's code changed since the training?): {reason}; {retrain}"
        ) from None
    return model


def split_batches(data: SplitData, batch_size: int):
    """``(images, labels)`` of a split's arrays, ``batch_size`` at a time."""
    for start in range(0, len(data.y), batch_size):
        yield data.x[start : start + batch_size], data.y[start : start + batch_size]


def predict(model, batches, mean, std, device) -> tuple[np.ndarray, np.ndarray, float]:
    """The true and predicted classes of every image of ``batches`` (uint8 NHWC images and
    labels) and the summed cross-entropy loss."""
    import torch
    import torch.nn.functional as F

    from clusterbench.data.images import normalize_images

    model.to(device).eval()
    truth, preds, loss_sum = [], [], 0.0
    with torch.inference_mode():
        for x, y in batches:
            xb = torch.as_tensor(np.ascontiguousarray(x))
            xb = normalize_images(xb.to(device), mean, std)
            yb = torch.as_tensor(np.asarray(y)).to(device)
            logits = model(xb)
            loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
            preds.append(logits.argmax(dim=1).cpu().numpy())
            truth.append(yb.cpu().numpy())
    return np.concatenate(truth), np.concatenate(preds), loss_sum


def split_of(data_dir: Path, params: EvalParams, ckpt: dict[str, Any]) -> tuple[dict, Any]:
    """The split's ``meta`` (with the ``image_shape`` its images are made at) and its batches:
    the arrays, or an image folder stored as files decoded as the model was trained to take
    them (``model.pt``'s ``input``: :func:`clusterbench.data.folder.eval_batches`)."""
    from clusterbench.config.storage import read_meta, storage_of

    if storage_of(read_meta(data_dir)) == "files":
        from clusterbench.data.folder import eval_batches

        return eval_batches(data_dir, params.split, params.batch_size, ckpt)
    data = image_split(data_dir, params.split, ckpt["arch"])
    return data.meta, split_batches(data, params.batch_size)


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> np.ndarray:
    """``cm[i, j]`` = number of samples of true class i predicted as class j."""
    flat = y_true.astype(np.int64) * num_classes + y_pred.astype(np.int64)
    return np.bincount(flat, minlength=num_classes**2).reshape(num_classes, num_classes)


def per_class_metrics(cm: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall, F1 and support per class; 0 where undefined (nothing predicted/true)."""
    tp = np.diag(cm).astype(float)
    predicted = cm.sum(axis=0).astype(float)
    support = cm.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    return {"precision": precision, "recall": recall, "f1": f1, "support": support}


def write_outputs(
    out_dir: Path,
    run: str,
    split: str,
    meta: dict[str, Any],
    y_true: np.ndarray,
    y_pred: np.ndarray,
    loss_sum: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``per_class.csv``, ``confusion.csv``, ``metrics.json`` (with ``extra``) and, last,
    their ``checksums.json``; return metrics."""
    import pandas as pd

    names = [str(n) for n in meta["class_names"]]
    cm = confusion_matrix(y_true, y_pred, len(names))
    pc = per_class_metrics(cm)
    n = int(len(y_true))
    loss = loss_sum / n
    if not math.isfinite(loss):
        print(
            f"evaluate: warning: run {run}: loss is {loss} (diverged model?); recorded as null",
            file=sys.stderr,
        )
    per_class = pd.DataFrame({"class": names, **pc})
    confusion = pd.DataFrame(cm, index=pd.Index(names, name="true"), columns=names)
    with atomic_open(out_dir / "per_class.csv", newline="") as fh:
        per_class.to_csv(fh, index=False)
    with atomic_open(out_dir / "confusion.csv", newline="") as fh:
        confusion.to_csv(fh)
    metrics = {
        "run": run,
        "dataset": meta.get("dataset"),
        "split": split,
        "n": n,
        "accuracy": float(np.trace(cm) / n),
        "loss": loss if math.isfinite(loss) else None,
        "macro_precision": float(pc["precision"].mean()),
        "macro_recall": float(pc["recall"].mean()),
        "macro_f1": float(pc["f1"].mean()),
        **(extra or {}),
    }
    if meta.get("synthetic"):
        metrics["synthetic"] = True
    write_json(out_dir / "metrics.json", metrics)
    # last: the workflow checks the three files against it before later steps read them
    integrity.write_checksums(out_dir, integrity.EVAL_FILES)
    return metrics


#: The most tokens a language model's evaluation batch holds (its logits: x 256 floats).
EVAL_TOKENS = 1 << 16


def token_split(data_dir: Path, split: str, arch: dict[str, Any]) -> tuple[Any, Any, dict]:
    """A language model's ``split``: inputs and next tokens ``(N, T)`` and ``meta.json``; a
    synthetic one generated again at the length the model was trained for."""
    from clusterbench.data import synthetic
    from clusterbench.data.tokens import load_tokens

    meta = read_json_object(data_dir / "meta.json", f"is {data_dir} a preprocessed data dir?")
    if meta.get("task") != "language-model":
        raise ValueError(
            f"{data_dir / 'meta.json'}: dataset {meta.get('dataset')!r} holds images, but the "
            f"model {arch['model']!r} is a language model"
        )
    if meta.get("synthetic"):
        (seq_len,) = arch["input_shape"]
        count = int(meta["counts"][split])
        x, y = synthetic.sequences(int(meta["seed"]), split, count, seq_len, "cpu")
        return x.numpy(), y.numpy(), meta
    tokens = load_tokens(data_dir, split)
    if [tokens.x.shape[1]] != list(arch["input_shape"]) or arch["num_classes"] != meta[
        "vocabulary"
    ]:
        raise ValueError(
            f"the model (sequences of {arch['input_shape']}, vocabulary {arch['num_classes']}) "
            f"does not fit dataset {meta.get('dataset')!r} (seq_len {meta['seq_len']}, "
            f"vocabulary {meta['vocabulary']})"
        )
    return tokens.x, tokens.y, meta


def predict_tokens(model, x: np.ndarray, y: np.ndarray, batch_size: int, device) -> tuple:
    """The summed cross-entropy and the tokens predicted right over sequences ``x`` with next
    tokens ``y``."""
    import torch
    import torch.nn.functional as F

    model.to(device).eval()
    per_batch = max(1, min(batch_size, EVAL_TOKENS // x.shape[1]))
    loss_sum, correct = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(x), per_batch):
            xb = torch.from_numpy(np.ascontiguousarray(x[start : start + per_batch])).to(device)
            yb = torch.from_numpy(np.ascontiguousarray(y[start : start + per_batch])).to(device)
            logits = model(xb.long()).float()
            yb = yb.long()
            loss_sum += F.cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="sum").item()
            correct += int((logits.argmax(-1) == yb).sum())
    return loss_sum, correct


def evaluate_tokens(
    data_dir: Path, ckpt: dict[str, Any], model_path: Path, params: EvalParams, out_dir: Path
) -> dict[str, Any]:
    """Evaluate a language model: ``metrics.json`` with its loss, perplexity and token
    accuracy; ``per_class.csv`` and ``confusion.csv`` with their header alone."""
    import torch

    x, y, meta = token_split(data_dir, params.split, ckpt["arch"])
    model = build(ckpt, model_path)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loss_sum, correct = predict_tokens(model, x, y, params.batch_size, device)
    tokens = int(y.size)
    loss = loss_sum / tokens
    with atomic_open(out_dir / "per_class.csv", newline="") as fh:
        fh.write("class,precision,recall,f1,support\n")
    with atomic_open(out_dir / "confusion.csv", newline="") as fh:
        fh.write("true\n")
    metrics = {
        "run": model_path.absolute().parent.name,
        "dataset": meta.get("dataset"),
        "split": params.split,
        "task": "language-model",
        "synthetic": bool(meta.get("synthetic")),
        "n": int(len(y)),
        "tokens": tokens,
        "accuracy": correct / tokens,
        "loss": loss if math.isfinite(loss) else None,
        "perplexity": math.exp(min(loss, 700.0)) if math.isfinite(loss) else None,
    }
    write_json(out_dir / "metrics.json", metrics)
    # last: the workflow checks the three files against it before later steps read them
    integrity.write_checksums(out_dir, integrity.EVAL_FILES)
    return metrics


def measure(
    data_dir: Path, ckpt: dict[str, Any], model_path: Path, params: EvalParams
) -> dict[str, Any]:
    """The accuracy and loss (per image, or per token: ``task``) of the network ``ckpt`` holds
    (as ``model.pt`` does) on ``params.split``, and the samples ``n``; nothing written (the
    watch stage's points, :mod:`clusterbench.watch`). Refusals as :func:`evaluate`'s."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if is_language_model(ckpt):
        x, y, _ = token_split(data_dir, params.split, ckpt["arch"])
        loss_sum, correct = predict_tokens(build(ckpt, model_path), x, y, params.batch_size, device)
        task, n, right, units = "language-model", len(y), correct, int(y.size)
    else:
        meta, batches = split_of(data_dir, params, ckpt)
        check_compatible(ckpt, meta, model_path)
        model = build(ckpt, model_path)
        y_true, y_pred, loss_sum = predict(model, batches, ckpt["mean"], ckpt["std"], device)
        n = len(y_true)
        task, right, units = "classification", int((y_true == y_pred).sum()), n
    loss = loss_sum / units if units else math.nan
    return {
        "task": task,
        "n": int(n),
        "accuracy": right / units if units else math.nan,
        "loss": loss if math.isfinite(loss) else None,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The stage's command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="results/data/NAME")
    parser.add_argument("--model", type=Path, required=True, help="results/runs/RUN/model.pt")
    parser.add_argument(
        "--params", required=True, help='{"batch_size": int, "split": "test"|"val"}'
    )
    parser.add_argument("--out-dir", type=Path, required=True, help="results/eval/RUN")
    args = parser.parse_args(argv)
    # absolute before any code of the user's runs (an own model may os.chdir in build); the
    # model file is read before, and named as given in messages
    args.data_dir, args.out_dir = args.data_dir.absolute(), args.out_dir.absolute()
    return args


@one_line("evaluate")
def main(argv: list[str] | None = None) -> int:
    """The stage: each refusal (a damaged or unusable model file, data that does not fit it,
    your own model's code edited since the training) one line on stderr, exit status 1; bad
    ``--params``: exit status 2."""
    args = parse_args(argv)
    try:
        params = parse_params(args.params)
    except ConfigError as exc:
        return bad_settings("evaluate", exc)
    try:
        return evaluate(args, params)
    except (ValueError, FileNotFoundError) as exc:  # ModelError, DataError, a damaged file
        print(f"evaluate: error: {exc}", file=sys.stderr)
        return 1


def evaluate(args: argparse.Namespace, params: EvalParams) -> int:
    """Evaluate the model of ``args`` (``main``'s) with ``params``; each refusal raised with
    its whole message."""
    ckpt = load_model_file(args.model)
    if is_language_model(ckpt):
        metrics = evaluate_tokens(args.data_dir, ckpt, args.model, params, args.out_dir)
        loss = "n/a" if metrics["loss"] is None else f"{metrics['loss']:.4f}"
        print(
            f"evaluate: {metrics['run']} on {metrics['dataset']}/{params.split} "
            f"({metrics['tokens']:,} tokens): loss {loss}, token accuracy {metrics['accuracy']:.4f}"
        )
        return 0
    meta, batches = split_of(args.data_dir, params, ckpt)
    check_compatible(ckpt, meta, args.model)
    model = build(ckpt, args.model)

    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        y_true, y_pred, loss_sum = predict(model, batches, ckpt["mean"], ckpt["std"], device)
    except Exception as exc:
        from clusterbench.training.network import user_code_error

        told = user_code_error(ckpt["arch"]["model"], exc, "was evaluated")
        if told is None:
            raise
        raise ValueError(told) from None
    run = args.model.absolute().parent.name
    skipped = getattr(batches, "skipped", None)
    extra = {} if skipped is None else {"skipped_files": len(skipped)}
    metrics = write_outputs(args.out_dir, run, params.split, meta, y_true, y_pred, loss_sum, extra)
    loss = "n/a" if metrics["loss"] is None else f"{metrics['loss']:.4f}"
    print(
        f"evaluate: {run} on {metrics['dataset']}/{params.split} (n={metrics['n']}, {device}): "
        f"accuracy {metrics['accuracy']:.4f}, loss {loss}"
    )
    return 0
