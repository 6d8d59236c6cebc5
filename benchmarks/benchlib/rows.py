"""Rows: one training (or measurement) each, in its own process tree, run one after the other.

A :class:`Case` is what every row of a section shares (model, data, global batch, device); a
:class:`Spec` one row: the clusterbench trainer (``kind="cb"``, started exactly as the workflow
starts it: ``python -m clusterbench.launch --np W -- python scripts/train.py``) or a reference
script of ``benchmarks/`` (``kind`` = its name: ``hand_loop``, ``plain_ddp``, ...), which takes
``--data-dir``, ``--out-dir``, ``--run`` (the trainer's run slice) and, for several processes,
``--nproc``. Every row writes ``metrics.jsonl`` (the trainer's format); its images/s is the
median over its epochs after the warm-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent
TAIL_LINES = 15


@dataclasses.dataclass(frozen=True)
class Case:
    """One model + data + global batch + device: all rows of a section share it."""

    name: str
    dataset: str  # meta.json dataset
    model: str
    data_dir: Path
    epochs: int
    batch_size: int
    lr: float
    gpu: bool = False
    precision: str = "fp32"
    channels_last: str | bool = "auto"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A row: ``kind`` is ``cb`` (the trainer) or a reference script's name. ``run`` holds
    run keys that differ from the case's (a pair per key: hashable), ``data`` the trainer's
    ``--data-settings`` that differ from the schema's defaults (``loading``, ``loader_workers``:
    how it reads the data, no run key), ``env`` environment variables of the row's processes,
    ``args`` further arguments of a script, ``label`` what the tables call it (made from the
    rest when empty), ``wrap`` a command each rank of a ``cb`` row runs the trainer under."""

    case: str
    kind: str
    workers: int = 1
    backend: str | None = None
    bn: str | None = None
    run: tuple[tuple[str, Any], ...] = ()
    data: tuple[tuple[str, Any], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    label: str = ""
    #: ``cb`` rows: a command each rank runs the trainer under (``slowed_rank.py``)
    wrap: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.kind == "cb":
            bn = f", bn {self.bn}" if self.workers > 1 else ""
            extra = "".join(f", {k} {v}" for k, v in (*self.run, *self.data, *self.env))
            return f"clusterbench {self.backend}, {self.workers} worker(s){bn}{extra}"
        procs = f", {self.workers} processes" if self.workers > 1 else ", 1 process"
        return f"{self.kind.replace('_', ' ')}{procs}"

    @property
    def slug(self) -> str:
        parts = [self.case, self.kind, str(self.workers), self.backend, self.bn]
        parts += [f"{k}={v}" for k, v in (*self.run, *self.data, *self.env)] + list(self.args)
        parts += [Path(w).stem for w in self.wrap[-1:]]
        return "-".join(str(p).replace("/", "_") for p in parts if p is not None)


@dataclasses.dataclass
class Row:
    spec: Spec
    round: int  # 1-based: every row runs once per round
    status: str  # ok | failed
    command: list[str]
    wall_seconds: float
    epochs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    images_per_second: float | None = None  # median over the epochs after the warm-up
    epoch_seconds: float | None = None
    measured_epochs: list[int] = dataclasses.field(default_factory=list)
    error: str | None = None
    #: What the trainer's run.json adds (:func:`run_facts`): compile time, TFLOP/s, MFU.
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)

    def median(self, key: str) -> float | None:
        """The median of ``key`` over the measured epochs (None where none has it)."""
        values = [r[key] for r in self.epochs if r["epoch"] in self.measured_epochs and key in r]
        return statistics.median(values) if values else None

    def as_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["spec"] = {**dataclasses.asdict(self.spec), "label": self.spec.name}
        return d


def run_config(case: Case, spec: Spec) -> dict[str, Any]:
    """The trainer's ``--run`` slice of a row: the schema's defaults, the case, the row."""
    from clusterbench.config import TRAIN_KEYS, load_schema

    settings = load_schema()["$defs"]["run_settings"]["properties"]
    run = {key: settings[key].get("default") for key in TRAIN_KEYS}
    run.update(
        name=f"bench-{spec.slug}"[:100],
        dataset=case.dataset,
        model=case.model,
        workers=spec.workers,
        gpus_per_node=1 if case.gpu else 0,
        epochs=case.epochs,
        batch_size=case.batch_size,
        lr=case.lr,
        warmup_epochs=0,  # a constant LR, as the references (it costs the same either way)
        backend=spec.backend or "horovod",
        bn=spec.bn or "aggregate",
        precision=case.precision,
        channels_last=case.channels_last,
    )
    run.update(dict(spec.run))
    return run


def command(case: Case, spec: Spec, out: Path) -> list[str]:
    py = sys.executable
    run = json.dumps(run_config(case, spec))
    io = ["--data-dir", str(case.data_dir), "--out-dir", str(out)]
    if spec.kind == "cb":
        train = [py, str(REPO / "scripts" / "train.py"), *io, "--run", run]
        if spec.data:
            train += ["--data-settings", json.dumps(data_settings(spec))]
        launch = [py, "-m", "clusterbench.launch", "--np", str(spec.workers), "--"]
        return [*launch, *spec.wrap, *train]
    nproc = ["--nproc", str(spec.workers)] if spec.workers > 1 else []
    return [py, str(HERE / f"{spec.kind}.py"), *io, "--run", run, *nproc, *spec.args]


def data_settings(spec: Spec) -> dict[str, Any]:
    """The trainer's ``--data-settings`` of a row: the schema's defaults, the row's."""
    from clusterbench.config import stage_params

    return stage_params("data_settings", dict(spec.data), what="--data-settings")


def child_env(gpu: bool, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONUNBUFFERED"] = "1"
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU sections stay on the CPU even on a GPU host
    env.update(dict(extra))
    return env


def run_process(
    cmd: list[str], log: Path, env: dict[str, str], timeout: float, verbose: bool
) -> tuple[int, float, bool]:
    """Run ``cmd`` in its own process group, output to ``log`` (and the terminal if verbose).
    Past ``timeout`` seconds its group gets SIGTERM, then SIGKILL.
    Returns (exit status, wall seconds, timed out)."""
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        timed_out = threading.Event()
        timer = threading.Timer(timeout, lambda: (timed_out.set(), stop_group(proc)))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                fh.write(line)
                if verbose:
                    print(f"    | {line}", end="", flush=True)
            rc = proc.wait()
        except BaseException:  # Ctrl-C: its own session does not get the SIGINT, so stop it
            timer.cancel()
            stop_group(proc)
            raise
        finally:
            timer.cancel()
        if timed_out.is_set():
            fh.write(f"\nbench: killed after the --timeout of {timeout:.0f} s\n")
            rc = rc or 124
    return rc, time.monotonic() - start, timed_out.is_set()


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group, SIGKILL 10 s later if it is still there."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            pass


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    return "\n".join(text[-lines:])


def run_facts(info: dict[str, Any], row: Row) -> dict[str, Any]:
    """A trainer row's figures from its ``run.json``: whether it compiled and in how many
    seconds (apart from the epochs), and its achieved TFLOP/s and MFU over the measured epochs
    (:func:`clusterbench.records.flops.efficiency`; None where not known)."""
    import math

    from clusterbench.records.flops import efficiency

    measured = [r for r in row.epochs if r["epoch"] in row.measured_epochs]
    figures = efficiency(info, measured)
    return {
        "compiled": (info.get("effective") or {}).get("compile"),
        "compile_seconds": info.get("compile_seconds"),
        **{k: None if math.isnan(v) else v for k, v in figures.items()},
        "peak_source": ((info.get("flops") or {}).get("peak") or {}).get("source"),
    }


def summarise(row: Row, warmup: int) -> None:
    """The row's median images/s and epoch seconds over the epochs after ``warmup`` (a
    measurement of something else, bytes/s, has neither: :meth:`Row.median` reads it)."""
    steady = [r for r in row.epochs if r["epoch"] > warmup] or row.epochs
    row.measured_epochs = [r["epoch"] for r in steady]
    if steady and "images_per_second" in steady[0]:
        row.images_per_second = statistics.median(r["images_per_second"] for r in steady)
        row.epoch_seconds = statistics.median(r["epoch_seconds"] for r in steady)


class Runner:
    """Runs rows on demand, each at most once per round, one at a time."""

    def __init__(self, cases: dict[str, Case], work: Path, args: argparse.Namespace) -> None:
        self.cases, self.work, self.args = cases, work, args
        self.rows: dict[tuple[Spec, int], Row] = {}
        self.round = 1

    def get(self, spec: Spec) -> Row:
        key = (spec, self.round)
        if key not in self.rows:
            self.rows[key] = self._run(spec)
        return self.rows[key]

    def row(self, spec: Spec) -> Row | None:
        """The row of ``spec`` in the current round, if it ran."""
        return self.rows.get((spec, self.round))

    def _run(self, spec: Spec) -> Row:
        case = self.cases[spec.case]
        out = self.work / "runs" / spec.slug
        log = self.work / "logs" / f"{spec.slug}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out, ignore_errors=True)  # no stale metrics.jsonl from a kept --work-dir
        cmd = command(case, spec, out)
        where = f"[{spec.case}, round {self.round}]"
        print(f"{where} {spec.name} ...", end="\n" if self.args.verbose else " ", flush=True)
        env = child_env(case.gpu, spec.env)
        rc, wall, timed_out = run_process(cmd, log, env, self.args.timeout, self.args.verbose)
        row = Row(spec=spec, round=self.round, status="ok", command=cmd, wall_seconds=wall)
        metrics = out / "metrics.jsonl"
        if metrics.is_file():
            row.epochs = [json.loads(line) for line in metrics.read_text().splitlines() if line]
        if rc != 0 or not row.epochs:
            row.status = "failed"
            why = f"timed out after {wall:.0f} s" if timed_out else f"exit {rc}, {wall:.0f} s"
            row.error = f"{why}; last lines of the output:\n{tail(log)}"
            print(f"FAILED ({why}); log tail:", flush=True)
            print("\n".join(f"    {line}" for line in tail(log).splitlines()), flush=True)
            return row
        summarise(row, self.args.warmup_epochs)
        if (out / "run.json").is_file():  # the trainer's (the references write none)
            row.facts = run_facts(json.loads((out / "run.json").read_text()), row)
        if "tokens_per_second" in row.epochs[0]:  # a language model's
            unit = "tokens/s"
        elif row.images_per_second is not None or "bytes_per_second" in row.epochs[0]:
            unit = "images/s" if row.images_per_second is not None else "bytes/s"
        else:
            unit = "s"  # a measurement in seconds (an indexing, a dry run)
        key = unit.replace("/s", "_per_second") if unit != "s" else "seconds"
        per_epoch = " ".join(f"{r[key]:.0f}" for r in row.epochs)
        print(
            f"{row.median(key):.0f} {unit} (per epoch: {per_epoch}; wall {wall:.0f} s)",
            flush=True,
        )
        return row
