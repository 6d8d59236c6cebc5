"""Stage 3: data-parallel training, one process per worker, under Horovod or DDP.

```
python scripts/train.py --data-dir results/data/NAME --run JSON --out-dir results/runs/RUN
```

Runs unchanged under every scheduler (local, Slurm, SGE) and whatever starts its ranks
(``clusterbench-launch``, ``horovodrun``, or plain ``python`` for a single worker). Everything
distributed goes through the run's ``backend`` (:mod:`clusterbench.backends`); the loop is
:func:`clusterbench.training.loop.fit`, the same for fixed-size and elastic runs, with no
backend branches.

This module checks the inputs (the ``--run`` slice against the config schema, the device, the
data) before any backend starts, starts the backend, and stops it on every way out: a rank that
fails leaves the world at once, so the others' pending collectives fail instead of hanging.
Every rank prints one identity line, ``train: <backend> rank R {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from clusterbench import checkpoints, preemption
from clusterbench.config import ConfigError, bad_settings, stage_params
from clusterbench.data.arrays import TrainingSplits
from clusterbench.data.source import MakeData, prepare
from clusterbench.models import ModelError
from clusterbench.training.device import check_device, node_name


def validate_run(run: str | dict[str, Any]) -> dict[str, Any]:
    """The ``--run`` slice (JSON text or object), checked against the config schema's run
    settings (:func:`clusterbench.config.stage_params`); names each bad key."""
    return stage_params("train", run, what="--run")


def train(
    run: dict[str, Any],
    data: MakeData | TrainingSplits,
    out_dir: Path,
    dump_dir: Path | None = None,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Train on every rank; rank 0 writes the outputs. Returns the last epoch's metrics.

    ``data``: ``make(device)``, the run's data source on the training device
    (:func:`clusterbench.data.source.prepare`), or the preprocessed splits of resident images.

    Raises :class:`clusterbench.preemption.Preempted` on every rank after a preemption
    warning, once rank 0 has written the checkpoint to continue from.
    """
    from clusterbench import backends
    from clusterbench.data.resident import ResidentImages
    from clusterbench.training.loop import fit

    device_type = check_device(run)
    rt = backends.init(run["backend"], device_type)
    try:
        identity = {**asdict(rt.identity), "backend": rt.name, "hostname": node_name()}
        print(f"train: {rt.name} rank {rt.rank} {json.dumps(identity)}", flush=True)

        def make_data(device: Any) -> Any:
            if isinstance(data, TrainingSplits):
                return ResidentImages(data, device, run["seed"])
            return data(device)

        result = fit(rt, run, make_data, out_dir, device_type, dump_dir, max_steps)
    except BaseException:
        # the other ranks' pending collectives then fail instead of hanging
        rt.shutdown()
        raise
    rt.finish()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="results/data/NAME")
    parser.add_argument("--run", required=True, help="the run's config slice, as JSON")
    parser.add_argument("--out-dir", type=Path, required=True, help="results/runs/RUN")
    # Debug/test only: every rank writes its final state_dict to DIR/<run name>/rank-R.pt.
    # (also $CLUSTERBENCH_DUMP_WEIGHTS, so tests can ask for it through Snakemake's --envvars)
    parser.add_argument(
        "--dump-final-weights",
        type=Path,
        metavar="DIR",
        default=os.environ.get("CLUSTERBENCH_DUMP_WEIGHTS") or None,
        help=argparse.SUPPRESS,
    )
    # Debug/test only: at most N optimiser steps per epoch (e.g. to compare first steps).
    parser.add_argument("--max-steps", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    preemption.install()  # from now on a warning is recorded, not fatal

    try:
        run = validate_run(args.run)
        checkpoints.checkpoint_settings()
        check_device(run)  # before reading data or starting any backend
    except ConfigError as exc:
        return bad_settings("train", exc)
    make_data = prepare(args.data_dir, run)
    try:
        train(
            run, make_data, args.out_dir, dump_dir=args.dump_final_weights, max_steps=args.max_steps
        )
    except preemption.Preempted:
        return preemption.EXIT_PREEMPTED
    except ModelError as exc:  # the model cannot be built as asked: the cause, no traceback
        return bad_settings("train", ConfigError(str(exc)))
    return 0
