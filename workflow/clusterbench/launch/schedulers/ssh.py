"""ssh: machines without a scheduler, listed in a hosts file, their ranks started over ssh (as
``mpirun -machinefile`` and ``horovodrun -H`` do).

Chosen by ``CLUSTERBENCH_SCHEDULER=ssh`` (its jobs run under Snakemake's local executor:
``profiles/ssh``); the launchers of the jobs inherit the variable.

- **Hosts**: the hosts file ``CLUSTERBENCH_HOSTS_FILE`` names (``host``, ``host:N``, ``host
  slots=N [max_slots=M]``, ``#`` comments: :func:`~._base.parse_hosts_file`), one rank per slot,
  the slots filled in order (:func:`~._base.fill_ranks`); read again by Horovod elastic's
  discovery, so editing it adds and takes out hosts. A host's address is the ``HostName`` ssh
  would connect to (``ssh -G``: aliases of ``~/.ssh/config`` work), resolved.
- **Starting a rank** (:meth:`SshScheduler.shell_command`): on a host whose address is this
  machine, a local process (as the local scheduler's); elsewhere ``ssh -o BatchMode=yes [-p
  PORT] <host> 'cd <cwd> && exec <python> -c <agent> ...'`` with the user's own keys and ssh
  configuration (``CLUSTERBENCH_SSH_COMMAND``, default ``ssh``; ``CLUSTERBENCH_SSH_PORT``). The
  launcher's environment reaches the rank through ssh's standard input, from a file only its
  user can read, whose name the rank's shell removes as it opens it (no values on any command
  line), less what belongs to the machine it was set on (:data:`NOT_FORWARDED`). The checkout
  and its ``.venv`` are at the same path on every host (a shared file system); the pre-flight
  checks it.
- **The agent** (:func:`rank_agent`, the remote process ssh runs): starts the rank in a
  process group of its own, announces its pid (``clusterbench-launch: rank pid N``, taken out
  of the output by :meth:`SshScheduler.observe`), sets the rank's network interface on its host
  and watches its ssh connection: ssh passes no signal on without a terminal, but when the
  connection ends (the launcher stopped or killed its ssh, Ctrl-C to Snakemake, the launcher
  killed), sshd closes the agent's standard output, which ``poll`` reports at once; the agent
  then stops the rank's whole process group (SIGTERM, SIGKILL after :data:`GRACE_S`). No rank
  outlives its ssh connection.
- **Signals** (:meth:`SshScheduler.signal_rank`): ``kill`` of the announced pid over a second
  ssh connection (SIGKILL: its whole process group). A dead host or a killed rank ends its ssh
  with an error (``ServerAliveInterval``: a host that stops answering within about
  :data:`ALIVE_INTERVAL_S` x :data:`ALIVE_COUNT`), which the launcher takes as the rank's
  failure: a fixed run stops its other ranks, an elastic one goes on without the host.
  Preemption warnings do not apply (no scheduler sends any).
- **The interface**: ``CLUSTERBENCH_IFACE`` (``--iface``) names it on every host; else each
  rank takes, on its own host, the interface that routes to the rendezvous address (hosts may
  name their interfaces differently), for Horovod's Gloo, torch's Gloo and NCCL alike.
- **Pre-flight** (:meth:`SshScheduler.unavailable`, before any job): a run needing more ranks
  than the hosts' slots is unavailable (skipped, or refused with ``on_unavailable: fail``); then
  the hosts the runs use (:func:`hosts_used`: the first ones, filled in order up to the largest
  run's ranks, not every line of a long file) are probed, :data:`PROBES_AT_ONCE` at a time, all
  within one limit (``CLUSTERBENCH_SSH_TIMEOUT``, default 10 s, plus :data:`PROBE_EXTRA_S`),
  saying so in the log: reachable over ssh without a password prompt, the same Python (the
  ``.venv``'s, at the same path) with the same torch and Horovod, each run's data directory
  readable and the working directory writable (the shared file system). A host that fails any of
  them stops the workflow before any training job, naming the host and the check
  (:class:`~._base.PreflightError`).

Standard library only: the Snakefile imports it (psutil only inside the agent).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from clusterbench.launch.schedulers._base import (
    HOSTS_FILE_VAR,
    SIGNAL_TIMEOUT_S,
    Allocation,
    AllocationError,
    Host,
    JobRequest,
    LaunchError,
    PreflightContext,
    PreflightError,
    Scheduler,
    fill_ranks,
    hosts_file_text,
    parse_hosts_file,
    resolve,
)
from clusterbench.launch.schedulers.local import LocalScheduler

#: The ssh command (split like a shell would): ``ssh -F ~/.ssh/lab_config``, say.
SSH_COMMAND_VAR = "CLUSTERBENCH_SSH_COMMAND"
#: The port of every host's sshd (``ssh -p``); unset: ssh's own (``~/.ssh/config``, 22).
SSH_PORT_VAR = "CLUSTERBENCH_SSH_PORT"
#: Seconds to connect to a host (``ConnectTimeout``), and the pre-flight's probe on top.
SSH_TIMEOUT_VAR = "CLUSTERBENCH_SSH_TIMEOUT"
DEFAULT_TIMEOUT_S = 10
#: The pre-flight's probe of one host may take this long beyond connecting (Python's start on
#: a slow shared file system).
PROBE_EXTRA_S = 30
#: A host that stops answering ends its ssh after ALIVE_INTERVAL_S x ALIVE_COUNT seconds.
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 3
#: The agent's wait between SIGTERM and SIGKILL to the rank's group when its connection ends.
GRACE_S = 5.0
#: What the agent prints before the rank's pid (the scheduler takes it out of the output).
PID_MARK = "clusterbench-launch: rank pid "
#: The packages whose versions must be the same on every host.
SAME_VERSIONS = ("torch", "horovod")

#: Variables of the launcher's environment that are not passed on to a remote rank: they
#: belong to the machine or the login they were set on (the remote login sets its own), or to
#: the local job (Snakemake's thread counts are the local job's cores; a remote rank shares its
#: own host's CPUs among its ranks). ``CUDA_VISIBLE_DEVICES``: the remote host's GPUs are its
#: ranks' by local rank.
NOT_FORWARDED = frozenset(
    {
        "HOSTNAME", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM",
        "DISPLAY", "MAIL", "TMPDIR", "KRB5CCNAME", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
        "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS", "WINDOWID", "STY", "WINDOW", "TMUX", "TMUX_PANE",
    }
)  # fmt: skip
NOT_FORWARDED_PREFIXES = ("SSH_", "XDG_", "DBUS_", "BASH_FUNC_")
#: The variables that name the ranks' interface (Horovod's Gloo, torch's Gloo, NCCL).
IFACE_VARS = ("HOROVOD_GLOO_IFACE", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
#: The interface asked for (``CLUSTERBENCH_IFACE``, or the launcher's ``--iface``, which it
#: passes on in the ranks' environment): the same name on every host.
IFACE_VAR = "CLUSTERBENCH_IFACE"
#: What ssh runs at the remote end: :func:`rank_agent` (argv[1]: the rank's command).
AGENT = (
    "import sys; from clusterbench.launch.schedulers.ssh import rank_agent; "
    "sys.exit(rank_agent(sys.argv[1:]))"
)


# ------------------------------------------------------------------------------------------
# settings and the ssh command


@dataclass(frozen=True)
class SshSettings:
    """How to reach the hosts: the ssh command, the port (None: ssh's own), the timeout."""

    command: tuple[str, ...] = ("ssh",)
    port: int | None = None
    timeout: int = DEFAULT_TIMEOUT_S

    def argv(self, host: str, remote: str, *, alive: bool = False) -> list[str]:
        """``ssh`` running ``remote`` (a command line for the host's shell) on ``host``,
        never asking for a password; ``alive``: give up on a host that stops answering."""
        cmd = [*self.command, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.timeout}"]
        if alive:
            cmd += ["-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}"]
            cmd += ["-o", f"ServerAliveCountMax={ALIVE_COUNT}"]
        if self.port is not None:
            cmd += ["-p", str(self.port)]
        return [*cmd, host, remote]


def ssh_settings(env: Mapping[str, str]) -> SshSettings:
    """The ssh settings of ``env``; a :class:`LaunchError` naming a variable that is wrong."""
    raw = env.get(SSH_COMMAND_VAR, "").strip() or "ssh"
    try:
        command = tuple(shlex.split(raw))
    except ValueError as exc:
        raise LaunchError(f"{SSH_COMMAND_VAR}={raw!r} is no command line: {exc}") from None
    port = _positive(env, SSH_PORT_VAR, None)
    if port is not None and port > 65535:
        raise LaunchError(f"{SSH_PORT_VAR}={port}: a port is 1..65535")
    timeout = _positive(env, SSH_TIMEOUT_VAR, DEFAULT_TIMEOUT_S)
    return SshSettings(command, port, timeout)


def _positive(env: Mapping[str, str], var: str, default: int | None) -> int | None:
    value = env.get(var, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise LaunchError(f"{var}={value!r}: expected a positive whole number")
    return int(value)


def ssh_hosts(env: Mapping[str, str]) -> dict[str, int]:
    """The hosts and slots of the hosts file ``CLUSTERBENCH_HOSTS_FILE`` names, in order; a
    :class:`LaunchError` naming the variable or the file when there is none to use."""
    path = env.get(HOSTS_FILE_VAR, "").strip()
    if not path:
        raise LaunchError(
            f"the ssh scheduler needs a hosts file: set {HOSTS_FILE_VAR} to a file listing the "
            "hosts, one a line ('host', 'host:slots' or 'host slots=N')"
        )
    text = hosts_file_text(path)
    try:
        hosts = parse_hosts_file(text)
    except AllocationError as exc:
        raise LaunchError(f"the hosts file {path} ({HOSTS_FILE_VAR}): {exc}") from None
    bad = [h for h in hosts if h.startswith("-")]
    if bad:
        raise LaunchError(f"the hosts file {path}: {bad[0]!r} is no host name (it starts with -)")
    if not hosts:
        raise LaunchError(f"the hosts file {path} ({HOSTS_FILE_VAR}) lists no host with a slot")
    return hosts


def parse_ssh_config(text: str) -> dict[str, str]:
    """``ssh -G``'s output (``key value`` lines, keys in lower case): key -> its first value."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and value:
            found.setdefault(key.lower(), value.strip())
    return found


def host_address(settings: SshSettings, host: str) -> str | None:
    """The IPv4 address ssh connects to for ``host`` (its ``HostName`` in the ssh
    configuration, ``ssh -G``, resolved); the name itself resolved where ``ssh -G`` fails."""
    name = host
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run(
            [*settings.command, "-G", host],
            capture_output=True,
            text=True,
            timeout=settings.timeout,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode == 0:
            name = parse_ssh_config(proc.stdout).get("hostname", host)
    return resolve(name)


def is_local_address(address: str | None) -> bool:
    """Whether ``address`` is one of this machine's (loopback, or one a socket can bind to)."""
    if not address:
        return False
    if address.startswith("127."):
        return True
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def forwarded_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What of the launcher's environment a remote rank gets (all but :data:`NOT_FORWARDED`)."""
    return {
        k: v
        for k, v in env.items()
        if k not in NOT_FORWARDED and not k.startswith(NOT_FORWARDED_PREFIXES)
    }


# ------------------------------------------------------------------------------------------
# the scheduler


class SshScheduler(Scheduler):
    """The hosts of a hosts file; ranks started over ssh (local ones as local processes)."""

    name = "ssh"
    detection_priority = 5  # never detected: CLUSTERBENCH_SCHEDULER=ssh chooses it
    how = "ssh"
    remote = True
    executor = "local"

    def __init__(self) -> None:
        super().__init__()
        self.settings = SshSettings()
        self.python = sys.executable
        self.pids: dict[int, int] = {}
        self._local = LocalScheduler()

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return False

    def allocation(self, env: Mapping[str, str]) -> Allocation:
        """The hosts and slots of the hosts file, in its order."""
        self.settings = ssh_settings(env)
        if shutil.which(self.settings.command[0]) is None:
            raise LaunchError(
                f"the ssh scheduler needs `{self.settings.command[0]}` ({SSH_COMMAND_VAR}), "
                "which is not on PATH"
            )
        self.job_env = env
        hosts = ssh_hosts(env)
        self.alloc = Allocation("ssh", tuple(Host(name, n) for name, n in hosts.items()))
        return self.alloc

    def addresses(self, alloc: Allocation) -> dict[str, str | None]:
        """Each host's address: where ssh connects to (``ssh -G``), resolved."""
        return {h.name: host_address(self.settings, h.name) for h in alloc.hosts}

    def allocated_hosts(self, env: Mapping[str, str]) -> dict[str, int]:
        """The hosts file, read again (elastic discovery: editing it adds or takes out hosts)."""
        return ssh_hosts(env)

    def spread(self, capacities: Sequence[tuple[str, int]], np: int) -> list[tuple[str, int]]:
        """Every slot of the first host, then the next host's: the hosts file's order."""
        return fill_ranks(capacities, np)

    def single_rank_here(self, host: str, local_hosts: set[str]) -> bool:
        return host in local_hosts

    def bind(self, alloc: Allocation, np: int, tag: str, local_hosts: set[str]) -> None:
        super().bind(alloc, np, tag, local_hosts)
        self._local.bind(alloc, np, tag, local_hosts)

    def rank_device(
        self, host: Host, local_rank: int, local_size: int, inherited: Sequence[str] | None
    ) -> str | None:
        """A local host's ranks: as the local scheduler's; a remote host's: left alone (each
        rank uses the GPU of its local rank there)."""
        if host.name in self.local_hosts:
            return super().rank_device(host, local_rank, local_size, inherited)
        return None

    def shell_command(self, command: str, slot_info: Any) -> str:
        if slot_info.hostname in self.local_hosts:
            return command
        remote = (
            f"cd {shlex.quote(self.cwd)} && exec {shlex.quote(self.python)} -c "
            f"{shlex.quote(AGENT)} {shlex.quote(command)}"
        )
        ssh = shlex.join(self.settings.argv(slot_info.hostname, remote, alive=True))
        # the shell opens the file as ssh's standard input and removes its name at once
        envfile = shlex.quote(self.environment_file())
        return f"{{ rm -f {envfile}; {ssh}; }} < {envfile}"

    def environment_file(self) -> str:
        """A new file (mode 0600) holding the environment a remote rank gets, as JSON: its
        ssh's standard input. The rank's shell removes it as it starts; one whose shell never
        ran is removed when the launcher exits."""
        fd, path = tempfile.mkstemp(prefix="clusterbench-ssh-env-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(forwarded_environment(self.job_env), fh)
        atexit.register(_remove, path)
        return path

    def observe(self, slot_info: Any, line: str) -> bool:
        _, mark, pid = line.partition(PID_MARK)
        if mark and pid.strip().isdigit():
            self.pids[slot_info.rank] = int(pid)
            return True
        return False

    def signal_rank(self, slot_info: Any, sig: signal.Signals) -> bool:
        """A local rank: as the local scheduler's. A remote one: ``kill`` of its pid (SIGKILL:
        of its process group) over another ssh connection."""
        if slot_info.hostname in self.local_hosts:
            return self._local.signal_rank(slot_info, sig)
        pid = self.pids.get(slot_info.rank)
        if pid is None:
            return False
        target = f"-- -{pid}" if sig == signal.SIGKILL else str(pid)
        cmd = self.settings.argv(slot_info.hostname, f"kill -s {sig.name[3:]} {target}")
        try:
            proc = subprocess.run(
                cmd, capture_output=True, timeout=SIGNAL_TIMEOUT_S, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return proc.returncode == 0

    # the workflow's side

    @classmethod
    def unavailable(cls, context: PreflightContext) -> dict[str, str]:
        """Runs needing more ranks than the hosts' slots (or, asking for GPUs, more than a
        host has for the ranks it gets); first, every host probed (:func:`check_hosts`): a
        host that fails a check is a :class:`PreflightError` naming it and the check."""
        from clusterbench.config import allocated_workers  # the workflow's: not the launcher's

        env = context.env
        try:
            settings, hosts = ssh_settings(env), ssh_hosts(env)
        except LaunchError as exc:
            raise PreflightError(str(exc)) from None
        ranks = {name: allocated_workers(run) for name, run in context.runs.items()}
        used = hosts_used(hosts, ranks.values())
        wants_gpus = any(run["gpus_per_node"] for run in context.runs.values())
        probes = check_hosts(used, settings, context, gpus=wants_gpus, listed=len(hosts))
        problems = [problem for probe in probes.values() for problem in probe.problems]
        if problems:
            raise PreflightError(
                f"the ssh hosts of {env[HOSTS_FILE_VAR]} are not ready:\n  " + "\n  ".join(problems)
            )
        gpus = {host: probe.gpus for host, probe in probes.items()}
        reasons = {}
        for name, run in context.runs.items():
            reason = slot_problem(name, ranks[name], run["gpus_per_node"], hosts, gpus)
            if reason:
                reasons[name] = f"{reason} ({HOSTS_FILE_VAR}={env[HOSTS_FILE_VAR]})"
        return reasons

    @classmethod
    def job_request(cls, resources: Mapping[str, Any], threads: int = 1) -> JobRequest:
        """The job's ranks (the neutral ``ranks``) over the hosts; its CPUs: its threads."""
        return JobRequest(
            nodes=int(resources.get("nodes") or 1),
            ranks=int(resources.get("ranks") or 1),
            cpus=int(threads or 1),
        )


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def slot_problem(
    run: str,
    ranks: int,
    gpus_per_node: int,
    hosts: Mapping[str, int],
    gpus: Mapping[str, int | None],
) -> str | None:
    """Why ``run`` (``ranks`` ranks, the slots filled in order) cannot run on ``hosts``: more
    ranks than slots, or, asking for GPUs, a host with fewer GPUs (``gpus``: each host's,
    None: no nvidia-smi there) than the ranks it gets. None when it can."""
    slots = sum(hosts.values())
    listed = ", ".join(f"{h}:{n}" for h, n in hosts.items())
    if ranks > slots:
        return (
            f"run {run!r} needs {ranks} ranks (one per slot) but the hosts file has {slots} "
            f"slot(s) ({listed}): add hosts or slots, or lower its workers"
        )
    if not gpus_per_node:
        return None
    for host, count in fill_ranks(list(hosts.items()), ranks):
        have = gpus.get(host) or 0
        if have < count:
            return (
                f"run {run!r} asks for GPUs (gpus_per_node={gpus_per_node}) and host {host} "
                f"gets {count} of its ranks but has {have} GPU(s) (nvidia-smi -L there): one "
                "GPU per rank is needed"
            )
    return None


# ------------------------------------------------------------------------------------------
# pre-flight: probing the hosts

#: What the pre-flight runs with the venv's Python on each host (Python 3.8+, standard library
#: only; argv[1]: JSON ``{"packages", "read", "write", "gpus"}``): one JSON line.
PROBE = """\
import json, os, shutil, subprocess, sys
from importlib import metadata
args = json.loads(sys.argv[1])
def version(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
def readable(path):
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        os.listdir(path)
    except OSError as exc:
        return [path, str(exc)]
    return [path, None]
def writable(path):
    ok = os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)
    return None if ok else "missing" if not os.path.isdir(path) else "not writable"
gpus = None
if args["gpus"] and shutil.which("nvidia-smi"):
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        gpus = sum(line.startswith("GPU ") for line in out.stdout.splitlines())
    except Exception:
        gpus = 0
print(json.dumps({
    "versions": {name: version(name) for name in args["packages"]},
    "read": {path: readable(path) for path in args["read"]},
    "write": {path: writable(path) for path in args["write"]},
    "gpus": gpus,
}))
"""


@dataclass
class Probe:
    """What the pre-flight found on one host: the problems (each naming the host and the
    check), and its GPUs (None: unknown)."""

    host: str
    problems: list[str]
    gpus: int | None = None


#: Hosts the pre-flight probes at once (each an ssh process waiting on its host).
PROBES_AT_ONCE = 32


def hosts_used(hosts: Mapping[str, int], ranks: Iterable[int]) -> dict[str, int]:
    """The hosts (and slots) of ``hosts`` that the runs' ranks (``ranks``: each run's) fill,
    in order (:func:`~._base.fill_ranks`): the largest run's; all of them when it needs more
    slots than there are (it is unavailable, and every host would be used)."""
    slots = sum(hosts.values())
    most = min(max(ranks, default=1), slots)
    return {host: hosts[host] for host, _ in fill_ranks(list(hosts.items()), max(most, 1))}


def check_hosts(
    hosts: Mapping[str, int],
    settings: SshSettings,
    context: PreflightContext,
    gpus: bool,
    listed: int | None = None,
) -> dict[str, Probe]:
    """Every host probed (:func:`probe_host`), :data:`PROBES_AT_ONCE` at a time, all within one
    limit (the ssh timeout plus :data:`PROBE_EXTRA_S`, as one host's): a host not answered by
    then is a problem naming it. Says what it does (``context.say``): how many hosts of the
    ``listed`` ones (the hosts file's), and then how long it took."""
    request = {
        "packages": list(SAME_VERSIONS),
        "read": sorted(set(context.data_dirs.values())),
        "write": [context.workdir],
        "gpus": gpus,
    }
    here = local_versions()
    limit = settings.timeout + PROBE_EXTRA_S
    listed = len(hosts) if listed is None else listed
    which = "" if listed == len(hosts) else f" of the {listed:,} listed (those the runs use)"
    context.say(
        f"ssh pre-flight: probing {len(hosts):,} host(s){which} over ssh, up to "
        f"{PROBES_AT_ONCE} at once, within {limit} s in all"
    )
    started = time.monotonic()
    deadline = started + limit
    pool = ThreadPoolExecutor(max_workers=min(PROBES_AT_ONCE, max(len(hosts), 1)))
    try:
        futures = {
            host: pool.submit(probe_host, host, settings, sys.executable, request, here, deadline)
            for host in hosts
        }
        found = {host: future.result() for host, future in futures.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    failed = sum(bool(p.problems) for p in found.values())
    context.say(
        f"ssh pre-flight: {len(found) - failed:,} host(s) ready, {failed:,} not, in "
        f"{time.monotonic() - started:.1f} s"
    )
    return found


def local_versions() -> dict[str, str | None]:
    """The versions of :data:`SAME_VERSIONS` here (None: not installed)."""
    found: dict[str, str | None] = {}
    for name in SAME_VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def probe_host(
    host: str,
    settings: SshSettings,
    python: str,
    request: Mapping[str, Any],
    here: Mapping[str, str | None],
    deadline: float | None = None,
) -> Probe:
    """Run :data:`PROBE` on ``host`` (through ssh; on this machine directly when the host's
    address is one of its own) and read what it says (:func:`probe_problems`); by
    ``deadline`` (``time.monotonic()``), the pre-flight's end, at the latest."""
    limit = settings.timeout + PROBE_EXTRA_S
    deadline = time.monotonic() + limit if deadline is None else deadline
    if time.monotonic() >= deadline:
        return Probe(host, [f"host {host}: ssh: not probed within the pre-flight's {limit} s"])
    argv = [python, "-c", PROBE, json.dumps(request)]
    local = is_local_address(host_address(settings, host))
    cmd = argv if local else settings.argv(host, shlex.join(argv))
    timeout = max(deadline - time.monotonic(), 0.1)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return Probe(
            host, [f"host {host}: ssh: no answer within {timeout:.0f} s ({shlex.join(cmd)})"]
        )
    except OSError as exc:
        return Probe(host, [f"host {host}: ssh: `{cmd[0]}` could not run: {exc}"])
    seconds = time.monotonic() - started
    return probe_problems(host, python, here, proc.returncode, proc.stdout, proc.stderr, seconds)


def probe_problems(
    host: str,
    python: str,
    here: Mapping[str, str | None],
    returncode: int,
    stdout: str,
    stderr: str,
    seconds: float = 0.0,
) -> Probe:
    """The problems :data:`PROBE`'s answer from ``host`` shows (a pure function): the check
    that failed (ssh, python, versions, data, working directory), named with the host."""
    said = " ".join(stderr.strip().splitlines()[-2:]) or "no message"
    if returncode == 255:
        return Probe(
            host,
            [
                f"host {host}: ssh: not reachable without a password prompt (ssh -o "
                f"BatchMode=yes gave up after {seconds:.1f} s): {said}"
            ],
        )
    if returncode == 127:
        return Probe(
            host,
            [
                f"host {host}: python: {python} is not there ({said}): the checkout and its "
                ".venv must be at the same path on every host (a shared file system)"
            ],
        )
    try:
        found = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Probe(host, [f"host {host}: python: {python} failed (exit {returncode}): {said}"])
    problems = [
        f"host {host}: versions: {name} {found['versions'].get(name) or 'not installed'} "
        f"there, {version or 'not installed'} here (the same .venv on every host)"
        for name, version in here.items()
        if found["versions"].get(name) != version
    ]
    for path, (reached, error) in found["read"].items():
        if error:
            problems.append(f"host {host}: data: cannot read {path} there ({reached}: {error})")
    for path, error in found["write"].items():
        if error:
            problems.append(
                f"host {host}: working directory: {path} is {error} there (the ranks write "
                "their outputs under it: it must be the same shared directory on every host)"
            )
    return Probe(host, problems, found.get("gpus"))


# ------------------------------------------------------------------------------------------
# the agent: runs on the rank's host, the remote end of its ssh connection


def parse_env_command(command: str) -> tuple[dict[str, str], list[str]]:
    """The variables the leading ``env NAME=VALUE ...`` words of ``command`` set (Horovod's
    and the launcher's; ``env`` may come several times) and the command after them."""
    words = shlex.split(command)
    assigned: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if word == "env":
            i += 1
        elif eq and name.isidentifier():
            assigned[name] = value
            i += 1
        else:
            break
    if i == len(words):
        raise LaunchError(f"no command after the variables in {command!r}")
    return assigned, words[i:]


def route_iface(address: str) -> str | None:
    """The interface of this host through which the route to ``address`` leaves (None: no
    route, or an address on no interface)."""
    import psutil

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            source = sock.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == source for a in addrs):
            return name
    return None


def rank_iface(env: Mapping[str, str]) -> str:
    """The rank's interface on this host: the one ``CLUSTERBENCH_IFACE`` names in ``env``,
    which must be one of its interfaces, else the one routing to the rendezvous address."""
    names = {name for _, name in socket.if_nameindex()}
    requested = env.get(IFACE_VAR, "")
    if requested:
        if requested not in names:
            raise LaunchError(
                f"network interface {requested!r} (CLUSTERBENCH_IFACE) is not on "
                f"{socket.gethostname()} (its interfaces: {', '.join(sorted(names))})"
            )
        return requested
    target = env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or env.get("MASTER_ADDR") or ""
    found = route_iface(target) if target else None
    if found is None:
        raise LaunchError(
            f"no route from {socket.gethostname()} to the rendezvous address {target!r}: set "
            "CLUSTERBENCH_IFACE to the interface the hosts reach each other through"
        )
    return found


def rank_agent(argv: Sequence[str]) -> int:
    """The remote end of a rank's ssh connection: ``argv`` = [the rank's command (``env
    NAME=VALUE ... CMD``)]; the launcher's environment as JSON on standard input. Starts the
    rank in a process group of its own on this host's interface (:func:`rank_iface`),
    announces its pid, and stops the group when the connection ends; exits with the rank's
    status (128 + signal if it died of one)."""
    (command,) = argv
    env = dict(os.environ)
    env.update(json.load(sys.stdin))
    try:
        assigned, words = parse_env_command(command)
        env.update(assigned)
        iface = rank_iface(env)
    except LaunchError as exc:
        print(f"clusterbench-launch: error: {exc}", file=sys.stderr, flush=True)
        return 1
    env.update({var: iface for var in IFACE_VARS})
    for sig in (signal.SIGUSR1, signal.SIGUSR2):  # the rank installs its own handlers
        signal.signal(sig, signal.SIG_IGN)
    child = subprocess.Popen(words, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    print(f"{PID_MARK}{child.pid}", file=sys.stderr, flush=True)
    if not watch(child):
        stop_group(child)
    with contextlib.suppress(OSError):  # what the rank left behind in its group
        os.killpg(child.pid, signal.SIGKILL)
    return 128 - child.returncode if child.returncode < 0 else child.returncode


def watch(child: subprocess.Popen) -> bool:
    """Wait until ``child`` ends (True) or this process's standard output is closed by its
    reader, sshd: the ssh connection is gone (False)."""
    poller = select.poll()
    poller.register(1, 0)  # no event asked: POLLERR / POLLHUP come anyway
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while child.poll() is None:
            for fd, _ in poller.poll(None if pidfd is not None else 200):
                if fd == 1:
                    return False
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def stop_group(child: subprocess.Popen) -> None:
    """SIGTERM to the rank's process group, SIGKILL after :data:`GRACE_S`."""
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


#: The scheduler of this module (the registry's plugin).
SCHEDULER = SshScheduler

__all__ = [
    "PID_MARK",
    "SCHEDULER",
    "SshScheduler",
    "SshSettings",
    "parse_env_command",
    "parse_ssh_config",
    "probe_problems",
    "rank_agent",
    "slot_problem",
    "ssh_hosts",
    "ssh_settings",
]
