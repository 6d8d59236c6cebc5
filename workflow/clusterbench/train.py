"""Stage 3: data-parallel training, one process per worker, under Horovod or DDP.

```
python scripts/train.py --data-dir results/data/NAME --run JSON --out-dir results/runs/RUN \
    [--data-settings JSON]
```

Runs unchanged under every scheduler (local, Slurm, SGE) and whatever starts its ranks
(``clusterbench-launch``, ``horovodrun``, or plain ``python`` for a single worker). Everything
distributed goes through the run's ``backend`` (:mod:`clusterbench.backends`); the loop is
:func:`clusterbench.training.loop.fit`, the same for fixed-size and elastic runs, with no
backend branches.

This module makes every path it is given absolute before any code of the user's runs (an own
model that changes the working directory in ``build`` or ``forward`` sends no output
elsewhere), checks the inputs (the ``--run`` slice against the config schema, the device, the
data) before any backend starts, starts the backend, and stops it on every way out: a rank that
fails leaves the world at once, so the others' pending collectives fail instead of hanging.
Every rank prints one identity line, ``train: <backend> rank R {...}``.

How the data is read changes no result, so it comes outside the ``--run`` slice (no rerun
trigger), as ``--data-settings``: ``loading``, ``loader_workers`` and ``staging``. With a
staging dir, each node's copy is made first (:mod:`clusterbench.data.staging`; the ranks of a
fixed-size run agree that every node has its copy before any trains); the data source is
chosen by :func:`clusterbench.data.source.open_source` and closed on every way out (a streamed
source's loader processes end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from clusterbench.backends import Runtime
from clusterbench.config import ConfigError, bad_settings, is_elastic, stage_params
from clusterbench.core import preemption
from clusterbench.core.interrupted import one_line
from clusterbench.data import DataError
from clusterbench.data.source import Reading, check, identity
from clusterbench.models import ModelError
from clusterbench.training import checkpoints
from clusterbench.training.compiled import CompileError
from clusterbench.training.device import check_device, cpu_threads, node_name
from clusterbench.training.network import user_code_error
from clusterbench.training.steps import NonFiniteLossError


def validate_run(run: str | dict[str, Any]) -> dict[str, Any]:
    """The ``--run`` slice (JSON text or object), checked against the config schema's run
    settings (:func:`clusterbench.config.stage_params`); names each bad key."""
    return stage_params("train", run, what="--run")


def train(
    run: dict[str, Any],
    data_dir: Path,
    out_dir: Path,
    dump_dir: Path | None = None,
    max_steps: int | None = None,
    data_settings: dict[str, Any] | None = None,
    started: float | None = None,
    data_id: str | None = None,
    watched: bool = False,
) -> dict[str, Any]:
    """Train on every rank; rank 0 writes the outputs. Returns the last epoch's metrics.

    ``data_settings``: ``--data-settings`` (schema defaults if None); ``started``: when this
    process started (staging: a copy verified since then is this run's); ``data_id``: the
    data's identity (:func:`clusterbench.data.source.identity`), kept with each checkpoint;
    ``watched``: an evaluation beside the training may ask for its weights
    (:mod:`clusterbench.watch`). Raises
    :class:`clusterbench.core.preemption.Preempted` on every rank after a preemption warning, once
    rank 0 has written the checkpoint to continue from.
    """
    from clusterbench import backends
    from clusterbench.data.source import open_source
    from clusterbench.training.loop import fit

    settings = data_settings or stage_params("data_settings", {}, what="--data-settings")
    started = time.time() if started is None else started
    device_type = check_device(run)
    rt = backends.init(run["backend"], device_type)
    sources: list[Any] = []
    try:
        identity = {**asdict(rt.identity), "backend": rt.name, "hostname": node_name()}
        print(f"train: {rt.name} rank {rt.rank} {json.dumps(identity)}", flush=True)
        data_dir, staged = stage_data(rt, run, Path(data_dir), settings["staging"], started)
        data_dir = data_dir.absolute()  # a staging.dir may be relative (an own model may chdir)
        reading = Reading(settings, rt.local_size, cpu_threads(rt.local_size), staged)

        def make_data(device: Any) -> Any:
            sources.append(open_source(data_dir, run, reading, device))
            if rt.rank == 0:
                decided = sources[-1].facts["loading"]
                print(f"train: loading {decided['decision']} ({decided['reason']})", flush=True)
            return sources[-1]

        result = fit(
            rt, run, make_data, out_dir, device_type, dump_dir, max_steps, data_id, watched
        )
    except BaseException:
        close_all(sources)
        # the other ranks' pending collectives then fail instead of hanging
        rt.shutdown()
        raise
    close_all(sources)
    rt.finish()
    return result


def close_all(sources: list[Any]) -> None:
    """End the data sources (a streamed one's loader processes)."""
    for source in sources:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def stage_data(
    rt: Runtime, run: dict[str, Any], data_dir: Path, staging: dict[str, Any], started: float
) -> tuple[Path, dict[str, Any] | None]:
    """Where the ranks read the data: this node's copy under ``staging.dir`` (made by the
    first of its ranks, :mod:`clusterbench.data.staging`), or ``data_dir`` without one.

    The ranks of a fixed-size run then agree that every node has its copy (one collective):
    a node whose copy failed stops every rank with its message. An elastic run's rank stops
    alone (a collective here would meet the others resetting): the run goes on without it.
    """
    from clusterbench.data.staging import StagingError, stage

    if not staging["dir"]:
        return data_dir, None
    failed, staged = None, None
    try:
        staged = stage(data_dir, staging["dir"], run["dataset"], started, node_name())
    except StagingError as exc:
        failed = str(exc)
    if not is_elastic(run):
        others = [m for m in rt.allgather_object(failed, name="train.staging") if m]
        failed = failed or (others[0] if others else None)
    if failed or staged is None:
        raise StagingError(failed or "staging failed")
    facts = staged.facts
    print(
        f"train: rank {rt.rank}: {facts['action']} the node-local copy {facts['dir']} "
        f"({facts['bytes']:,} bytes copied, {facts['seconds']:.2f} s)",
        flush=True,
    )
    return staged.data_dir, facts


@one_line("train")
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
    parser.add_argument(
        "--data-settings",
        default="{}",
        help="how the data is read, as JSON: loading, loader_workers, staging (no result "
        "changes with them: not in --run)",
    )
    # Debug/test only: at most N optimiser steps per epoch (e.g. to compare first steps).
    parser.add_argument("--max-steps", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument(
        "--watched",
        action="store_true",
        help="an evaluation runs beside the training (the watch stage: evaluate.every_minutes) "
        "and may ask for its weights (no result changes with it: not in --run)",
    )
    args = parser.parse_args(argv)
    # every path made absolute now, before any code of the user's runs: an own model may
    # change the working directory (os.chdir in build or forward), the outputs stay put
    args.data_dir, args.out_dir = args.data_dir.absolute(), args.out_dir.absolute()
    if args.dump_final_weights:
        args.dump_final_weights = Path(args.dump_final_weights).absolute()
    started = time.time()
    preemption.install()  # from now on a warning is recorded, not fatal

    try:
        run = validate_run(args.run)
        settings = stage_params("data_settings", args.data_settings, what="--data-settings")
        checkpoints.checkpoint_settings()
        check_device(run)  # before reading data or starting any backend
    except ConfigError as exc:
        return bad_settings("train", exc)
    try:
        meta = check(args.data_dir, run)  # before any backend starts; the data is read later
        train(
            run,
            args.data_dir,
            args.out_dir,
            dump_dir=args.dump_final_weights,
            max_steps=args.max_steps,
            data_settings=settings,
            started=started,
            data_id=identity(meta),
            watched=args.watched,
        )
    except preemption.Preempted:
        return preemption.EXIT_PREEMPTED
    except DataError as exc:
        print(f"train: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except ModelError as exc:  # the model cannot be built as asked: the cause, no traceback
        return bad_settings("train", ConfigError(str(exc)))
    except (NonFiniteLossError, CompileError) as exc:  # its message says what to do: alone
        print(f"train: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:
        told = user_code_error(run["model"], exc, run=run)
        if told is None:
            raise
        return bad_settings("train", ConfigError(told))
    return 0
