"""Horovod's background threads kept quiet while CPU ranks compute
(:mod:`clusterbench.backends._background`, issue 27).

Unit tests: the threads a call started (and no other) move to ``SCHED_IDLE``; the sleeping wait
polls until the handle is done and then returns Horovod's own result; every module of
``horovod.torch`` that holds ``synchronize`` gets it. The slow test runs two real Horovod ranks
on the CPU: after ``wrap`` with one gradient buffer their Horovod threads are ``SCHED_IDLE``,
the main thread is not, and a step and the runtime's collectives give the right answers; with
``CLUSTERBENCH_HOROVOD_QUIET=0`` the threads stay as Horovod started them.

Run as a script (by ``clusterbench.launch`` in the slow test) this file is the worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_threads_a_call_started_and_no_others_are_quieted():
    from clusterbench.backends._background import BackgroundThreads

    stop, started = threading.Event(), []
    before = threading.Thread(target=stop.wait)
    before.start()

    def start() -> None:  # as hvd.init(): returns with its threads running
        for _ in range(2):
            thread = threading.Thread(target=stop.wait)
            thread.start()
            started.append(thread)

    try:
        background = BackgroundThreads.started_by(start)
        assert background.tids == {t.native_id for t in started}
        assert sorted(background.quiet()) == sorted(background.tids)
        for thread in started:
            assert os.sched_getscheduler(thread.native_id) == os.SCHED_IDLE
        for tid in (before.native_id, threading.get_native_id()):
            assert os.sched_getscheduler(tid) == os.SCHED_OTHER
    finally:
        stop.set()
        for thread in (before, *started):
            thread.join()
    # an id that is not a thread of this process (pid 1's) is never touched
    policy = os.sched_getscheduler(1)
    assert BackgroundThreads(frozenset({1})).quiet() == []
    assert os.sched_getscheduler(1) == policy != os.SCHED_IDLE


def test_the_sleeping_wait_polls_until_done_then_returns_synchronizes_result():
    from clusterbench.backends._background import sleeping_wait

    polls, done = [], threading.Event()

    def poll(handle):
        polls.append(handle)
        if len(polls) == 3:
            done.set()
        return done.is_set()

    def synchronize(handle):
        """Horovod's."""
        assert done.is_set(), "synchronize before the handle was done: it would spin"
        if handle == "bad":
            raise RuntimeError("a rank failed")
        return f"result of {handle}"

    wait = sleeping_wait(synchronize, poll)
    assert wait("h") == "result of h" and polls == ["h"] * 3
    assert wait.__wrapped__ is synchronize and wait.__doc__ == "Horovod's."
    with pytest.raises(RuntimeError, match="a rank failed"):  # errors are Horovod's
        wait("bad")


def test_a_site_may_keep_the_threads_awake_and_a_bad_value_is_named():
    from clusterbench.backends._background import QUIET_ENV, quiet_wanted

    assert quiet_wanted({}) and quiet_wanted({QUIET_ENV: "1"}) and quiet_wanted({QUIET_ENV: ""})
    assert not quiet_wanted({QUIET_ENV: "0"})
    with pytest.raises(ValueError, match=r"\$CLUSTERBENCH_HOROVOD_QUIET must be 0 .* got 'no'"):
        quiet_wanted({QUIET_ENV: "no"})


@pytest.mark.horovod
def test_every_module_of_horovod_torch_holding_synchronize_gets_the_sleeping_wait(monkeypatch):
    import horovod.torch as hvd
    from clusterbench.backends._background import install_sleeping_wait
    from horovod.torch import functions, mpi_ops, optimizer, sync_batch_norm

    original = mpi_ops.synchronize
    holders = [mpi_ops, hvd, functions, optimizer, sync_batch_norm]
    for module in holders:  # put back after the test
        monkeypatch.setattr(module, "synchronize", original)
    changed = install_sleeping_wait(mpi_ops)
    assert sorted(changed) == sorted(m.__name__ for m in holders)
    wait = mpi_ops.synchronize
    assert wait is not original and wait.__wrapped__ is original
    assert all(m.synchronize is wait for m in holders)
    assert install_sleeping_wait(mpi_ops) == []  # again: nothing more to change
    assert mpi_ops.synchronize(12345) is None  # an unknown handle, as Horovod's answers it


# --------------------------------------------------------------------------------------------
# Real ranks


def worker(out_dir: str) -> None:
    """Start the Horovod runtime on the CPU, wrap a model with one gradient buffer, then take
    a step and use the runtime's collectives; writes what it saw to ``rank-<r>.json``."""
    import torch
    from clusterbench import backends
    from torch import nn

    torch.set_num_threads(1)
    rt = backends.init("horovod", "cpu")
    seen = {"threads": sorted(rt.background.tids)}
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rt.broadcast_state(model, optimizer)
    seen["before_wrap"] = [os.sched_getscheduler(t) for t in rt.background.tids]
    net, step = rt.wrap(model, optimizer, "aggregate", grad_allreduce="one")
    seen["after_wrap"] = [os.sched_getscheduler(t) for t in rt.background.tids]
    seen["main"] = os.sched_getscheduler(threading.get_native_id())
    x = torch.full((4, 4), float(rt.rank + 1))
    step.zero_grad()
    net(x).sum().backward()
    step.step()
    seen["weights"] = model[2].weight.detach().reshape(-1).tolist()
    seen["sum"] = float(rt.allreduce_sum(torch.tensor([rt.rank + 1.0]), "t.sum"))
    seen["gathered"] = rt.allgather_object({"rank": rt.rank}, name="t.gather")
    seen["any"] = rt.any_rank(rt.rank == 1, "t.any")
    Path(out_dir, f"rank-{rt.rank}.json").write_text(json.dumps(seen))
    rt.finish()


@pytest.mark.slow
@pytest.mark.parametrize("quiet", ["", "0"])
def test_two_cpu_horovod_ranks_compute_beside_quiet_background_threads(quiet, tmp_path):
    script = [sys.executable, str(Path(__file__)), "worker", str(tmp_path)]
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--", *script]
    env = {**os.environ, "CLUSTERBENCH_HOROVOD_QUIET": quiet}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for seen in ranks:
        assert seen["threads"], "hvd.init() started no thread that could be told apart"
        assert set(seen["before_wrap"]) == {os.SCHED_OTHER}
        assert set(seen["after_wrap"]) == {os.SCHED_OTHER if quiet == "0" else os.SCHED_IDLE}
        assert seen["main"] == os.SCHED_OTHER
        assert seen["sum"] == 3.0 and seen["any"] is True
        assert seen["gathered"] == [{"rank": 0}, {"rank": 1}]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # the step's gradients were averaged


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2])
