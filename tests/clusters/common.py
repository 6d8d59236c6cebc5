"""Shared machinery of the test clusters: package installation, free ports, daemons by pid file.

A test cluster lives entirely in one directory (its *base*). Everything it starts is recorded in
``<base>/state.json`` as it starts, so that ``stop()`` — from the same process, from a pytest
fixture's finaliser, or from ``python -m tests.clusters slurm down --dir BASE`` after a crash —
stops exactly the daemons this cluster started, by the pids in their pid files, and undoes exactly
the system changes it made (the /etc/slurm/slurm.conf symlink). Nothing is ever killed by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server")
SGE_PACKAGES = ("gridengine-master", "gridengine-exec", "gridengine-client")
#: The ssh test hosts (tests/clusters/ssh.py): Debian's sshd (the client, openssh-client, comes
#: with it).
SSH_PACKAGES = ("openssh-server",)
PACKAGES = {"slurm": SLURM_PACKAGES, "sge": SGE_PACKAGES, "ssh": SSH_PACKAGES}

STATE_FILE = "state.json"


class ClusterUnavailable(RuntimeError):
    """The cluster's software cannot be installed on this machine (no apt, not root, ...)."""


class ClusterError(RuntimeError):
    """A cluster daemon or command failed; the message carries the relevant log tail."""


# ------------------------------------------------------------------------------------------------
# installation


def missing_packages(packages: Sequence[str]) -> list[str]:
    """The Debian packages of ``packages`` that are not installed (one quick dpkg-query)."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {
        line.split()[0]
        for line in proc.stdout.splitlines()
        if len(line.split()) == 2 and line.split()[1] == "installed"
    }
    return [p for p in packages if p not in installed]


def _sge_preseed(host: str) -> str:
    lines = []
    for pkg in ("gridengine-common", "gridengine-master", "gridengine-exec", "gridengine-client"):
        lines += [
            f"{pkg} shared/gridengineconfig boolean true",
            f"{pkg} shared/gridenginecell string default",
            f"{pkg} shared/gridenginemaster string {host}",
        ]
    return "\n".join(lines) + "\n"


def install(kinds: Sequence[str] = ("slurm", "sge"), *, quiet: bool = True) -> list[str]:
    """Install the Debian packages the test clusters of ``kinds`` need; return what was installed.

    Quick and idempotent: a single ``dpkg-query`` when everything is present. Daemons are not
    started by the packages (a temporary ``policy-rc.d`` denies it when the machine has none);
    the clusters run private instances. Raises :class:`ClusterUnavailable` when installing is not
    possible here (no apt-get, not root) or fails.
    """
    wanted = [p for kind in kinds for p in PACKAGES[kind]]
    missing = missing_packages(wanted)
    if not missing:
        return []
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable(
            f"Debian packages {' '.join(missing)} are missing and there is "
            "no apt-get to install them"
        )
    if os.geteuid() != 0:
        raise ClusterUnavailable(
            f"Debian packages {' '.join(missing)} are missing; installing "
            "them (and running the test clusters) needs root"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if any(p.startswith("gridengine") for p in missing):
        subprocess.run(
            ["debconf-set-selections"],
            input=_sge_preseed(socket.gethostname()),
            text=True,
            check=True,
            env=env,
        )
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = not policy.exists()
    if made_policy:  # a machine with an init system: do not let the packages start daemons
        policy.write_text("#!/bin/sh\n# written by tests/clusters while installing\nexit 101\n")
        policy.chmod(0o755)
    out = subprocess.DEVNULL if quiet else None
    try:
        update = subprocess.run(
            ["apt-get", "update"],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        proc = subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", *missing],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        if made_policy:
            policy.unlink()
    if proc.returncode != 0:
        raise ClusterUnavailable(
            f"apt-get install {' '.join(missing)} failed (exit {proc.returncode}):\n"
            f"{update.stderr[-2000:]}{proc.stderr[-4000:]}"
        )
    still = missing_packages(missing)
    if still:
        raise ClusterUnavailable(f"apt-get install ran but {' '.join(still)} still missing")
    return missing


# ------------------------------------------------------------------------------------------------
# small helpers


def free_ports(count: int, *, low: int = 20000, high: int = 32000) -> list[int]:
    """``count`` distinct TCP ports that nothing listens on now, below the ephemeral range.

    Random, so that a cluster left behind by a crashed run (still holding its ports) does not
    collide with the next one.
    """
    ports: list[int] = []
    candidates = random.sample(range(low, high), k=min(2000, high - low))
    for port in candidates:
        if _port_free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ClusterError(f"could not find {count} free TCP ports in {low}..{high}")


def _port_free(port: int) -> bool:
    for addr in ("0.0.0.0", "127.0.0.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    interval: float = 0.25,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy; raise ClusterError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = on_timeout() if on_timeout else ""
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{detail}")
        time.sleep(interval)


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (or a note that it does not exist)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"(no {path})"
    return f"--- {path} (tail) ---\n" + "\n".join(text.splitlines()[-lines:])


def run(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float = 60,
    input: str | None = None,
    logs: Sequence[Path] = (),
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output; on failure raise ClusterError with output and logs."""
    proc = subprocess.run(
        list(cmd),
        env=dict(env) if env is not None else None,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        details = "\n".join(tail(p) for p in logs)
        raise ClusterError(
            f"{' '.join(cmd)} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
            f"stderr: {proc.stderr[-2000:]}\n{details}"
        )
    return proc


# ------------------------------------------------------------------------------------------------
# daemons by pid file


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(Path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, comm: str) -> bool:
    """Whether ``pid`` is a live (not zombie) process whose name starts like ``comm``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    if fields.get("State", "").startswith(("Z", "X")):
        return False
    # /proc/PID/status truncates Name to 15 characters.
    return fields.get("Name", "").strip() == comm[:15]


@dataclass
class Daemon:
    """One daemon a cluster started: its name (for messages), pid file and process name."""

    name: str
    pidfile: str
    comm: str
    log: str = ""

    def pid(self) -> int | None:
        """The pid from the pid file if that process is alive and is this daemon."""
        pid = _read_pid(Path(self.pidfile))
        return pid if pid is not None and _alive(pid, self.comm) else None

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the daemon by its pid file, SIGKILL it if it outlives ``timeout``."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid, self.comm):
            _reap(pid)
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.2)
                _reap(pid)
                break
            time.sleep(0.1)


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child (a daemon run in the foreground through Popen)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _left_by_a_dead_cluster(link: Path) -> bool:
    """Whether symlink ``link`` dangles, or is a test cluster's whose daemons are all gone."""
    if not os.path.exists(link):
        return True
    target = Path(os.path.realpath(link))
    for base in target.parents:
        if (base / STATE_FILE).is_file():
            try:
                state = State.load(base)
            except (OSError, ValueError, KeyError, TypeError):
                return False  # unreadable: not provably ours to take over
            return (str(link), os.readlink(link)) in state.symlinks and not any(
                d.pid() for d in state.daemons
            )
    return False


@dataclass
class State:
    """What a cluster started and changed, persisted in ``<base>/state.json`` as it happens."""

    base: Path
    daemons: list[Daemon] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)  # (link path, its target)
    env: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.base / STATE_FILE

    def save(self) -> None:
        data = {
            "daemons": [d.__dict__ for d in self.daemons],
            "symlinks": self.symlinks,
            "env": self.env,
            "info": self.info,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, base: Path) -> State:
        data = json.loads((Path(base) / STATE_FILE).read_text())
        return cls(
            base=Path(base),
            daemons=[Daemon(**d) for d in data["daemons"]],
            symlinks=[tuple(s) for s in data["symlinks"]],
            env=data["env"],
            info=data["info"],
        )

    def add_daemon(self, daemon: Daemon) -> Daemon:
        self.daemons.append(daemon)
        self.save()
        return daemon

    def add_symlink_if_free(self, link: Path, target: Path) -> bool:
        """Create ``link`` -> ``target`` only if nothing exists at ``link``; remember it.

        A dangling symlink (left by a cluster whose directory is gone) counts as nothing, and so
        does one left by a test cluster none of whose daemons still runs (a crashed session, or a
        machine restored from a snapshot with a dev cluster's directory in it).
        """
        if os.path.lexists(link):
            if not (os.path.islink(link) and _left_by_a_dead_cluster(link)):
                return False
            os.unlink(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)
        self.symlinks.append((str(link), str(target)))
        self.save()
        return True

    def undo(self) -> None:
        """Stop every recorded daemon (last started first), remove exactly our symlinks."""
        for daemon in reversed(self.daemons):
            daemon.stop()
        for link, target in self.symlinks:
            # Remove only the very symlink we made, still pointing where we pointed it.
            if os.path.islink(link) and os.readlink(link) == target:
                os.unlink(link)
        self.symlinks = []
        self.save()


class Cluster:
    """Base of the test clusters: a base directory, the recorded state, start/stop, env."""

    kind = "cluster"

    def __init__(self, base: str | os.PathLike[str]):
        self.base = Path(base).resolve()
        self.state = State(self.base)

    # subclasses implement _start(); everything they start goes through self.state
    def _start(self) -> None:
        raise NotImplementedError

    def _before_stop(self) -> None:
        """Cancel jobs etc. while the daemons still run (best effort)."""

    @property
    def env(self) -> dict[str, str]:
        """The environment variables a client of this cluster needs (add them to os.environ)."""
        return dict(self.state.env)

    def environ(self) -> dict[str, str]:
        """``os.environ`` plus :attr:`env`: pass as ``env=`` to subprocesses."""
        return {**os.environ, **self.env}

    @property
    def logs(self) -> list[Path]:
        """The cluster's daemon logs (their tails go into error messages)."""
        return sorted(self.base.glob("log/*.log"))

    def run(
        self,
        cmd: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 120,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command (sbatch, qsub, ...) against this cluster, output captured."""
        return run(
            cmd, env=self.environ(), check=check, timeout=timeout, input=input, logs=self.logs
        )

    def start(self) -> Cluster:
        """Create the base directory and start the cluster; on failure stop what started."""
        if (self.base / STATE_FILE).exists():
            raise ClusterError(f"{self.base} already holds a cluster ({STATE_FILE}); stop it first")
        self.base.mkdir(parents=True, exist_ok=True)
        self.state.info["kind"] = self.kind
        self.state.save()
        try:
            self._start()
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def stop(self, *, remove: bool = False) -> None:
        """Stop everything this cluster started (by pid file); optionally delete the base dir."""
        try:
            if any(d.pid() for d in self.state.daemons):
                self._before_stop()
        finally:
            self.state.undo()
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)

    @classmethod
    def attach(cls, base: str | os.PathLike[str]) -> Cluster:
        """The cluster recorded in ``base`` (e.g. to stop one a crashed process left behind)."""
        cluster = cls.__new__(cls)
        Cluster.__init__(cluster, base)
        if not cluster.state.path.exists():
            raise ClusterError(f"no cluster recorded in {cluster.base} ({STATE_FILE} missing)")
        cluster.state = State.load(cluster.base)
        return cluster

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
