"""`make bench`: the clusterbench trainer against readable references, in one run.

```
.venv/bin/python benchmarks/bench.py [--quick] [--only digits,resnet,assembly,gpu] [--verbose]
```

Every row is one training (or measurement) in its own process, run one after the other, never
two at once: ``clusterbench`` rows through ``python -m clusterbench.launch --np W -- python
scripts/train.py`` exactly as the workflow runs them; the references are ``hand_loop.py`` (one
process) and ``plain_ddp.py`` (plain DistributedDataParallel, 2 processes, local BatchNorm);
``assembly.py`` builds batches as the trainer does, without a model. A row's images/s is the
median over its epochs after the first ``--warmup-epochs`` (default 1), training phase only.

Sections (same model, data, global batch and device within each):

* digits: small_cnn on the real digits data set (built offline), global batch 128, lr 0.05.
  F1 = clusterbench 1 worker / hand loop (goal >= 0.95), per backend.
  F3 = clusterbench 2 workers / plain DDP 2 processes (goal >= 0.9), per backend and bn mode.
* resnet: ResNet-20 on synthetic CIFAR-shaped arrays (compute-bound).
  F2 = (clusterbench 2 / clusterbench 1) / (plain DDP 2 / hand loop), per backend (goal >= 0.9).
* assembly: batch-assembly images/s / clusterbench 1-worker images/s, on the digits and on the
  resnet case (goal >= 20).
* gpu (only with CUDA): ResNet-20, CIFAR-shaped arrays, batch 512, bf16 autocast and
  channels_last: clusterbench 1 GPU / hand loop 1 GPU (goal >= 0.95).

CPU sections hide any GPU (``CUDA_VISIBLE_DEVICES=``) and drop ``OMP_NUM_THREADS`` /
``MKL_NUM_THREADS`` from the environment, so that every row uses the CPUs of its affinity mask
(divided among its processes). Failed rows are reported with the tail of their output and do
not stop the others; the exit status is 1 when any row failed, else 0 (nothing is asserted).
Results: ``benchmarks/results/<short hostname>-<YYYY-MM-DD>[-quick].json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_data import build_digits, make_cifar_like

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SECTIONS = ("digits", "resnet", "assembly", "gpu")
BACKENDS = ("horovod", "ddp")
TAIL_LINES = 15


# --------------------------------------------------------------------------------------------
# What is run: sections (a data set and training settings) and rows (one process tree each)


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
    channels_last: bool = False


@dataclasses.dataclass(frozen=True)
class Spec:
    """A row: ``kind`` is hand (hand_loop.py), ddp (plain_ddp.py), cb (the trainer) or
    assembly (assembly.py)."""

    case: str
    kind: str
    workers: int = 1
    backend: str | None = None
    bn: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "hand":
            return "hand loop, 1 process"
        if self.kind == "ddp":
            return f"plain DDP, {self.workers} processes"
        if self.kind == "assembly":
            return "batch assembly only"
        bn = f", bn {self.bn}" if self.workers > 1 else ""
        return f"clusterbench {self.backend}, {self.workers} worker(s){bn}"


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

    def as_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["spec"] = {**dataclasses.asdict(self.spec), "label": self.spec.label}
        return d


def run_config(case: Case, spec: Spec) -> dict[str, Any]:
    """The trainer's ``--run`` slice (every key of ``clusterbench.config.TRAIN_KEYS``)."""
    return {
        "name": f"bench-{case.name}-{spec.backend}-{spec.workers}w-{spec.bn}",
        "dataset": case.dataset,
        "model": case.model,
        "workers": spec.workers,
        "nodes": 1,
        "gpus_per_node": 1 if case.gpu else 0,
        "epochs": case.epochs,
        "minutes": None,
        "batch_size": case.batch_size,
        "lr": case.lr,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "warmup_epochs": 0,  # a constant LR, as the references (it costs the same either way)
        "seed": 1,
        "backend": spec.backend or "horovod",
        "bn": spec.bn or "aggregate",
        "batch_scaling": "global",
        "deterministic": False,
        "precision": case.precision,
        "channels_last": case.channels_last,
        "min_workers": None,  # a fixed world (no Horovod elastic)
        "max_workers": None,
    }


def command(case: Case, spec: Spec, out: Path, assembly_args: Sequence[str]) -> list[str]:
    py = sys.executable
    run = json.dumps(run_config(case, spec))
    io = ["--data-dir", str(case.data_dir), "--out-dir", str(out)]
    if spec.kind == "cb":
        train = [py, str(REPO / "scripts" / "train.py"), *io, "--run", run]
        return [py, "-m", "clusterbench.launch", "--np", str(spec.workers), "--", *train]
    if spec.kind == "hand":
        return [py, str(HERE / "hand_loop.py"), *io, "--run", run]
    if spec.kind == "ddp":
        return [py, str(HERE / "plain_ddp.py"), *io, "--nproc", str(spec.workers), "--run", run]
    if spec.kind == "assembly":
        size = ["--batch-size", str(case.batch_size)]
        return [py, str(HERE / "assembly.py"), *io, *size, *assembly_args]
    raise ValueError(spec.kind)


# --------------------------------------------------------------------------------------------
# Running one row


def child_env(gpu: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONUNBUFFERED"] = "1"
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU sections stay on the CPU even on a GPU host
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

        def kill() -> None:
            timed_out.set()
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

        timer = threading.Timer(timeout, kill)
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
            kill()
            raise
        finally:
            timer.cancel()
        if timed_out.is_set():
            fh.write(f"\nbench: killed after the --timeout of {timeout:.0f} s\n")
            rc = rc or 124
    return rc, time.monotonic() - start, timed_out.is_set()


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    return "\n".join(text[-lines:])


def summarise(row: Row, warmup: int) -> None:
    """The row's median images/s and epoch seconds over the epochs after ``warmup``."""
    steady = [r for r in row.epochs if r["epoch"] > warmup] or row.epochs
    row.measured_epochs = [r["epoch"] for r in steady]
    if steady:
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
        slug = "-".join(str(p) for p in dataclasses.astuple(spec) if p is not None)
        out = self.work / "runs" / slug
        log = self.work / "logs" / f"{slug}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out, ignore_errors=True)  # no stale metrics.jsonl from a kept --work-dir
        cmd = command(case, spec, out, self.args.assembly_args)
        where = f"[{spec.case}, round {self.round}]"
        print(f"{where} {spec.label} ...", end="\n" if self.args.verbose else " ", flush=True)
        env = child_env(case.gpu)
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
        per_epoch = " ".join(f"{r['images_per_second']:.0f}" for r in row.epochs)
        print(
            f"{row.images_per_second:.0f} images/s (per epoch: {per_epoch}; wall {wall:.0f} s)",
            flush=True,
        )
        return row


# --------------------------------------------------------------------------------------------
# Figures


@dataclasses.dataclass
class Figure:
    name: str
    what: str
    goal: float
    value: float | None = None
    detail: str = ""
    rows: list[str] = dataclasses.field(default_factory=list)

    @property
    def met(self) -> str:
        return "n/a" if self.value is None else ("yes" if self.value >= self.goal else "no")

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "met": self.met}


def _rate(runner: Runner, spec: Spec) -> tuple[float | None, str]:
    row = runner.row(spec)
    if row is None or row.images_per_second is None:
        return None, f"{spec.case}: {spec.label}: {'failed' if row else 'not run'}"
    return row.images_per_second, ""


def ratio_figure(
    runner: Runner, name: str, what: str, goal: float, num: Spec, den: Spec, scale: float = 1.0
) -> Figure:
    fig = Figure(name, what, goal, rows=[f"{s.case}: {s.label}" for s in (num, den)])
    a, why_a = _rate(runner, num)
    b, why_b = _rate(runner, den)
    if a is None or b is None:
        fig.detail = "; ".join(w for w in (why_a, why_b) if w)
    else:
        fig.value = a / b * scale
        fig.detail = f"{a:.0f} / {b:.0f} images/s"
    return fig


def scaling_figure(runner: Runner, backend: str) -> Figure:
    """F2: clusterbench's 1 -> 2 worker speed-up relative to plain DDP's over the hand loop."""
    cb1 = Spec("resnet", "cb", 1, backend, "aggregate")
    cb2 = Spec("resnet", "cb", 2, backend, "aggregate")
    hand, ddp = Spec("resnet", "hand"), Spec("resnet", "ddp", 2)
    fig = Figure(
        f"F2 {backend}",
        f"resnet: (clusterbench {backend} 2w / 1w) / (plain DDP 2p / hand loop)",
        0.9,
        rows=[f"resnet: {s.label}" for s in (cb2, cb1, ddp, hand)],
    )
    rates = [_rate(runner, s) for s in (cb2, cb1, ddp, hand)]
    if any(r is None for r, _ in rates):
        fig.detail = "; ".join(w for r, w in rates if r is None)
        return fig
    (c2, _), (c1, _), (d2, _), (h1, _) = rates
    fig.value = (c2 / c1) / (d2 / h1)
    fig.detail = f"speed-up {c2 / c1:.2f} (clusterbench) vs {d2 / h1:.2f} (plain DDP)"
    return fig


def combine_rounds(per_round: Sequence[Figure]) -> list[Figure]:
    """One figure per name: the median of its per-round values (rounds that failed left out)."""
    by_name: dict[str, list[Figure]] = {}
    for fig in per_round:
        by_name.setdefault(fig.name, []).append(fig)
    out = []
    for figs in by_name.values():
        values = [f.value for f in figs if f.value is not None]
        fig = dataclasses.replace(figs[0], value=statistics.median(values) if values else None)
        shown = ", ".join("failed" if f.value is None else f"{f.value:.3g}" for f in figs)
        fig.detail = f"rounds: {shown}" + (f"; round 1: {figs[0].detail}" if len(figs) > 1 else "")
        if len(figs) == 1:
            fig.detail = figs[0].detail
        out.append(fig)
    return out


def section_order(case: str) -> int:
    return next((i for i, s in enumerate(SECTIONS) if case.startswith(s)), len(SECTIONS))


# --------------------------------------------------------------------------------------------
# Sections


def run_digits(runner: Runner, backends: Sequence[str]) -> list[Figure]:
    figs = []
    hand, ddp = Spec("digits", "hand"), Spec("digits", "ddp", 2)
    for spec in (hand, *(Spec("digits", "cb", 1, b, "aggregate") for b in backends), ddp):
        runner.get(spec)
    for b in backends:
        for bn in ("aggregate", "local"):
            runner.get(Spec("digits", "cb", 2, b, bn))
    for b in backends:
        cb1 = Spec("digits", "cb", 1, b, "aggregate")
        what = f"digits: clusterbench {b} 1 worker / hand loop"
        figs.append(ratio_figure(runner, f"F1 {b}", what, 0.95, cb1, hand))
    for b in backends:
        for bn in ("aggregate", "local"):
            cb2 = Spec("digits", "cb", 2, b, bn)
            what = f"digits: clusterbench {b} 2 workers (bn {bn}) / plain DDP 2 processes"
            figs.append(ratio_figure(runner, f"F3 {b} bn={bn}", what, 0.9, cb2, ddp))
    return figs


def run_resnet(runner: Runner, backends: Sequence[str]) -> list[Figure]:
    runner.get(Spec("resnet", "hand"))
    runner.get(Spec("resnet", "ddp", 2))
    for b in backends:
        runner.get(Spec("resnet", "cb", 1, b, "aggregate"))
        runner.get(Spec("resnet", "cb", 2, b, "aggregate"))
    return [scaling_figure(runner, b) for b in backends]


def run_assembly(runner: Runner, backends: Sequence[str]) -> list[Figure]:
    figs = []
    for case in ("digits", "resnet"):
        assembly = Spec(f"assembly-{case}", "assembly")
        runner.get(assembly)
        for b in backends:
            cb1 = Spec(case, "cb", 1, b, "aggregate")
            runner.get(cb1)  # already run by its own section, unless that was left out
            what = f"{case}: batch assembly / clusterbench {b} 1-worker consumption"
            figs.append(ratio_figure(runner, f"F4 {case} {b}", what, 20.0, assembly, cb1))
    return figs


def run_gpu(runner: Runner, backends: Sequence[str]) -> list[Figure]:
    hand = Spec("gpu", "hand")
    runner.get(hand)
    figs = []
    for b in backends:
        cb1 = Spec("gpu", "cb", 1, b, "aggregate")
        runner.get(cb1)
        what = f"gpu resnet bf16+channels_last: clusterbench {b} 1 GPU / hand loop 1 GPU"
        figs.append(ratio_figure(runner, f"F5 {b}", what, 0.95, cb1, hand))
    return figs


# --------------------------------------------------------------------------------------------
# Machine, output


def machine() -> dict[str, Any]:
    from clusterbench.provenance import collect

    info = collect(REPO)
    info["cpus_usable"] = len(os.sched_getaffinity(0))
    info["gpus"] = info["gpus"] or "none"
    return info


def print_tables(rows: Sequence[Row], figures: Sequence[Figure], warmup: int) -> None:
    print()
    print(f"Rows (images/s and epoch s: medians over epochs > {warmup}; wall s: whole command)")
    print(
        f"{'section':<16} {'row':<50} {'round':>5} {'status':<7} {'images/s':>9} {'epoch s':>8} "
        f"{'wall s':>7}"
    )
    for r in sorted(rows, key=lambda r: (section_order(r.spec.case), r.spec.label, r.round)):
        ips = f"{r.images_per_second:.0f}" if r.images_per_second is not None else "-"
        eps = f"{r.epoch_seconds:.3f}" if r.epoch_seconds is not None else "-"
        print(
            f"{r.spec.case:<16} {r.spec.label:<50} {r.round:>5} {r.status:<7} {ips:>9} {eps:>8} "
            f"{r.wall_seconds:>7.1f}"
        )
    print()
    print("Figures (ratios of the rows' median images/s within a round; median over the rounds)")
    print(f"{'figure':<24} {'value':>8} {'goal':>8} {'met':<4} detail")
    for f in figures:
        value = "-" if f.value is None else f"{f.value:.{3 if f.value < 100 else 0}f}"
        goal = f">= {f.goal:g}"
        print(f"{f.name:<24} {value:>8} {goal:>8} {f.met:<4} {f.detail}")
        print(f"{'':<24} {'':>8} {'':>8} {'':<4} {f.what}")


def case_json(case: Case) -> dict[str, Any]:
    meta = json.loads((case.data_dir / "meta.json").read_text())
    return {**dataclasses.asdict(case), "data_dir": None, "images": meta["counts"]}


def results_path(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    host = socket.gethostname().split(".")[0] or "unknown"
    suffix = "-quick" if args.quick else ""
    return HERE / "results" / f"{host}-{dt.date.today().isoformat()}{suffix}.json"


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, 3 epochs (development)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    p.add_argument("--backends", default=",".join(BACKENDS), help="trainer backends to run")
    p.add_argument("--warmup-epochs", type=int, default=1, help="epochs left out of the medians")
    p.add_argument("--rounds", type=int, help="times every row runs, interleaved (default 3)")
    p.add_argument("--digits-epochs", type=int, help="default 20 (quick: 3)")
    p.add_argument("--resnet-train", type=int, help="training images, default 768 (quick: 192)")
    p.add_argument("--resnet-batch", type=int, help="global batch, default 128 (quick: 64)")
    p.add_argument("--resnet-epochs", type=int, help="default 6 (quick: 3)")
    p.add_argument("--gpu-train", type=int, help="training images, default 50000 (quick: 4096)")
    p.add_argument("--gpu-epochs", type=int, help="default 6 (quick: 3)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per row before killing it")
    p.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/...)")
    p.add_argument("--work-dir", type=Path, help="keep data, run dirs and logs here")
    p.add_argument("--verbose", action="store_true", help="stream every row's output")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [s for s in args.sections if s not in SECTIONS]
    bad += [b for b in args.backends if b not in BACKENDS]
    if bad:
        p.error(f"unknown section(s)/backend(s) {bad}: sections {SECTIONS}, backends {BACKENDS}")
    q = args.quick
    defaults = {
        "rounds": 1 if q else 3,
        "digits_epochs": 3 if q else 20,
        "resnet_train": 192 if q else 768,
        "resnet_batch": 64 if q else 128,
        "resnet_epochs": 3 if q else 6,
        "gpu_train": 4096 if q else 50000,
        "gpu_epochs": 3 if q else 6,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    epochs = 3 if q else 8
    args.assembly_args = ["--epochs", str(epochs), "--min-seconds", "0.2" if q else "0.5"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    from clusterbench.config import TRAIN_KEYS

    has_gpu = torch.cuda.is_available()
    info = machine()
    print(
        f"clusterbench benchmark{' (--quick)' if args.quick else ''}: {info['host']}, "
        f"{info['cpu_model']}, {info['cpus_usable']} usable CPU(s), GPUs: {info['gpus']}, "
        f"torch {info['versions']['torch']}, horovod {info['versions']['horovod']}, "
        f"python {info['versions']['python']}"
    )
    print(
        f"sections {','.join(args.sections)}; backends {','.join(args.backends)}; medians over "
        f"epochs > {args.warmup_epochs} (epoch 1 includes one-off start-up costs)"
    )

    with tempfile.TemporaryDirectory(prefix="clusterbench-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        need = set(args.sections)
        cases: dict[str, Case] = {}
        if need & {"digits", "assembly"}:
            print("building the digits data set (offline) ...", flush=True)
            logging.disable(logging.INFO)  # the download/preprocess stages' progress lines
            digits = build_digits(work / "digits")
            logging.disable(logging.NOTSET)
            cases["digits"] = Case(
                "digits", "digits", "small_cnn", digits, args.digits_epochs, 128, 0.05
            )
        if need & {"resnet", "assembly"}:
            cifar = make_cifar_like(work / "data" / "cifar-cpu", args.resnet_train)
            cases["resnet"] = Case(
                "resnet", "cifar10", "resnet", cifar, args.resnet_epochs, args.resnet_batch, 0.05
            )
        for name in ("digits", "resnet"):
            if name in cases:
                cases[f"assembly-{name}"] = dataclasses.replace(
                    cases[name], name=f"assembly-{name}"
                )
        if "gpu" in need and has_gpu:
            cifar = make_cifar_like(work / "data" / "cifar-gpu", args.gpu_train)
            cases["gpu"] = Case(
                "gpu", "cifar10", "resnet", cifar, args.gpu_epochs, 512, 0.05,
                gpu=True, precision="bf16", channels_last=True,
            )  # fmt: skip
        if cases:
            keys = set(run_config(next(iter(cases.values())), Spec("", "cb")))
            if keys != set(TRAIN_KEYS):
                print(f"WARNING: the run keys differ from TRAIN_KEYS in: {keys ^ set(TRAIN_KEYS)}")

        runner = Runner(cases, work, args)
        per_round: list[Figure] = []
        skipped: list[str] = []
        started = time.monotonic()
        if "gpu" in need and not has_gpu:
            skipped.append("gpu: skipped (no GPU: torch.cuda.is_available() is False)")
            print(skipped[-1], flush=True)
        # Rounds interleave the rows, so that a slow spell of the machine hits every row alike;
        # each figure is computed within a round, then the median over the rounds is reported.
        for runner.round in range(1, args.rounds + 1):
            for section in SECTIONS:
                if section not in need or (section == "gpu" and not has_gpu):
                    continue
                run = {
                    "digits": run_digits,
                    "resnet": run_resnet,
                    "assembly": run_assembly,
                    "gpu": run_gpu,
                }[section]
                per_round += run(runner, args.backends)
        figures = combine_rounds(per_round)
        cases_json = {k: case_json(c) for k, c in cases.items()}  # before tmp goes

    rows = list(runner.rows.values())
    print_tables(rows, figures, args.warmup_epochs)
    for line in skipped:
        print(line)
    failed = [r for r in rows if r.status != "ok"]
    total = time.monotonic() - started
    print(f"{len(rows)} row(s) in {total:.0f} s; {len(failed)} failed")

    settings = {
        k: v
        for k, v in vars(args).items()
        if k not in ("out", "work_dir", "only") and not isinstance(v, Path)
    }
    result = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": info,
        "settings": settings,
        "cases": cases_json,
        "medians_exclude_epochs": list(range(1, args.warmup_epochs + 1)),
        "rows": [r.as_json() for r in rows],
        "figures": [f.as_json() for f in figures],
        "skipped": skipped,
        "total_seconds": total,
    }
    path = results_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, default=str) + "\n"
    # no machine paths in a file meant to be kept: the interpreter, the work dir, the checkout
    for where, name in ((sys.executable, "python"), (str(work), "<work>"), (str(REPO), "<repo>")):
        text = text.replace(json.dumps(where)[1:-1], name)
    path.write_text(text)
    print(f"results: {path}")
    if failed:
        print("failed rows: " + "; ".join(f"{r.spec.case}: {r.spec.label}" for r in failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
