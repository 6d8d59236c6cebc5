"""A real Son of Grid Engine 8.1.9 cell on this one machine, under one directory, no systemd.

The cell has its own ``SGE_ROOT`` (``<base>/root``: the Debian binaries linked in, a private
``default/common`` with bootstrap, act_qmaster and host_aliases), its own berkeleydb spool and
execd spool under ``<base>/spool``, and free ports (``SGE_QMASTER_PORT``, ``SGE_EXECD_PORT``).
It runs ``sge_qmaster`` and one ``sge_execd``; queue ``all.q`` on ``@allhosts`` with parallel
environments ``smp`` ($pe_slots) and ``mpi`` ($fill_up, control_slaves, so ``qrsh -inherit``
works); queue ``grow.q`` for the worker jobs of runs that grow (``grow_resources: {sge_queue:
grow.q}``), PE ``mpi``, one slot on the same host: all.q's queue-wise subordinate, suspended
(its job with it) while all.q's slots are full, so a training's own job takes a worker job's
slot back, and no more than the host's slots run at once (all.q's slots less one beside
grow.q's one);
jobs that name no queue go to all.q (the cell's ``sge_request``: ``-q all.q``); complexes
``tmem``/``tscratch`` (always requested by Snakemake's SGE plugin) with values on the global
exec host, and a site's GPU complex of each kind a site may have, for a run's
``sge_gpu_complex``: ``gpu`` (a per-job consumable, :attr:`SgeCell.gpu_complex`) and
``gpu_slot`` (a per-slot one, counted per slot of a job: :attr:`SgeCell.gpu_slot_complex`),
2 of each on the exec host; 1 s scheduling and accounting flush so tests do not wait.

Clients need ``SGE_ROOT``, ``SGE_CELL``, ``SGE_QMASTER_PORT`` and ``SGE_EXECD_PORT``
(:attr:`SgeCell.env`); the Debian wrappers in /usr/bin honour them.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from .common import Cluster, ClusterError, Daemon, free_ports, run, tail, wait_until

SGE_LIB = Path("/usr/lib/gridengine")  # the real binaries (Debian's /usr/bin ones are wrappers)
SGE_SHARE = Path("/usr/share/gridengine")
CELL = "default"

# Complexes Snakemake's SGE plugin requests on every job (-l tmem=..., -l tscratch=...), and a
# site's GPU complex, a count consumed once per job: name -> (shortcut, type, consumable).
EXTRA_COMPLEXES = {
    "tmem": ("tmem", "MEMORY", "NO"),
    "tscratch": ("tscratch", "MEMORY", "NO"),
    "gpu": ("gpu", "INT", "JOB"),
    "gpu_slot": ("gpu_slot", "INT", "YES"),
}


def _conf_text(values: dict[str, str]) -> str:
    return "".join(f"{k:<24} {v}\n" for k, v in values.items())


class SgeCell(Cluster):
    """``sge_qmaster`` + ``sge_execd`` with queues ``all.q`` and ``grow.q`` (its subordinate)
    and PEs ``smp``/``mpi``."""

    kind = "sge"
    queue = "all.q"
    grow_queue = "grow.q"  # worker jobs' queue: suspended while all.q is full
    grow_slots = 1  # grow.q's slots on the host (see :attr:`suspend_grow_at`)
    parallel_environments = ("smp", "mpi")
    gpu_complex = "gpu"  # the GPU complex of the cell (no device behind it: SGE only counts)
    gpu_slot_complex = "gpu_slot"  # the same GPUs as a per-slot complex

    def __init__(self, base: str | os.PathLike[str], *, slots: int = 4, gpus: int = 2):
        super().__init__(base)
        self.slots = slots
        self.gpus = gpus

    @property
    def suspend_grow_at(self) -> int:
        """All.q's used slots on the host at which SGE suspends grow.q there: below it, all.q's
        jobs and a full grow.q fit the host's slots."""
        return self.slots - self.grow_slots + 1

    @property
    def root(self) -> Path:
        """``SGE_ROOT`` of the cell."""
        return self.base / "root"

    @property
    def common(self) -> Path:
        return self.root / CELL / "common"

    @property
    def spool(self) -> Path:
        return self.base / "spool"

    @property
    def nodes(self) -> list[str]:
        """The execution hosts (this machine's name)."""
        return [self.state.info["host"]]

    @property
    def logs(self) -> list[Path]:
        return [
            self.spool / "qmaster" / "messages",
            *sorted((self.spool / "execd").glob("*/messages")),
        ]

    # --------------------------------------------------------------------------------------------

    def _start(self) -> None:
        host = socket.gethostname()
        qmaster_port, execd_port = free_ports(2)
        self.state.info.update(
            host=host,
            queue=self.queue,
            slots=self.slots,
            gpus=self.gpus,
            ports={"qmaster": qmaster_port, "execd": execd_port},
            sge_root=str(self.root),
        )
        self.state.env = {
            "SGE_ROOT": str(self.root),
            "SGE_CELL": CELL,
            "SGE_QMASTER_PORT": str(qmaster_port),
            "SGE_EXECD_PORT": str(execd_port),
            "SGE_CLUSTER_NAME": f"clusterbench{qmaster_port}",
        }
        self.state.save()
        self._make_root(host)
        self._init_spool()
        self._start_qmaster()
        self._configure(host)
        self._start_execd(host)

    def _make_root(self, host: str) -> None:
        arch = run([str(SGE_SHARE / "util" / "arch")]).stdout.strip()
        for sub in ("bin", "lib", "utilbin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            (self.root / sub / arch).symlink_to(SGE_LIB)
        (self.root / "util").symlink_to(SGE_SHARE / "util")
        self.common.mkdir(parents=True)
        for d in ("qmaster/job_scripts", "spooldb", "execd"):
            (self.spool / d).mkdir(parents=True, exist_ok=True)
        (self.common / "bootstrap").write_text(
            "# Version: 6.2\n"
            + _conf_text(
                {
                    "admin_user": "none",  # daemons stay root: the spool is in a root-only tmpdir
                    "default_domain": "none",
                    "ignore_fqdn": "true",
                    "spooling_method": "berkeleydb",
                    "spooling_lib": "libspoolb",
                    "spooling_params": str(self.spool / "spooldb"),
                    "binary_path": "/usr/sbin",
                    "qmaster_spool_dir": str(self.spool / "qmaster"),
                    "security_mode": "none",
                    "listener_threads": "2",
                    "worker_threads": "2",
                    "scheduler_threads": "1",
                }
            )
        )
        (self.common / "act_qmaster").write_text(host + "\n")
        (self.common / "cluster_name").write_text(self.state.env["SGE_CLUSTER_NAME"] + "\n")
        # qmaster resolves a client's address back to a name (127.0.0.1 -> "localhost" here);
        # unless that name is an alias of the host it rejects the client as unknown.
        aliases = _host_aliases(host)
        (self.common / "host_aliases").write_text(" ".join([host, *aliases]) + "\n")
        settings = "".join(f"{k}={v}; export {k}\n" for k, v in self.state.env.items())
        (self.common / "settings.sh").write_text(settings)

    def _init_spool(self) -> None:
        env = self.environ()
        lib = SGE_LIB
        run(
            [
                str(lib / "spoolinit"),
                "berkeleydb",
                "libspoolb",
                str(self.spool / "spooldb"),
                "init",
            ],
            env=env,
        )
        conf = {}
        for line in (SGE_SHARE / "default-configuration").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition(" ")
                conf[key] = value.strip()
        conf.update(
            {
                "execd_spool_dir": str(self.spool / "execd"),
                "mailer": "/bin/true",
                "min_uid": "0",
                "min_gid": "0",
                "load_report_time": "00:00:05",
                "reporting_params": "accounting=true reporting=false flush_time=00:00:01 "
                "joblog=false sharelog=00:00:00",
                "finished_jobs": "100",
                "loglevel": "log_info",
            }
        )
        global_conf = self.base / "global.conf"
        global_conf.write_text(_conf_text(conf))
        centry = self.base / "centry"
        shutil.copytree(SGE_SHARE / "util/resources/centry", centry)
        for name, (shortcut, ctype, consumable) in EXTRA_COMPLEXES.items():
            (centry / name).write_text(
                _conf_text(
                    {
                        "name": name,
                        "shortcut": shortcut,
                        "type": ctype,
                        "relop": "<=",
                        "requestable": "YES",
                        "consumable": consumable,
                        "default": "0",
                        "urgency": "0",
                    }
                )
            )
        defaults = str(lib / "spooldefaults")
        run([defaults, "configuration", str(global_conf)], env=env)
        run([defaults, "complexes", str(centry)], env=env)
        run([defaults, "usersets", str(SGE_SHARE / "util/resources/usersets")], env=env)
        run([defaults, "managers", "root"], env=env)

    def _start_qmaster(self) -> None:
        qm = self.state.add_daemon(
            Daemon(
                "sge_qmaster",
                str(self.spool / "qmaster" / "qmaster.pid"),
                "sge_qmaster",
                str(self.spool / "qmaster" / "messages"),
            )
        )
        run([str(SGE_LIB / "sge_qmaster")], env=self.environ(), logs=self.logs)
        wait_until(
            lambda: qm.pid() and self.run(["qconf", "-sh"], check=False).returncode == 0,
            timeout=60,
            what="sge_qmaster",
            on_timeout=lambda: "\n".join(tail(p) for p in self.logs),
        )

    def _qconf_file(self, option: str, name: str, values: dict[str, str]) -> None:
        path = self.base / "conf" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(_conf_text(values))
        self.run(["qconf", option, str(path)])

    def _configure(self, host: str) -> None:
        self.run(["qconf", "-ah", host])
        self.run(["qconf", "-as", host])
        sched = {}
        for line in self.run(["qconf", "-ssconf"]).stdout.splitlines():
            key, _, value = line.partition(" ")
            if key:
                sched[key] = value.strip()
        sched.update(schedule_interval="0:0:1", flush_submit_sec="1", flush_finish_sec="1")
        self._qconf_file("-Msconf", "sched_conf", sched)
        self._qconf_file(
            "-Ae",
            f"exechost_{host}",
            {
                "hostname": host,
                "load_scaling": "NONE",
                # both queues' slots: SGE dispatches into all.q beside grow.q's job, then
                # suspends grow.q (its subordinate) once all.q is full
                "complex_values": f"slots={self.slots + self.grow_slots},"
                f"{self.gpu_complex}={self.gpus},"
                f"{self.gpu_slot_complex}={self.gpus}",
                "user_lists": "NONE",
                "xuser_lists": "NONE",
                "projects": "NONE",
                "xprojects": "NONE",
                "usage_scaling": "NONE",
                "report_variables": "NONE",
            },
        )
        self._qconf_file(
            "-Me",
            "exechost_global",
            {
                "hostname": "global",
                "load_scaling": "NONE",
                "complex_values": "tmem=1T,tscratch=1T",
                "user_lists": "NONE",
                "xuser_lists": "NONE",
                "projects": "NONE",
                "xprojects": "NONE",
                "usage_scaling": "NONE",
                "report_variables": "NONE",
            },
        )
        self._qconf_file("-Ahgrp", "allhosts", {"group_name": "@allhosts", "hostlist": host})
        for pe, rule, slaves in (("smp", "$pe_slots", "FALSE"), ("mpi", "$fill_up", "TRUE")):
            self._qconf_file(
                "-Ap",
                pe,
                {
                    "pe_name": pe,
                    "slots": "9999",
                    "user_lists": "NONE",
                    "xuser_lists": "NONE",
                    "start_proc_args": "NONE",
                    "stop_proc_args": "NONE",
                    "allocation_rule": rule,
                    "control_slaves": slaves,
                    "job_is_first_task": "FALSE" if slaves == "TRUE" else "TRUE",
                    "urgency_slots": "min",
                    "accounting_summary": "FALSE",
                    "qsort_args": "NONE",
                },
            )
        queue = {
            "qname": self.queue,
            "hostlist": "@allhosts",
            "seq_no": "0",
            "load_thresholds": "NONE",
            "suspend_thresholds": "NONE",
            "nsuspend": "1",
            "suspend_interval": "00:05:00",
            "priority": "0",
            "min_cpu_interval": "00:05:00",
            "processors": "UNDEFINED",
            "qtype": "BATCH INTERACTIVE",
            "ckpt_list": "NONE",
            "pe_list": " ".join(self.parallel_environments),
            "rerun": "FALSE",
            "slots": str(self.slots),
            "tmpdir": "/tmp",
            "shell": "/bin/bash",
            "prolog": "NONE",
            "epilog": "NONE",
            "shell_start_mode": "posix_compliant",
            "starter_method": "NONE",
            "suspend_method": "NONE",
            "resume_method": "NONE",
            "terminate_method": "NONE",
            "notify": "00:00:60",
            "owner_list": "NONE",
            "user_lists": "NONE",
            "xuser_lists": "NONE",
            "subordinate_list": f"{self.grow_queue}={self.suspend_grow_at}",
            "complex_values": "NONE",
            "projects": "NONE",
            "xprojects": "NONE",
            "calendar": "NONE",
            "initial_state": "default",
        }
        for limit in (
            "s_rt",
            "h_rt",
            "s_cpu",
            "h_cpu",
            "s_fsize",
            "h_fsize",
            "s_data",
            "h_data",
            "s_stack",
            "h_stack",
            "s_core",
            "h_core",
            "s_rss",
            "h_rss",
            "s_vmem",
            "h_vmem",
        ):
            queue[limit] = "INFINITY"
        # grow.q first: all.q names it as its subordinate
        grow_q = {**queue, "qname": self.grow_queue, "seq_no": "1", "pe_list": "mpi"}
        grow_q.update(slots=str(self.grow_slots), subordinate_list="NONE")
        self._qconf_file("-Aq", self.grow_queue, grow_q)
        self._qconf_file("-Aq", "all.q", queue)
        # a job that names no queue goes to all.q (the cell's default requests): only jobs that
        # ask for grow.q (-q grow.q, a run's grow_resources.sge_queue) run there
        (self.common / "sge_request").write_text(f"-q {self.queue}\n")

    def _start_execd(self, host: str) -> None:
        run([str(SGE_LIB / "sge_execd")], env=self.environ(), logs=self.logs)
        # execd spools under the name it resolves itself to (here "localhost", not the host's
        # name), so its pid file is found rather than predicted.
        pidfile = wait_until(
            lambda: next(iter((self.spool / "execd").glob("*/execd.pid")), None),
            timeout=30,
            what="sge_execd pid file",
            on_timeout=lambda: "\n".join(tail(p) for p in self.logs),
        )
        ex = self.state.add_daemon(
            Daemon("sge_execd", str(pidfile), "sge_execd", str(pidfile.parent / "messages"))
        )

        def queue_ready() -> bool:
            out = self.run(["qstat", "-f", "-q", self.queue], check=False).stdout
            lines = [ln.split() for ln in out.splitlines() if ln.startswith(f"{self.queue}@")]
            # columns: queuename qtype resv/used/tot. load_avg arch [states]
            return bool(lines) and all(len(f) == 5 for f in lines) and bool(ex.pid())

        wait_until(
            queue_ready,
            timeout=60,
            what=f"queue {self.queue} on {host} ready",
            on_timeout=lambda: (
                self.run(["qstat", "-f"], check=False).stdout
                + "\n".join(tail(p) for p in self.logs)
            ),
        )

    def _before_stop(self) -> None:
        if self.run(["qdel", "-f", "-u", "*"], check=False, timeout=20).returncode:
            return

        def no_jobs() -> bool:
            out = self.run(["qstat", "-u", "*"], check=False, timeout=10)
            return out.returncode != 0 or not out.stdout.strip()

        try:
            wait_until(no_jobs, timeout=20, what="jobs to end")
        except ClusterError:
            pass


def _host_aliases(host: str) -> list[str]:
    """Names other than ``host`` that this host's address resolves back to."""
    try:
        addr = socket.gethostbyname(host)
        name, aliases, _ = socket.gethostbyaddr(addr)
    except OSError:
        return []
    return [n for n in dict.fromkeys([name, *aliases]) if n != host]
