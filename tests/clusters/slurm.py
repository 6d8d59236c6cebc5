"""A real two-node Slurm 22.05 cluster on this one machine, under one directory, no systemd.

Daemons (each with its pid file under ``<base>/run``, logs under ``<base>/log``):
``munged`` (private key and socket), ``mariadbd`` (private datadir/socket, port on 127.0.0.1),
``slurmdbd`` (so ``sacct`` works), ``slurmctld`` and one ``slurmd`` per node (``-N node1``,
``-N node2``, distinct ports). Each node declares two fake GPUs (character devices under
``<base>/gpus``) through gres.conf, so GPU requests are accepted and CUDA_VISIBLE_DEVICES is set.
slurmdbd holds a QOS besides ``normal``, :attr:`SlurmCluster.qos` (``cbtest``), which root's
association may use: a run's ``qos`` can be tested with it.

Clients need only ``SLURM_CONF=<base>/etc/slurm.conf``. A nested ``srun`` inside a job started by
Snakemake's jobstep plugin loses SLURM_CONF, so the cluster also links /etc/slurm/slurm.conf to its
config — only when nothing exists there — and removes exactly that link when it stops.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import stat
import subprocess
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from .common import Cluster, ClusterError, Daemon, free_ports, run, tail, wait_until

SYSTEM_SLURM_CONF = Path("/etc/slurm/slurm.conf")
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"


class SlurmCluster(Cluster):
    """Two ``slurmd`` nodes, ``slurmctld``, ``slurmdbd`` + MariaDB, ``munged``; see module doc."""

    kind = "slurm"
    nodes = ("node1", "node2")
    partition = "debug"
    #: A second partition over the same nodes, of a lower ``PriorityTier``: a job in
    #: :attr:`partition` preempts (``preempt/partition_prio``) the jobs of this one that hold what
    #: it needs. They are cancelled (``PreemptMode=REQUEUE`` requeues those that allow it).
    preemptible_partition = "scavenger"
    cluster_name = "clusterbench"
    qos = "cbtest"  # a second QOS in slurmdbd, for jobs that ask for one (`--qos=cbtest`)

    def __init__(
        self,
        base: str | os.PathLike[str],
        *,
        cpus_per_node: int = 4,
        mem_per_node_mb: int = 4000,
        gpus_per_node: int = 2,
        def_mem_per_cpu_mb: int = 500,
    ):
        super().__init__(base)
        self.cpus_per_node = cpus_per_node
        self.mem_per_node_mb = mem_per_node_mb
        self.gpus_per_node = gpus_per_node
        self.def_mem_per_cpu_mb = def_mem_per_cpu_mb

    # --------------------------------------------------------------------------------------------
    # layout

    @property
    def conf(self) -> Path:
        """The cluster's slurm.conf (what SLURM_CONF points to)."""
        return self.base / "etc" / "slurm.conf"

    @property
    def nested_srun_ok(self) -> bool:
        """Whether /etc/slurm/slurm.conf is this cluster's: srun inside a Snakemake job needs it.

        False when another cluster (or a real installation) owns that path.
        """
        return SYSTEM_SLURM_CONF.exists() and SYSTEM_SLURM_CONF.resolve() == self.conf.resolve()

    def _p(self, *parts: str) -> Path:
        return self.base.joinpath(*parts)

    @property
    def munge_socket(self) -> Path:
        return self._p("munge-run", "munge.socket")

    # --------------------------------------------------------------------------------------------
    # start

    def _start(self) -> None:
        for d in (
            "etc",
            "run",
            "log",
            "spool/ctld",
            "gpus",
            "mysql",
            *(f"spool/{n}" for n in self.nodes),
        ):
            self._p(d).mkdir(parents=True, exist_ok=True)
        ports = free_ports(5)
        info = self.state.info
        info.update(
            host=socket.gethostname(),
            nodes=list(self.nodes),
            partition=self.partition,
            cluster_name=self.cluster_name,
            ports=dict(zip(("slurmctld", "slurmdbd", "mysql", *self.nodes), ports, strict=True)),
            cpus_per_node=self.cpus_per_node,
            mem_per_node_mb=self.mem_per_node_mb,
            gpus_per_node=self.gpus_per_node,
            conf=str(self.conf),
        )
        self.state.env = {"SLURM_CONF": str(self.conf)}
        self.state.save()

        self._start_munge()
        db_pass = secrets.token_hex(12)
        self._start_mariadb(db_pass)
        self._write_configs(db_pass)
        self._start_slurm_daemons()
        # Nested srun inside a Snakemake jobstep has no SLURM_CONF: it reads the default path.
        self.state.add_symlink_if_free(SYSTEM_SLURM_CONF, self.conf)
        if not self.nested_srun_ok:
            warnings.warn(
                f"{SYSTEM_SLURM_CONF} exists and is not this cluster's config: srun inside "
                "Snakemake jobs will not reach this cluster (is another test cluster running?)",
                stacklevel=2,
            )

    def _start_munge(self) -> None:
        key_dir = self._p("munge")
        key_dir.mkdir(mode=0o700, exist_ok=True)
        key_dir.chmod(0o700)
        self.munge_socket.parent.mkdir(mode=0o755, exist_ok=True)
        self.munge_socket.parent.chmod(0o755)
        key = key_dir / "munge.key"
        if not key.exists():
            run(["mungekey", "-c", "-k", str(key)])
        daemon = self.state.add_daemon(
            Daemon(
                "munged",
                str(self._p("run", "munged.pid")),
                "munged",
                str(self._p("log", "munged.log")),
            )
        )
        run(
            [
                "munged",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={daemon.pidfile}",
                f"--log-file={daemon.log}",
                f"--seed-file={key_dir / 'munged.seed'}",
            ],
            logs=[Path(daemon.log)],
        )
        wait_until(
            lambda: self.munge_socket.exists() and daemon.pid(),
            timeout=15,
            what="munged",
            on_timeout=lambda: tail(Path(daemon.log)),
        )

    def _start_mariadb(self, db_pass: str) -> None:
        my = self._p("mysql")
        datadir, sock = my / "data", my / "mysqld.sock"
        log = self._p("log", "mariadb.log")
        run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            timeout=120,
        )
        daemon = self.state.add_daemon(
            Daemon("mariadbd", str(self._p("run", "mariadbd.pid")), "mariadbd", str(log))
        )
        port = self.state.info["ports"]["mysql"]
        with open(log, "ab") as fh:
            subprocess.Popen(
                [
                    "mariadbd",
                    "--no-defaults",
                    f"--datadir={datadir}",
                    f"--socket={sock}",
                    f"--port={port}",
                    "--bind-address=127.0.0.1",
                    f"--pid-file={daemon.pidfile}",
                    "--user=root",
                    f"--log-error={log}",
                    "--skip-name-resolve",
                    "--skip-log-bin",
                    "--innodb-buffer-pool-size=64M",
                    "--max-connections=50",
                ],
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=fh,
                start_new_session=True,
            )
        sql = ["mariadb", "--no-defaults", f"--socket={sock}", "-uroot"]
        wait_until(
            lambda: run([*sql, "-e", "SELECT 1"], check=False).returncode == 0,
            timeout=60,
            what="mariadbd",
            on_timeout=lambda: tail(log),
        )
        statements = "".join(
            f"CREATE USER '{DB_USER}'@'{h}' IDENTIFIED BY '{db_pass}';"
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{h}';"
            for h in ("127.0.0.1", "localhost")
        )
        run([*sql, "-e", statements + "FLUSH PRIVILEGES;"], logs=[log])

    def _write_configs(self, db_pass: str) -> None:
        info = self.state.info
        host, ports = info["host"], info["ports"]
        auth = f"socket={self.munge_socket}"
        gpus = self.gpus_per_node
        node_lines, gres_lines = [], []
        for node in self.nodes:
            gres = f" Gres=gpu:fake:{gpus}" if gpus else ""
            node_lines.append(
                f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[node]} "
                f"CPUs={self.cpus_per_node} RealMemory={self.mem_per_node_mb}{gres} State=UNKNOWN"
            )
            if gpus:
                devdir = self._p("gpus", node)
                devdir.mkdir(exist_ok=True)
                for i in range(gpus):
                    dev = devdir / f"nvidia{i}"
                    if not dev.exists():  # slurmd accepts only character devices as GPU files
                        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                files = f"{devdir}/nvidia[0-{gpus - 1}]" if gpus > 1 else f"{devdir}/nvidia0"
                gres_lines.append(f"NodeName={node} Name=gpu Type=fake File={files}")
        p = self._p
        slurm_conf = f"""\
# Test cluster written by tests/clusters/slurm.py
ClusterName={self.cluster_name}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
AuthType=auth/munge
AuthInfo={auth}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={p("spool", "ctld")}
SlurmdSpoolDir={p("spool")}/%n
SlurmctldPidFile={p("run", "slurmctld.pid")}
SlurmdPidFile={p("run")}/slurmd-%n.pid
SlurmctldLogFile={p("log", "slurmctld.log")}
SlurmdLogFile={p("log")}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={self.def_mem_per_cpu_mb}
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=300
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
GresTypes=gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports["slurmdbd"]}
AccountingStoragePass={self.munge_socket}
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{chr(10).join(node_lines)}
{self._partition_line(self.partition, "Default=YES PriorityTier=2")}
{self._partition_line(self.preemptible_partition, "PriorityTier=1")}
"""
        self.conf.write_text(slurm_conf)
        (self.conf.parent / "gres.conf").write_text(
            "AutoDetect=off\n" + "".join(line + "\n" for line in gres_lines)
        )
        dbd = self.conf.parent / "slurmdbd.conf"
        dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo={auth}
DbdHost={host}
DbdAddr=127.0.0.1
DbdPort={ports["slurmdbd"]}
SlurmUser=root
PidFile={p("run", "slurmdbd.pid")}
LogFile={p("log", "slurmdbd.log")}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports["mysql"]}
StorageUser={DB_USER}
StoragePass={db_pass}
StorageLoc={DB_NAME}
""")
        dbd.chmod(0o600)
        # cgroup.conf is read by some plugins even when unused; keep it from /etc/slurm.
        (self.conf.parent / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")

    def _partition_line(self, name: str, settings: str) -> str:
        nodes = ",".join(self.nodes)
        return f"PartitionName={name} Nodes={nodes} {settings} MaxTime=INFINITE State=UP"

    def _slurm_env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _start_slurm_daemons(self) -> None:
        env = self._slurm_env()
        p, ports = self._p, self.state.info["ports"]

        dbd = self.state.add_daemon(
            Daemon(
                "slurmdbd", str(p("run", "slurmdbd.pid")), "slurmdbd", str(p("log", "slurmdbd.log"))
            )
        )
        run(["slurmdbd"], env=env, logs=[Path(dbd.log)])
        wait_until(
            lambda: _listening(ports["slurmdbd"]),
            timeout=60,
            what="slurmdbd",
            on_timeout=lambda: tail(Path(dbd.log)),
        )

        ctld = self.state.add_daemon(
            Daemon(
                "slurmctld",
                str(p("run", "slurmctld.pid")),
                "slurmctld",
                str(p("log", "slurmctld.log")),
            )
        )
        run(["slurmctld", "-i", "-f", str(self.conf)], env=env, logs=[Path(ctld.log)])
        wait_until(
            lambda: run(["scontrol", "ping"], env=env, check=False).stdout.count("UP") > 0,
            timeout=30,
            what="slurmctld",
            on_timeout=lambda: tail(Path(ctld.log)),
        )
        for node in self.nodes:
            d = self.state.add_daemon(
                Daemon(
                    f"slurmd {node}",
                    str(p("run", f"slurmd-{node}.pid")),
                    "slurmd",
                    str(p("log", f"slurmd-{node}.log")),
                )
            )
            run(["slurmd", "-N", node, "-f", str(self.conf)], env=env, logs=[Path(d.log)])

        def nodes_idle() -> bool:
            out = run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, check=False).stdout
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return all(states.get(n) == "idle" for n in self.nodes)

        wait_until(
            nodes_idle,
            timeout=60,
            what="both nodes idle",
            on_timeout=lambda: (
                run(["sinfo", "-N", "-l"], env=env, check=False).stdout
                + "\n".join(tail(log) for log in self.logs)
            ),
        )

        def registered() -> bool:
            out = run(
                ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], env=env, check=False
            ).stdout
            return self.cluster_name in out.split()

        wait_until(
            registered,
            timeout=30,
            what="cluster registered in slurmdbd",
            on_timeout=lambda: "\n".join(tail(log) for log in self.logs),
        )
        # a QOS for tests of `--qos` (root's association, registered with the cluster, may use it)
        run(["sacctmgr", "-i", "add", "qos", self.qos], env=env, logs=[Path(dbd.log)])
        run(
            ["sacctmgr", "-i", "modify", "user", "root", "set", f"qos+={self.qos}"],
            env=env,
            logs=[Path(dbd.log)],
        )

    # --------------------------------------------------------------------------------------------
    # a batch job to its end

    #: The states a job ends in (squeue keeps them for MinJobAge).
    ENDED = frozenset(
        "COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY PREEMPTED BOOT_FAIL "
        "DEADLINE".split()
    )

    def batch(self, args: Sequence[str], *, timeout: float = 180) -> tuple[str, str]:
        """``sbatch --parsable ARGS``, then its job's state every 0.2 s until it has ended: the
        job id and that state. What ``sbatch --wait`` does, less its waits: it sleeps 2 s, then
        8 s, then 32 s between polls (sbatch.c), so a job of 3 s took it 10 s."""
        job = self.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]
        if not job.isdigit():
            raise ClusterError(f"sbatch {' '.join(args)} printed no job id: {job!r}")

        def ended() -> str | None:
            out = self.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%T"], check=False)
            state = out.stdout.strip()
            return state if state in self.ENDED else None

        return job, wait_until(ended, timeout=timeout, what=f"job {job} to end", interval=0.2)

    # --------------------------------------------------------------------------------------------
    # a site's settings, for one test

    @contextlib.contextmanager
    def settings(self, **values: str) -> Iterator[SlurmCluster]:
        """slurm.conf with these settings (``RequeueExit="75"``) while the block runs: written,
        ``scontrol reconfigure``d and seen in ``scontrol show config``; then as it was."""
        original = self.conf.read_text()
        self.conf.write_text(original + "".join(f"{k}={v}\n" for k, v in values.items()))
        try:
            self.run(["scontrol", "reconfigure"])

            def in_force() -> bool:
                shown = self.run(["scontrol", "show", "config"]).stdout
                return all(
                    any(line.split() == [k, "=", v] for line in shown.splitlines())
                    for k, v in values.items()
                )

            wait_until(in_force, timeout=30, what=f"slurm.conf settings {values}")
            yield self
        finally:
            self.conf.write_text(original)
            self.run(["scontrol", "reconfigure"], check=False)

    # --------------------------------------------------------------------------------------------
    # stop

    def _before_stop(self) -> None:
        env = self._slurm_env()
        if run(["scancel", "--user=root", "--full"], env=env, check=False, timeout=20).returncode:
            return

        def no_jobs() -> bool:
            out = run(["squeue", "-h", "-o", "%i"], env=env, check=False, timeout=10)
            return out.returncode != 0 or not out.stdout.strip()

        try:
            wait_until(no_jobs, timeout=20, what="jobs to end")
        except ClusterError:
            pass


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
