"""The newest weights lent to an evaluation that runs beside the training (the watch stage,
:mod:`clusterbench.watch`, for the config's ``evaluate.every_minutes``), through small files in
the run's folder, ``results/runs/<run>/watch/``:

``request.json``  the watcher's, ``{"id", "host", "pid", "time"}``: it wants the weights now;
``weights.pt``    rank 0's: the network as ``model.pt`` holds it (``arch``, ``state_dict``, the
                  data's normalisation, your own model's code digest);
``answer.json``   rank 0's, after the weights: ``{"id", "sha256", "pause"}`` and where the
                  training stands (``train_seconds``, ``epoch``, ``step``, ``steps``, ``time``);
``done.json``     the watcher's, ``{"id"}``: it has evaluated them.

Rank 0 reads the request at the ranks' checks within an epoch (every
``checkpoints.preemption_check_steps`` steps; only in a run the workflow watches: the train
stage's ``--watched``) and at each epoch's end; the ranks agree on it in their check's
collective (:mod:`clusterbench.training.agreement`). Then, between two steps: the weights
written, the answer, and where the watcher runs on a host of the training's ranks, the ranks
wait until it is done (rank 0 polls ``done.json`` every :data:`POLL_SECONDS`, the others wait
in a broadcast of what it found), at most :data:`PAUSE_SECONDS`, less where the watcher's
process, on rank 0's host, has ended. A request already answered (its ``id``) is not answered
again; a watcher takes only the answer to its own.

The time from the check to going on (the weights, the answer, the wait) counts neither in the
epoch's time nor in the time box (``train_seconds``): an evaluation on the training's node runs
while the training waits, never beside its timed steps, and one elsewhere costs the training
the weights' write alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from clusterbench.core.atomic import atomic_path, write_json

#: The folder of the files, in the run's output folder.
WATCH_DIR = "watch"
REQUEST, WEIGHTS, ANSWER, DONE = "request.json", "weights.pt", "answer.json", "done.json"
#: Seconds between two looks of rank 0 at ``done.json`` while the training waits.
POLL_SECONDS = 0.2
#: The longest the training waits for an evaluation on its node.
PAUSE_SECONDS = 15 * 60


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``; None where it is missing, unreadable or no object (a file
    being replaced is read whole or not at all: every writer writes atomically)."""
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def alive(pid: Any) -> bool:
    """Whether process ``pid`` of this host exists (an unknown pid: taken to)."""
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class Lender:
    """Rank 0's side of the exchange (module docstring), and every rank's wait. ``hosts``: the
    training ranks' hosts; ``host``: rank 0's."""

    def __init__(self, out_dir: Path, hosts: set[str], host: str) -> None:
        self.dir = Path(out_dir) / WATCH_DIR
        self.hosts, self.host = hosts, host
        self.request: dict[str, Any] | None = None
        self.answered: str | None = None

    def asked(self) -> bool:
        """Rank 0: whether a request not answered yet is there (it is kept for the answer)."""
        found = read_json(self.dir / REQUEST)
        if not found or not isinstance(found.get("id"), str) or found["id"] == self.answered:
            return False
        self.request = found
        return True

    def lend(self, rt: Any, model_file: dict[str, Any], where: dict[str, Any]) -> float:
        """Every rank, after the ranks agreed on a request: rank 0 writes ``model_file`` (what
        ``model.pt`` would hold now) and the answer (``where``: where the training stands),
        then all wait while a watcher on their node evaluates. Returns the seconds it took."""
        began = time.perf_counter()
        pause = self.answer(model_file, where) if rt.rank == 0 else False
        if rt.broadcast_object(pause, name="train.lend"):
            waited = time.monotonic()
            while not rt.broadcast_object(
                self.finished(waited) if rt.rank == 0 else False, name="train.lend.wait"
            ):
                pass
        return time.perf_counter() - began

    def answer(self, model_file: dict[str, Any], where: dict[str, Any]) -> bool:
        """Rank 0: the weights, then the answer to the request; whether to wait for it."""
        import torch

        request = self.request or {}
        self.answered = request.get("id")
        self.dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.dir / WEIGHTS) as tmp:
            torch.save(model_file, tmp)
        digest = hashlib.sha256((self.dir / WEIGHTS).read_bytes()).hexdigest()
        pause = request.get("host") in self.hosts
        answer = {"id": self.answered, "sha256": digest, "pause": pause, **where}
        write_json(self.dir / ANSWER, answer)
        return pause

    def finished(self, since: float) -> bool:
        """Rank 0, waiting: whether the watcher is done (or gone, or out of time); sleeps
        :data:`POLL_SECONDS` where it is not."""
        if (read_json(self.dir / DONE) or {}).get("id") == self.answered:
            return True
        request = self.request or {}
        if request.get("host") == self.host and not alive(request.get("pid")):
            print("train: the evaluation asking for the weights has ended: going on", flush=True)
            return True
        if time.monotonic() - since > PAUSE_SECONDS:
            print(
                f"train: the evaluation on this node took over {PAUSE_SECONDS} s: going on",
                flush=True,
            )
            return True
        time.sleep(POLL_SECONDS)
        return False
