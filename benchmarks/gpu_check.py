"""`make gpu-check`: one command for a machine with a GPU; the images/s it trains at, its
model-FLOPs utilisation (MFU), and the rate it decodes JPEGs at.

```
.venv/bin/python benchmarks/gpu_check.py [--minutes 0.5] [--work-dir results/gpu-check]
.venv/bin/python benchmarks/gpu_check.py --cpu-smoke     # the same steps on the CPU, tiny
```

Three steps, one after the other (never two trainings at once), each with its time printed:

1. the GPU tests: ``pytest -m gpu`` (tests/test_gpu.py: one GPU under each backend, bf16 with
   channels-last, data resident on the GPU, a compiled run against an eager one, JPEGs decoded
   and augmented on the GPU against the CPU path, a run on an image folder decoded there; two
   GPUs where there are two). Their collection imports no cluster executor plugin (a GPU
   machine's offline set-up may lack them);
2. bench: ``benchmarks/bench.py --only gpu,decode --rounds 1`` (F5: ResNet-20, CIFAR-shaped
   arrays, bf16 + channels-last, clusterbench 1 GPU / a hand-written loop, per backend, and the
   same run with ``compile: true`` beside it; the decode section: ImageNet-sized JPEGs made into
   ResNet-50's batches on one GPU, decoded and augmented there against this node's CPUs);
3. the workflow on ``config/gpu-check.yaml``: a torchvision ResNet-50 on synthetic 224x224
   images, bf16, channels-last, time-boxed to ``--minutes`` under each backend (Horovod twice:
   the gradients allreduced in one buffer after backward, ``grad_allreduce: one``, and in
   buckets during backward, ``buckets``; DDP), on every GPU of the machine (one rank each); and
   the same model under DDP on a small folder of JPEGs read in place (made here, in the working
   directory), decoded and augmented on the GPUs (``decode: auto``); evaluated and reported, in
   a working directory of its own (default ``results/gpu-check/``, kept: its
   ``results/report/report.pdf``).

It ends with one table: every run's and bench row's images/s (all GPUs, and per GPU: the median
over the epochs after the first, as the report times them), its MFU (model FLOPs achieved over
the GPUs' peak from the table of clusterbench.training.peaks), and the decode rows' images/s
(the decode rate); then how each run's gradients were allreduced and its exposed
communication, the figures (F5, C, G), the steps' times and the GPUs; the exit status is 0 only
when every step passed. It is sized for one call of under 10 minutes on one H100 or H200
(tests about 3, bench about 3, three 30-second trainings with their start, evaluation and
report about 3); not yet run on a GPU in this form. On one GPU nothing is exchanged, so the
Horovod run with buckets is left out (it would train exactly what the one-buffer run trains);
with two or more, the two Horovod rows are the measurement of ``grad_allreduce: auto``'s rule
on GPUs.

Without a CUDA GPU it stops at once with exit status 2, saying so. ``--cpu-smoke`` runs the same
three steps on this machine's CPU at tiny sizes (the GPU tests and the bench's GPU sections then
skip themselves; the workflow trains the same ResNet-50, bf16 and channels-last, on 32x32
images for one epoch of a few steps, 2 ranks per backend, and on a folder of small JPEGs,
decoded on the CPU, where ``decode: auto`` decodes there): it checks the command, not a GPU,
and its images/s and MFU mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONFIG = REPO / "config" / "gpu-check.yaml"
#: Seconds a step may take before it is stopped (the whole check aims at under 10 minutes).
STEP_TIMEOUT = {"tests": 600, "bench": 600, "workflow": 1200}
#: The bench step's sections and sizes (F5's epochs fewer than bench's own 6: the time box).
BENCH_ARGS = ("--only", "gpu,decode", "--rounds", "1", "--gpu-epochs", "4")
BENCH_GPU_ARGS = ("--loader-images", "1024", "--loader-epochs", "3")
#: The JPEG folder the workflow's decode run reads in place: (images, classes, distinct images,
#: their size) on GPUs, and under --cpu-smoke.
JPEGS = {"gpu": (2048, 8, 256, (500, 375)), "cpu": (48, 2, 48, (48, 40))}
#: The run on it (config/gpu-check.yaml's other runs' model and settings).
JPEG_RUN = {"name": "resnet50-jpegs-ddp", "dataset": "jpegs", "backend": "ddp", "decode": "auto"}

#: What --cpu-smoke changes in config/gpu-check.yaml: a few CPU steps on tiny images.
CPU_SMOKE = {
    "dataset": {
        "shape": [3, 32, 32],
        "samples": 96,
        "val_fraction": 0.25,
        "test_fraction": 0.25,
        "min_split_size": 8,
    },
    "run_defaults": {
        "workers": 2,
        "gpus_per_node": 0,
        "epochs": 1,
        "minutes": None,
        "batch_size": 8,
        "mem_mb": 2000,
    },
    "jpegs": {"val_fraction": 0.25, "test_fraction": 0.25, "min_split_size": 8},
    # the comm stage's sizes: up to 64 KiB (its defaults, up to 256 MiB at 0.2 s a size, took
    # about 55 s a backend on 2 CPU cores)
    "comm": {"max_bytes": 2**16, "seconds_per_size": 0.005},
}


def no_gpu_message() -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (
        "make gpu-check needs a CUDA GPU, and this machine has none that torch can use "
        f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}; "
        f"torch.cuda.is_available() is False"
        + (f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
        + "). Run it on a machine with an NVIDIA GPU and its driver. To run the same steps on "
        "this CPU at tiny sizes (a check of the command, no GPU figure): "
        "make gpu-check GPU_CHECK_ARGS=--cpu-smoke"
    )


def check_config(
    gpus: int, minutes: float, cpu_smoke: bool, jpegs: Path | None = None
) -> dict[str, Any]:
    """config/gpu-check.yaml for this machine: one rank per GPU, ``minutes`` per backend; with
    ``cpu_smoke``, its tiny CPU form (:data:`CPU_SMOKE`); with ``jpegs`` (a folder of class
    folders), the run that reads it in place, decoding on the GPUs (:data:`JPEG_RUN`)."""
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    runs = config["run_defaults"]
    if jpegs is not None:
        side = 32 if cpu_smoke else 224
        config["datasets"]["jpegs"] = {
            "format": "image-folder",
            "path": str(jpegs),
            "image_size": [side, side],
        }
        config["runs"].append(dict(JPEG_RUN))
        if cpu_smoke:  # a few dozen images: splits of a dozen
            config["datasets"]["jpegs"].update(CPU_SMOKE["jpegs"])
    if cpu_smoke:
        for name, dataset in config["datasets"].items():
            if name != "jpegs":
                dataset.update(CPU_SMOKE["dataset"])
        runs.update(CPU_SMOKE["run_defaults"])
        config["comm"] = {**config.get("comm", {}), **CPU_SMOKE["comm"]}
        config["report"]["title"] = "make gpu-check --cpu-smoke (CPU, tiny: no GPU figure)"
    else:
        runs.update({"workers": gpus, "gpus_per_node": gpus, "minutes": minutes})
    if gpus == 1:  # one GPU exchanges nothing: Horovod's two ways to allreduce are one run
        config["runs"] = [r for r in config["runs"] if r.get("grad_allreduce") != "buckets"]
    return config


def run_step(name: str, cmd: list[str], log: Path, cwd: Path = REPO) -> tuple[int, float]:
    """Run one step, its output to the terminal and ``log``; (exit status, seconds)."""
    print(f"\n== {name}: {' '.join(cmd)}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "workflow"), env.get("PYTHONPATH", "")) if p
    )
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            print(f"   {line}", end="", flush=True)
        try:
            rc = proc.wait(timeout=STEP_TIMEOUT.get(name, 600))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = 124
    seconds = time.monotonic() - start
    print(f"== {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {seconds:.0f} s")
    return rc, seconds


def run_summary(run_dir: Path) -> dict[str, Any]:
    """One run's throughput from its run.json and metrics.jsonl: images/s of every epoch, the
    median over the epochs after the first (all of them if there is one), its MFU over those
    epochs, where it decoded its images, the GPUs."""
    from clusterbench.records.flops import efficiency

    info = json.loads((run_dir / "run.json").read_text())
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [e["images_per_second"] for e in epochs]
    timed = rates[1:] or rates
    world = info["world"]
    shares = [comm_share(e["step_seconds"]) for e in epochs[1:] or epochs if e.get("step_seconds")]
    effective = info.get("effective", {})
    mfu = efficiency(info, epochs[1:] or epochs)["mfu"]
    return {
        "backend": world["backend"],
        "ranks": world["size"],
        "device": world["device"],
        "gpu_names": world.get("gpu_names", []),
        "epochs": len(epochs),
        "images_per_second": statistics.median(timed),
        "per_rank": statistics.median(timed) / world["size"],
        "mfu": None if mfu != mfu else mfu,  # NaN: no peak known
        "decode": (info.get("data") or {}).get("decode"),
        "every_epoch": rates,
        "effective": effective,
        "grad_allreduce": effective.get("grad_allreduce", "?"),
        "comm_share": statistics.median(shares) if shares else None,
        "throughput_lines": (info.get("throughput") or {}).get("lines", []),
    }


def comm_share(steps: dict[str, Any]) -> float:
    """The exposed communication's share of a step (an epoch's ``step_seconds``: the mean over
    the ranks of each phase)."""
    phases = ("data", "compute", "comm", "optimizer")
    return steps["comm"]["mean"] / sum(steps[p]["mean"] for p in phases)


def workflow_step(work: Path, config: dict[str, Any], logs: Path) -> tuple[int, float]:
    """The whole workflow on ``config`` in ``work`` (its config/config.yaml), local profile."""
    (work / "config").mkdir(parents=True, exist_ok=True)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(work), "--profile", str(REPO / "profiles" / "local")]
    return run_step("workflow", cmd, logs / "workflow.log", cwd=work)


def table_line(what: str, rate: float | None, per: float | None, mfu: Any, note: str) -> str:
    """One line of the summary's table."""

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    shown = "-" if mfu is None else f"{100 * mfu:.1f} %"
    return f"   {what:<44} {number(rate):>9} {number(per):>9} {shown:>7}  {note}"


def run_lines(work: Path, config: dict[str, Any]) -> list[str]:
    """The table's lines of the workflow's runs."""
    lines = []
    for run in config["runs"]:
        run_dir = work / "results" / "runs" / run["name"]
        if not (run_dir / "metrics.jsonl").is_file():
            lines.append(f"   {run['name']}: no metrics (see {work / 'results' / 'logs'})")
            continue
        s = run_summary(run_dir)
        where = ", ".join(s["gpu_names"]) or s["device"]
        share = "-" if s["comm_share"] is None else f"{100 * s['comm_share']:.1f} %"
        note = (
            f"{s['ranks']} rank(s) ({where}), {s['epochs']} epoch(s); gradients allreduced: "
            f"{s['grad_allreduce']}, exposed communication {share} of a step"
            + (f"; decoded on the {s['decode'].upper()}" if s["decode"] else "")
        )
        what = f"workflow {run['name']}"
        lines.append(table_line(what, s["images_per_second"], s["per_rank"], s["mfu"], note))
        lines += [f"      {line}" for line in s["throughput_lines"]]
    return lines


def bench_lines(bench_json: Path) -> list[str]:
    """The table's lines of the bench step's rows (F5, compiled, decode) and its figures (or
    why there are none)."""
    if not bench_json.is_file():
        return ["   bench: no results (the bench step failed before writing them)"]
    result = json.loads(bench_json.read_text())
    lines = []
    for row in result.get("rows", []):
        facts, rate = row.get("facts") or {}, row.get("images_per_second")
        compiled = facts.get("compile_seconds") if facts.get("compiled") else None
        note = row["spec"]["case"] + ("" if compiled is None else f"; compiled in {compiled:.0f} s")
        note += "" if row["status"] == "ok" else f"; {row['status']}"
        what = f"bench {row['spec']['label']}"[:44]
        lines.append(table_line(what, rate, rate, facts.get("mfu"), note))
    for f in result.get("figures", []):
        value = "no value" if f["value"] is None else f"{f['value']:.3f}"
        goal = "" if f["goal"] is None else f" (goal >= {f['goal']:g})"
        lines.append(f"   {f['name']}: {value}{goal}; {f['detail']}")
    return lines + [f"   {line}" for line in result.get("skipped", [])]


def print_summary(work: Path, config: dict[str, Any], steps: dict, bench_json: Path) -> None:
    print("\n== make gpu-check: summary")
    for name, (rc, seconds) in steps.items():
        print(f"   {name:<9} {'ok' if rc == 0 else f'FAILED (exit {rc})':<16} {seconds:6.0f} s")
    print(f"   {'what':<44} {'images/s':>9} {'per GPU':>9} {'MFU':>7}  notes")
    for line in run_lines(work, config) + bench_lines(bench_json):
        print(line)
    print(f"   report: {work / 'results' / 'report' / 'report.pdf'}")


def make_jpegs(work: Path, cpu_smoke: bool) -> Path:
    """The folder of JPEGs the workflow's decode run reads in place (:data:`JPEGS`), made in
    ``work`` (kept: a later check reuses it)."""
    from bench_data import jpeg_tree

    n, classes, distinct, size = JPEGS["cpu" if cpu_smoke else "gpu"]
    print(f"== making {n} JPEGs of {size[0]}x{size[1]} in {work / 'jpegs'} ...", flush=True)
    return jpeg_tree(work / "jpegs", n, classes, distinct=distinct, size=size)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=0.5, help="training time per run")
    p.add_argument("--work-dir", type=Path, default=REPO / "results" / "gpu-check")
    p.add_argument("--cpu-smoke", action="store_true", help="the same steps on the CPU, tiny")
    p.add_argument(
        "--skip", default="", help="comma-separated steps to leave out: tests, bench, workflow"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    why = None if args.cpu_smoke else no_gpu_message()
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    import torch

    gpus = torch.cuda.device_count() if not args.cpu_smoke else 0
    work = args.work_dir.resolve()
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    jpegs = None if "workflow" in skip else make_jpegs(work, args.cpu_smoke)
    config = check_config(gpus, args.minutes, args.cpu_smoke, jpegs)
    bench_json = logs / "bench-gpu.json"
    bench_json.unlink(missing_ok=True)
    steps: dict[str, tuple[int, float]] = {}
    py = sys.executable
    if "tests" not in skip:
        steps["tests"] = run_step("tests", [py, "-m", "pytest", "-q", "-m", "gpu"], logs / "t.log")
    if "bench" not in skip:
        bench = [py, str(HERE / "bench.py"), *BENCH_ARGS, "--out", str(bench_json)]
        bench += ["--quick"] if args.cpu_smoke else list(BENCH_GPU_ARGS)
        steps["bench"] = run_step("bench", bench, logs / "bench.log")
    if "workflow" not in skip:
        steps["workflow"] = workflow_step(work, config, logs)
    print_summary(work, config, steps, bench_json)
    return 0 if all(rc == 0 for rc, _ in steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
