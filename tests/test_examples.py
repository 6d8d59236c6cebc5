"""config/examples/: each example is a valid config written for its user, and all of them run
through the real workflow in ONE Snakemake session (one start, one report: the cheapest way to
run them all), each shrunk by an overlay to seconds of training on this machine's CPU: what
the example is about (its model, data, backends, LR schedule, compression, streaming and
staging) is kept.

The session's config is the examples' own: each example's ``run_defaults`` folded into its runs
and experiments (they differ from example to example), the overlays merged over them, the
datasets, runs and experiments put side by side. An example whose features the workflow lacks
yet (another branch's formats or keys) is left out of the session and its test skipped.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from clusterbench import config as cb
from clusterbench.models import problems as model_problems
from conftest import PYTHON_M_SNAKEMAKE, REPO, TINY_COMM, run_snakemake

EXAMPLES = REPO / "config" / "examples"

#: What each example needs of the workflow: dataset formats, run keys, models.
NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "synthetic-resnet50": (("synthetic",), ("grad_compression",), ("torchvision.resnet50",)),
    "gpt": (("synthetic-text",), ("lr_schedule",), ("gpt-tiny",)),
    "own-model": ((), ("loss", "optimizer"), ()),
    "image-folder-stream": (
        ("image-folder",),
        ("loading", "augment", "on_bad_file"),
        ("torchvision.resnet50",),
    ),
}

#: Each example's overlay: tiny sizes, the CPU, no time box (image-folder-stream's archive is
#: added by the session: it is made there).
TINY: dict[str, dict[str, Any]] = {
    "synthetic-resnet50": {
        "datasets": {
            "fake-imagenet": {
                "shape": [3, 32, 32],
                "samples": 40,
                "val_fraction": 0.2,
                "test_fraction": 0.2,
                "min_split_size": 8,
            }
        },
        "environment_defaults": {"cores_per_node": 2},
        "run_defaults": {
            "epochs": 1,
            "minutes": None,
            "batch_size": 4,
            "cpus_per_worker": 1,
            "mem_mb": 2000,
        },
        # on the CPU: both cores (2 workers), the fp16 point of the matrix, both backends
        "experiments": {
            "gpus": {"environments": ["cpu-parallel"], "matrix": {"grad_compression": ["fp16"]}}
        },
    },
    "gpt": {
        "datasets": {"tokens": {"seq_len": 32, "samples": 200, "min_split_size": 10}},
        "run_defaults": {"epochs": 2, "batch_size": 16},
    },
    "own-model": {"run_defaults": {"epochs": 2, "workers": 1}},
    "image-folder-stream": {
        "datasets": {
            "photos": {
                "image_size": [32, 32],
                "val_fraction": 0.25,
                "test_fraction": 0.25,
                "min_split_size": 4,
            }
        },
        "run_defaults": {
            "workers": 2,
            "gpus_per_node": 0,
            "epochs": 1,
            "warmup_epochs": 0,  # the example's 2 would leave its cosine no epoch
            "batch_size": 2,
            "loader_workers": 1,
            "cpus_per_worker": 1,
            "mem_mb": 2000,
        },
    },
}


def missing(name: str) -> list[str]:
    """What the workflow lacks for example ``name`` (empty: it can run it)."""
    from clusterbench.formats import FORMATS

    formats, run_keys, models = NEEDS[name]
    keys = cb.load_schema()["$defs"]["run_settings"]["properties"]
    found = [] if (EXAMPLES / f"{name}.yaml").is_file() else [f"config/examples/{name}.yaml"]
    found += [f"format {f}" for f in formats if f not in FORMATS.names()]
    found += [f"model {m}" for m in models if model_problems(m, "model")]
    if name == "own-model" and not (EXAMPLES / "mynets.py").is_file():
        found.append("config/examples/mynets.py")
    return found + [f"run key {k}" for k in run_keys if k not in keys]


def needs(name: str) -> pytest.MarkDecorator:
    lacks = missing(name)
    return pytest.mark.skipif(bool(lacks), reason=f"the workflow has no {', '.join(lacks)}")


def merged(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base``, dicts key by key (as Snakemake merges configs)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def folded(config: dict) -> dict:
    """An example's config with its ``run_defaults`` written into each run and experiment."""
    defaults = config.pop("run_defaults", {})
    config["runs"] = [{**defaults, **run} for run in config.get("runs") or []]
    experiments = config.get("experiments") or {}
    config["experiments"] = {k: {**defaults, **e} for k, e in experiments.items()}
    return config


def session_config(names: list[str], overlays: dict[str, dict]) -> dict:
    """The examples ``names``, each under its overlay, side by side in one config."""
    out: dict[str, Any] = {"datasets": {}, "runs": [], "experiments": {}}
    for name in names:
        example = folded(
            merged(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()), overlays[name])
        )
        out["datasets"].update(example.pop("datasets", {}))
        out["runs"] += example.pop("runs")
        out["experiments"].update(example.pop("experiments"))
        example.pop("report", None)
        out = merged(out, example)  # staging, environment_defaults, evaluate
    out["report"] = {"title": "config/examples/, each at tiny sizes"}
    # the multi-worker examples' comm jobs (one per environment and backend) at tiny sizes too:
    # the defaults (up to 256 MiB, 0.2 s a size) take about 40 s a job on 2 cores
    out["comm"] = dict(TINY_COMM)
    return out


def image_folder_archive(path: Path, per_class: int = 12) -> Path:
    """A .tar.gz of a small image folder: two classes of 24x24 PNGs (dark and bright)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for label, level in (("dark", 50), ("bright", 200)):
            for i in range(per_class):
                pixels = np.clip(rng.normal(level, 30, (24, 24, 3)), 0, 255).astype(np.uint8)
                png = io.BytesIO()
                Image.fromarray(pixels).save(png, format="PNG")
                info = tarfile.TarInfo(f"photos/{label}/{i:03d}.png")
                info.size = len(png.getvalue())
                tar.addfile(info, io.BytesIO(png.getvalue()))
    path.write_bytes(gzip.compress(buf.getvalue()))
    return path


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> dict[str, Any]:
    """One Snakemake session of every example the workflow can run: its results/ and more."""
    tmp = tmp_path_factory.mktemp("examples")
    names = [name for name in NEEDS if not missing(name)]
    overlays = copy.deepcopy(TINY)
    archive = image_folder_archive(tmp / "photos.tar.gz")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    overlays["image-folder-stream"]["datasets"]["photos"]["files"] = [
        {"url": archive.as_uri(), "sha256": digest}
    ]
    overlays["image-folder-stream"]["staging"] = {"dir": str(tmp / "node-local")}
    work = tmp / "work"
    config = tmp / "examples.yaml"
    config.write_text(yaml.safe_dump(session_config(names, overlays), sort_keys=False))
    cmd = [*PYTHON_M_SNAKEMAKE, "--profile", str(REPO / "profiles" / "local")]
    cmd += ["--snakefile", str(REPO / "Snakefile"), "--directory", str(work)]
    cmd += ["--configfile", str(config)]
    # own-model's jobs import config.examples.mynets from the checkout (its header says so)
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run_snakemake(cmd, REPO, work / "results", True, 1200, env)
    results = work / "results"
    assert (results / "report" / "report.pdf").is_file()
    return {"results": results, "names": names, "tmp": tmp}


def run_info(results: Path, run: str) -> dict:
    return json.loads((results / "runs" / run / "run.json").read_text())


def metrics(results: Path, run: str) -> list[dict]:
    return [
        json.loads(x)
        for x in (results / "runs" / run / "metrics.jsonl").read_text().splitlines()
        if x
    ]


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(n)) for n in NEEDS])
def test_every_example_is_a_valid_config_with_comments_for_its_user(name):
    text = (EXAMPLES / f"{name}.yaml").read_text()
    assert text.startswith("# Example: ") and "snakemake --profile" in text
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 10
    cb.validate(cb.load_file(EXAMPLES / f"{name}.yaml"))
    cb.validate(merged(cb.load_file(EXAMPLES / f"{name}.yaml"), TINY[name]))


@pytest.mark.slow
@needs("synthetic-resnet50")
def test_synthetic_resnet50_compares_backends_with_fp16_compression(examples):
    results = examples["results"]
    runs = [r for r in (results / "runs").iterdir() if r.name.startswith("gpus")]
    assert len(runs) == 2, sorted(p.name for p in runs)
    assert {run_info(results, r.name)["world"]["backend"] for r in runs} == {"horovod", "ddp"}
    for run in runs:
        info = run_info(results, run.name)
        assert info["run"]["model"] == "torchvision.resnet50" and info["world"]["size"] == 2
        assert info["run"]["precision"] == "bf16"
        assert info["effective"]["grad_compression"] == "fp16"
    assert "fp16" in (results / "report" / "runs.csv").read_text()


@pytest.mark.slow
@needs("gpt")
def test_gpt_trains_both_backends_with_a_cosine_lr(examples):
    results = examples["results"]
    for run in ("gpt-tiny-horovod", "gpt-tiny-ddp"):
        info = run_info(results, run)
        assert info["run"]["model"] == "gpt-tiny" and info["run"]["lr_schedule"] == "cosine"
        records = metrics(results, run)
        lrs = [m["lr"] for m in records]
        assert lrs[1] < lrs[0] <= 0.01, lrs  # decaying from the peak
        assert all("tokens_per_second" in m for m in records)


@pytest.mark.slow
@needs("own-model")
def test_own_model_trains_the_users_module_beside_small_cnn(examples):
    results = examples["results"]
    for run, model in (
        ("mynet-horovod", "config.examples.mynets:build"),
        ("mynet-ddp", "config.examples.mynets:build"),
        ("small-cnn-horovod", "small_cnn"),
        ("mynet-adamw", "config.examples.mynets:build"),
    ):
        assert run_info(results, run)["run"]["model"] == model
        first, last = metrics(results, run)
        assert last["train_loss"] < first["train_loss"]  # it learns
        assert last["val_accuracy"] > 0.15  # above chance (10 classes)
    # trained with your own loss and optimiser, as recorded
    info = run_info(results, "mynet-adamw")["run"]
    assert info["loss"] == "config.examples.mytraining:smoothed"
    assert info["optimizer"] == "config.examples.mytraining:adamw"


@pytest.mark.slow
@needs("image-folder-stream")
def test_image_folder_stream_streams_from_staging(examples):
    results = examples["results"]
    for run in ("photos-resnet50-horovod", "photos-resnet50-ddp"):
        info = run_info(results, run)
        assert info["run"]["augment"] == "standard" and info["world"]["size"] == 2
        assert "stream" in json.dumps(info["data"]), info["data"]  # streamed, not resident
    assert any((examples["tmp"] / "node-local").iterdir())  # the staged copy, kept
