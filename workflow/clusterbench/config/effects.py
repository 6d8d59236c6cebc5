"""Run keys that can have no effect on a run, refused where they are given (one rule,
config/README.md, "Keys that can have no effect").

Some run keys act only with another setting or on some data: ``lr_min`` is the floor of
``lr_schedule: cosine`` alone, ``augment`` acts on images, ``channels_last`` on image inputs,
``grad_compression`` on what several workers exchange. Given where it can do nothing, such a
key was accepted, changed nothing, and still reran the run when edited (a training key is in
the train slice) or was recorded as if in effect. The rule:

    A run key given a value other than its default is refused, naming the key and why,
    when it can have no effect on any run it is given to: a run's own key on that run; a
    ``run_defaults`` key on every run that takes it from there; an experiment's key (its
    settings or its matrix) on every run the experiment expands to.

A key given for many runs (``run_defaults``, an experiment's) that acts on some of them is
kept: the others train as if it were unset, and their ``run.json`` records what they did
(``effective``), never the key's value as in effect.

:data:`RULES` holds, for each such key, when it acts (one function per key). Pure; standard
library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterbench.config.datasets import DATASETS as BUILTIN_DATASETS
from clusterbench.config.model_data import dataset_input
from clusterbench.formats import FORMATS, is_synthetic


@dataclass(frozen=True)
class Data:
    """What a run's dataset is, as far as the rules ask: its task, whether it is stored as
    image files (an image folder a run streams), and whether every run holds it in memory
    whatever ``loading`` says (synthetic data, a text's token windows)."""

    task: str
    files: bool
    resident: bool = False


def _ranks(run: Mapping[str, Any]) -> int:
    """The most ranks ``run`` trains on."""
    return max(run["workers"], run.get("max_workers") or 0)


def _schedule(kind: str, key: str) -> Callable[[Mapping[str, Any], Data], str | None]:
    def rule(run: Mapping[str, Any], data: Data) -> str | None:
        if run["lr_schedule"] == kind:
            return None
        return f"{key} acts with lr_schedule: {kind} only (this run's: {run['lr_schedule']})"

    return rule


def _warmup(run: Mapping[str, Any], data: Data) -> str | None:
    if run["batch_scaling"] != "per_worker":
        return (
            "warmup_epochs ramps the LR to lr x workers under batch_scaling: per_worker only "
            f"(this run's: {run['batch_scaling']}, whose LR is not scaled)"
        )
    if _ranks(run) == 1:
        return "warmup_epochs ramps the LR to lr x workers, which is lr for one worker"
    return None


def _exchanged(key: str) -> Callable[[Mapping[str, Any], Data], str | None]:
    def rule(run: Mapping[str, Any], data: Data) -> str | None:
        if _ranks(run) > 1:
            return None
        return f"{key} acts on what the workers exchange, and one worker exchanges nothing"

    return rule


def _streamed(run: Mapping[str, Any], data: Data) -> str | None:
    if data.resident:
        return (
            f"loader_workers act on a streamed run only; dataset {run['dataset']!r} is held "
            "in memory whatever loading says (generated, or a text's token windows)"
        )
    if run["loading"] == "resident":
        return "loader_workers act on a streamed run only; this run's loading is resident"
    return None


def _gpus(run: Mapping[str, Any], data: Data) -> str | None:
    if run["gpus_per_node"]:
        return None
    return "sge_gpu_complex carries a run's GPU request, and this run asks for none"


def _images(key: str) -> Callable[[Mapping[str, Any], Data], str | None]:
    def rule(run: Mapping[str, Any], data: Data) -> str | None:
        if data.task == "classification":
            return None
        return f"{key} acts on images only; dataset {run['dataset']!r} holds token sequences"

    return rule


def _files(key: str, what: str) -> Callable[[Mapping[str, Any], Data], str | None]:
    def rule(run: Mapping[str, Any], data: Data) -> str | None:
        if data.files:
            return None
        return (
            f"{key} acts on an image folder stored as files only (decoded per batch); dataset "
            f"{run['dataset']!r} is read from arrays or generated, {what}"
        )

    return rule


#: Training key -> why it can have no effect on a run (None: it can).
RULES: dict[str, Callable[[Mapping[str, Any], Data], str | None]] = {
    "lr_min": _schedule("cosine", "lr_min"),
    "lr_step_size": _schedule("step", "lr_step_size"),
    "lr_gamma": _schedule("step", "lr_gamma"),
    "lr_decay": _schedule("inverse_time", "lr_decay"),
    "warmup_epochs": _warmup,
    "augment": _images("augment"),
    "channels_last": _images("channels_last"),
    "on_bad_file": _files("on_bad_file", "where no image can fail"),
    "decode": _files("decode", "where nothing is decoded"),
    "grad_compression": _exchanged("grad_compression"),
    "loader_workers": _streamed,
    "sge_gpu_complex": _gpus,
}


def data_of(run: Mapping[str, Any], datasets: Mapping[str, Any]) -> Data | None:
    """The :class:`Data` of the run's dataset (its resolved entry), None if undeclared."""
    ds = datasets.get(run["dataset"])
    if ds is None:
        return None
    task, _ = dataset_input(run["dataset"], ds)
    fmt = ds.get("format")
    synthetic = run["dataset"] not in BUILTIN_DATASETS and fmt in FORMATS and is_synthetic(fmt)
    return Data(task, ds.get("storage") == "files", synthetic or task == "language-model")


def given(config: Mapping[str, Any], where: str, run: Mapping[str, Any], key: str) -> str | None:
    """Where ``key`` of ``run`` (at ``where``: ``runs[2]`` or an expanded run's) was written in
    the raw ``config``: its key path, None where the run takes the built-in default."""
    experiments = config.get("experiments") or {}
    name = run.get("experiment")
    if name is not None and isinstance(experiments.get(name), Mapping):
        spec = experiments[name]
        if key in (spec.get("matrix") or {}):
            return f"experiments.{name}.matrix.{key}"
        if key in spec:
            return f"experiments.{name}.{key}"
    elif where.startswith("runs["):
        raw = config["runs"][int(where[len("runs[") : where.index("]")])]
        if key in raw:
            return f"{where}.{key}"
    if key in (config.get("run_defaults") or {}):
        return f"run_defaults.{key}"
    return None


def written(config: Mapping[str, Any]) -> set[str]:
    """Every run key written anywhere in the raw ``config``: run_defaults, runs, experiments'
    settings and matrices (where the rules need to look at all)."""
    found = set(config.get("run_defaults") or {})
    for run in config.get("runs") or ():
        found |= set(run) if isinstance(run, Mapping) else set()
    for spec in (config.get("experiments") or {}).values():
        if isinstance(spec, Mapping):
            found |= set(spec) | set(spec.get("matrix") or {})
    return found


def no_effect_problems(
    config: Mapping[str, Any],
    checked: Sequence[tuple[str, Mapping[str, Any]]],
    datasets: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> list[str]:
    """A problem for each key of :data:`RULES`, where it is given (its key path in the raw
    ``config``), that has no effect on any run that takes it from there (``checked``: ``(where,
    resolved run)``) while some of them take a value other than its default (``defaults``): a
    default value, given or not, changes nothing anyway."""
    keys = [key for key in RULES if key in written(config)]
    seen: dict[str, tuple[bool, str]] = {}  # key path -> (acts on some run, why not on one)
    for where, run in checked if keys else ():
        data = data_of(run, datasets)
        if data is None:
            continue
        for key in keys:
            rule, path = RULES[key], given(config, where, run, key)
            if path is None:
                continue
            acts, why = seen.get(path, (False, ""))
            if run[key] == defaults.get(key):
                seen[path] = (acts, why)
                continue
            reason = rule(run, data)
            seen[path] = (acts or reason is None, why or reason or "")
    return [
        f"{path}: {_value_at(config, path)!r} can have no effect: {why}; drop it, or change "
        "the setting it depends on"
        for path, (acts, why) in seen.items()
        if not acts and why
    ]


def _value_at(config: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` (``runs[1].lr_min``, ``experiments.x.matrix.lr_min``) of the raw
    config."""
    node: Any = config
    for part in path.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node
