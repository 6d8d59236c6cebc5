"""Elastic training: a Horovod run whose ranks may fail or join while it trains.

A run with ``min_workers``/``max_workers`` is launched by Horovod's elastic driver
(:mod:`clusterbench.launch.elastic`) and trains here, under ``hvd.elastic.run``:

* **State.** The model, the optimiser, the epoch, the step within it (the sampler position: the
  epoch's permutation is fixed by the seed, so the step says which samples come next), the
  epoch's loss and image sums so far (over all ranks), the metrics of the finished epochs and
  the resets seen live in an ``hvd.elastic.TorchState``. It is committed every
  ``checkpoints.elastic_commit_steps`` steps and at each epoch's end.
* **A rank fails.** The others' next collective raises; Horovod restores the last commit,
  re-forms the world without the failed host and sends rank 0's state to every rank. The steps
  since the commit are done again.
* **A rank joins** (discovery found a slot): at the next commit every rank is interrupted, the
  world re-forms with the new rank, which receives the state.
* **After each reset** the global batch is split over the new number of ranks
  (:func:`clusterbench.train.shard_bounds`), the BatchNorm aggregation is made for the new
  world (``rt.wrap`` again), and the LR convention (``batch_scaling``) is unchanged: with
  ``global`` the global batch and the LR stay what they were.
* **Records.** Each epoch's metrics record its ``world_size`` at the end, every size it had
  (``world_sizes``) and its ``resets``: when (epoch, step), from and to which size, why, and
  how long the reset took: from the moment this rank was interrupted (a failed collective, or
  hosts changed) to training resumed in the new world (``seconds``), and from its last commit
  (``stalled_seconds``: the steps done again, the wait until the failure showed, which a
  failed peer's Gloo timeout bounds, and the reset). That time counts in the epoch's time: it
  is what the run cost.
* **Preemption** works as in a fixed run: the ranks agree at a check, rank 0 writes a
  checkpoint (with the elastic place in the epoch), every rank exits 75.
* Rank 0 writes the outputs; if rank 0 fails, the new rank 0 takes over from the state.

Elastic runs are Horovod-only (the config refuses ``backend: ddp`` with ``min_workers``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from clusterbench import checkpoints, preemption
from clusterbench import train as t
from clusterbench.dist.base import Runtime


def _new_epoch() -> dict[str, Any]:
    """The state's place in an epoch at its start."""
    return {"step": 0, "loss_sum": 0.0, "images": 0, "lr": 0.0, "seconds": 0.0, "sizes": []}


def train_elastic(
    rt: Runtime,
    run: dict[str, Any],
    data: t.TrainData,
    out_dir: Path,
    dump_dir: Path | None,
    max_steps: int | None,
    device_type: str,
) -> dict[str, Any]:
    """Train ``run`` under ``hvd.elastic.run``; rank 0 writes the outputs. Returns the last
    epoch's metrics. No collective before the elastic function: a rank that joins later
    starts here too, while the others are resetting."""
    import torch

    device = t.setup_device(run, device_type, rt.local_rank, rt.local_size)
    meta = data.meta
    arch, model, optimizer = t.build(rt, run, meta, device)
    settings = checkpoints.checkpoint_settings()
    commit_every, check_every = settings["elastic_commit_steps"], settings["preemption_check_steps"]

    # Continue from the newest intact checkpoint (rank 0's choice reaches the others by sync).
    found = checkpoints.newest_valid(out_dir, run) if rt.rank == 0 else None
    ckpt = found[1] if found else None
    place = _new_epoch()
    if found is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        place.update(ckpt.get("elastic") or {})
        place["seconds"] = ckpt.get("epoch_seconds", 0.0)
        print(f"train: continuing from the checkpoint {found[0].describe()}", flush=True)
    state = rt.elastic_state(
        model,
        optimizer,
        epoch=found[0].epoch if found else 0,
        place=place,
        records=list(ckpt["metrics"]) if ckpt else [],
        train_seconds=ckpt["train_seconds"] if ckpt else 0.0,
        resets=[],
    )
    local: dict[str, Any] = {"outputs": None, "interrupted": None, "size": None}

    def outputs() -> t.Outputs | None:
        """Rank 0's writer, made by whichever process is rank 0 now."""
        if rt.rank != 0:
            return None
        if local["outputs"] is None:
            resume = {"metrics": state.records, "train_seconds": state.train_seconds}
            local["outputs"] = t.Outputs(out_dir, run, resume, settings["keep"])
        return local["outputs"]

    def move(**values: Any) -> None:
        """Update the place in the epoch. Always a new dict, never changed in place: Horovod's
        commit keeps the object itself, which a later change would alter."""
        state.place = {**state.place, **values}

    def commit(clock: dict[str, float]) -> None:
        now = time.perf_counter()
        state.train_seconds += now - clock["train"]
        move(seconds=state.place["seconds"] + now - clock["epoch"])
        clock["train"] = clock["epoch"] = now
        local["committed"] = now
        state.commit()  # may raise HostsUpdatedInterrupt: a rank joins

    @rt.elastic_run
    def body(state: Any) -> dict[str, Any]:
        now = time.perf_counter()
        before = local["size"]
        rt.refresh()
        if local["interrupted"] is not None:  # back from a reset
            kind, at = local["interrupted"]
            # the time since the last commit (steps done again, the reset) is the epoch's too
            move(seconds=state.place["seconds"] + now - local.get("committed", now))
            state.train_seconds += now - local.get("committed", now)
            state.resets = [
                *state.resets,
                {
                    "epoch": state.epoch + 1,
                    "step": state.place["step"],
                    "from": before,
                    "to": rt.size,
                    "why": kind,
                    "seconds": round(now - at, 3),
                    # from this rank's last commit: the steps done again, the wait for the
                    # failure to show (a Gloo timeout), and the reset
                    "stalled_seconds": round(now - local.get("committed", now), 3),
                },
            ]
            print(
                f"train: rank {rt.rank} of {rt.size}: the world was reset ({kind}; "
                f"{before} -> {rt.size} ranks) in {now - at:.2f} s; going on from epoch "
                f"{state.epoch + 1}, step {state.place['step']}",
                flush=True,
            )
        local["size"] = rt.size
        local["interrupted"] = None
        try:
            return _train_epochs(state, now)
        except rt.elastic_errors() as exc:
            local["interrupted"] = (_why(exc), time.perf_counter())
            raise

    def _train_epochs(state: Any, entered: float) -> dict[str, Any]:
        ctx = t.make_context(rt, run, data, device, model, rt.wrap(model, optimizer, run["bn"]))
        facts = rt.allgather_object(
            t.rank_provenance(rt.rank, rt.local_rank, device), name="train.provenance"
        )
        clock = {"train": entered, "epoch": entered}
        local.setdefault("committed", entered)
        record: dict[str, Any] = state.records[-1] if state.records else {}

        def finished() -> bool:
            stop = False
            if rt.rank == 0:
                stop = run["epochs"] is not None and state.epoch >= run["epochs"]
                seconds = state.train_seconds + time.perf_counter() - clock["train"]
                stop = stop or run["minutes"] is not None and seconds >= 60 * run["minutes"]
            return rt.broadcast_object(stop, name="train.stop")

        while not finished():
            if rt.size not in state.place["sizes"]:
                move(sizes=[*state.place["sizes"], rt.size])
            place = state.place
            if place["step"] == 0 and t._any_warned(rt):
                raise _preempted(rt, checkpoints.Position(state.epoch))
            steps = t.epoch_steps(ctx, max_steps)
            while True:
                chunk = t.EpochProgress(step=place["step"], images=place["images"], lr=place["lr"])
                chunk = t._run_epoch(
                    ctx, state.epoch, max_steps, chunk, check_every, place["step"] + commit_every
                )
                done = chunk.step >= steps and not chunk.stopped
                if not done:  # the epoch's own end sums the loss over the ranks already
                    chunk = t._reduce_epoch(ctx, state.epoch, chunk, steps)
                move(
                    step=chunk.step,
                    loss_sum=place["loss_sum"] + chunk.loss_sum,
                    images=chunk.images,
                    lr=chunk.lr,
                )
                place = state.place
                if chunk.stopped:  # warned: a checkpoint at this step, then every rank stops
                    ctx.synchronize()
                    now = time.perf_counter()
                    seconds = place["seconds"] + now - clock["epoch"]
                    where = checkpoints.Position(state.epoch, chunk.step)
                    out = outputs()
                    if out is not None:
                        train_seconds = state.train_seconds + now - clock["train"]
                        saved = {k: place[k] for k in ("step", "loss_sum", "images", "lr")}
                        out.checkpoint(where, model, optimizer, train_seconds, [], seconds, saved)
                    raise _preempted(rt, where)
                if done:
                    break
                commit(clock)
            ctx.synchronize()
            now = time.perf_counter()
            seconds = place["seconds"] + now - clock["epoch"]
            val_loss, val_accuracy = t._validate(ctx)
            state.epoch += 1
            record = {
                "epoch": state.epoch,
                "train_loss": place["loss_sum"] / place["images"],
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
                "epoch_seconds": seconds,
                "images_per_second": place["images"] / seconds,
                "workers": rt.size,
                "world_size": rt.size,
                "world_sizes": list(place["sizes"]),
                "resets": [r for r in state.resets if r["epoch"] == state.epoch],
                "global_batch": t.global_batch_size(run),
                "lr": place["lr"],
                "time": t.dt.datetime.now(t.dt.UTC).isoformat(timespec="milliseconds"),
            }
            state.records = [*state.records, record]
            state.place = {**_new_epoch(), "sizes": [rt.size]}
            state.train_seconds += time.perf_counter() - clock["train"]
            clock["train"] = clock["epoch"] = time.perf_counter()
            out = outputs()
            if out is not None:
                out.records = list(state.records[:-1])
                out.epoch(record, model, optimizer, state.train_seconds, [])
                print(
                    f"train: epoch {state.epoch}: loss {record['train_loss']:.4f}, val accuracy "
                    f"{val_accuracy:.4f}, {seconds:.2f} s, {rt.size} rank(s)"
                    + (f", {len(record['resets'])} reset(s)" if record["resets"] else ""),
                    flush=True,
                )
            local["committed"] = time.perf_counter()
            state.commit()

        if dump_dir is not None:
            with t.atomic_path(Path(dump_dir) / run["name"] / f"rank-{rt.rank}.pt") as tmp:
                torch.save(t._cpu_state(model), tmp)
        out = outputs()
        if out is not None:
            world = t.world_record(rt, device, facts, list(dict.fromkeys(f["node"] for f in facts)))
            world["elastic"] = {
                "min_workers": run["min_workers"],
                "max_workers": run["max_workers"],
                "sizes": [r.get("world_size") for r in state.records],
                "resets": list(state.resets),
            }
            out.finish(
                world,
                t.effective_settings(run),
                state.train_seconds,
                t.model_file(arch, model, meta),
                t.run_provenance(facts),
            )
            print(
                f"train: {state.epoch} epoch(s) in {state.train_seconds:.1f} s, "
                f"{len(state.resets)} reset(s) -> {out_dir}",
                flush=True,
            )
        return record

    return body(state)


def _why(exc: BaseException) -> str:
    """Why Horovod interrupted the rank: a rank failed, or the hosts changed."""
    return "hosts changed" if type(exc).__name__ == "HostsUpdatedInterrupt" else "a rank failed"


def _preempted(rt: Runtime, where: checkpoints.Position) -> preemption.Preempted:
    rt.broadcast_object(None, name="train.checkpointed")  # rank 0 has written it
    message = preemption.Preempted(where.describe())
    print(f"train: rank {rt.rank} {message}", flush=True)
    return message
