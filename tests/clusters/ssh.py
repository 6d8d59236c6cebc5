"""Two ssh hosts on this one machine: two network namespaces joined by a veth pair, each with
its own address and its own ``sshd`` (Debian's openssh-server).

Each namespace (``cb<id>a``, ``cb<id>b``: ``<id>`` random, so that two sessions never meet)
holds one end of a veth pair, named differently in each (``cb<id>a0`` and ``cb<id>b0``: hosts
need not share their interface names) with an address of a private /24, and ``lo``. Each runs
an ``sshd`` on a free port of its own address, with its own host key, the test's client key in
``authorized_keys`` and password logins off. The namespaces share the file system (the checkout
and its ``.venv`` are at the same path on both hosts, as on a shared file system) and the pid
space (``ip netns pids NS`` tells which processes are in which namespace).

The client side is a private ssh configuration (:attr:`SshHosts.ssh_config`): the two hosts
under aliases (``cb-a``, ``cb-b``: ``HostName`` their addresses, as a user's ``~/.ssh/config``
would), the client key, a ``known_hosts`` holding both host keys (``StrictHostKeyChecking
yes``). :attr:`SshHosts.env` points clusterbench's ssh scheduler at it: ``CLUSTERBENCH_SCHEDULER
=ssh``, ``CLUSTERBENCH_HOSTS_FILE`` (both hosts, one slot each) and ``CLUSTERBENCH_SSH_COMMAND``
(``ssh -F <config>``). Processes meant to run "on host a" run in namespace a
(:meth:`SshHosts.netns_exec`).

Everything is recorded in ``<base>/state.json`` as it is made (the sshd daemons by pid file,
the namespaces by name), and :meth:`SshHosts.stop` undoes exactly that.
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import subprocess
import time
from pathlib import Path

from .common import Cluster, ClusterError, ClusterUnavailable, Daemon, run, tail, wait_until

SSHD = "/usr/sbin/sshd"
#: The directory Debian's sshd needs for privilege separation (the package's init script makes
#: it; no init script runs here).
PRIVSEP_DIR = Path("/run/sshd")


def _netns_exists(name: str) -> bool:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return any(line.split()[0] == name for line in proc.stdout.splitlines() if line.split())


class SshHosts(Cluster):
    """Two namespaces ``a`` and ``b`` joined by a veth pair, each with an sshd."""

    kind = "ssh"
    #: The hosts, as the hosts file and the ssh configuration name them.
    names = ("cb-a", "cb-b")
    #: A host of the ssh configuration that does not answer (an unused address of the subnet).
    unreachable = "cb-gone"

    def __init__(self, base: str | os.PathLike[str]):
        super().__init__(base)

    # ----------------------------------------------------------------- what was made
    @property
    def namespaces(self) -> list[str]:
        """The namespaces, host a's first."""
        return list(self.state.info.get("netns", []))

    @property
    def addresses(self) -> list[str]:
        return list(self.state.info["addresses"])

    @property
    def ifaces(self) -> list[str]:
        """The veth end in each namespace."""
        return list(self.state.info["ifaces"])

    @property
    def port(self) -> int:
        return int(self.state.info["port"])

    @property
    def ssh_config(self) -> Path:
        return self.base / "ssh_config"

    @property
    def hosts_file(self) -> Path:
        return self.base / "hosts"

    @property
    def nodes(self) -> list[str]:
        return list(self.names)

    @property
    def logs(self) -> list[Path]:
        return sorted(self.base.glob("sshd-*.log"))

    def netns_exec(self, host: int, cmd: list[str]) -> list[str]:
        """``cmd`` run on host ``host`` (0: a, 1: b): in its namespace."""
        return ["ip", "netns", "exec", self.namespaces[host], *cmd]

    def ssh(self, host: int, command: str, *, timeout: float = 30) -> subprocess.CompletedProcess:
        """``command`` over ssh to host ``host``, from namespace a (as the launcher does)."""
        cmd = ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", self.names[host], command]
        return subprocess.run(
            self.netns_exec(0, cmd), capture_output=True, text=True, timeout=timeout, check=False
        )

    def pids(self, host: int) -> set[int]:
        """Every process in host ``host``'s namespace (``ip netns pids``)."""
        proc = run(["ip", "netns", "pids", self.namespaces[host]], check=False)
        return {int(p) for p in proc.stdout.split() if p.isdigit()}

    def processes(self, host: int, mentioning: str) -> list[tuple[int, str]]:
        """``pgrep -a -f mentioning`` limited to host ``host``'s namespace: ``(pid, command
        line)`` of each live (not zombie) process."""
        proc = subprocess.run(
            ["pgrep", "-a", "-f", mentioning], capture_output=True, text=True, check=False
        )
        found = []
        inside = self.pids(host)
        for line in proc.stdout.splitlines():
            pid, _, cmdline = line.partition(" ")
            if not pid.isdigit() or int(pid) not in inside or int(pid) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append((int(pid), cmdline))
        return found

    def iface_bytes(self, host: int, iface: str | None = None) -> tuple[int, int]:
        """``(received, sent)`` bytes so far on interface ``iface`` (default: the veth end) of
        host ``host`` (its namespace's ``/sys/class/net``, which ``ip netns exec`` mounts)."""
        name = iface or self.ifaces[host]
        found = []
        for direction in ("rx_bytes", "tx_bytes"):
            path = f"/sys/class/net/{name}/statistics/{direction}"
            found.append(int(run(self.netns_exec(host, ["cat", path])).stdout))
        return found[0], found[1]

    # ----------------------------------------------------------------- starting
    def _start(self) -> None:
        if os.geteuid() != 0:
            raise ClusterUnavailable("network namespaces and sshd need root")
        ident = f"{os.getpid() % 10000:04d}{random.randrange(100):02d}"
        subnet = f"10.{random.randrange(64, 250)}.{random.randrange(1, 250)}"
        names = [f"cb{ident}a", f"cb{ident}b"]
        ifaces = [f"{name}0" for name in names]
        addresses = [f"{subnet}.1", f"{subnet}.2"]
        port = random.randrange(20000, 32000)  # each sshd in its own namespace: no clash
        self.state.info.update(ifaces=ifaces, addresses=addresses, port=port, netns=[])
        self.state.save()
        if not PRIVSEP_DIR.is_dir():
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True)
            self.state.info["made_privsep_dir"] = True
        for name in names:
            run(["ip", "netns", "add", name])
            self.state.info["netns"].append(name)
            self.state.save()
            run(["ip", "-n", name, "link", "set", "lo", "up"])
        run(["ip", "link", "add", ifaces[0], "netns", names[0], "type", "veth",
             "peer", "name", ifaces[1], "netns", names[1]])  # fmt: skip
        for name, iface, address in zip(names, ifaces, addresses, strict=True):
            run(["ip", "-n", name, "addr", "add", f"{address}/24", "dev", iface])
            run(["ip", "-n", name, "link", "set", iface, "up"])
        self._write_keys()
        for host in range(2):
            self._start_sshd(host)
        for host in range(2):
            wait_until(
                lambda h=host: self.ssh(h, "true", timeout=10).returncode == 0,
                timeout=30,
                what=f"ssh to {self.names[host]}",
                on_timeout=lambda h=host: (
                    f"{self.ssh(h, 'true').stderr}\n" + "\n".join(tail(p) for p in self.logs)
                ),
            )

    def _write_keys(self) -> None:
        base = self.base
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "clusterbench-test",
             "-f", str(base / "id_ed25519")])  # fmt: skip
        (base / "authorized_keys").write_text((base / "id_ed25519.pub").read_text())
        known = []
        for host, address in enumerate(self.addresses):
            key = base / f"host_key_{host}"
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
            public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
            known.append(f"[{address}]:{self.port} {public}\n")
        (base / "known_hosts").write_text("".join(known))
        for path in base.iterdir():
            path.chmod(0o600)
        subnet = self.addresses[0].rsplit(".", 1)[0]
        hosts = "".join(
            f"Host {name}\n    HostName {address}\n"
            for name, address in (
                *zip(self.names, self.addresses, strict=True),
                (self.unreachable, f"{subnet}.3"),
            )
        )
        self.ssh_config.write_text(
            f"{hosts}Host *\n"
            f"    Port {self.port}\n"
            "    User root\n"
            f"    IdentityFile {base / 'id_ed25519'}\n"
            "    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {base / 'known_hosts'}\n"
            "    GlobalKnownHostsFile /dev/null\n"
            "    StrictHostKeyChecking yes\n"
            "    ConnectTimeout 10\n"
        )
        self.hosts_file.write_text("# the test's two hosts, one slot each\ncb-a slots=1\ncb-b:1\n")
        self.state.env.update(
            CLUSTERBENCH_SCHEDULER="ssh",
            CLUSTERBENCH_HOSTS_FILE=str(self.hosts_file),
            CLUSTERBENCH_SSH_COMMAND=shlex.join(["ssh", "-F", str(self.ssh_config)]),
        )
        self.state.save()

    def _start_sshd(self, host: int) -> None:
        base = self.base
        config = base / f"sshd_config_{host}"
        pidfile = base / f"sshd-{host}.pid"
        log = base / f"sshd-{host}.log"
        config.write_text(
            f"ListenAddress {self.addresses[host]}:{self.port}\n"
            f"HostKey {base / f'host_key_{host}'}\n"
            f"PidFile {pidfile}\n"
            f"AuthorizedKeysFile {base / 'authorized_keys'}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            # the keys live under /tmp (world-writable): sshd's ownership check would refuse
            "StrictModes no\n"
            "UsePAM no\n"
            "X11Forwarding no\n"
            "PrintMotd no\n"
            "MaxStartups 64:30:128\n"
            "LogLevel VERBOSE\n"
        )
        daemon = self.state.add_daemon(Daemon(f"sshd-{host}", str(pidfile), "sshd", str(log)))
        run(self.netns_exec(host, [SSHD, "-f", str(config), "-E", str(log)]), logs=[log])
        wait_until(daemon.pid, timeout=20, what=f"sshd of {self.names[host]}",
                   on_timeout=lambda: tail(log))  # fmt: skip

    # ----------------------------------------------------------------- stopping
    def stop(self, *, remove: bool = False) -> None:
        """The sshd daemons (by pid file), then the namespaces (and with them the veth pair),
        then the privilege separation directory if this made it."""
        try:
            super().stop(remove=False)
        finally:
            for name in self.namespaces:
                self._delete_netns(name)
            if self.state.info.pop("made_privsep_dir", False):
                with contextlib.suppress(OSError):
                    PRIVSEP_DIR.rmdir()
            self.state.info["netns"] = []
            self.state.save()
        if remove:
            import shutil

            shutil.rmtree(self.base, ignore_errors=True)

    def _delete_netns(self, name: str) -> None:
        if not _netns_exists(name):
            return
        left = run(["ip", "netns", "pids", name], check=False).stdout.split()
        if left:
            raise ClusterError(
                f"processes {' '.join(left)} still run in namespace {name}: not deleting it"
            )
        run(["ip", "netns", "del", name])
        deadline = time.monotonic() + 10
        while _netns_exists(name) and time.monotonic() < deadline:
            time.sleep(0.1)
