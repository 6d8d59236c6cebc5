"""Stage 3c: evaluate a run's newest weights while it trains (``evaluate.every_minutes``), as the
Rescale tutorial's ``imagenet_eval --eval_interval_secs`` does beside its training.

```
python scripts/watch.py --run JSON --params JSON --data-dir results/data/NAME \
    --run-dir results/runs/RUN --out results/watch/RUN/watch.json [--inputs FILE ...]
```

A job of its own (rules/watch.smk), started beside the run's training job. While the training
runs (its launcher holds ``train.lock``: :mod:`clusterbench.launch.exclusive`), as soon as it
sees it run (the weights it starts from) and then every ``every_minutes`` from its last
evaluation's end, it asks for the weights and evaluates them on ``evaluate.split``
(:func:`clusterbench.evaluate.measure`), through files in the run's folder
(:mod:`clusterbench.training.lending`): the training answers between two steps or at an
epoch's end, and where this job runs on a host of the training's ranks, the training waits
while it evaluates. So its evaluation never runs beside the timed steps, and the time counts
neither in the epoch's time nor in the time box. Each point: the training time the weights had
(``train_seconds``), where in the training they were, the accuracy and loss.

``watch.json`` is written after every point (atomically) and when the job ends, with how it
ended (``ended``):

``trained``      the training ended with success (its outputs complete, of this run's settings
                 and newer than the inputs they were made from): the final model's point is the
                 evaluate stage's;
``failed``       a training that started while this job ran ended with failure (exit status
                 1: Snakemake's retry starts the job again beside the next training);
``no training``  no training started, and Snakemake ran no job but such watchers for
                 :data:`IDLE_SECONDS` (``.snakemake/incomplete``: an earlier job failed);
``deadline``     ``--deadline-minutes`` passed (a cluster job ends before its time limit).

Reads nothing of the training but those files, its lock's record and its outputs' checksums.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterbench.config import ConfigError, bad_settings, stage_params
from clusterbench.core import integrity
from clusterbench.core.atomic import write_json
from clusterbench.training.lending import ANSWER, DONE, REQUEST, WATCH_DIR, WEIGHTS, read_json

#: Seconds between two looks at the training's files.
POLL_SECONDS = 0.5
#: A training that started less than this before the job (clocks of two hosts) is its own.
SKEW_SECONDS = 300
#: Seconds without a job of Snakemake's but watchers after which no training will start.
IDLE_SECONDS = 120
#: Where Snakemake marks the outputs of the jobs it runs (base64 of their paths).
INCOMPLETE = Path(".snakemake", "incomplete")
#: What this stage's own outputs' paths end with (a watcher's job is no training to wait for).
OWN_OUTPUT = "/watch.json"


class Training:
    """What this job knows of its run's training: its lock's record, its outputs, and whether
    Snakemake still runs other jobs (module docstring)."""

    def __init__(self, run_dir: Path, run: dict[str, Any], inputs: Sequence[Path]) -> None:
        self.run_dir, self.run, self.inputs = Path(run_dir), run, [Path(p) for p in inputs]
        self.started = time.time()
        self.idle_since: float | None = None

    def lock(self) -> dict[str, Any]:
        return read_json(self.run_dir / "train.lock") or {}

    def running(self) -> bool:
        """A launcher holds the run's lock (its record has no end)."""
        found = self.lock()
        return bool(found.get("started")) and found.get("ended") is None

    def failed(self) -> int | None:
        """The exit status of a training that started while this job ran and ended with
        failure (None: none did)."""
        found = self.lock()
        began, code = found.get("started") or 0, found.get("exit")
        if found.get("ended") and code not in (0, None) and began >= self.started - SKEW_SECONDS:
            return int(code)
        return None

    def trained(self) -> bool:
        """The run's outputs complete (checksums), of this run's training settings, and newer
        than every input they were made from: its training ended with success."""
        marker = self.run_dir / integrity.CHECKSUMS
        if not marker.is_file() or integrity.recorded_problems(marker, "files", strict=True):
            return False
        info = read_json(self.run_dir / "run.json") or {}
        if {k: v for k, v in (info.get("run") or {}).items()} != {
            k: v for k, v in self.run.items() if k != "experiment"
        }:
            return False
        made = (self.run_dir / "run.json").stat().st_mtime
        return all(not p.exists() or p.stat().st_mtime <= made for p in self.inputs)

    def abandoned(self, now: float) -> bool:
        """No training running, and Snakemake running no job but watchers for
        :data:`IDLE_SECONDS`: none will start."""
        if self.running() or busy(INCOMPLETE):
            self.idle_since = None
            return False
        self.idle_since = self.idle_since or now
        return now - self.idle_since >= IDLE_SECONDS


def busy(incomplete: Path) -> bool:
    """Whether Snakemake runs a job other than a watcher (a marker of its outputs other than a
    ``watch.json``); with no marker folder: taken to."""
    if not incomplete.is_dir():
        return True
    for marker in incomplete.iterdir():
        try:
            path = base64.b64decode(marker.name, validate=False).decode("utf-8", "replace")
        except ValueError:
            return True
        if not path.endswith(OWN_OUTPUT):
            return True
    return False


class Watcher:
    """Asks for the weights, evaluates them, writes ``watch.json`` (module docstring)."""

    def __init__(self, args: argparse.Namespace, settings: dict[str, Any], run: dict[str, Any]):
        self.args, self.settings, self.run = args, settings, run
        self.dir = Path(args.run_dir) / WATCH_DIR
        self.points: list[dict[str, Any]] = []
        self.asked: str | None = None
        self.next_at: float | None = None

    def ask(self) -> None:
        self.asked = uuid.uuid4().hex
        self.dir.mkdir(parents=True, exist_ok=True)
        request = {"id": self.asked, "host": socket.gethostname(), "pid": os.getpid()}
        write_json(self.dir / REQUEST, {**request, "time": time.time()})

    def answered(self) -> dict[str, Any] | None:
        found = read_json(self.dir / ANSWER)
        return found if found and found.get("id") == self.asked else None

    def evaluate(self, answer: dict[str, Any]) -> None:
        """The weights of ``answer`` evaluated, the point written, the training told."""
        import torch

        from clusterbench.evaluate import EvalParams, measure

        began = time.monotonic()
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))  # the training waits
        try:
            point = {**where(answer), **measure_weights(self, answer, measure, EvalParams)}
        finally:
            write_json(self.dir / DONE, {"id": self.asked})
        point["evaluation_seconds"] = time.monotonic() - began
        self.points.append(point)
        self.asked = None
        self.write(None)
        print(f"watch: {point_line(point)}", flush=True)

    def write(self, ended: str | None, note: str = "") -> None:
        write_json(
            Path(self.args.out),
            {
                "run": self.run["name"],
                "split": self.settings["split"],
                "every_minutes": self.settings["every_minutes"],
                "points": self.points,
                "ended": ended,
                "note": note,
            },
        )


def where(answer: dict[str, Any]) -> dict[str, Any]:
    """Where the training stood when it lent the weights."""
    keys = ("train_seconds", "epoch", "step", "steps", "time", "pause")
    return {k: answer.get(k) for k in keys}


def measure_weights(watcher: Watcher, answer: dict[str, Any], measure: Any, params: Any) -> dict:
    """The lent weights, checked against the answer's sha256, evaluated."""
    import hashlib

    import torch

    path = watcher.dir / WEIGHTS
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != answer.get("sha256"):
        raise ValueError(f"{path}: not the weights the training lent (its sha256 differs)")
    import io

    ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    split = params(watcher.settings["batch_size"], watcher.settings["split"])
    return measure(Path(watcher.args.data_dir), ckpt, path, split)


def point_line(point: dict[str, Any]) -> str:
    """A point in the log: where the training stood, what the weights scored."""
    at = (
        f"epoch {point['epoch'] + 1}, step {point['step']}"
        if point.get("steps")
        else (f"after epoch {point['epoch']}")
    )
    loss = "n/a" if point.get("loss") is None else f"{point['loss']:.4f}"
    return (
        f"{point['train_seconds']:.1f} s of training ({at}): accuracy {point['accuracy']:.4f}, "
        f"loss {loss} ({point['evaluation_seconds']:.1f} s"
        + (", the training waiting)" if point.get("pause") else ")")
    )


def watch(watcher: Watcher, training: Training) -> tuple[str, str]:
    """Evaluate the training's weights every ``every_minutes`` while it runs; how it ended and
    why (module docstring)."""
    every = 60 * float(watcher.settings["every_minutes"])
    deadline = training.started + 60 * watcher.args.deadline_minutes
    while True:
        now = time.time()
        running = training.running()
        if running and watcher.next_at is None:  # at once: the weights it starts from
            watcher.next_at = now
        if running and watcher.asked is None and now >= (watcher.next_at or now):
            watcher.ask()
        answer = watcher.answered() if watcher.asked else None
        if answer is not None:
            watcher.evaluate(answer)
            watcher.next_at = time.time() + every
        elif not running:
            ended = ending(training, now)
            if ended is not None:
                return ended
        if now >= deadline:
            return "deadline", f"stopped at its deadline ({watcher.args.deadline_minutes:g} min)"
        time.sleep(POLL_SECONDS)


def ending(training: Training, now: float) -> tuple[str, str] | None:
    """How the watch ends while no training runs (None: it goes on waiting)."""
    if training.trained():
        return "trained", "the training ended with success"
    code = training.failed()
    if code is not None:
        return "failed", f"the training ended with exit status {code}"
    if training.abandoned(now):
        return "no training", f"no training started, and no other job ran for {IDLE_SECONDS} s"
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="the run's training slice, as JSON")
    parser.add_argument("--params", required=True, help="the config's evaluate settings, JSON")
    parser.add_argument("--data-dir", type=Path, required=True, help="results/data/NAME")
    parser.add_argument("--run-dir", type=Path, required=True, help="results/runs/RUN")
    parser.add_argument("--out", type=Path, required=True, help="results/watch/RUN/watch.json")
    parser.add_argument(
        "--inputs", type=Path, nargs="*", default=[], help="what the training is made from"
    )
    parser.add_argument(
        "--deadline-minutes", type=float, default=24 * 60, help="end after this long"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The stage; exit status 1 where the training it watched failed, 2 for bad settings."""
    args = parse_args(argv)
    try:
        settings = stage_params("watch", args.params)
        run = stage_params("train", args.run, what="--run")
    except ConfigError as exc:
        return bad_settings("watch", exc)
    if not settings["every_minutes"]:
        return bad_settings("watch", ConfigError("--params: every_minutes is not set"))
    cores = max(1, len(os.sched_getaffinity(0)))  # the training's, while it waits
    if os.environ.get("OMP_NUM_THREADS", "0") == "0":  # Snakemake's for a job of no thread
        os.environ["OMP_NUM_THREADS"] = str(cores)  # (torch: imported at the first point)
    watcher = Watcher(args, settings, run)
    watcher.write(None)
    try:
        ended, note = watch(watcher, Training(args.run_dir, run, args.inputs))
    except (ValueError, FileNotFoundError) as exc:  # the weights or the data refused
        print(f"watch: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        (watcher.dir / REQUEST).unlink(missing_ok=True)
    watcher.write(ended, note)
    print(f"watch: {len(watcher.points)} point(s); {note}", flush=True)
    return 1 if ended == "failed" else 0
