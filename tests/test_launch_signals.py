"""clusterbench.launch when things go wrong: stop signals (twice, in every order, at varied
delays), ranks that ignore SIGTERM, a launcher killed by SIGKILL, a rank killed by SIGKILL; and
SIGUSR1 (the preemption warning), which is passed on to every rank and stops nothing.

The subprocess tests start the real launcher (``--scheduler local --np 2``) with tiny rank
programs (``python -S``, no Horovod, no torch: real training is covered in test_launch.py) that
record their pid and sleep. They assert bounds, not timings: after a first stop signal every rank
is gone and the launcher has exited (128 + signal) within :data:`AFTER_FIRST_S`, after a second
one within :data:`AFTER_SECOND_S`, and nothing the launcher started is left. The timings measured
on the way are printed (``pytest -s``): docs/troubleshooting.md, quotes
them. No test can hang: every wait has a deadline, and a ``finally`` SIGKILLs whatever a test
started.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from clusterbench.launch import runner
from clusterbench.launch import signals as launch_signals
from conftest import default_sigint

PY = sys.executable
STARTUP_S = 60  # the ranks are up within this (2 busy cores)
AFTER_FIRST_S = 15.0  # every rank gone, launcher exited, this long after a first signal
AFTER_SECOND_S = 5.0  # ... after a second signal
POLL_S = 0.002

needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the local scheduler offers one slot per CPU"
)

# argv: the directory for the pid files, then the ranks that ignore SIGTERM ("0,1"; "" none).
RANK = r"""
import os, signal, sys, time
rank = os.environ["HOROVOD_RANK"]
if rank in sys.argv[2].split(","):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
path = os.path.join(sys.argv[1], "rank%s.pid" % rank)
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(path + ".tmp", path)
n = 0
while True:
    n += sum(range(2000))
    time.sleep(0.01)
"""

# Like RANK, but records every SIGUSR1 it gets (one line each in rank<N>.usr1) and exits 0 when
# the file "stop" appears in its directory.
RANK_USR1 = r"""
import os, signal, sys, time
rank = os.environ["HOROVOD_RANK"]
record = os.path.join(sys.argv[1], "rank%s.usr1" % rank)
def on_usr1(sig, frame):
    with open(record, "a") as f:
        f.write("%d\n" % sig)
signal.signal(signal.SIGUSR1, on_usr1)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])  # as clusterbench.train does
path = os.path.join(sys.argv[1], "rank%s.pid" % rank)
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(path + ".tmp", path)
while not os.path.exists(os.path.join(sys.argv[1], "stop")):
    time.sleep(0.01)
print("rank %s done" % rank, flush=True)
"""


# Like a training rank on a preemption warning (SIGUSR1 or SIGUSR2): it finishes what it does
# (rank 1 takes 1.5 s longer, as if writing the checkpoint), records that it did, and exits 75.
RANK_PREEMPTED = r"""
import os, signal, sys, time
rank = os.environ["HOROVOD_RANK"]
warned = []
for sig in (signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, lambda s, f: warned.append(s))
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1, signal.SIGUSR2])
path = os.path.join(sys.argv[1], "rank%s.pid" % rank)
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(path + ".tmp", path)
while not warned:
    time.sleep(0.01)
time.sleep(1.5 * int(rank))
with open(os.path.join(sys.argv[1], "rank%s.done" % rank), "w") as f:
    f.write("%d\n" % warned[0])
# at exit, as clusterbench.core.preemption.install does
for sig in (signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, signal.SIG_IGN)
sys.exit(75)
"""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process from /proc/<pid>/stat; None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


@dataclass(frozen=True)
class Pid:
    pid: int
    start: int  # /proc start time: tells a reused pid apart

    @classmethod
    def of(cls, pid: int) -> Pid | None:
        stat = _proc_stat(pid)
        return None if stat is None else cls(pid, stat[1])

    def alive(self) -> bool:
        """Still running: /proc/<pid> is there, the same process, and not a zombie (a zombie has
        ended and holds nothing; the ranks are not this test's children, it cannot reap them)."""
        stat = _proc_stat(self.pid)
        return stat is not None and stat[1] == self.start and stat[0] not in ("Z", "X")

    def kill(self) -> None:
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass


@dataclass
class Launch:
    """One launcher with two tiny ranks, in a session of its own (like a job under `timeout`
    or in a terminal: a signal may go to its whole process group)."""

    proc: subprocess.Popen
    dir: Path
    ranks: list[Pid] = field(default_factory=list)
    started: list[Pid] = field(default_factory=list)  # everything below the launcher
    exited_at: float | None = None

    @classmethod
    def start(cls, tmp_path: Path, name: str, stubborn: str = "", code: str = RANK) -> Launch:
        script = tmp_path / f"rank-{abs(hash(code))}.py"
        if not script.exists():
            script.write_text(code)
        run_dir = tmp_path / name
        run_dir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERBENCH_")}
        cmd = [PY, "-m", "clusterbench.launch", "--np", "2", "--scheduler", "local", "--"]
        with open(run_dir / "out", "wb") as out, open(run_dir / "err", "wb") as err:
            proc = subprocess.Popen(
                [*cmd, PY, "-S", str(script), str(run_dir), stubborn],
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        return cls(proc, run_dir)

    def wait_ranks(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        files = [self.dir / f"rank{r}.pid" for r in (0, 1)]
        while not all(f.exists() for f in files):
            assert self.proc.poll() is None, f"launcher exited early:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"ranks not up in {STARTUP_S} s:\n{self.stderr()}"
            time.sleep(0.01)
        self.ranks = [Pid.of(int(f.read_text())) for f in files]
        assert all(self.ranks), "a rank ended right after it started"
        launcher = psutil.Process(self.proc.pid)
        below = [Pid.of(p.pid) for p in launcher.children(recursive=True)]
        self.started = [p for p in below if p is not None]

    def signal(self, sig: int, group: bool) -> None:
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)

    def wait_until(self, deadline: float) -> tuple[float | None, float | None]:
        """Poll until the launcher has exited and every rank is gone, or ``deadline``: the
        moments (monotonic) when each happened, None if not by then."""
        ranks_gone = None
        while True:
            now = time.monotonic()
            if self.exited_at is None and self.proc.poll() is not None:
                self.exited_at = now
            if ranks_gone is None and not any(r.alive() for r in self.ranks):
                ranks_gone = now
            if (self.exited_at is not None and ranks_gone is not None) or now > deadline:
                return ranks_gone, self.exited_at
            time.sleep(POLL_S)

    def leftovers(self, within: float) -> list[Pid]:
        """What the launcher started that is still running ``within`` seconds from now."""
        deadline = time.monotonic() + within
        while (left := [p for p in self.started if p.alive()]) and time.monotonic() < deadline:
            time.sleep(0.02)
        return left

    def stderr(self) -> str:
        return (self.dir / "err").read_text(errors="replace")

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        for pid in [*self.ranks, *self.started]:
            pid.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _figures(label: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    text = (
        f"{label}: median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms, "
        f"min {ms[0]:.0f} ms over {len(ms)} trials"
    )
    print(f"\n[figures] {text}")
    return text


# ------------------------------------------------------------------------------------------
# in-process: whose handlers are installed, and the escalation


def test_horovod_installs_locking_handlers_and_the_launcher_keeps_its_own(monkeypatch) -> None:
    """With the installed horovod: plain launch_gloo (whose elastic twin, launch_gloo_elastic,
    calls the same register_shutdown_event) leaves Horovod's set_event_on_signal (Event.set in
    a signal handler) installed while the ranks run; through the launcher's StopSignals and
    horovod_runner.shutdown_event_without_handlers the ranks run under _on_signal and get the
    launcher's shutdown event, and the previous handlers come back afterwards."""
    pytest.importorskip("horovod")
    from clusterbench.launch.horovod_runner import shutdown_event_without_handlers
    from horovod.runner.common.util.settings import Settings
    from horovod.runner.gloo_run import launch_gloo

    seen: list[tuple[object, object, list]] = []

    def exec_command(command, slot_info, events):
        seen.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), events))
        return 0, time.time()

    def run_two() -> None:
        settings = Settings(hosts="localhost:2", num_proc=2, verbose=0)
        launch_gloo(["true"], exec_command, settings, ["lo"], {}, "127.0.0.1")

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    try:
        run_two()
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    assert len(seen) == 2
    for on_int, on_term, _ in seen:
        assert on_int is on_term
        assert on_term.__qualname__ == "register_shutdown_event.<locals>.set_event_on_signal"

    seen.clear()
    shutdown = threading.Event()
    signals = launch_signals.StopSignals(
        shutdown, kill=lambda: None, sweep=lambda: None, final=lambda: None
    )
    with signals, shutdown_event_without_handlers(shutdown):
        run_two()
    assert len(seen) == 2
    for on_int, on_term, events in seen:
        assert on_int is on_term is launch_signals._on_signal
        assert events == [shutdown]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up fd was given back too


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.exited = threading.Event()
        self.code: int | None = None

    def hook(self, name: str):
        return lambda: self.calls.append((name, time.monotonic()))

    def exit(self, code: int) -> None:
        self.code = code
        self.calls.append(("exit", time.monotonic()))
        self.exited.set()

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def _stop_signals(rec: _Recorder, shutdown: threading.Event, **deadlines: float):
    return launch_signals.StopSignals(
        shutdown,
        kill=rec.hook("kill"),
        sweep=rec.hook("sweep"),
        final=rec.hook("final"),
        exit=rec.exit,
        **deadlines,
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGTERM, signal.SIGINT),
    ],
)
def test_second_signal_kills_at_once_then_exits(first, second) -> None:
    """Real signals to this process, the second one right behind the first: shutdown, then
    kill, then the forced exit with 128 + the first signal, each on its own thread."""
    rec, shutdown = _Recorder(), threading.Event()
    signals = _stop_signals(rec, shutdown, kill_after=30, exit_after=30, exit_after_second=0.3)
    try:
        with signals:
            t0 = time.monotonic()
            os.kill(os.getpid(), first)
            os.kill(os.getpid(), second)
            assert rec.exited.wait(10), rec.calls
            assert shutdown.is_set()
    finally:
        signals.uninstall()
    names = rec.names()
    assert names[0] == "kill" and names[-2:] == ["final", "exit"], names
    assert rec.code == 128 + first
    assert signals.first == first and signals.second_at is not None
    assert rec.calls[0][1] - t0 < 5.0  # killed at once, not after kill_after (30 s)
    assert 0.3 <= rec.calls[-1][1] - signals.second_at < 5.0


def test_one_signal_kills_after_the_grace_period_then_exits() -> None:
    rec, shutdown = _Recorder(), threading.Event()
    signals = _stop_signals(rec, shutdown, kill_after=0.3, exit_after=1.2)
    try:
        with signals:
            os.kill(os.getpid(), signal.SIGTERM)
            assert rec.exited.wait(10), rec.calls
    finally:
        signals.uninstall()
    kill_at = dict(rec.calls)["kill"]
    assert 0.3 <= kill_at - signals.first_at < 1.2
    assert "sweep" in rec.names()  # what appears after the kill is killed too (0.5 s later)
    assert 1.2 <= rec.calls[-1][1] - signals.first_at < 5.0
    assert rec.code == 128 + signal.SIGTERM


def test_without_a_signal_nothing_happens_and_handlers_come_back() -> None:
    rec, shutdown = _Recorder(), threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with _stop_signals(rec, shutdown) as signals:
        assert signal.getsignal(signal.SIGTERM) is launch_signals._on_signal
    assert signal.getsignal(signal.SIGTERM) is before
    assert signals.first is None and not shutdown.is_set() and rec.calls == []


def test_usr1_is_passed_on_and_stops_nothing() -> None:
    """SIGUSR1 (twice) to this process: ``forward`` gets it each time, on the watcher thread;
    no shutdown, no kill, no exit; a SIGTERM afterwards still stops as usual."""
    rec, shutdown = _Recorder(), threading.Event()
    forwarded: list[int] = []
    both = threading.Event()

    def forward(signum: int) -> None:
        forwarded.append(signum)
        if len(forwarded) == 2:
            both.set()

    before = signal.getsignal(signal.SIGUSR1)
    signals = launch_signals.StopSignals(
        shutdown,
        kill=rec.hook("kill"),
        sweep=rec.hook("sweep"),
        final=rec.hook("final"),
        exit=rec.exit,
        forward=forward,
        kill_after=0.3,
        exit_after=1.0,
    )
    try:
        with signals:
            assert signal.getsignal(signal.SIGUSR1) is launch_signals._on_signal
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGUSR1)
            assert both.wait(5), forwarded
            time.sleep(0.5)  # longer than kill_after: a stop would have escalated by now
            assert forwarded == [signal.SIGUSR1, signal.SIGUSR1]
            assert not shutdown.is_set() and rec.calls == [] and signals.first is None
            assert signals.passed_on == [signal.SIGUSR1] * 2 and signals.received == []
            os.kill(os.getpid(), signal.SIGTERM)
            assert rec.exited.wait(10), rec.calls
    finally:
        signals.uninstall()
    assert rec.code == 128 + signal.SIGTERM and shutdown.is_set()
    assert signal.getsignal(signal.SIGUSR1) is before


def test_another_handlers_signal_stops_nothing() -> None:
    """Another Python handler in the process (torch's DataLoader installs one for SIGCHLD): its
    signal reaches the wake-up fd too, and a child's exit must stop nothing; the launcher's own
    SIGTERM still stops as usual. (Once a DataLoader with workers ran in the pytest process, a
    child's exit read as a stop signal stopped an in-process launch and exited 128 + SIGCHLD.)"""
    rec, shutdown = _Recorder(), threading.Event()
    seen: list[int] = []
    before = signal.signal(signal.SIGCHLD, lambda signum, frame: seen.append(signum))
    signals = _stop_signals(rec, shutdown, kill_after=0.3, exit_after=1.0)
    try:
        with signals:
            subprocess.run([PY, "-S", "-c", "pass"], check=True)
            deadline = time.monotonic() + 5
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
            assert seen == [signal.SIGCHLD]
            time.sleep(0.5)  # longer than kill_after: a stop would have escalated by now
            assert not shutdown.is_set() and rec.calls == [] and signals.received == []
            os.kill(os.getpid(), signal.SIGTERM)
            assert rec.exited.wait(10), rec.calls
    finally:
        signals.uninstall()
        signal.signal(signal.SIGCHLD, before)
    assert rec.code == 128 + signal.SIGTERM and signals.received == [signal.SIGTERM]


def test_reaper_kills_a_session_and_what_left_it(tmp_path) -> None:
    """A session leader below this process (as a rank's shell is), its child, and an orphan
    of its process group that is no longer below this process: one sweep kills them all."""
    reaper = runner.Reaper()
    pid_file = tmp_path / "orphan.pid"
    leader = subprocess.Popen(
        ["sh", "-c", f"(sleep 60 & echo $! > {pid_file}); sleep 60"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    pids: list[Pid] = []
    try:
        deadline = time.monotonic() + 10
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        orphan = Pid.of(int(pid_file.read_text()))
        assert orphan is not None
        assert orphan.pid not in {p.pid for p in psutil.Process().children(recursive=True)}
        pids = [orphan, *(Pid.of(c.pid) for c in psutil.Process(leader.pid).children())]
        reaper.sweep()
        assert leader.wait(timeout=5) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while any(p.alive() for p in pids if p) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not [p for p in pids if p and p.alive()]
    finally:
        leader.kill()
        leader.wait(timeout=5)
        for pid in pids:
            if pid:
                pid.kill()


# ------------------------------------------------------------------------------------------
# the real launcher

# (first, second): twice SIGTERM, twice SIGINT, SIGTERM then SIGINT
PAIRS = [
    (signal.SIGTERM, signal.SIGTERM),
    (signal.SIGINT, signal.SIGINT),
    (signal.SIGTERM, signal.SIGINT),
]
# Between the two signals. Those under a millisecond land while the launcher handles the first
# one: the old launcher (Horovod's handlers) deadlocked in about 1 trial in 12 at 50-500 us.
DELAYS_S = [0.0, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05]


@dataclass
class Trial:
    after_first: tuple[float, float]  # (every rank gone, launcher exited), s after the first
    after_second: tuple[float, float]  # ... after the second signal
    twice: bool  # the launcher read both signals (two equal ones sent close together can
    # reach it as one: a pending signal is not queued again)


def _signal_twice(
    tmp_path: Path, name: str, first: int, second: int, delay: float, group: bool, stubborn=""
) -> Trial:
    """One trial: both signals, then the bounds: AFTER_SECOND_S after the second signal if the
    launcher read it, AFTER_FIRST_S after the first in any case."""
    what = f"{name}: {signal.Signals(first).name} then {signal.Signals(second).name}"
    run = Launch.start(tmp_path, name, stubborn=stubborn)
    try:
        run.wait_ranks()
        run.signal(first, group)
        t1 = time.monotonic()
        if delay:
            time.sleep(delay)
        run.signal(second, group)
        t2 = time.monotonic()
        gone, exited = run.wait_until(min(t1 + AFTER_FIRST_S, t2 + AFTER_SECOND_S))
        if gone is None or exited is None:
            assert "killing every rank (SIGKILL)" not in run.stderr(), (
                f"{what}: second signal read, but not done {AFTER_SECOND_S} s after it\n"
                f"{run.stderr()}"
            )
            gone, exited = run.wait_until(t1 + AFTER_FIRST_S)
        assert gone is not None, f"{what}: ranks still running\n{run.stderr()}"
        assert exited is not None, f"{what}: the launcher did not exit\n{run.stderr()}"
        m = re.search(r"the launcher received (.*): all ranks were stopped", run.stderr())
        assert m, f"{what}\n{run.stderr()}"
        # It exits with the signal it received first. Two signals sent before the launcher ran
        # again are both pending when it does, and the kernel hands them over in an order of its
        # own, not the sending order: SIGTERM then SIGINT sent close together reached it as
        # SIGINT then SIGTERM once on CI.
        received = signal.Signals[m.group(1).split()[0]]
        assert received in (first, second), f"{what}\n{run.stderr()}"
        assert run.proc.returncode == 128 + received, f"{what}\n{run.stderr()}"
        left = run.leftovers(within=2.0)
        assert not left, f"{what}: still running: {left}\n{run.stderr()}"
        twice = " twice" in m.group(1) or " then " in m.group(1)
        return Trial((gone - t1, exited - t1), (gone - t2, exited - t2), twice)
    finally:
        run.cleanup()


@pytest.mark.slow
@needs_two_cpus
def test_stop_signal_twice_in_a_loop(tmp_path) -> None:
    """30 trials: each pair of signals at each delay, to the launcher or to its process group
    (as Ctrl-C and `timeout` send them) in turn. The ranks die of the first SIGTERM already."""
    t0 = time.monotonic()
    trials = [
        _signal_twice(tmp_path, f"t{i}", first, second, delay, group=bool(i % 2))
        for i, (delay, (first, second)) in enumerate(
            [(delay, pair) for delay in DELAYS_S for pair in PAIRS]
        )
    ]
    wall = time.monotonic() - t0
    _figures("first signal -> every rank gone", [t.after_first[0] for t in trials])
    _figures("first signal -> launcher exited", [t.after_first[1] for t in trials])
    print(
        f"[figures] {len(trials)} trials in {wall:.1f} s; the launcher read both signals in "
        f"{sum(t.twice for t in trials)}"
    )


@pytest.mark.slow
@needs_two_cpus
def test_second_signal_kills_ranks_that_ignore_sigterm(tmp_path) -> None:
    """Both ranks ignore SIGTERM, so only the second signal's SIGKILL ends them (well before
    the grace period of a single signal)."""
    trials = []
    for i, delay in enumerate([0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5]):
        first, second = PAIRS[i % len(PAIRS)]
        trials.append(_signal_twice(tmp_path, f"s{i}", first, second, delay, bool(i % 2), "0,1"))
    twice = [t for t in trials if t.twice]
    assert len(twice) >= len(trials) // 2  # else this tested the single signal's grace period
    _figures(
        "second signal -> every rank gone (ranks ignoring SIGTERM)",
        [t.after_second[0] for t in twice],
    )
    _figures(
        "second signal -> launcher exited (ranks ignoring SIGTERM)",
        [t.after_second[1] for t in twice],
    )
    print(f"[figures] the launcher read both signals in {len(twice)} of {len(trials)} trials")


@pytest.mark.slow
@needs_two_cpus
def test_rank_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path) -> None:
    run = Launch.start(tmp_path, "one", stubborn="0")
    try:
        run.wait_ranks()
        run.signal(signal.SIGTERM, group=False)
        t1 = time.monotonic()
        gone, exited = run.wait_until(t1 + AFTER_FIRST_S)
        assert gone is not None and exited is not None, run.stderr()
        assert run.proc.returncode == 128 + signal.SIGTERM, run.stderr()
        assert not run.leftovers(within=2.0), run.stderr()
        # rank 1 died of SIGTERM at once, rank 0 only of the SIGKILL after the grace period
        assert gone - t1 >= 4.0, run.stderr()
        assert "received SIGTERM: stopping every rank" in run.stderr()
    finally:
        run.cleanup()
    _figures("one SIGTERM, a rank ignoring it -> every rank gone", [gone - t1])
    _figures("one SIGTERM, a rank ignoring it -> launcher exited", [exited - t1])


@pytest.mark.slow
@needs_two_cpus
@pytest.mark.parametrize("stubborn", ["", "0,1"], ids=["plain", "ignoring-sigterm"])
def test_ranks_do_not_outlive_a_killed_launcher(tmp_path, stubborn) -> None:
    """SIGKILL to the launcher alone: its watchdog sees its pipe from the launcher close and
    stops every rank (SIGTERM, SIGKILL after 5 s)."""
    run = Launch.start(tmp_path, "k", stubborn=stubborn)
    try:
        run.wait_ranks()
        run.signal(signal.SIGKILL, group=False)
        t1 = time.monotonic()
        gone, _ = run.wait_until(t1 + AFTER_FIRST_S)
        assert gone is not None, "ranks outlived the launcher"
        assert not run.leftovers(within=AFTER_FIRST_S - (time.monotonic() - t1))
    finally:
        run.cleanup()
    kind = "ranks ignoring SIGTERM" if stubborn else "plain ranks"
    _figures(f"launcher SIGKILLed ({kind}) -> every rank gone", [gone - t1])


@pytest.mark.slow
@needs_two_cpus
def test_a_dead_rank_fails_the_job(tmp_path) -> None:
    """SIGKILL to rank 1: the launcher stops rank 0 and exits 137, naming rank 1."""
    took = []
    for i in range(5):
        run = Launch.start(tmp_path, f"d{i}")
        try:
            run.wait_ranks()
            os.kill(run.ranks[1].pid, signal.SIGKILL)
            t1 = time.monotonic()
            _, exited = run.wait_until(t1 + AFTER_FIRST_S)
            assert exited is not None, run.stderr()
            assert run.proc.returncode == 128 + signal.SIGKILL, run.stderr()
            assert "rank 1 of 2 on host" in run.stderr()
            assert not run.leftovers(within=2.0), run.stderr()
            took.append(exited - t1)
        finally:
            run.cleanup()
    _figures("rank SIGKILLed -> launcher exited non-zero", took)


@pytest.mark.slow
@needs_two_cpus
def test_usr1_reaches_every_local_rank_and_they_keep_running(tmp_path) -> None:
    """SIGUSR1 to the launcher (three times) reaches each rank's own process (not the shell
    between, which would die of it) every time; the ranks and the launcher keep running, and
    end normally (exit 0) when told."""
    run = Launch.start(tmp_path, "usr1", code=RANK_USR1)
    try:
        run.wait_ranks()
        records = [run.dir / f"rank{r}.usr1" for r in (0, 1)]

        def counts() -> list[int]:
            return [len(f.read_text().split()) if f.exists() else 0 for f in records]

        for n in (1, 2, 3):
            run.signal(signal.SIGUSR1, group=False)
            deadline = time.monotonic() + 10
            while counts() != [n, n] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert counts() == [n, n], run.stderr()
        assert {f.read_text() for f in records} == {f"{int(signal.SIGUSR1)}\n" * 3}
        time.sleep(1.0)
        assert run.proc.poll() is None, run.stderr()
        assert all(r.alive() for r in run.ranks), run.stderr()
        assert not [p for p in run.started if not p.alive() and p not in run.ranks], run.stderr()
        (run.dir / "stop").write_text("")
        run.proc.wait(timeout=STARTUP_S)
        assert run.proc.returncode == 0, run.stderr()
        err = run.stderr()
        assert err.count("received SIGUSR1: passing it on to every rank") == 3, err
        assert "stopping every rank" not in err and "SIGKILL" not in err, err
        assert "all 2 rank(s) finished" in err, err
        out = (run.dir / "out").read_text()
        assert "[0]<stdout>:rank 0 done" in out and "[1]<stdout>:rank 1 done" in out, out
    finally:
        run.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, to",
    [
        (signal.SIGUSR1, "launcher"),
        (signal.SIGUSR2, "launcher"),
        (signal.SIGUSR1, "every-process"),
    ],
    ids=["USR1-to-the-launcher", "USR2-to-the-launcher", "USR1-to-every-process"],
)
def test_ranks_that_stop_on_a_preemption_warning_make_the_launcher_exit_75(tmp_path, sig, to):
    """Slurm's warning (SIGUSR1) or SGE's -notify before a kill (SIGUSR2) reaches every rank;
    a rank that exits 75 first is no failure: the others are left to finish their exit (no
    SIGTERM), and the launcher exits 75 ("run again to continue") saying so. Sent to every
    process of the launch at once, as Slurm sends `--signal` to a whole job step, nothing in
    between (Horovod's middlemen, the ranks' shells) dies of it."""
    run = Launch.start(tmp_path, "preempted", code=RANK_PREEMPTED)
    try:
        run.wait_ranks()
        if to == "launcher":
            run.signal(sig, group=False)
        else:
            below = psutil.Process(run.proc.pid).children(recursive=True)
            for proc in [psutil.Process(run.proc.pid), *below]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(sig)
        run.proc.wait(timeout=STARTUP_S)
        err = run.stderr()
        assert run.proc.returncode == 75, err
        done = [run.dir / f"rank{r}.done" for r in (0, 1)]
        assert [f.read_text() for f in done] == [f"{int(sig)}\n"] * 2, err  # rank 1 not stopped
        assert "preempted: every rank stopped at the checkpoint" in err, err
        assert "stopping the other ranks" not in err and "exited with code" not in err, err
    finally:
        run.cleanup()


def test_interrupt_forwarding_finds_the_launchers_below_a_process():
    from clusterbench.pipeline import interrupt

    assert interrupt.parse_stat("42 (python -m (x) y) S 7 42 42 0") == (42, 7)
    tree = {2: 1, 3: 2, 4: 3, 5: 1, 6: 99}
    assert interrupt.descendants(1, tree) == [2, 5, 3, 4]
    assert interrupt.descendants(6, tree) == []


# Snakemake's shape: the main thread sleeps in the scheduler's semaphore until a job's thread,
# waiting for its launcher, releases it. The SIGINT reaches another thread, as the kernel may
# choose (any thread that does not block it): here the timer's own (pthread_kill).
SIGINT_ELSEWHERE = """\
import signal, subprocess, sys, threading, time
from clusterbench.pipeline import interrupt
interrupt.install()
launcher = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(120)", "clusterbench.launch"]
)
scheduler = threading.Semaphore(0)
def job():
    launcher.wait()
    scheduler.release()
threading.Thread(target=job, daemon=True).start()
threading.Timer(0.5, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT)).start()
try:
    scheduler.acquire()
    print("no KeyboardInterrupt")
except KeyboardInterrupt:
    print(f"KeyboardInterrupt; launcher exit {launcher.wait()}")
"""


def test_interrupt_forwarding_does_not_wait_for_the_main_thread():
    """A SIGINT that lands on another thread than the main one (asleep until a job ends: a whole
    training) still stops the launchers at once; their end wakes the main thread, whose handler
    then raises the KeyboardInterrupt Snakemake stops on. (Before, the training ran to its end.)"""
    proc = subprocess.run(
        [sys.executable, "-c", SIGINT_ELSEWHERE],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=default_sigint,  # as Snakemake's, whatever this pytest inherited
    )
    assert proc.stdout.strip() == f"KeyboardInterrupt; launcher exit {-signal.SIGTERM}", (
        proc.stdout + proc.stderr
    )
