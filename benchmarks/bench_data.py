"""Data sets and small helpers shared by the benchmark scripts.

* :func:`build_digits`: the real digits data set, made offline by clusterbench's own download
  and preprocess stages (scikit-learn's bundled copy), exactly like ``results/data/digits``.
* :func:`build_text`: a text of real English (config/examples/text's notes, repeated to the
  size asked) as byte-token windows, made by clusterbench's download and preprocess stages.
* :func:`make_cifar_like`: synthetic CIFAR-shaped arrays (32x32x3 uint8, or another size, 10
  classes) in the preprocessed layout, for compute-bound timing; the content does not matter
  for speed.
* :func:`build_synthetic`: a dataset of ``format: synthetic`` (images generated on the
  training device), made by the download and preprocess stages.
* :func:`load_arrays`: a preprocessed data dir read with plain NumPy (what the references use;
  a synthetic dataset's images as the trainer generates them).
* :func:`jpeg_folder` and :func:`extract_folder`: an archive of JPEGs (smooth synthetic photos)
  preprocessed by clusterbench as an image folder stored as files (the streamed image folder);
  :func:`with_records`: arrays with their sizes and sha256 in meta.json, as preprocessing
  records them (what staging checks its copy against).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import socket
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def build_digits(root: Path) -> Path:
    """results/data/digits equivalent, made by the download and preprocess stages."""
    from clusterbench import download, preprocess

    manifest = root / "raw" / "digits" / "MANIFEST.json"
    code = download.main(
        [
            "--dataset",
            "digits",
            "--params",
            json.dumps({"cache_dir": str(root / "cache")}),
            "--out",
            str(manifest),
        ]
    )
    if code != 0:
        raise RuntimeError(f"the download of digits failed ({code}): see above")
    params = {"val_fraction": 0.1, "test_fraction": 0.2, "split_seed": 0}
    out = root / "data" / "digits"
    code = preprocess.main(
        [
            "--dataset",
            "digits",
            "--manifest",
            str(manifest),
            "--params",
            json.dumps(params),
            "--out-dir",
            str(out),
        ]
    )
    if code != 0:
        raise RuntimeError(f"preprocessing digits failed ({code}): see above")
    return out


#: The small offline text of the tests and the example (self-written English, 7 KB).
NOTES = (
    Path(__file__).resolve().parent.parent / "config" / "examples" / "text" / "cluster-notes.txt"
)


def build_text(root: Path, kilobytes: int, seq_len: int) -> Path:
    """A preprocessed text dataset (``format: text``) named ``bench-text``: the notes repeated
    to ``kilobytes`` KiB, in windows of ``seq_len`` byte tokens (10 % each for validation and
    test), made by the download and preprocess stages as the workflow's rules make it."""
    from clusterbench import config, download, preprocess

    notes = NOTES.read_bytes()
    text = root / "bench-text.txt"
    text.parent.mkdir(parents=True, exist_ok=True)
    text.write_bytes((notes * (kilobytes * 1024 // len(notes) + 1))[: kilobytes * 1024])
    entry = {
        "format": "text",
        "seq_len": seq_len,
        "files": [{"url": text.as_uri(), "sha256": hashlib.sha256(text.read_bytes()).hexdigest()}],
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "split_seed": 0,
        "min_split_size": 10,
    }
    cfg = config.validate(
        {
            "datasets": {"bench-text": entry},
            "runs": [{"name": "lm", "dataset": "bench-text", "model": "gpt-tiny"}],
            "report": {"title": "bench"},
        }
    )
    ds = cfg["datasets"]["bench-text"]
    manifest = root / "raw" / "bench-text" / "MANIFEST.json"
    params = {**config.download_slice(ds), "cache_dir": str(root / "cache")}
    argv = ["--dataset", "bench-text", "--params", json.dumps(params), "--out", str(manifest)]
    if download.main(argv) != 0:
        raise RuntimeError("the download of bench-text failed: see above")
    out = root / "data" / "bench-text"
    argv = ["--dataset", "bench-text", "--manifest", str(manifest), "--out-dir", str(out)]
    if preprocess.main(argv + ["--params", json.dumps(config.preprocess_slice(ds))]) != 0:
        raise RuntimeError("preprocessing bench-text failed: see above")
    return out


def make_cifar_like(
    path: Path, n_train: int, n_val: int = 256, seed: int = 0, size: int = 32
) -> Path:
    """A preprocessed data dir of ``n_train`` random ``size`` x ``size`` x 3 uint8 images
    with random labels (CIFAR's 32 by default)."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    counts = {"train": n_train, "val": n_val, "test": n_val}
    for split, n in counts.items():
        np.save(path / f"{split}_x.npy", rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8))
        np.save(path / f"{split}_y.npy", rng.integers(0, 10, n).astype(np.int64))
    meta = {
        "dataset": "cifar10",
        "image_shape": [size, size, 3],
        "num_classes": 10,
        "class_names": [f"class{i}" for i in range(10)],
        "mean": [0.5, 0.5, 0.5],  # of x / 255 for uniform random bytes
        "std": [0.2887, 0.2887, 0.2887],
        "counts": counts,
    }
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def build_synthetic(root: Path, size: int, n_train: int, classes: int = 10) -> Path:
    """A dataset of ``format: synthetic`` (``bench-synthetic``: 3 x ``size`` x ``size`` images
    generated on the training device, ``classes`` classes, ``n_train`` of them to train on),
    made by the download and preprocess stages as the workflow's rules make it: ``meta.json``
    alone."""
    from clusterbench import config, download, preprocess

    samples = round(n_train / 0.8)  # 10 % each for validation and test
    entry = {
        "format": "synthetic",
        "shape": [3, size, size],
        "classes": classes,
        "samples": samples,
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "split_seed": 0,
        "min_split_size": 8,
    }
    run = {"name": "bench", "dataset": "bench-synthetic", "model": "torchvision.resnet18"}
    cfg = config.validate(
        {"datasets": {"bench-synthetic": entry}, "runs": [run], "report": {"title": "bench"}}
    )
    ds = cfg["datasets"]["bench-synthetic"]
    manifest = root / "raw" / "bench-synthetic" / "MANIFEST.json"
    params = {**config.download_slice(ds), "cache_dir": str(root / "cache")}
    argv = ["--dataset", "bench-synthetic", "--params", json.dumps(params), "--out", str(manifest)]
    if download.main(argv) != 0:
        raise RuntimeError("the download of bench-synthetic failed: see above")
    out = root / "data" / f"bench-synthetic-{size}"
    argv = ["--dataset", "bench-synthetic", "--manifest", str(manifest), "--out-dir", str(out)]
    if preprocess.main(argv + ["--params", json.dumps(config.preprocess_slice(ds))]) != 0:
        raise RuntimeError("preprocessing bench-synthetic failed: see above")
    return out


def with_records(data: Path) -> Path:
    """The arrays' sizes and sha256 in ``data/meta.json``, as preprocessing records them."""
    from clusterbench.core import integrity

    meta = json.loads((data / "meta.json").read_text())
    meta["files"] = {p.name: integrity.record_with_blocks(p) for p in sorted(data.glob("*.npy"))}
    (data / "meta.json").write_text(json.dumps(meta))
    return data


def photo(rng: np.random.Generator, size: int, label: int) -> np.ndarray:
    """A smooth RGB image (JPEG compresses it as it does a photo): gradients and a disc."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    base = rng.uniform(40, 200, 3)
    image = base + 50 * np.stack([xx, yy, xx * yy], axis=-1) * rng.uniform(-1, 1, 3)
    cy, cx, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.1, 0.3)
    disc = (yy - cy) ** 2 + (xx - cx) ** 2 < r**2
    image[disc] = [230, 40, 40] if label else [40, 40, 230]
    image += rng.normal(0, 6, image.shape)
    return image.clip(0, 255).astype(np.uint8)


def jpeg_folder(path: Path, n: int, size: int, seed: int = 0) -> Path:
    """A zip of ``n`` ``size`` x ``size`` JPEGs (quality 90) in two class folders."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(photo(rng, size, i % 2)).save(buf, "JPEG", quality=90)
            archive.writestr(f"photos/c{i % 2}/img{i:06d}.jpg", buf.getvalue())
    return path


def extract_folder(archive: Path, out: Path, image_size: Sequence[int] | None) -> Path:
    """The archive preprocessed by clusterbench as an image folder stored as files (dataset
    ``photos``), decoded at ``image_size`` (None: the images' own)."""
    from clusterbench import preprocess
    from clusterbench.download import file_digests

    manifest = archive.parent / "MANIFEST.json"
    files = {archive.name: {"sha256": file_digests(archive)["sha256"]}}
    manifest.write_text(json.dumps({"dataset": "photos", "files": files}))
    params = {
        "format": "image-folder",
        "files": [archive.name],
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "split_seed": 0,
        "min_split_size": 5,
        "storage": "files",
        **({"image_size": list(image_size)} if image_size else {}),
    }
    preprocess.preprocess("photos", manifest, json.dumps(params), out)
    return out


def load_arrays(data_dir: Path) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``(train_x uint8 (N, H, W, C), train_y int64 (N,), meta)`` of a preprocessed data dir;
    of a synthetic dataset (``meta.json`` alone), the training images the trainer generates
    (the same bytes), with ``image_shape``, ``mean`` and ``std`` added to ``meta``."""
    data_dir = Path(data_dir)
    meta = json.loads((data_dir / "meta.json").read_text())
    if meta.get("synthetic"):
        from clusterbench.data import synthetic

        channels, height, width = meta["shape"]
        n = meta["counts"]["train"]
        x, y = synthetic.images(meta["seed"], "train", n, meta["shape"], meta["num_classes"], "cpu")
        meta["image_shape"] = [height, width, channels]
        meta["mean"] = [synthetic.PIXEL_MEAN] * channels
        meta["std"] = [synthetic.PIXEL_STD] * channels
        return x.numpy(), y.numpy(), meta
    x = np.load(data_dir / "train_x.npy", allow_pickle=False)
    y = np.load(data_dir / "train_y.npy", allow_pickle=False)
    return x, y, meta


def cpu_cores() -> int:
    """The CPUs this process may run on (its affinity mask), as the trainer counts them."""
    return len(os.sched_getaffinity(0))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_metrics(out_dir: Path, records: list[dict[str, Any]]) -> None:
    """``out_dir/metrics.jsonl``, one JSON object per epoch (the trainer's format)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    (out_dir / "metrics.jsonl").write_text(text)


#: The training settings both references take (flags, or the trainer's --run JSON).
TRAINING_DEFAULTS: dict[str, Any] = {
    "model": "small_cnn",
    "epochs": 8,
    "batch_size": 128,
    "lr": 0.05,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 1,
}


def settings_cli(description: str, defaults: dict[str, Any]) -> argparse.ArgumentParser:
    """A reference script's parser: --data-dir, --out-dir, --run and one flag per setting."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data-dir", type=Path, required=True, help="a preprocessed data dir")
    parser.add_argument("--out-dir", type=Path, help="write metrics.jsonl here")
    parser.add_argument("--run", help="the trainer's run JSON (overrides the flags below)")
    for key, value in defaults.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(value), default=value)
    return parser


def parsed_settings(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """The settings of parsed ``args``: the flags, overridden by ``--run`` where it has them."""
    return settings_from_run(args.run, {k: getattr(args, k) for k in defaults})


def settings_from_run(run_json: str | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` overridden by the keys they share with a trainer ``--run`` JSON slice."""
    if not run_json:
        return dict(defaults)
    run = json.loads(run_json)
    return {key: run.get(key, value) for key, value in defaults.items()}


def imagenet_like(rng: np.random.Generator, width: int = 500, height: int = 375) -> np.ndarray:
    """An RGB image that JPEG compresses as it does an ImageNet photo (about 110 KB at 500 x 375,
    quality 90): gradients under fine noise."""
    yy, xx = np.mgrid[0:height, 0:width] / max(width, height)
    image = rng.uniform(40, 200, 3) + 50 * np.stack([xx, yy, xx * yy], axis=-1) * rng.uniform(
        -1, 1, 3
    )
    image += rng.normal(0, 26, image.shape)
    return image.clip(0, 255).astype(np.uint8)


def jpeg_tree(
    folder: Path,
    n: int,
    classes: int,
    seed: int = 0,
    distinct: int | None = None,
    size: tuple[int, int] = (500, 375),
) -> Path:
    """A folder of ``n`` JPEGs of ``size`` (default ImageNet's typical 500 x 375, about 110 KB)
    in ``classes`` class folders; ``distinct``: only that many different images, written in
    turn (making 100,000 files takes seconds, not minutes). Kept when it is there already."""
    from PIL import Image

    done = folder / ".complete"
    stamp = f"{n} {classes} {seed} {distinct} {size}"
    if done.exists() and done.read_text() == stamp:
        return folder
    rng = np.random.default_rng(seed)
    blobs: list[bytes] = []
    for i in range(n):
        if distinct is None or len(blobs) < distinct:
            buf = io.BytesIO()
            Image.fromarray(imagenet_like(rng, *size)).save(buf, "JPEG", quality=90)
            blobs.append(buf.getvalue())
        target = folder / f"c{i % classes:04d}" / f"img{i:07d}.JPEG"
        if i < classes:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[i] if distinct is None else blobs[i % distinct])
    done.write_text(stamp)
    return folder


def tiny_tree(folder: Path, n: int, classes: int) -> Path:
    """A folder of ``n`` tiny PNG files (8 x 8, about 100 bytes) in ``classes`` class folders,
    as ImageNet's training folders are laid out: the cost of a folder of that many files, not
    of their bytes. Kept when it is there already."""
    from PIL import Image

    done = folder / ".complete"
    if done.exists() and done.read_text() == f"{n} {classes}":
        return folder
    per_class = -(-n // classes)
    blobs = []
    for k in range(4):
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), 60 * k, np.uint8)).save(buf, "PNG")
        blobs.append(buf.getvalue())
    for c in range(classes):
        sub = folder / f"n{c:08d}"
        sub.mkdir(parents=True, exist_ok=True)
        fd = os.open(sub, os.O_RDONLY)
        try:
            for i in range(min(per_class, n - c * per_class)):
                out = os.open(
                    f"n{c:08d}_{i}.PNG", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd
                )
                os.write(out, blobs[i % 4])
                os.close(out)
        finally:
            os.close(fd)
    done.write_text(f"{n} {classes}")
    return folder


def index_in_place(
    folder: Path, out: Path, image_size: Sequence[int] | None, **params: Any
) -> Path:
    """The folder preprocessed by clusterbench as a dataset read in place (``path``; dataset
    ``photos``): its index, nothing copied."""
    from clusterbench import preprocess

    raw = out.parent / f"{out.name}-raw"
    raw.mkdir(parents=True, exist_ok=True)
    manifest = raw / "MANIFEST.json"
    manifest.write_text(json.dumps({"dataset": "photos", "path": str(folder), "files": {}}))
    settings = {
        "format": "image-folder",
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "split_seed": 0,
        "min_split_size": 5,
        "storage": "files",
        **({"image_size": list(image_size)} if image_size else {}),
        **params,
    }
    if preprocess.main(
        ["--dataset", "photos", "--manifest", str(manifest), "--params", json.dumps(settings)]
        + ["--out-dir", str(out)]
    ):
        raise RuntimeError(f"indexing {folder} failed")
    return out
