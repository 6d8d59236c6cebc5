"""Training checkpoints: where they are, which one a run continues from, and when they go.

A run's checkpoints live in ``results/runs/RUN/checkpoints/<slice>/``, ``<slice>`` being the
first 16 hex digits of the sha256 of the run's training slice (:func:`slice_hash`): a
checkpoint belongs to exactly the settings that made it. Each file is named after its place in
the training and its own content::

    epoch-0003-step-000000-<sha256[:16]>.pt   after 3 whole epochs
    epoch-0003-step-000120-<sha256[:16]>.pt   120 steps into epoch 4 (written on a preemption)

so damage (a truncated file, flipped bits: torch.load reads both without complaint in the
tensors) is detected by hashing the file before it is used.

* :func:`newest_valid` finds the newest checkpoint that is intact and was made for this slice,
  for the network the run builds now (:func:`model_problem`: the same weights' names and
  shapes, and your own model's code unchanged) and on the data it reads now
  (:func:`data_problem`: a folder read in place that changed is indexed again, and a
  checkpoint of the old index is no start for the new); it says in the log why it passed over
  any other one (damaged, another slice, another network, other data, an older layout), and
  never deletes them.
* The writer keeps the newest ``checkpoints.keep`` of the run's slice (:func:`prune`), and
  removes all of them only once the run has finished and ``model.pt`` is written
  (:func:`remove_all`).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.config import canonical_json, stage_params
from clusterbench.core.atomic import atomic_path

#: Environment variable with the config's ``checkpoints`` settings (JSON), set by the workflow
#: (rules/common.smk): how many checkpoints are kept, and how often a warned run checks for
#: preemption, change no result, so they are no rerun trigger.
CHECKPOINTS_ENV = "CLUSTERBENCH_CHECKPOINTS"
#: Layout of the checkpoint dict; a checkpoint of another layout is passed over.
FORMAT = 3
#: Hex digits of the slice hash (directory) and of the content hash (file name).
HASH_DIGITS = 16

_NAME = re.compile(rf"epoch-(\d+)-step-(\d+)-([0-9a-f]{{{HASH_DIGITS}}})\.pt")


def checkpoint_settings() -> dict[str, Any]:
    """The ``checkpoints`` settings from :data:`CHECKPOINTS_ENV` (schema defaults if unset)."""
    return stage_params("checkpoints", os.environ.get(CHECKPOINTS_ENV, "{}"), what=CHECKPOINTS_ENV)


def slice_hash(run: Mapping[str, Any]) -> str:
    """The hash naming a run's training slice (its ``run`` dict, as the train rule passes it)."""
    return hashlib.sha256(canonical_json(run).encode()).hexdigest()[:HASH_DIGITS]


@dataclass(frozen=True, order=True)
class Position:
    """Where in a training a checkpoint was taken: ``epoch`` whole epochs done, then ``step``
    optimiser steps of the next one (0 at an epoch's end)."""

    epoch: int
    step: int = 0

    def describe(self) -> str:
        if self == Position(0):
            return "before any training"
        if self.step == 0:
            return f"after epoch {self.epoch}"
        return f"epoch {self.epoch + 1}, after step {self.step}"


def slice_dir(out_dir: Path, run: Mapping[str, Any]) -> Path:
    """Where the checkpoints of ``run`` (its training slice) are kept."""
    return Path(out_dir) / "checkpoints" / slice_hash(run)


def checkpoint_paths(directory: Path) -> list[tuple[Position, Path]]:
    """The checkpoints in ``directory``, oldest first (by position: epoch 1000 after 999)."""
    found = [
        (Position(int(m.group(1)), int(m.group(2))), p)
        for p in Path(directory).glob("epoch-*.pt")
        if (m := _NAME.fullmatch(p.name))
    ]
    return sorted(found)


def save(directory: Path, position: Position, state: Mapping[str, Any]) -> Path:
    """Write ``state`` as the checkpoint at ``position``, atomically; returns its path."""
    import torch

    buffer = io.BytesIO()
    torch.save({**state, "format": FORMAT, "position": [position.epoch, position.step]}, buffer)
    data = buffer.getbuffer()
    digest = hashlib.sha256(data).hexdigest()[:HASH_DIGITS]
    path = Path(directory) / f"epoch-{position.epoch:04d}-step-{position.step:06d}-{digest}.pt"
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


def prune(directory: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints in ``directory``."""
    for _, old in checkpoint_paths(directory)[:-keep]:
        old.unlink(missing_ok=True)


def remove_all(out_dir: Path) -> None:
    """Every checkpoint of the run in ``out_dir`` (once it has finished and model.pt exists)."""
    shutil.rmtree(Path(out_dir) / "checkpoints", ignore_errors=True)


class DamagedCheckpoint(ValueError):
    """A checkpoint that cannot be used: unreadable, altered, or not what its name says."""


def load(path: Path, run: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint at ``path``, checked against its name and ``run``'s slice.

    Raises :class:`DamagedCheckpoint` naming what is wrong.
    """
    import torch

    m = _NAME.fullmatch(path.name)
    if m is None:
        raise DamagedCheckpoint("not a checkpoint name this version writes")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedCheckpoint(f"unreadable: {exc.strerror or exc}") from None
    digest = hashlib.sha256(data).hexdigest()[:HASH_DIGITS]
    if digest != m.group(3):
        raise DamagedCheckpoint(
            f"content changed since it was written ({len(data)} bytes hash to {digest}, "
            f"the name says {m.group(3)})"
        )
    try:
        ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds; all mean "unusable"
        raise DamagedCheckpoint(f"torch cannot read it: {' '.join(str(exc).split())}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise DamagedCheckpoint(f"not a format-{FORMAT} checkpoint")
    if ckpt.get("position") != [int(m.group(1)), int(m.group(2))]:
        raise DamagedCheckpoint(f"its content is for position {ckpt.get('position')}")
    if ckpt.get("config") != dict(run):
        raise DamagedCheckpoint(f"made for another training slice ({differing_keys(ckpt, run)})")
    return ckpt


def differing_keys(ckpt: Any, run: Mapping[str, Any]) -> str:
    """``differs in lr, momentum``: the training keys where a checkpoint's config and ``run``
    disagree."""
    config = ckpt.get("config") if isinstance(ckpt, dict) else None
    if not isinstance(config, dict):
        return "no training slice recorded"
    keys = sorted(k for k in {*config, *run} if config.get(k) != run.get(k))
    return f"differs in {', '.join(keys)}" if keys else "same settings"


def model_problem(
    ckpt: Mapping[str, Any], model: Any, code: str | None, training_code: str | None = None
) -> str | None:
    """Why a checkpoint's weights are not for ``model`` as the run builds it now (None: they
    are): other weights' names or shapes, or (your own model: ``code``, the digest of its
    module's files, :func:`clusterbench.models.custom.code_digest`) other code, or other code
    of your own loss or optimiser (``training_code``,
    :func:`clusterbench.models.custom_training.code_digest`). A checkpoint written before a
    digest was kept has none and is judged by its weights alone."""
    saved, mine = ckpt.get("model") or {}, model.state_dict()
    if set(saved) != set(mine):
        extra, lacks = sorted(set(saved) - set(mine)), sorted(set(mine) - set(saved))
        return "made for another network (the model's code changed since?): " + "; ".join(
            f"{what} {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
            for what, names in (("it has", extra), ("it lacks", lacks))
            if names
        )
    shapes = [k for k in mine if tuple(saved[k].shape) != tuple(mine[k].shape)]
    if shapes:
        key = shapes[0]
        return (
            f"made for another network (the model's code changed since?): {key} is "
            f"{list(saved[key].shape)} there, {list(mine[key].shape)} now"
            + (f", and {len(shapes) - 1} more" if len(shapes) > 1 else "")
        )
    if code is not None and ckpt.get("model_code") not in (None, code):
        return "made with other code of the model's module (edited since)"
    if training_code is not None and ckpt.get("training_code") not in (None, training_code):
        return "made with other code of the loss's or the optimizer's module (edited since)"
    return None


def data_problem(ckpt: Mapping[str, Any], data: str | None) -> str | None:
    """Why a checkpoint was not trained on the data the run reads now (``data``: its
    :func:`clusterbench.data.source.identity`; None: not known, nothing is judged), None when
    it was. A checkpoint written before the data was kept with it is passed over: its data
    cannot be told."""
    if data is None:
        return None
    if ckpt.get("data") is None:
        return "it records no data it was trained on (an older clusterbench wrote it)"
    if ckpt["data"] != data:
        return (
            f"trained on other data (the dataset was preprocessed or indexed again since: "
            f"data {ckpt['data']} there, {data} now)"
        )
    return None


def newest_valid(
    out_dir: Path,
    run: Mapping[str, Any],
    log: Callable[[str], None] = print,
    fits: Callable[[dict[str, Any]], str | None] = lambda ckpt: None,
) -> tuple[Position, dict[str, Any]] | None:
    """The newest intact checkpoint of ``run``'s training slice in ``out_dir`` that ``fits``
    (why a checkpoint is not for the network built now, None when it is: :func:`model_problem`),
    or None.

    Logs, and passes over, every newer damaged one, one that does not fit, the checkpoints of
    other training slices (naming the keys that differ) and files of an older layout; deletes
    nothing.
    """
    import torch

    root = Path(out_dir) / "checkpoints"
    mine = slice_dir(out_dir, run)
    if root.is_dir():
        for other in sorted(p for p in root.iterdir() if p != mine):
            if other.is_dir() and (found := checkpoint_paths(other)):
                try:  # only to say how it differs; a damaged one is still another slice's
                    reason = differing_keys(torch.load(found[-1][1], weights_only=True), run)
                except Exception:  # noqa: BLE001
                    reason = "unreadable"
                log(
                    f"train: ignoring {len(found)} checkpoint(s) in {other}: made for another "
                    f"training slice ({reason})"
                )
            elif other.is_file() and other.suffix == ".pt":
                log(f"train: ignoring {other}: written by an older clusterbench (no slice hash)")
    for position, path in reversed(checkpoint_paths(mine)):
        try:
            ckpt = load(path, run)
        except DamagedCheckpoint as exc:
            log(f"train: skipping checkpoint {path} ({position.describe()}): {exc}")
            continue
        problem = fits(ckpt)
        if problem is None:
            return position, ckpt
        log(f"train: skipping checkpoint {path} ({position.describe()}): {problem}")
    return None
