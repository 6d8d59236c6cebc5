"""Start one rank per slot of the allocation this job runs in: no ssh, no MPI, no torchrun.

    clusterbench-launch --np W [--launcher auto|local|slurm|sge] [--iface IF] [--timeout S]
                        [--log-level L] -- CMD ARGS...

The rendezvous, the slot assignment and every rank's environment come from Horovod's own Gloo
runner (:func:`horovod.runner.gloo_run.launch_gloo`); this module only supplies what that runner
leaves open: the hosts and slots (read from the scheduler, see :mod:`clusterbench.allocation`) and
how to execute one slot's command on its host:

- ``local``: a subprocess on this host;
- ``slurm``: ``srun --jobid=<id> --nodes=1 --ntasks=1 --nodelist=<node> --exact ...`` — a
  single-task step of the job's own allocation (found through ``scontrol show job -d <id>``,
  since Snakemake's jobstep executor strips every other ``SLURM_*`` variable), see
  :class:`SlurmExecutor` for the flags;
- ``sge``: ``qrsh -inherit -nostdin -V <host> ...`` on the hosts of ``$PE_HOSTFILE`` (a
  parallel environment with ``control_slaves TRUE``).

Each rank's output is streamed with a ``[rank]`` prefix. When a rank fails the others are
stopped (SIGTERM, then SIGKILL after a grace period) and the launcher exits with the failing
rank's exit code and a message naming its rank, host, exit code and last log lines.

SIGINT and SIGTERM stop every rank the same way; a second one kills them at once (SIGKILL), and
the launcher exits with ``128 + signal`` within a bounded time whatever the ranks do (see
:class:`StopSignals`: no lock is taken in a signal handler, and Horovod's own handlers, which
take one, are never installed).

Every rank gets Horovod's variables (from ``launch_gloo``) and the ``torch.distributed`` ones
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``GROUP_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` of rank 0's node, see
:func:`torch_dist_env`), so both training backends start the same way under every scheduler.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import queue
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from clusterbench.allocation import (
    LAUNCHERS,
    Allocation,
    AllocationError,
    Host,
    IfaceChoice,
    choose_iface,
    horovod_hosts,
    local_nodes,
    node_devices,
    parse_pe_hostfile,
    parse_scontrol_job,
    parse_scontrol_nodes,
    rank_device,
    running_steps,
    select_launcher,
    slurm_job_id,
    split_devices,
)

log = logging.getLogger("clusterbench.launch")

TAIL_LINES = 20
GRACE_S = 5.0  # between SIGTERM to a remote rank and killing its srun/qrsh
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")
# Launcher verbosity for each Horovod log level; without one the launcher logs at INFO.
_PY_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.INFO,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}
_TOOL_TIMEOUT_S = 60  # scontrol / squeue answering
_SIGNAL_TIMEOUT_S = 15  # scancel --signal / qrsh -inherit kill answering

# After a stop signal (SIGINT/SIGTERM) every rank gets SIGTERM at once (Horovod's middleman
# follows with SIGKILL after its own 5 s); what is left of the ranks is killed (SIGKILL) after
# KILL_AFTER_S, and the launcher exits by EXIT_AFTER_S whatever still runs. A second signal
# kills every rank at once and the launcher exits within EXIT_AFTER_SECOND_S of it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KILL_AFTER_S = 8.0
EXIT_AFTER_S = 12.0
EXIT_AFTER_SECOND_S = 3.0
SWEEP_EVERY_S = 0.5  # once killing, SIGKILL whatever appeared since, this often


class LaunchError(RuntimeError):
    """The launch cannot start; the message says why."""


# ------------------------------------------------------------------------------------------
# command line


def parse_args(argv: Sequence[str], env: Mapping[str, str]) -> argparse.Namespace:
    """The options before ``--`` (flags win over the CLUSTERBENCH_* variables), the command
    after it in ``.command``."""
    argv = list(argv)
    parser = argparse.ArgumentParser(
        prog="clusterbench-launch",
        description="Start one Horovod (Gloo) rank per slot of the current allocation.",
        epilog="Environment: CLUSTERBENCH_LAUNCHER, CLUSTERBENCH_IFACE, CLUSTERBENCH_LOG_LEVEL, "
        "CLUSTERBENCH_GLOO_TIMEOUT (the flags win).",
    )
    parser.add_argument("--np", type=int, required=True, help="number of ranks")
    parser.add_argument(
        "--launcher",
        default=None,
        help="auto (default: slurm if SLURM_JOB_ID, sge if PE_HOSTFILE, else local), "
        + ", ".join(LAUNCHERS),
    )
    parser.add_argument("--iface", default=None, help="network interface for Gloo")
    parser.add_argument(
        "--timeout", default=None, help="Gloo timeout in seconds (HOROVOD_GLOO_TIMEOUT_SECONDS)"
    )
    parser.add_argument(
        "--log-level", default=None, help=f"Horovod log level: {', '.join(LOG_LEVELS)}"
    )
    if "--" not in argv:
        parser.parse_known_args(argv)  # --help, or an error about the options themselves
        raise LaunchError("missing '--' before the command to run (... --np W -- CMD ARGS)")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    args = parser.parse_args(options)
    if not command:
        raise LaunchError("no command after '--'")
    args.command = command

    args.iface = args.iface or env.get("CLUSTERBENCH_IFACE") or None
    level = args.log_level or env.get("CLUSTERBENCH_LOG_LEVEL") or None
    if level is not None and level.lower() not in LOG_LEVELS:
        raise LaunchError(f"unknown log level {level!r}: choose one of {', '.join(LOG_LEVELS)}")
    args.log_level = level.lower() if level else None
    timeout = args.timeout or env.get("CLUSTERBENCH_GLOO_TIMEOUT") or None
    if timeout is not None:
        try:
            args.timeout = int(timeout)
        except ValueError:
            args.timeout = 0
        if args.timeout <= 0:
            raise LaunchError(f"the Gloo timeout must be a positive number of seconds: {timeout!r}")
    return args


# ------------------------------------------------------------------------------------------
# reading the allocation


def _require_tools(launcher: str, *tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise LaunchError(f"the {launcher} launcher needs `{tool}`, which is not on PATH")


def _run_tool(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"`{shlex.join(cmd)}` did not answer within {_TOOL_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        raise LaunchError(
            f"`{shlex.join(cmd)}` failed with exit code {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout


def _resolve(name: str) -> str | None:
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None


def local_allocation() -> Allocation:
    """This host, one slot per CPU this process may run on."""
    return Allocation("local", (Host(socket.gethostname(), len(os.sched_getaffinity(0))),))


def slurm_allocation(env: Mapping[str, str]) -> tuple[Allocation, dict[str, str | None]]:
    """The job's nodes and slots from ``scontrol show job -d``, and each node's address."""
    job_id = slurm_job_id(env)
    if not job_id:
        raise LaunchError(
            "the slurm launcher needs SLURM_JOB_ID (or SLURM_JOBID) in the environment"
        )
    _require_tools("slurm", "scontrol", "srun")
    alloc = parse_scontrol_job(_run_tool(["scontrol", "show", "job", "-d", job_id]))
    names = ",".join(h.name for h in alloc.hosts)
    try:
        node_addr = parse_scontrol_nodes(_run_tool(["scontrol", "show", "node", names]))
    except LaunchError as exc:
        log.warning("could not read node addresses (%s); resolving node names instead", exc)
        node_addr = {}
    return alloc, {h.name: _resolve(node_addr.get(h.name, h.name)) for h in alloc.hosts}


def sge_allocation(env: Mapping[str, str]) -> tuple[Allocation, dict[str, str | None]]:
    """The hosts and slots of ``$PE_HOSTFILE``, and each host's address."""
    path = env.get("PE_HOSTFILE")
    if not path:
        raise LaunchError("the sge launcher needs PE_HOSTFILE (submit with `qsub -pe <pe> N`)")
    if not env.get("JOB_ID"):
        raise LaunchError("the sge launcher needs JOB_ID in the environment (qrsh -inherit)")
    _require_tools("sge", "qrsh")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LaunchError(f"cannot read PE_HOSTFILE {path}: {exc}") from exc
    alloc = parse_pe_hostfile(text)
    return alloc, {h.name: _resolve(h.name) for h in alloc.hosts}


def _local_ifaces() -> dict[str, list[str]]:
    import psutil

    return {
        name: [a.address for a in addrs if a.family == socket.AF_INET]
        for name, addrs in psutil.net_if_addrs().items()
        if any(a.family == socket.AF_INET for a in addrs)
    }


# ------------------------------------------------------------------------------------------
# executing one slot's command


# safe_shell_exec runs the command with `sh -c`. A shell that exec's its last command would
# *be* the rank, and safe_shell_exec's termination (SIGTERM the shell's children, then SIGSTOP
# the shell, then SIGKILL) would stop the rank instead of letting it handle SIGTERM. With a
# trailing `exit` the shell stays the rank's parent and the rank gets SIGTERM first.
def _keep_shell(command: str) -> str:
    return f"{command}; exit $?"


class Executor:
    """How one slot's command runs on its host: the scheduler-specific part of a launch.

    ``shell_command`` wraps Horovod's per-slot command (``env HOROVOD_RANK=... CMD``) for
    :func:`safe_shell_exec.execute`, which runs it with ``env`` and, when told to stop, sends
    SIGTERM to the shell's children and SIGKILL after a grace period. When the rank runs
    elsewhere that SIGTERM would only reach srun/qrsh, so ``signal_rank`` first signals the rank
    itself (SIGTERM, then SIGKILL after the grace period).
    """

    env: dict[str, str] | None = None  # environment of the local process (None: inherit)
    # The rank is not this host's process but a scheduler's task (srun step, qrsh -inherit):
    # killing it goes through ``signal_rank``, and killing the local srun/qrsh is a last resort.
    remote = False

    def shell_command(self, command: str, slot_info: Any) -> str:
        return command

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        """Send ``sig`` to the rank itself; True when it was sent."""
        return False

    def observe(self, slot_info: Any, line: str) -> bool:
        """Look at one line of the rank's output; True to drop it from the output."""
        return False


class LocalExecutor(Executor):
    """Ranks are subprocesses of this launcher."""


class SlurmExecutor(Executor):
    """One single-task step per rank inside the job's allocation.

    Slurm 22.05 gives a step every CPU of its nodes unless ``--exact``; with ``--exact
    --cpus-per-task`` each step gets its own share, and concurrent steps on a node are bound to
    *different* CPUs. They must not wait for each other on memory or GRES either: each asks for
    its share of the node's memory (``--mem``) and for one GPU (``--gres=gpu:1``, Slurm then
    sets ``CUDA_VISIBLE_DEVICES``) or no GRES at all. ``--overlap`` would also stop steps from
    waiting, but it binds every overlapping step to the same first CPUs of the node, so it is
    used only when other steps already run in the job (this launcher inside a step, say), which
    the ranks could otherwise wait for forever.

    The environment is passed on without the launcher's own ``SLURM_*`` variables (a batch
    step's values would override srun's options), so srun behaves the same under sbatch and
    under Snakemake's jobstep executor, which strips them.

    srun answers SIGTERM by killing its step at once (SIGKILL), so ``signal_rank`` signals the
    step's task with ``scancel --signal``.
    """

    remote = True

    def __init__(self, alloc: Allocation, tag: str, overlap: bool):
        self.alloc, self.tag, self.overlap = alloc, tag, overlap
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"
        }
        self.cwd = os.getcwd()
        self.hosts = {h.name: h for h in alloc.hosts}

    def step_name(self, slot_info: Any) -> str:
        return f"{self.tag}.{slot_info.rank}"

    def shell_command(self, command: str, slot_info: Any) -> str:
        host = self.hosts[slot_info.hostname]
        srun = [
            "srun",
            f"--jobid={self.alloc.job_id}",
            f"--job-name={self.step_name(slot_info)}",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={slot_info.hostname}",
            f"--cpus-per-task={self.alloc.cpus_per_task}",
            "--exact",
        ]
        if self.overlap:
            srun.append("--overlap")
        else:
            if host.mem_mb:
                srun.append(f"--mem={max(1, host.mem_mb // slot_info.local_size)}M")
            srun.append("--gres=gpu:1" if host.gpus else "--gres=none")
        srun += ["--input=none", "--export=ALL", f"--chdir={self.cwd}", "--quiet"]
        return shlex.join([*srun, "bash", "-c", command])

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        steps = slurm_steps(self.alloc.job_id, name=self.step_name(slot_info))
        if steps:
            cmd = ["scancel", f"--signal={sig.name[3:]}", *steps]
            subprocess.run(cmd, check=False, capture_output=True, timeout=_SIGNAL_TIMEOUT_S)
        return bool(steps)


class SgeExecutor(Executor):
    """``qrsh -inherit -nostdin -V <host>`` in the job's parallel environment.

    qrsh joins its arguments with spaces and the remote side parses them again with a shell,
    so the ``bash -c`` script is quoted twice. The remote shell starts in the home directory:
    change to the launcher's directory first. ``-V`` passes this environment on.

    SGE kills the whole job (this launcher included) when a ``qrsh -inherit`` client is killed
    or a task dies of a signal, and the client may even exit 0. So the remote bash runs the rank
    as its child, announces the child's pid on stderr and exits with ``128 + signal`` if the rank
    dies of one; ``signal_rank`` signals that pid: directly when the host is this machine, else
    through another ``qrsh -inherit``. The client then ends by itself with the rank's status.
    """

    remote = True

    def __init__(self, local_hosts: set[str]) -> None:
        self.cwd = os.getcwd()
        self.local_hosts = local_hosts
        self.pids: dict[int, int] = {}

    def shell_command(self, command: str, slot_info: Any) -> str:
        remote = (
            f"cd {shlex.quote(self.cwd)} || exit 1; {command} & echo {_PID_MARK}$! >&2; wait $!"
        )
        qrsh = ["qrsh", "-inherit", "-nostdin", "-V", slot_info.hostname, "bash", "-c"]
        return f"{shlex.join(qrsh)} {shlex.quote(shlex.quote(remote))}"

    def observe(self, slot_info: Any, line: str) -> bool:
        _, mark, pid = line.partition(_PID_MARK)
        if mark and pid.strip().isdigit():
            self.pids[slot_info.rank] = int(pid)
            return True
        return False

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        pid = self.pids.get(slot_info.rank)
        if pid is None:
            return False
        if slot_info.hostname in self.local_hosts:
            try:
                os.kill(pid, sig)
            except OSError:
                return False
            return True
        cmd = ["qrsh", "-inherit", "-nostdin", slot_info.hostname, "kill", f"-{sig.name[3:]}"]
        proc = subprocess.run(
            [*cmd, str(pid)], check=False, capture_output=True, timeout=_SIGNAL_TIMEOUT_S
        )
        return proc.returncode == 0


_PID_MARK = "clusterbench-launch: rank pid "


class _TailStream:
    """A text stream that writes to ``target`` and keeps the last lines for the error report;
    ``drop(text)`` may withhold a line."""

    def __init__(
        self,
        target: IO[str],
        tail: collections.deque[str],
        lock: threading.Lock,
        drop: Callable[[str], bool],
    ):
        self._target, self._tail, self._lock, self._drop = target, tail, lock, drop

    def write(self, text: str) -> None:
        if self._drop(text):
            return
        with self._lock:
            self._target.write(text)
            self._target.flush()
            self._tail.extend(text.splitlines())

    def flush(self) -> None:
        with self._lock:
            self._target.flush()


@dataclass
class RankResult:
    rank: int
    host: str
    exit_code: int
    ended: float
    after_stop: bool  # it ended after the launcher had started stopping the ranks
    tail: list[str]


def torch_dist_env(slot_info: Any, master: tuple[str, int]) -> dict[str, str]:
    """The ``torch.distributed`` (env://) variables of one slot, beside Horovod's own: every
    backend's ranks are started the same way, from the same allocation."""
    return {
        "RANK": str(slot_info.rank),
        "WORLD_SIZE": str(slot_info.size),
        "LOCAL_RANK": str(slot_info.local_rank),
        "LOCAL_WORLD_SIZE": str(slot_info.local_size),
        "GROUP_RANK": str(slot_info.cross_rank),
        "GROUP_WORLD_SIZE": str(slot_info.cross_size),
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
    }


def free_port(address: str) -> int:
    """A TCP port that is free on this machine's ``address`` now (for rank 0's TCPStore)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


class RankRunner:
    """``exec_command(command, slot_info, events)`` for :func:`launch_gloo`: runs one slot's
    command through ``executor`` with :func:`safe_shell_exec.execute` (``[rank]``-prefixed
    output) and stops all ranks when one fails or an event (the launcher's shutdown event, set
    by :class:`StopSignals`) is set: first ``executor.signal_rank`` (SIGTERM, then SIGKILL, each
    followed by a grace period), then safe_shell_exec's own SIGTERM/SIGKILL of the local process
    (srun, qrsh or the rank). :meth:`kill_all` is the short way: SIGKILL to every rank at once."""

    def __init__(
        self,
        executor: Executor,
        devices: Mapping[int, str | None],
        master: tuple[str, int] = ("127.0.0.1", 29500),
    ):
        self.executor = executor
        self.devices = devices
        self.master = master
        self.stop_all = threading.Event()
        self.results: dict[int, RankResult] = {}
        self.slots: dict[int, Any] = {}  # the slots whose rank was started
        self.reaper = Reaper()
        self._lock = threading.Lock()
        self._out_lock = threading.Lock()

    def exec_command(self, command: str, slot_info: Any, events: list | None) -> tuple[int, float]:
        from horovod.runner.common.util import safe_shell_exec
        from horovod.runner.util.threads import on_event

        rank, host = slot_info.rank, slot_info.hostname
        extra = torch_dist_env(slot_info, self.master)
        device = self.devices.get(rank)
        if device is not None:
            extra["CUDA_VISIBLE_DEVICES"] = device
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())
        command = f"env {assignments} {command}"
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        external = list(events or [])
        done, kill = threading.Event(), threading.Event()

        def stop() -> None:
            try:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    sent = self.executor.signal_rank(slot_info, sig)
                    log.debug("rank %d: %s %s", rank, sig.name, "sent" if sent else "not sent")
                    if not sent or done.wait(GRACE_S):
                        break
            finally:
                kill.set()

        def drop(text: str) -> bool:
            return self.executor.observe(slot_info, text)

        for event in external:
            on_event(event, self.stop_all.set, stop=done, silent=True)
        on_event(self.stop_all, stop, stop=done, silent=True)
        try:
            if self.stop_all.is_set() or any(ev.is_set() for ev in external):
                raise LaunchError("the launcher was stopped before this rank started")
            with self._lock:
                self.slots[rank] = slot_info
            shell_command = self.executor.shell_command(command, slot_info)
            log.debug("rank %d on %s: %s", rank, host, shell_command)
            exit_code = safe_shell_exec.execute(
                _keep_shell(shell_command),
                env=self.executor.env,
                index=rank,
                stdout=_TailStream(sys.stdout, tail, self._out_lock, drop),
                stderr=_TailStream(sys.stderr, tail, self._out_lock, drop),
                events=[kill],
            )
        except Exception as exc:  # noqa: BLE001 - any failure to run the rank is its failure
            tail.append(f"launcher: could not run rank {rank}: {exc!r}")
            exit_code = 1
        finally:
            done.set()
        ended = time.time()
        result = RankResult(rank, host, exit_code, ended, self.stop_all.is_set(), list(tail))
        with self._lock:
            self.results[rank] = result
            if exit_code != 0 and not self.stop_all.is_set():
                log.error(
                    "rank %d on %s exited with code %d: stopping the other ranks",
                    rank,
                    host,
                    exit_code,
                )
            if exit_code != 0:
                self.stop_all.set()
        return exit_code, ended

    def kill_all(self) -> None:
        """SIGKILL every rank at once, without the grace periods of a stop.

        Local ranks: :meth:`Reaper.sweep` (their whole process groups). Remote ranks: the
        executor's ``signal_rank`` (scancel / qrsh kill), one thread per rank since the
        scheduler's tools may be slow; their local srun/qrsh are left to end by themselves
        (killing a ``qrsh -inherit`` client ends the whole SGE job) until the launcher's
        final :meth:`Reaper.sweep`."""
        self.stop_all.set()
        if not self.executor.remote:
            self.reaper.sweep()
            return
        with self._lock:
            slots = [s for r, s in self.slots.items() if r not in self.results]
        for slot in slots:
            threading.Thread(
                target=self._kill_remote, args=(slot,), name=f"kill-rank-{slot.rank}", daemon=True
            ).start()

    def sweep(self) -> None:
        """Once killing: SIGKILL what is left of local ranks (started since, say)."""
        if not self.executor.remote:
            self.reaper.sweep()

    def _kill_remote(self, slot_info: Any) -> None:
        try:
            self.executor.signal_rank(slot_info, signal.SIGKILL)
        except Exception as exc:  # noqa: BLE001 - a thread of its own: report, do not raise
            log.warning("rank %d: could not send SIGKILL: %r", slot_info.rank, exc)

    def failure(self) -> RankResult | None:
        """The rank whose failure ended the run, None if every rank exited 0.

        The first to fail before the others were told to stop, preferring a rank whose output
        does not show Horovod reacting to a dead peer (a rank that dies takes its peers' Gloo
        connections down with it, and they may be seen failing at about the same time)."""
        failed = [r for r in self.results.values() if r.exit_code != 0]
        if not failed:
            return None
        unprompted = [r for r in failed if not r.after_stop] or failed
        primary = [r for r in unprompted if not _peer_failure(r.tail)] or unprompted
        return min(primary, key=lambda r: r.ended)


_PEER_FAILURE = (
    "Horovod has been shut down",
    "Connection closed by peer",
    "Connection reset by peer",
)


def _peer_failure(tail: Sequence[str]) -> bool:
    return any(marker in line for line in tail for marker in _PEER_FAILURE)


def failure_message(result: RankResult, size: int) -> str:
    lines = "\n".join(f"    {line}" for line in result.tail) or "    (no output)"
    return (
        f"rank {result.rank} of {size} on host {result.host} exited with code "
        f"{result.exit_code}; the other ranks were stopped. Its last {len(result.tail)} "
        f"log line(s):\n{lines}"
    )


def slurm_steps(
    job_id: str | None, name: str | None = None, name_prefix: str | None = None
) -> list[str]:
    """Running steps of the job (not batch/extern), optionally only those with that name."""
    try:
        out = _run_tool(["squeue", "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %j"])
    except LaunchError as exc:
        log.warning("could not list the steps of job %s: %s", job_id, exc)
        return []
    return running_steps(out, job_id, name=name, name_prefix=name_prefix)


def cancel_slurm_steps(job_id: str | None, tag: str) -> None:
    """Kill any step of this launch still known to Slurm (a rank whose srun was killed)."""
    steps = slurm_steps(job_id, name_prefix=f"{tag}.")
    if steps:
        log.warning("cancelling leftover step(s) %s", " ".join(steps))
        subprocess.run(["scancel", "--signal=KILL", *steps], check=False, timeout=_SIGNAL_TIMEOUT_S)


# ------------------------------------------------------------------------------------------
# stop signals


class Reaper:
    """SIGKILL to everything this launcher started, at once: on a second stop signal, at the end
    of a stop's grace period, before a forced exit.

    Horovod's safe_shell_exec starts each rank through a middleman process that calls
    ``os.setsid()``: the middleman, the rank's shell, the rank and whatever the rank starts
    share one process group (the middleman's pid), apart from the launcher's own. A sweep kills
    each such group (``killpg``; a group is remembered from the first sweep that sees its
    middleman below this process until it is found empty), then every process still below this
    one (srun, qrsh, a process that left its group), except multiprocessing's resource tracker,
    which ends by itself with the launcher, and processes older than the reaper (when the
    launcher runs inside another program, that program's other children are left alone).
    """

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.since = time.time() - 1.0  # process start times are coarser than time.time()
        self._lock = threading.Lock()

    def sweep(self) -> None:
        from multiprocessing import resource_tracker

        import psutil

        tracker = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)

        def ours(proc: psutil.Process) -> bool:
            try:
                return proc.pid != tracker and proc.create_time() >= self.since
            except psutil.Error:  # gone already
                return False

        with self._lock:
            try:
                procs = [p for p in psutil.Process().children(recursive=True) if ours(p)]
            except psutil.Error:
                procs = []
            for proc in procs:
                with contextlib.suppress(OSError):
                    if os.getsid(proc.pid) == proc.pid:
                        self.groups.add(proc.pid)
            for group in sorted(self.groups):
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:  # ESRCH: the group is gone, its number may be reused
                    self.groups.discard(group)
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()  # psutil checks the pid still names the same process


def _on_stop_signal(signum: int, frame: Any) -> None:
    """The Python-level SIGINT/SIGTERM handler while the ranks run: nothing at all.

    CPython's C-level handler has already written the signal number to the wake-up fd
    (:func:`signal.set_wakeup_fd`), which :class:`StopSignals`' thread reads. No lock, no
    logging, no ``Event.set``: a second signal interrupting this handler finds nothing held."""


class StopSignals:
    """Stop signals while the ranks run, handled outside any signal handler.

    ``install`` (main thread) sets :func:`_on_stop_signal` for ``signals`` and a non-blocking
    pipe as the wake-up fd, and starts a watcher thread reading that pipe; it does, in order:

    - first signal: ``shutdown.set()`` (the event Horovod hands every rank's ``exec_command``:
      every rank gets SIGTERM, then SIGKILL after a grace period);
    - a second signal, or ``kill_after`` seconds after the first: ``kill()`` (SIGKILL to every
      rank at once), then ``sweep()`` every :data:`SWEEP_EVERY_S`;
    - ``exit_after`` seconds after the first signal, or ``exit_after_second`` after the second,
      if the launcher is still there: ``final()`` and ``exit(128 + first signal)``.

    What it has to say goes through a queue to a second thread that logs it, so that a blocked
    stderr cannot hold the watcher up. ``first`` is the first signal's number (None: none came).
    """

    def __init__(
        self,
        shutdown: threading.Event,
        kill: Callable[[], None],
        sweep: Callable[[], None],
        final: Callable[[], None],
        signals: Sequence[signal.Signals] = STOP_SIGNALS,
        kill_after: float = KILL_AFTER_S,
        exit_after: float = EXIT_AFTER_S,
        exit_after_second: float = EXIT_AFTER_SECOND_S,
        exit: Callable[[int], Any] = os._exit,
    ):
        self.shutdown, self.kill, self.sweep, self.final = shutdown, kill, sweep, final
        self.signals = tuple(signals)
        self.kill_after, self.exit_after = kill_after, exit_after
        self.exit_after_second, self.exit = exit_after_second, exit
        self.first: int | None = None
        self.first_at: float | None = None
        self.second_at: float | None = None
        self.killed_at: float | None = None
        self.received: list[int] = []  # every signal number read, in order
        self._swept_at = 0.0
        self._exiting = False
        self._old: dict[int, Any] = {}
        self._old_fd: int | None = None
        self._pipe: tuple[int, int] | None = None
        self._messages: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.install()
        else:  # signal.signal() works in the main thread only: leave the signals alone
            log.debug("not in the main thread: stop signals are not handled")
        return self

    def __exit__(self, *exc: object) -> None:
        """Uninstall, unless a signal came. Then the ranks are gone and the launcher is on its
        way out with 128 + the first signal: further stop signals are ignored (SIG_IGN, which,
        unlike a Python handler, the interpreter's shutdown leaves in place), so that one
        coming now cannot kill it by its default action instead, and the watcher stays to
        enforce the deadlines until the process ends."""
        if self.first is None:
            self.uninstall()
        elif self._pipe is not None:
            for sig in self.signals:
                signal.signal(sig, signal.SIG_IGN)

    def install(self) -> None:
        read_fd, write_fd = self._pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in self.signals:
            self._old[sig] = signal.signal(sig, _on_stop_signal)
        self._threads = [
            threading.Thread(target=self._watch, args=(read_fd,), name="stop-signals"),
            threading.Thread(target=self._report, name="stop-signals-log"),
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    def uninstall(self) -> None:
        """The previous handlers and wake-up fd again; the threads end (what they have read is
        handled first)."""
        if self._pipe is None:
            return
        for sig, handler in self._old.items():
            if handler is not None:
                signal.signal(sig, handler)
        signal.set_wakeup_fd(-1 if self._old_fd is None else self._old_fd)
        with contextlib.suppress(OSError):
            os.write(self._pipe[1], b"\0")  # no signal is 0: the watcher's cue to end
        self._messages.put(None)
        for thread in self._threads:
            thread.join(timeout=2.0)
        if not any(t.is_alive() for t in self._threads):
            for fd in self._pipe:
                os.close(fd)
        self._pipe = None

    # the watcher thread

    def _watch(self, read_fd: int) -> None:
        while True:
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([read_fd], [], [], timeout)
            data = b""
            if readable:
                with contextlib.suppress(BlockingIOError):
                    data = os.read(read_fd, 256)
            for signum in data:
                if signum:
                    self._received(signum)
            self._on_time()
            if 0 in data:
                return

    def _received(self, signum: int) -> None:
        now = time.monotonic()
        name = _signal_name(signum)
        self.received.append(signum)
        if self.first is None:
            self.first, self.first_at = signum, now
            self.shutdown.set()
            self._say(
                f"received {name}: stopping every rank (SIGTERM, SIGKILL after a grace "
                f"period); send it again to kill them at once"
            )
        elif self.second_at is None:
            self.second_at = now
            self._kill_all(f"received {self.describe()}: killing every rank (SIGKILL)")

    def describe(self) -> str:
        """The first two signals read: "SIGTERM", "SIGTERM twice", "SIGTERM then SIGINT"."""
        names = [_signal_name(s) for s in self.received[:2]]
        if len(names) < 2:
            return names[0] if names else "no signal"
        return f"{names[0]} twice" if names[0] == names[1] else " then ".join(names)

    def _kill_all(self, why: str) -> None:
        self.killed_at = self._swept_at = time.monotonic()
        self._call(self.kill)
        self._say(why)

    def _call(self, action: Callable[[], None]) -> None:
        """``action()``; an error is reported, never the end of the watcher (and its deadlines)."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001
            self._say(f"stopping the ranks: {exc!r}")

    def _next_deadline(self) -> float | None:
        if self.first_at is None or self._exiting:
            return None
        deadlines = [self.first_at + self.exit_after]
        if self.second_at is not None:
            deadlines.append(self.second_at + self.exit_after_second)
        if self.killed_at is None:
            deadlines.append(self.first_at + self.kill_after)
        else:
            deadlines.append(self._swept_at + SWEEP_EVERY_S)
        return min(deadlines)

    def _on_time(self) -> None:
        if self.first_at is None or self._exiting:
            return
        now = time.monotonic()
        if self.killed_at is None and now >= self.first_at + self.kill_after:
            self._kill_all(
                f"{self.kill_after:g} s after {_signal_name(self.first)}: killing what is left "
                "of the ranks (SIGKILL)"
            )
        elif self.killed_at is not None and now >= self._swept_at + SWEEP_EVERY_S:
            self._swept_at = now
            self._call(self.sweep)
        exit_at = self.first_at + self.exit_after
        if self.second_at is not None:
            exit_at = min(exit_at, self.second_at + self.exit_after_second)
        if now >= exit_at:
            self._exiting = True
            self._call(self.final)
            code = 128 + (self.first or 0)
            _write_stderr(
                f"[launch] still running {now - self.first_at:.1f} s after "
                f"{_signal_name(self.first)}: everything this launcher started was killed "
                f"(SIGKILL); exiting with {code}\n"
            )
            self.exit(code)

    def _say(self, message: str) -> None:
        self._messages.put(message)

    def _report(self) -> None:
        while (message := self._messages.get()) is not None:
            log.warning(message)


def _signal_name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name  # type: ignore[arg-type]
    except ValueError:
        return f"signal {signum}"


def _write_stderr(text: str, wait_s: float = 0.5) -> None:
    """Write to fd 2 from a thread of its own, waiting at most ``wait_s`` for it (a stderr that
    nobody reads must not keep the launcher from exiting)."""

    def write() -> None:
        with contextlib.suppress(OSError):
            os.write(2, text.encode())

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(wait_s)


@contextlib.contextmanager
def _shutdown_event_without_handlers(shutdown: threading.Event):
    """``launch_gloo`` handing ``shutdown`` to every rank, without Horovod's signal handlers.

    horovod 0.28.1's ``launch_gloo`` calls ``gloo_run.register_shutdown_event()`` (by its module
    global name, at each call), which installs SIGINT and SIGTERM handlers that call
    ``Event.set``: a ``Condition`` lock taken in a signal handler, which deadlocks when a second
    signal comes while the first one's handler holds it. It is the only place in
    ``horovod.runner`` that installs a signal handler, so while this is in force Horovod leaves
    the launcher's handlers (:class:`StopSignals`) in place."""
    from horovod.runner import gloo_run

    original = gloo_run.register_shutdown_event
    gloo_run.register_shutdown_event = lambda: shutdown
    try:
        yield
    finally:
        gloo_run.register_shutdown_event = original


# ------------------------------------------------------------------------------------------
# main


@dataclass
class Plan:
    args: argparse.Namespace
    launcher: str
    allocation: Allocation
    hosts: str  # Horovod's host:slots string
    iface: IfaceChoice
    devices: dict[int, str | None]
    env: dict[str, str]  # extra environment of every rank
    slurm_overlap: bool = False
    local_hosts: set[str] = field(default_factory=set)  # hosts whose address is this machine
    master: tuple[str, int] = ("127.0.0.1", 29500)  # rank 0's address and port (env://)


def prepare(args: argparse.Namespace, env: Mapping[str, str]) -> Plan:
    """Everything that can be checked before a rank starts."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    launcher = select_launcher(args.launcher, env)
    if launcher == "slurm":
        alloc, addresses = slurm_allocation(env)
    elif launcher == "sge":
        alloc, addresses = sge_allocation(env)
    else:
        alloc = local_allocation()
        addresses = {alloc.hosts[0].name: "127.0.0.1"}
    hosts = horovod_hosts(alloc, args.np)
    slots = get_host_assignments(parse_hosts(hosts), args.np)

    used = {s.hostname for s in slots}
    host_name = socket.gethostname()
    ifaces = _local_ifaces()
    iface = choose_iface(
        {h: a for h, a in addresses.items() if h in used},
        ifaces,
        host_name,
        _resolve(host_name),
        args.iface,
    )

    # A single rank runs right here as a local process (see run()): no step of its own, and it
    # keeps the GPUs its environment already has.
    single = args.np == 1
    overlap = False
    if launcher == "slurm" and not single:
        steps = slurm_steps(alloc.job_id)
        if steps:
            overlap = True
            log.warning(
                "steps %s already run in job %s: the ranks' steps use --overlap so they cannot "
                "wait for them (they may then share CPUs)",
                " ".join(steps),
                alloc.job_id,
            )

    inherited = split_devices(env.get("CUDA_VISIBLE_DEVICES"))
    by_name = {h.name: h for h in alloc.hosts}
    devices: dict[int, str | None] = {}
    for s in slots:
        host = by_name[s.hostname]
        device = rank_device(
            node_devices(host.gpus, inherited), s.local_rank, s.local_size, s.hostname
        )
        # A Slurm step with --gres=gpu:1 gets its GPU (and CUDA_VISIBLE_DEVICES) from Slurm.
        slurm_pins = launcher == "slurm" and host.gpus and not overlap
        devices[s.rank] = None if single or slurm_pins else device

    # the ranks record what started them (clusterbench.train writes it to run.json)
    extra: dict[str, str] = {
        "CLUSTERBENCH_LAUNCHER": launcher,
        "GLOO_SOCKET_IFNAME": iface.iface,  # torch.distributed's gloo (Horovod's is set apart)
    }
    if args.log_level:
        extra["HOROVOD_LOG_LEVEL"] = args.log_level
    if args.timeout:
        extra["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(args.timeout)
    here = local_nodes(addresses, ifaces)
    # torch.distributed's rendezvous: a TCPStore served by rank 0, on rank 0's node address.
    first = slots[0].hostname
    master_addr = addresses.get(first) or iface.address
    if first not in here:
        log.warning(
            "rank 0 runs on %s, not on this host: MASTER_PORT is chosen free here, not there",
            first,
        )
    master = (master_addr, free_port(master_addr if first in here else ""))
    return Plan(args, launcher, alloc, hosts, iface, devices, extra, overlap, here, master)


def run(plan: Plan) -> int:
    """Start the ranks through Horovod's Gloo runner; the failing rank's exit code or 0."""
    from horovod.runner.common.util.settings import Settings
    from horovod.runner.gloo_run import launch_gloo

    args = plan.args
    tag = f"cb-{uuid.uuid4().hex[:8]}"
    executor: Executor
    if args.np == 1:
        # The only slot is on the job's first node, where this runs: no remote start needed
        # (and a one-slot SGE job's PE need not allow qrsh -inherit).
        executor, how = LocalExecutor(), "one local process"
    elif plan.launcher == "slurm":
        executor, how = SlurmExecutor(plan.allocation, tag, plan.slurm_overlap), "srun steps"
    elif plan.launcher == "sge":
        executor, how = SgeExecutor(plan.local_hosts), "qrsh -inherit"
    else:
        executor, how = LocalExecutor(), "local processes"

    log.info(
        "%s launcher (%s): %d rank(s) on %s (allocation: %s)",
        plan.launcher,
        how,
        args.np,
        plan.hosts,
        plan.allocation.describe(),
    )
    log.info(
        "Gloo interface %s, rendezvous on %s: %s",
        plan.iface.iface,
        plan.iface.address,
        plan.iface.reason,
    )
    pinned = {r: d for r, d in plan.devices.items() if d is not None}
    if pinned:
        log.info("CUDA_VISIBLE_DEVICES by rank: %s", pinned)
    elif args.np > 1 and plan.launcher == "slurm" and any(h.gpus for h in plan.allocation.hosts):
        log.info("each rank's step gets one GPU from Slurm (--gres=gpu:1, CUDA_VISIBLE_DEVICES)")

    runner = RankRunner(executor, plan.devices, plan.master)
    verbose = 2 if log.isEnabledFor(logging.DEBUG) else 0
    settings = Settings(hosts=plan.hosts, num_proc=args.np, verbose=verbose)
    shutdown = threading.Event()
    signals = StopSignals(shutdown, runner.kill_all, runner.sweep, runner.reaper.sweep)
    with signals:
        try:
            with _shutdown_event_without_handlers(shutdown):
                launch_gloo(
                    args.command,
                    runner.exec_command,
                    settings,
                    [plan.iface.iface],
                    plan.env,
                    plan.iface.address,
                )
        except RuntimeError:
            if runner.failure() is None and signals.first is None:
                raise
        finally:
            if signals.killed_at is not None:
                runner.reaper.sweep()  # nothing started for a rank outlives a kill
            stopped = runner.failure() is not None or signals.first is not None
            if plan.launcher == "slurm" and stopped:
                cancel_slurm_steps(plan.allocation.job_id, tag)

    failed = runner.failure()
    if signals.first is not None and (failed is None or failed.after_stop):
        log.error("the launcher received %s: all ranks were stopped", signals.describe())
        return 128 + signals.first
    if failed is None:
        log.info("all %d rank(s) finished", args.np)
        return 0
    log.error(failure_message(failed, args.np))
    return failed.exit_code if 0 < failed.exit_code < 256 else 1


class _StderrHandler(logging.StreamHandler):
    """A handler writing to the current ``sys.stderr``, also when it was replaced since."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, env)
    except LaunchError as exc:
        print(f"clusterbench-launch: error: {exc}", file=sys.stderr)
        return 2
    level = _PY_LEVELS[args.log_level] if args.log_level else logging.INFO
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[launch] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level)
    try:
        plan = prepare(args, env)
    except (LaunchError, AllocationError) as exc:
        print(f"clusterbench-launch: error: {exc}", file=sys.stderr)
        return 2
    return run(plan)


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
