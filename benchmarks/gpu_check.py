"""`make gpu-check`: one command for a machine with a GPU; the images/s it trains at.

```
.venv/bin/python benchmarks/gpu_check.py [--minutes 1] [--work-dir results/gpu-check]
.venv/bin/python benchmarks/gpu_check.py --cpu-smoke     # the same steps on the CPU, tiny
```

Three steps, one after the other (never two trainings at once), each with its time printed:

1. the GPU tests: ``pytest -m gpu`` (tests/test_gpu.py: one GPU under each backend, bf16 with
   channels-last, data resident on the GPU; two GPUs where there are two);
2. bench F5: ``benchmarks/bench.py --only gpu --rounds 1`` (ResNet-20, CIFAR-shaped arrays,
   bf16 + channels-last: clusterbench 1 GPU / a hand-written loop, per backend);
3. the workflow on ``config/gpu-check.yaml``: a torchvision ResNet-50 on synthetic 224x224
   images, bf16, channels-last, time-boxed to ``--minutes`` under each backend (Horovod twice:
   the gradients allreduced in one buffer after backward, ``grad_allreduce: one``, and in
   buckets during backward, ``buckets``; DDP), on every GPU of the machine (one rank each),
   evaluated and reported, in a working directory of its own (default
   ``results/gpu-check/``, kept: its ``results/report/report.pdf``).

It ends with a summary: each run's images/s (all GPUs, and per GPU: the median over the epochs
after the first, as the report times them), how its gradients were allreduced and the exposed
communication's share of a step (the step-time breakdown, median over those epochs), Horovod's
summary lines, the GPUs, and F5; the exit status is 0 only when every step passed. With the
defaults it takes about 8 minutes on one GPU (tests about 2, F5 about 2, the three 1-minute
trainings with their start, evaluation and report about 4). On one GPU nothing is exchanged
(both Horovod runs are the same); with two or more, the two Horovod rows are the measurement
of ``grad_allreduce: auto``'s rule on GPUs.

Without a CUDA GPU it stops at once with exit status 2, saying so. ``--cpu-smoke`` runs the same
three steps on this machine's CPU at tiny sizes (the GPU tests and F5 then skip themselves; the
workflow trains the same ResNet-50, bf16 and channels-last, on 32x32 images for one epoch of a
few steps, 2 ranks per backend): it checks the command, not a GPU, and its images/s mean
nothing.
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


def check_config(gpus: int, minutes: float, cpu_smoke: bool) -> dict[str, Any]:
    """config/gpu-check.yaml for this machine: one rank per GPU, ``minutes`` per backend; with
    ``cpu_smoke``, its tiny CPU form (:data:`CPU_SMOKE`)."""
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    runs = config["run_defaults"]
    if cpu_smoke:
        for dataset in config["datasets"].values():
            dataset.update(CPU_SMOKE["dataset"])
        runs.update(CPU_SMOKE["run_defaults"])
        config["comm"] = {**config.get("comm", {}), **CPU_SMOKE["comm"]}
        config["report"]["title"] = "make gpu-check --cpu-smoke (CPU, tiny: no GPU figure)"
    else:
        runs.update({"workers": gpus, "gpus_per_node": gpus, "minutes": minutes})
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
    median over the epochs after the first (all of them if there is one), the GPUs."""
    info = json.loads((run_dir / "run.json").read_text())
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [e["images_per_second"] for e in epochs]
    timed = rates[1:] or rates
    world = info["world"]
    shares = [comm_share(e["step_seconds"]) for e in epochs[1:] or epochs if e.get("step_seconds")]
    effective = info.get("effective", {})
    return {
        "backend": world["backend"],
        "ranks": world["size"],
        "device": world["device"],
        "gpu_names": world.get("gpu_names", []),
        "epochs": len(epochs),
        "images_per_second": statistics.median(timed),
        "per_rank": statistics.median(timed) / world["size"],
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


def f5_figures(bench_json: Path) -> list[str]:
    """bench F5's lines from its results file (or why there are none)."""
    if not bench_json.is_file():
        return ["F5: no results (the bench step failed before writing them)"]
    result = json.loads(bench_json.read_text())
    lines = [
        f"{f['name']}: {f['value']:.3f} (goal >= {f['goal']:g}; {f['detail']})"
        if f["value"] is not None
        else f"{f['name']}: no value ({f['detail']})"
        for f in result.get("figures", [])
        if f["name"].startswith("F5")
    ]
    return lines + list(result.get("skipped", []))


def workflow_step(work: Path, config: dict[str, Any], logs: Path) -> tuple[int, float]:
    """The whole workflow on ``config`` in ``work`` (its config/config.yaml), local profile."""
    (work / "config").mkdir(parents=True, exist_ok=True)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(work), "--profile", str(REPO / "profiles" / "local")]
    return run_step("workflow", cmd, logs / "workflow.log", cwd=work)


def print_summary(work: Path, config: dict[str, Any], steps: dict, bench_json: Path) -> None:
    print("\n== make gpu-check: summary")
    for name, (rc, seconds) in steps.items():
        print(f"   {name:<9} {'ok' if rc == 0 else f'FAILED (exit {rc})':<16} {seconds:6.0f} s")
    for run in config["runs"]:
        run_dir = work / "results" / "runs" / run["name"]
        if not (run_dir / "metrics.jsonl").is_file():
            print(f"   {run['name']}: no metrics (see {work / 'results' / 'logs'})")
            continue
        s = run_summary(run_dir)
        where = ", ".join(s["gpu_names"]) or s["device"]
        every = ", ".join(f"{r:.0f}" for r in s["every_epoch"])
        share = "-" if s["comm_share"] is None else f"{100 * s['comm_share']:.1f} %"
        print(
            f"   {run['name']}: {s['images_per_second']:,.0f} images/s on {s['ranks']} "
            f"rank(s) ({s['per_rank']:,.0f} per rank; {where}); {s['epochs']} epoch(s): {every}; "
            f"gradients allreduced: {s['grad_allreduce']}, exposed communication {share} of a step"
        )
        for line in s["throughput_lines"]:
            print(f"      {line}")
    for line in f5_figures(bench_json):
        print(f"   {line}")
    print(f"   report: {work / 'results' / 'report' / 'report.pdf'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=1.0, help="training time per backend")
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
    config = check_config(gpus, args.minutes, args.cpu_smoke)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    bench_json = logs / "bench-gpu.json"
    bench_json.unlink(missing_ok=True)
    steps: dict[str, tuple[int, float]] = {}
    py = sys.executable
    if "tests" not in skip:
        steps["tests"] = run_step("tests", [py, "-m", "pytest", "-q", "-m", "gpu"], logs / "t.log")
    if "bench" not in skip:
        bench = [py, str(HERE / "bench.py"), "--only", "gpu", "--rounds", "1"]
        bench += ["--out", str(bench_json)] + (["--quick"] if args.cpu_smoke else [])
        steps["bench"] = run_step("bench", bench, logs / "bench.log")
    if "workflow" not in skip:
        steps["workflow"] = workflow_step(work, config, logs)
    print_summary(work, config, steps, bench_json)
    return 0 if all(rc == 0 for rc, _ in steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
