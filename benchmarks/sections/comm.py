"""comm: the comm stage's allreduce against a plain ``torch.distributed.all_reduce`` loop (F11).

F11 = the comm stage's allreduce bus bandwidth at >= 1 MiB, 2 local ranks / that of a plain
``torch.distributed.all_reduce`` loop (``plain_allreduce.py``) in the same round (goal >= 0.9),
per backend: per size the ratio of the two bus bandwidths, the figure the median over the sizes
from 1 MiB to ``--comm-max-bytes``. The comm rows run as the workflow runs the stage (``python
-m clusterbench.launch --np 2 -- python scripts/comm.py --params ...``, the schema's default
timing settings). ``F11 ddp`` has the goal: the stage's ``ddp`` job times torch.distributed's own
``all_reduce``, like for like with the reference, so the ratio is what the stage's way of
timing costs. ``F11 horovod`` is reported beside it without a goal: Horovod's allreduce
(through its background cycle and fusion buffer) is another collective than the reference's,
so its ratio measures Horovod as well as the stage.

Its rows train nothing: each writes its bus bandwidths as JSON (the stage's comm.json, the
reference's ``--out``), read here; the rows table shows them without images/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchlib.figures import Figure
from benchlib.rows import HERE, REPO, Case, Row, Runner, Spec, child_env, run_process, tail

ORDER = 100
TITLE = "the comm stage's allreduce bus bandwidth / a plain all_reduce loop, 2 ranks (F11)"
OPTIONS = {
    "comm_max_bytes": (int, 2**28, 2**23, "the largest message of the comm rows, bytes"),
}
NEEDS: tuple[str, ...] = ()
GPU = False
CASE = "comm"

#: F11 is taken over the sizes from here up (1 MiB).
F11_MIN_BYTES = 2**20
RANKS = 2


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    return {}  # no data: the rows make their own messages


def stage_spec(backend: str) -> Spec:
    return Spec(CASE, "comm_stage", RANKS, backend, label=f"comm stage {backend}, {RANKS} ranks")


PLAIN = Spec(CASE, "plain_allreduce", RANKS, label=f"plain all_reduce loop, {RANKS} processes")


def command(spec: Spec, max_bytes: int, out: Path) -> list[str]:
    """The row's command: the comm stage as the workflow starts it, or the reference."""
    py = sys.executable
    if spec.kind == "plain_allreduce":
        sizes = ["--min-bytes", str(F11_MIN_BYTES), "--max-bytes", str(max_bytes)]
        script = str(HERE / "plain_allreduce.py")
        return [py, script, "--nproc", str(RANKS), *sizes, "--out", str(out / "plain.json")]
    params = {
        "name": f"{RANKS}w-1n-cpu-{spec.backend}",
        "workers": RANKS,
        "nodes": 1,
        "gpus_per_node": 0,
        "backend": spec.backend,
        "max_bytes": max_bytes,
    }
    stage = [py, str(REPO / "scripts" / "comm.py"), "--params", json.dumps(params)]
    return [
        py,
        "-m",
        "clusterbench.launch",
        "--np",
        str(RANKS),
        "--",
        *stage,
        "--out-dir",
        str(out),
    ]


def allreduce_busbw(spec: Spec, out: Path) -> dict[int, float]:
    """Allreduce bus bandwidth (GB/s) by message size of the row's JSON."""
    if spec.kind == "plain_allreduce":
        return {
            r["size"]: r["busbw_gbps"] for r in json.loads((out / "plain.json").read_text())["rows"]
        }
    rows = json.loads((out / "comm.json").read_text())["rows"]
    return {r["size"]: r["busbw_gbps"] for r in rows if r["op"] == "allreduce"}


def measure(runner: Runner, spec: Spec, args: argparse.Namespace) -> dict[int, float]:
    """The row's bus bandwidths in this round, run at most once per round ({} if it failed);
    the row goes to the runner's table like every other."""
    key = (spec, runner.round)
    out = runner.work / "runs" / f"{spec.slug}-round{runner.round}"
    if key not in runner.rows:
        log = runner.work / "logs" / f"{spec.slug}-round{runner.round}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        cmd = command(spec, args.comm_max_bytes, out)
        print(f"[{CASE}, round {runner.round}] {spec.name} ...", end=" ", flush=True)
        rc, wall, timed_out = run_process(cmd, log, child_env(False), args.timeout, args.verbose)
        row = Row(spec=spec, round=runner.round, status="ok", command=cmd, wall_seconds=wall)
        try:
            busbw = allreduce_busbw(spec, out) if rc == 0 else {}
        except (OSError, ValueError, KeyError) as exc:
            busbw, row.error = {}, f"unreadable results in {out}: {exc}"
        if not busbw:
            why = f"timed out after {wall:.0f} s" if timed_out else f"exit {rc}, {wall:.0f} s"
            row.status, row.error = "failed", row.error or f"{why}; last lines:\n{tail(log)}"
        runner.rows[key] = row
        print(f"{row.status} (wall {wall:.0f} s)", flush=True)
    if runner.rows[key].status != "ok":
        return {}
    return allreduce_busbw(spec, out)


def ratio(mine: dict[int, float], plain: dict[int, float]) -> tuple[float, dict[int, float]]:
    """F11 of one round: the median over the sizes >= 1 MiB both measured of mine / plain,
    and each size's ratio."""
    sizes = sorted(s for s in mine.keys() & plain.keys() if s >= F11_MIN_BYTES)
    if not sizes:
        raise ValueError("no message size >= 1 MiB measured by both rows")
    per_size = {s: mine[s] / plain[s] for s in sizes}
    return statistics.median(per_size.values()), per_size


def figure(backend: str, mine: dict[int, float], plain: dict[int, float]) -> Figure:
    spec = stage_spec(backend)
    what = f"comm allreduce busbw >= 1 MiB, {RANKS} local ranks, {backend} / plain all_reduce"
    goal = 0.9 if backend == "ddp" else None
    fig = Figure(f"F11 {backend}", what, goal, rows=[f"{CASE}: {s.name}" for s in (spec, PLAIN)])
    if not mine or not plain:
        fig.detail = "; ".join(
            f"{s.name}: failed" for s, b in ((spec, mine), (PLAIN, plain)) if not b
        )
        return fig
    fig.value, per_size = ratio(mine, plain)
    big = max(per_size)
    fig.detail = (
        f"per size {min(per_size) >> 20}..{big >> 20} MiB: "
        + " ".join(f"{r:.2f}" for r in per_size.values())
        + f"; at {big >> 20} MiB {mine[big]:.2f} / {plain[big]:.2f} GB/s"
    )
    return fig


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    plain = measure(runner, PLAIN, args)
    return [figure(b, measure(runner, stage_spec(b), args), plain) for b in args.backends]
