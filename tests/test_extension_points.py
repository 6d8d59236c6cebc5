"""Every extension point is its registry alone: a new model, dataset format and backend each
come in one new module, with no other file edited (issue 16).

Each test copies the checkout, writes one module into the copy's package, and runs the copy's
own code in a subprocess (its ``workflow/`` first on ``PYTHONPATH``): the config accepts the
new name (and lists it among the choices), and the stage that uses it works with it. The
repository itself is never edited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_checkout
from test_train import make_dataset, run_config

TOY_MODEL = '''
"""A toy model family: one linear layer over the flattened image."""
from clusterbench.models import ModelSpec


def build(num_classes, input_shape):
    import math

    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


MODELS = {"toy_linear": ModelSpec("toy_linear", build, convolutional=False)}
'''

TOY_FORMAT = '''
"""``format: toy-text``: one text file, a line per image: the label, then H*W grey pixels."""
import numpy as np

from clusterbench.formats import FormatError, Images, check_classes, classes_from_labels

FILES = (1,)
SUFFIXES = (".txt",)
RESIZES = False


def decode(files, image_size=None, class_names=None):
    (path,) = files
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    side = int(round((len(rows[0]) - 1) ** 0.5))
    if any(len(r) != side * side + 1 for r in rows):
        raise FormatError(f"{path.name}: rows of unequal length")
    labels, names = classes_from_labels(np.array([r[0] for r in rows]), path.name)
    check_classes(names, path.name)
    pixels = np.array([[int(v) for v in r[1:]] for r in rows], dtype=np.uint8)
    return Images(pixels.reshape(-1, side, side, 1), labels, None, None, names)
'''

TOY_BACKEND = '''
"""``backend: solo``: a world of one, without any library (no collective has anyone to talk to)."""
from clusterbench.backends import DistributedOptimizer, Identity, Runtime


class SoloRuntime(Runtime):
    name = "solo"

    @classmethod
    def start(cls, device_type):
        return cls(Identity(0, 1, 0, 1, 0, 1), device_type)

    def shutdown(self):
        pass

    def _allreduce_sum(self, tensor, name):
        raise AssertionError("a world of one has no peers")

    _allreduce_sum_autograd = _broadcast_tensors_ = _broadcast_object = _allreduce_sum
    _allgather_object = _allreduce_sum

    def sync_batchnorm(self, device):
        raise NotImplementedError

    def wrap(self, model, optimizer, bn, compression="none", timed=False):
        return model, DistributedOptimizer(optimizer)


RUNTIME = SoloRuntime
'''


def with_plugin(tmp_path: Path, package: str, module: str, text: str) -> Path:
    """A copy of the checkout with ``text`` as ``clusterbench/<package>/<module>.py``: the one
    file added."""
    copy = copy_checkout(tmp_path / "checkout")
    (copy / "workflow" / "clusterbench" / package / f"{module}.py").write_text(text)
    return copy


def run_in(copy: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` with the copy's package first on the path."""
    env = {**os.environ, "PYTHONPATH": str(copy / "workflow")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd or copy
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


CHECK_RUN = """
import json, sys
from clusterbench import config
run = json.loads(sys.argv[1])
resolved = config.validate({"report": {"title": "t"}, "runs": [run]})
print(json.dumps(config.load_schema()["$defs"]["run_settings"]["properties"][sys.argv[2]]))
"""


def train_one(copy: Path, tmp_path: Path, **run: object) -> dict:
    """Train a 1-worker, 1-epoch run with the copy's code; its run.json and model.pt's arch."""
    data = make_dataset(tmp_path / "data")
    out = tmp_path / "out"
    settings = run_config(workers=1, epochs=1, **run)
    script = str(copy / "scripts" / "train.py")
    run_in(
        copy, script, "--data-dir", str(data), "--run", json.dumps(settings), "--out-dir", str(out)
    )
    import torch

    arch = torch.load(out / "model.pt", weights_only=True)["arch"]
    return {"run": json.loads((out / "run.json").read_text()), "arch": arch}


@pytest.mark.slow
def test_a_model_is_one_new_module(tmp_path):
    copy = with_plugin(tmp_path, "models", "toy", TOY_MODEL)
    run = {"name": "a", "dataset": "digits", "model": "toy_linear"}
    run_in(copy, "-c", CHECK_RUN, json.dumps(run), "model")
    trained = train_one(copy, tmp_path, model="toy_linear")
    assert trained["arch"] == {"model": "toy_linear", "num_classes": 4, "input_shape": [1, 8, 8]}


@pytest.mark.slow
def test_a_backend_is_one_new_module(tmp_path):
    copy = with_plugin(tmp_path, "backends", "solo", TOY_BACKEND)
    run = {"name": "a", "dataset": "digits", "backend": "solo", "workers": 1}
    choices = json.loads(run_in(copy, "-c", CHECK_RUN, json.dumps(run), "backend").stdout)
    assert choices["enum"] == ["ddp", "horovod", "solo"]
    trained = train_one(copy, tmp_path, backend="solo")
    assert trained["run"]["world"]["backend"] == "solo"


@pytest.mark.slow
def test_a_dataset_format_is_one_new_module(tmp_path):
    copy = with_plugin(tmp_path, "formats", "toy_text", TOY_FORMAT)
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = [
        f"{'ab'[i % 2]} " + " ".join(str((i * 7 + p) % 256) for p in range(16)) for i in range(300)
    ]
    (raw / "toy.txt").write_text("\n".join(lines) + "\n")
    check = """
import sys
from clusterbench import config
cfg = {"report": {"title": "t"}, "runs": [{"name": "a", "dataset": "mine"}],
       "datasets": {"mine": {"format": "toy-text",
                             "files": [{"url": "file:///x/toy.txt", "sha256": "0" * 64}]}}}
config.validate(cfg)
print(config.load_schema()["$defs"]["format"]["enum"])
"""
    assert "'toy-text'" in run_in(copy, "-c", check).stdout
    from clusterbench.core.integrity import sha256_of

    manifest = {
        "dataset": "mine",
        "files": {"toy.txt": {"sha256": sha256_of(raw / "toy.txt"), "size": 1, "url": "x"}},
    }
    (raw / "MANIFEST.json").write_text(json.dumps(manifest))
    params = {"val_fraction": 0.2, "test_fraction": 0.2, "split_seed": 0, "format": "toy-text"}
    params["files"] = ["toy.txt"]
    out = tmp_path / "data"
    script = str(copy / "scripts" / "preprocess.py")
    args = ["--dataset", "mine", "--manifest", str(raw / "MANIFEST.json"), "--out-dir", str(out)]
    run_in(copy, script, *args, "--params", json.dumps(params))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["image_shape"] == [4, 4, 1] and meta["class_names"] == ["a", "b"]
    assert sum(meta["counts"].values()) == 300
