"""The ssh scheduler (clusterbench.launch.schedulers.ssh): machines without a batch system,
listed in a hosts file, their ranks started over ssh.

Unit tests first (its parsers, its commands, the pre-flight's verdicts on a probe's answer, the
agent that runs a rank at the remote end, with real processes but no ssh). Then the real thing
(marker ``ssh``): two network namespaces joined by a veth pair, each with its own address and
Debian's sshd (``tests/clusters/ssh.py``, the session's ``ssh_hosts``); Snakemake and the
launcher run "on host a" (in its namespace), so host a's rank is a local process and host b's
is started over ssh. A 2-rank training and comm job whose traffic crosses the veth (its byte
counters, and the interface every host's rank recorded), a rank killed on host b, the launcher
killed, host b's link taken down mid-run, an elastic run losing host b, a host that cannot be
reached (the pre-flight stops the workflow, naming it, before any job), and SIGINT to Snakemake
(nothing left in either namespace: ``pgrep`` there).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from clusterbench.core import provenance
from clusterbench.launch import schedulers
from clusterbench.launch.placement import choose_iface
from clusterbench.launch.schedulers import (
    AllocationError,
    LaunchError,
    PreflightContext,
    PreflightError,
    fill_ranks,
    parse_hosts_file,
)
from clusterbench.launch.schedulers import ssh as sshmod
from conftest import (
    REPO,
    default_config,
    default_sigint,
    run_snakemake,
    snakemake_cmd,
    snakemake_env,
    write_config,
)

# ------------------------------------------------------------------------------------------
# settings, hosts, commands


def test_ssh_settings_from_the_environment_and_what_is_refused():
    assert sshmod.ssh_settings({}) == sshmod.SshSettings(("ssh",), None, 10)
    got = sshmod.ssh_settings(
        {
            "CLUSTERBENCH_SSH_COMMAND": "ssh -F '/a b/config'",
            "CLUSTERBENCH_SSH_PORT": "2222",
            "CLUSTERBENCH_SSH_TIMEOUT": "3",
        }
    )
    assert got == sshmod.SshSettings(("ssh", "-F", "/a b/config"), 2222, 3)
    for env, says in (
        ({"CLUSTERBENCH_SSH_PORT": "0"}, "CLUSTERBENCH_SSH_PORT='0'"),
        ({"CLUSTERBENCH_SSH_PORT": "70000"}, "a port is 1..65535"),
        ({"CLUSTERBENCH_SSH_TIMEOUT": "soon"}, "CLUSTERBENCH_SSH_TIMEOUT='soon'"),
        ({"CLUSTERBENCH_SSH_COMMAND": "ssh 'open"}, "CLUSTERBENCH_SSH_COMMAND"),
    ):
        with pytest.raises(LaunchError) as err:
            sshmod.ssh_settings(env)
        assert says in str(err.value)


def test_the_ssh_command_never_asks_for_a_password_and_gives_up_on_a_silent_host():
    settings = sshmod.SshSettings(("ssh", "-F", "cfg"), 2222, 7)
    cmd = settings.argv("gpu1", "echo hi", alive=True)
    assert cmd[:3] == ["ssh", "-F", "cfg"] and cmd[-2:] == ["gpu1", "echo hi"]
    options = " ".join(cmd)
    assert "-o BatchMode=yes" in options and "-o ConnectTimeout=7" in options
    assert "-o ServerAliveInterval=5 -o ServerAliveCountMax=3" in options
    assert "-p 2222" in options
    assert "ServerAlive" not in " ".join(sshmod.SshSettings().argv("h", "true"))
    assert "-p" not in sshmod.SshSettings().argv("h", "true")


def test_the_hosts_file_as_today_and_what_is_refused(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# lab\ngpu1:2\ngpu2 slots=4   # the big one\n\ngpu3\nold:0\n")
    env = {"CLUSTERBENCH_HOSTS_FILE": str(path)}
    assert sshmod.ssh_hosts(env) == {"gpu1": 2, "gpu2": 4, "gpu3": 1}
    with pytest.raises(LaunchError, match="needs a hosts file: set CLUSTERBENCH_HOSTS_FILE"):
        sshmod.ssh_hosts({})
    with pytest.raises(LaunchError, match=f"cannot read the hosts file {tmp_path / 'none'}"):
        sshmod.ssh_hosts({"CLUSTERBENCH_HOSTS_FILE": str(tmp_path / "none")})
    path.write_text("gpu1 two three\n")
    with pytest.raises(LaunchError, match=r"hosts file .*line 1 is not 'host'"):
        sshmod.ssh_hosts(env)
    path.write_text("# nobody\nold:0\n")
    with pytest.raises(LaunchError, match="lists no host with a slot"):
        sshmod.ssh_hosts(env)
    path.write_text("-oProxyCommand\n")
    with pytest.raises(LaunchError, match="is no host name"):
        sshmod.ssh_hosts(env)


def test_openmpi_machine_files_crlf_and_a_bom_read_as_openmpi_reads_them():
    """Issue 40: OpenMPI's `host slots=N max_slots=M` (Rescale's machinefile.gpu) was refused;
    a file saved on Windows (CRLF, a byte-order mark) reads as the same hosts."""
    text = (
        "\ufeff# the lab, saved on Windows\r\n"
        "n1 slots=4 max_slots=4\r\n"
        "n2\tslots = 2   max-slots=8   # oversubscribable\r\n"
        "\r\n"
        "n3 max_slots=2\r\n"  # slots: one
        "n1:1\r\n"  # a second line for n1: the sum
        "n4 slots=0 max_slots=0"
    )
    assert parse_hosts_file(text) == {"n1": 5, "n2": 2, "n3": 1}
    assert parse_hosts_file(text.replace("\r\n", "\n").removeprefix("\ufeff")) == (
        parse_hosts_file(text)
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("gpu1:\u00b3", r"slots '\u00b3' is not a whole number in ASCII digits"),  # superscript 3
        ("gpu1 slots=\u2461", r"slots '\u2461' is not a whole number in ASCII digits"),
        ("gpu1:\u0664", r"slots '\u0664' is not a whole number"),  # Arabic-Indic 4: not 4 slots
        ("gpu1 slots=2 max_slots=\uff18", r"max_slots '\uff18' is not a whole number"),
        ("localhost:4097", r"slots 4,097 is more than 4,096, the most one host may have"),
        ("localhost:1" + "0" * 25, r"slots 10(,000){8} is more than 4,096"),
        ("gpu1 slots=4 max_slots=3", r"max_slots=3 is less than slots=4"),
        ("gpu1 slots=1 slots=2", r"slots= is given twice"),
        ("gpu1 cpu=4", r"cpu= is not read by clusterbench"),
        ("gpu\u200b1:2", r"line 2 holds U\+200B \(ZERO WIDTH SPACE\), an invisible"),
        ("gpu1\ufeff", r"U\+FEFF \(ZERO WIDTH NO-BREAK SPACE\)"),  # a BOM inside the file
        ("gpu1\x0b:2", r"holds U\+000B, an invisible or control character"),
        ("\u0301gpu1", r"starts with U\+0301 \(COMBINING ACUTE ACCENT\), a combining mark"),
    ],
)
def test_slot_counts_are_ascii_digits_within_a_bound_and_names_show_what_hides(line, says):
    """`str.isdigit()` took `²` and `①` (a ValueError traceback) and `٣` (3 slots); a name
    with a zero-width space or a BOM went on to the report; each is now refused, naming it."""
    with pytest.raises(AllocationError) as err:
        parse_hosts_file(f"# lab\n{line}\n")
    assert re.search(says, str(err.value)), str(err.value)


def test_host_names_are_read_in_nfc_and_the_file_is_named(tmp_path):
    decomposed, composed = "cafe\u0301", "caf\u00e9"
    assert parse_hosts_file(f"{decomposed}:2\n{composed}:1\n") == {composed: 3}
    path = tmp_path / "hosts"
    path.write_bytes(b"gpu1:2\n\xff\xfe\n")
    env = {"CLUSTERBENCH_HOSTS_FILE": str(path)}
    with pytest.raises(LaunchError, match=rf"the hosts file {path} .* is not UTF-8 text"):
        sshmod.ssh_hosts(env)
    path.write_text("gpu1:\u00b2\n")
    with pytest.raises(AllocationError, match=rf"the hosts file {path} .*: hosts file line 1"):
        schedulers.read_hosts_file(env)


def rescale_files() -> dict[str, str]:
    """The files docs/ssh.md shows as `$ cat ~/NAME` and the lines after it, by name."""
    text = (REPO / "docs" / "ssh.md").read_text(encoding="utf-8")
    block = text.split("$ cat ~/machinefile.gpu\n", 1)[1].split("```", 1)[0]
    files, name = {}, "machinefile.gpu"
    for line in block.splitlines(keepends=True):
        if line.startswith("$ cat ~/"):
            name = line.removeprefix("$ cat ~/").strip()
        elif not line.startswith("$ "):
            files[name] = files.get(name, "") + line
    return files


def test_both_files_of_the_rescale_tutorial_in_the_docs_are_hosts_files():
    files = rescale_files()
    assert sorted(files) == ["machinefile", "machinefile.gpu"]
    assert parse_hosts_file(files["machinefile.gpu"]) == {"ip-10-0-0-11": 4, "ip-10-0-0-12": 4}
    assert parse_hosts_file(files["machinefile"]) == {"ip-10-0-0-11": 1, "ip-10-0-0-12": 1}


def test_slots_are_filled_in_order_one_rank_each():
    hosts = [("a", 2), ("b", 2), ("c", 1)]
    assert fill_ranks(hosts, 1) == [("a", 1)]
    assert fill_ranks(hosts, 2) == [("a", 2)]
    assert fill_ranks(hosts, 3) == [("a", 2), ("b", 1)]
    assert fill_ranks(hosts, 5) == [("a", 2), ("b", 2), ("c", 1)]
    with pytest.raises(AllocationError, match=r"--np 6 is more than the 5 slot\(s\)"):
        fill_ranks(hosts, 6)
    # the scheduler's spread of the ranks
    from clusterbench.launch.placement import rank_hosts

    alloc = schedulers.Allocation("ssh", tuple(schedulers.Host(h, n) for h, n in hosts))
    assert rank_hosts(alloc, 3, sshmod.SshScheduler().spread) == [("a", 2), ("b", 1)]
    # the other schedulers: one per host first
    assert rank_hosts(alloc, 3) == [("a", 1), ("b", 1), ("c", 1)]


def test_ssh_g_output_gives_the_host_name_ssh_connects_to():
    text = "user me\nhostname 10.1.2.3\nport 2222\nidentityfile ~/.ssh/id_ed25519\n"
    assert sshmod.parse_ssh_config(text)["hostname"] == "10.1.2.3"
    assert sshmod.parse_ssh_config(text)["port"] == "2222"


def test_the_env_words_of_a_rank_command_and_its_argv():
    command = (
        "env CLUSTERBENCH_RANK_ID=cb-1.1 RANK=1 env HOROVOD_RANK=1 X='a b' "
        "HOROVOD_GLOO_IFACE=eth0 python /x/train.py --run '{\"a\": 1}'"
    )
    assigned, argv = sshmod.parse_env_command(command)
    assert assigned == {
        "CLUSTERBENCH_RANK_ID": "cb-1.1",
        "RANK": "1",
        "HOROVOD_RANK": "1",
        "X": "a b",
        "HOROVOD_GLOO_IFACE": "eth0",
    }
    assert argv == ["python", "/x/train.py", "--run", '{"a": 1}']
    with pytest.raises(LaunchError, match="no command after the variables"):
        sshmod.parse_env_command("env A=1")


def test_the_environment_a_remote_rank_gets_leaves_out_this_machines_own():
    env = {
        "PATH": "/venv/bin:/usr/bin",
        "PYTHONPATH": "/x/workflow",
        "CLUSTERBENCH_CHECKPOINTS": "{}",
        "HOME": "/root",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "2",
        "BASH_FUNC_x%%": "() { :; }",
        "TMPDIR": "/tmp/job",
    }
    assert sshmod.forwarded_environment(env) == {
        "PATH": "/venv/bin:/usr/bin",
        "PYTHONPATH": "/x/workflow",
        "CLUSTERBENCH_CHECKPOINTS": "{}",
    }


def _bound(local_hosts: set[str]) -> sshmod.SshScheduler:
    scheduler = sshmod.SshScheduler()
    scheduler.settings = sshmod.SshSettings(("ssh", "-F", "/cfg"), 2222, 5)
    scheduler.job_env = {"PATH": "/venv/bin", "HOME": "/root", "CLUSTERBENCH_IFACE": ""}
    alloc = schedulers.Allocation("ssh", (schedulers.Host("a", 1), schedulers.Host("b", 1)))
    scheduler.bind(alloc, 2, "cb-test", local_hosts)
    return scheduler


def test_a_remote_rank_starts_over_ssh_with_the_environment_on_its_stdin(tmp_path):
    scheduler = _bound({"a"})
    here = SimpleNamespace(rank=0, hostname="a")
    there = SimpleNamespace(rank=1, hostname="b")
    assert scheduler.shell_command("env RANK=0 python t.py", here) == "env RANK=0 python t.py"
    cmd = scheduler.shell_command("env RANK=1 python t.py", there)
    envfile = cmd.rsplit("< ", 1)[1]
    assert cmd.startswith(f"{{ rm -f {envfile}; ssh -F /cfg -o BatchMode=yes ")
    assert " -p 2222 b " in cmd and "ServerAliveInterval" in cmd
    assert os.stat(envfile).st_mode & 0o777 == 0o600
    assert json.loads(Path(envfile).read_text()) == {"PATH": "/venv/bin", "CLUSTERBENCH_IFACE": ""}
    assert "/venv/bin" not in cmd.rsplit("< ", 1)[0]  # no value on any command line
    # the rank's shell: ssh reads the file, whose name is gone as soon as the shell started
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "ssh").write_text(f"#!/bin/sh\nls {envfile} 2>/dev/null\ncat\n")
    (stand_in / "ssh").chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in}:{os.environ['PATH']}"}
    ran = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=30)
    assert json.loads(ran.stdout) == {"PATH": "/venv/bin", "CLUSTERBENCH_IFACE": ""}
    assert not Path(envfile).exists()
    assert scheduler.observe(there, "clusterbench-launch: rank pid 4242\n")
    assert scheduler.pids == {1: 4242}
    assert not scheduler.observe(there, "train: epoch 1\n")


def test_one_rank_runs_here_only_when_its_host_is_this_machine():
    scheduler = sshmod.SshScheduler()
    assert scheduler.single_rank_here("a", {"a"})
    assert not scheduler.single_rank_here("b", {"a"})
    # in an allocation (Slurm, SGE, local) the launcher runs on its first node
    assert schedulers.SCHEDULERS["local"]().single_rank_here("b", set())


# ------------------------------------------------------------------------------------------
# the workflow's choice of scheduler


def test_the_workflow_takes_the_scheduler_clusterbench_scheduler_names_among_its_executors():
    of = schedulers.of_executor
    assert of("local", {}).name == "local"
    assert of("slurm", {}).name == "slurm"
    assert of("local", {"CLUSTERBENCH_SCHEDULER": "ssh"}).name == "ssh"
    assert of("local", {"CLUSTERBENCH_SCHEDULER": "auto"}).name == "local"
    assert of("kubernetes", {}) is None
    assert of("ssh", {}) is None  # no Snakemake executor of that name
    with pytest.raises(AllocationError, match="ssh scheduler's jobs run under Snakemake's local"):
        of("slurm", {"CLUSTERBENCH_SCHEDULER": "ssh"})
    with pytest.raises(AllocationError, match="unknown scheduler 'pbs'"):
        of("local", {"CLUSTERBENCH_SCHEDULER": "pbs"})
    assert schedulers.executors() == ["slurm", "sge", "local"]
    assert schedulers.select(None, {"CLUSTERBENCH_SCHEDULER": "ssh"}).name == "ssh"
    assert schedulers.detect({}).name == "local"  # never detected by itself


# ------------------------------------------------------------------------------------------
# the interface


def test_the_interface_that_routes_to_the_other_nodes_is_chosen():
    ifaces = {"lo": ["127.0.0.1"], "eth0": ["172.17.0.2"], "ib0": ["10.9.0.1"]}
    routes = {"10.9.0.2": "10.9.0.1", "10.9.0.3": "10.9.0.1"}
    choice = choose_iface(
        {"a": "10.9.0.1", "b": "10.9.0.2", "c": "10.9.0.3"},
        ifaces,
        "vm",
        "127.0.0.1",  # the host's name resolves to loopback: no matter
        route=routes.get,
    )
    assert (choice.iface, choice.address) == ("ib0", "10.9.0.1")
    assert "the route to b (10.9.0.2) leaves through ib0" in choice.reason
    # nodes reached through different interfaces: the first's, and the reason says so
    split = choose_iface(
        {"b": "10.9.0.2", "d": "192.168.5.5"},
        {**ifaces, "wlan0": ["192.168.5.1"]},
        "vm",
        None,
        route={"10.9.0.2": "10.9.0.1", "192.168.5.5": "192.168.5.1"}.get,
    )
    assert split.iface == "ib0" and "d is reached through wlan0" in split.reason
    # no route: the host name's interface, as before
    fallback = choose_iface({"b": "10.9.0.2"}, ifaces, "vm", "172.17.0.2", route=lambda a: None)
    assert fallback.iface == "eth0"


def test_every_library_gets_the_interface_and_the_provenance_records_it():
    from clusterbench.launch.common import rank_env
    from clusterbench.launch.placement import IfaceChoice

    args = SimpleNamespace(log_level=None, timeout=None, iface=None)
    env = rank_env(args, sshmod.SshScheduler(), IfaceChoice("ib0", "10.9.0.1", "test"))
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert "CLUSTERBENCH_IFACE" not in env  # chosen, not asked for: each host finds its own
    args.iface = "ib0"
    assert (
        rank_env(args, sshmod.SshScheduler(), IfaceChoice("ib0", "x", "asked"))[
            "CLUSTERBENCH_IFACE"
        ]
        == "ib0"
    )
    same = {v: "ib0" for v in provenance.IFACE_VARS}
    assert provenance.rank_iface(same) == "ib0"
    assert provenance.rank_iface({}) is None
    mixed = {**same, "NCCL_SOCKET_IFNAME": "eth0"}
    assert provenance.rank_iface(mixed) == (
        "HOROVOD_GLOO_IFACE=ib0 GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME=eth0"
    )


# ------------------------------------------------------------------------------------------
# the pre-flight's verdicts


HERE = {"torch": "2.13.0", "horovod": "0.28.1"}


def _answer(**changes) -> str:
    found = {
        "versions": dict(HERE),
        "read": {"/w/results/data/digits": ["/w/results", None]},
        "write": {"/w": None},
        "gpus": None,
    }
    found.update(changes)
    return json.dumps(found) + "\n"


def test_a_ready_host_has_no_problem():
    probe = sshmod.probe_problems("gpu1", "/v/bin/python", HERE, 0, _answer(gpus=2), "")
    assert probe.problems == [] and probe.gpus == 2


@pytest.mark.parametrize(
    ("returncode", "stdout", "stderr", "says"),
    [
        (
            255,
            "",
            "ssh: connect to host 10.0.0.9 port 22: No route to host",
            "host gpu1: ssh: not reachable without a password prompt (ssh -o BatchMode=yes gave "
            "up after 0.0 s): ssh: connect to host 10.0.0.9 port 22: No route to host",
        ),
        (255, "", "root@gpu1: Permission denied (publickey).", "Permission denied (publickey)"),
        (127, "", "sh: 1: /v/bin/python: not found", "host gpu1: python: /v/bin/python is not"),
        (1, "", "Traceback ...\nImportError: x", "host gpu1: python: /v/bin/python failed (exit"),
        (
            0,
            _answer(versions={"torch": "2.12.0", "horovod": "0.28.1"}),
            "",
            "host gpu1: versions: torch 2.12.0 there, 2.13.0 here",
        ),
        (
            0,
            _answer(versions={"torch": "2.13.0", "horovod": None}),
            "",
            "host gpu1: versions: horovod not installed there, 0.28.1 here",
        ),
        (
            0,
            _answer(read={"/w/results/data/digits": ["/w", "[Errno 13] Permission denied"]}),
            "",
            "host gpu1: data: cannot read /w/results/data/digits there (/w: [Errno 13]",
        ),
        (
            0,
            _answer(write={"/w": "missing"}),
            "",
            "host gpu1: working directory: /w is missing there",
        ),
    ],
)
def test_each_failed_check_is_named_with_its_host(returncode, stdout, stderr, says):
    probe = sshmod.probe_problems("gpu1", "/v/bin/python", HERE, returncode, stdout, stderr)
    assert len(probe.problems) == 1 and says in probe.problems[0], probe.problems


def test_a_run_larger_than_the_slots_or_the_gpus_is_unavailable():
    hosts = {"a": 2, "b": 1}
    assert sshmod.slot_problem("r", 3, 0, hosts, {}) is None
    assert "needs 4 ranks (one per slot) but the hosts file has 3 slot(s) (a:2, b:1)" in (
        sshmod.slot_problem("r", 4, 0, hosts, {})
    )
    assert sshmod.slot_problem("r", 3, 1, hosts, {"a": 2, "b": 1}) is None
    said = sshmod.slot_problem("r", 3, 1, hosts, {"a": 1, "b": 1})
    assert "host a gets 2 of its ranks but has 1 GPU(s)" in said


def test_the_preflight_without_a_hosts_file_cannot_decide():
    context = PreflightContext({"r": {"workers": 2}}, lambda name, keys: {}, env={})
    with pytest.raises(PreflightError, match="needs a hosts file: set CLUSTERBENCH_HOSTS_FILE"):
        sshmod.SshScheduler.unavailable(context)


#: A stand-in for ssh: ``-G HOST`` says where HOST is (an address of no interface here, so the
#: probe goes "over ssh"); a probe of HOST logs HOST, sleeps on the hosts named in SLOW, and
#: answers as a ready host would.
FAKE_SSH = """#!/bin/sh
if [ "$1" = -G ]; then echo "hostname 192.0.2.1"; exit 0; fi
for arg; do case "$arg" in -*|BatchMode=*|ConnectTimeout=*) ;; *) host=$arg; break;; esac; done
echo "$host" >> "$LOG"
case " $SLOW " in *" $host "*) exec sleep 60;; esac
echo '{answer}'
"""


def fake_ssh_context(
    tmp_path, monkeypatch, lines: int, workers: int, slow: str = ""
) -> tuple[PreflightContext, list[str]]:
    """The ssh pre-flight's context for a hosts file of ``lines`` hosts of 2 slots each and
    one run of ``workers``, ssh being :data:`FAKE_SSH` (the hosts in ``slow`` never answer);
    and the list of what it says."""
    answer = json.dumps({"versions": sshmod.local_versions(), "read": {}, "write": {}})
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH.replace("{answer}", answer))
    ssh.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"node{i:05d} slots=2 max_slots=2\n" for i in range(lines)))
    env = {
        "CLUSTERBENCH_HOSTS_FILE": str(hosts),
        "CLUSTERBENCH_SSH_COMMAND": str(ssh),
        "CLUSTERBENCH_SSH_TIMEOUT": "1",
    }
    monkeypatch.setenv("LOG", str(tmp_path / "log"))  # the fake ssh's (it inherits ours)
    monkeypatch.setenv("SLOW", slow)
    said: list[str] = []
    run = {"workers": workers, "gpus_per_node": 0}
    return PreflightContext({"r": run}, lambda name, keys: {}, env=env, say=said.append), said


def test_the_preflight_probes_only_the_hosts_the_runs_use_and_says_so(tmp_path, monkeypatch):
    """A 10,000-line hosts file kept a dry run at "Building DAG" past 120 s: every host was
    sshed, 16 at a time. A 5-rank run on hosts of 2 slots uses 3 of them."""
    context, said = fake_ssh_context(tmp_path, monkeypatch, 10_000, 5)
    started = time.monotonic()
    assert sshmod.SshScheduler.unavailable(context) == {}
    assert time.monotonic() - started < 30
    assert sorted((tmp_path / "log").read_text().split()) == [
        "node00000", "node00001", "node00002"
    ]  # fmt: skip
    assert said[0] == (
        "ssh pre-flight: probing 3 host(s) of the 10,000 listed (those the runs use) over ssh, "
        "up to 32 at once, within 31 s in all"
    )
    assert re.fullmatch(r"ssh pre-flight: 3 host\(s\) ready, 0 not, in \d+\.\d s", said[1])
    assert sshmod.hosts_used({"a": 2, "b": 2, "c": 1}, [1, 3]) == {"a": 2, "b": 2}
    assert sshmod.hosts_used({"a": 2, "b": 2}, [9]) == {"a": 2, "b": 2}  # unavailable: all


def test_the_preflight_ends_within_one_limit_naming_the_host_that_did_not_answer(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(sshmod, "PROBE_EXTRA_S", 1)  # the limit: 1 s to connect + 1 s
    context, said = fake_ssh_context(tmp_path, monkeypatch, 100, 6, slow="node00001")
    started = time.monotonic()
    with pytest.raises(PreflightError) as err:
        sshmod.SshScheduler.unavailable(context)
    assert time.monotonic() - started < 10
    assert "host node00001: ssh: no answer within 2 s" in str(err.value)
    assert "node00000" not in str(err.value) and "node00002" not in str(err.value)
    assert "ssh pre-flight: 2 host(s) ready, 1 not, in" in said[1]


def test_the_probe_runs_on_this_host_and_finds_it_ready(tmp_path):
    """The probe itself, run as the pre-flight runs it on a host, here (no ssh)."""
    (tmp_path / "data").mkdir()
    request = {
        "packages": ["torch", "horovod"],
        "read": [str(tmp_path / "data" / "digits"), str(tmp_path / "data")],
        "write": [str(tmp_path), str(tmp_path / "gone")],
        "gpus": False,
    }
    proc = subprocess.run(
        [sys.executable, "-c", sshmod.PROBE, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    probe = sshmod.probe_problems(
        "me", sys.executable, sshmod.local_versions(), proc.returncode, proc.stdout, proc.stderr
    )
    assert len(probe.problems) == 1, probe.problems
    assert probe.problems[0].startswith(
        f"host me: working directory: {tmp_path / 'gone'} is missing there"
    )


# ------------------------------------------------------------------------------------------
# the agent: the remote end of a rank's ssh connection (real processes, no ssh)


def start_agent(command: str, env: dict | None = None) -> subprocess.Popen:
    """The agent as ssh runs it on a host: the launcher's environment on its stdin, its
    stdout and stderr pipes to the launcher (here: this test)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", sshmod.AGENT, command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    proc.stdin.write(json.dumps(env or {"FROM_LAUNCHER": "yes"}))
    proc.stdin.close()
    proc.stdin = None  # (communicate() would flush it)
    return proc


def rank_pid(agent: subprocess.Popen) -> int:
    line = agent.stderr.readline()
    assert line.startswith(sshmod.PID_MARK), line + agent.stderr.read()
    return int(line[len(sshmod.PID_MARK) :])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_agent_runs_the_rank_in_its_environment_and_on_the_routed_interface():
    command = (
        "env HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 HOROVOD_GLOO_IFACE=eth9 A='x y' sh -c "
        "'echo $FROM_LAUNCHER $A $HOROVOD_GLOO_IFACE $GLOO_SOCKET_IFNAME $NCCL_SOCKET_IFNAME'"
    )
    agent = start_agent(command)
    pid = rank_pid(agent)
    out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert out.split() == ["yes", "x", "y", "lo", "lo", "lo"]  # the host's own, not eth9
    assert pid > 0


def test_the_agent_takes_the_interface_asked_for_and_refuses_one_the_host_has_not():
    agent = start_agent("env X=1 sh -c 'echo $HOROVOD_GLOO_IFACE'", {"CLUSTERBENCH_IFACE": "lo"})
    assert agent.communicate(timeout=60)[0].strip() == "lo"
    # asked for with the launcher's --iface: in the rank's own variables
    agent = start_agent("env CLUSTERBENCH_IFACE=lo sh -c 'echo $NCCL_SOCKET_IFNAME'")
    assert agent.communicate(timeout=60)[0].strip() == "lo"
    agent = start_agent("env X=1 true", {"CLUSTERBENCH_IFACE": "nosuch0"})
    _, err = agent.communicate(timeout=60)
    assert agent.returncode == 1
    assert "network interface 'nosuch0' (CLUSTERBENCH_IFACE) is not on" in err


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -9 $$", 137)])
def test_the_agent_exits_with_the_ranks_status(script, status):
    agent = start_agent(f"env HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 sh -c '{script}'")
    agent.communicate(timeout=60)
    assert agent.returncode == status


def test_when_its_connection_ends_the_agent_stops_the_ranks_whole_group():
    """sshd closes the agent's stdout when the ssh connection ends (the launcher stopped or
    killed its ssh): closing the read end here is the same to the agent."""
    command = (
        "env HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 sh -c "
        "'sleep 300 & echo child $!; trap \"\" TERM; wait'"  # the rank's shell ignores SIGTERM
    )
    agent = start_agent(command)
    pid = rank_pid(agent)
    child = int(agent.stdout.readline().split()[1])
    assert alive(pid) and alive(child)
    agent.stdout.close()  # the connection is gone
    agent.wait(timeout=sshmod.GRACE_S + 30)
    deadline = time.monotonic() + 10
    while (alive(pid) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "the rank's child outlived the connection"
    assert not alive(pid), "the rank (which ignores SIGTERM) outlived the connection"


# ------------------------------------------------------------------------------------------
# real ssh: two hosts in two network namespaces (tests/clusters/ssh.py)

#: How long after a stop everything of the run must be gone, in both namespaces (a bound).
BOUND_S = 60

#: Each rank says where it runs, then loops over allreduce (Horovod) until stopped.
LOOP = r"""
import os, time
import torch
import horovod.torch as hvd

hvd.init()
print(f"ready rank {hvd.rank()} pid {os.getpid()}", flush=True)
while True:
    hvd.allreduce(torch.zeros(1000))
    time.sleep(0.05)
"""


def launcher_env(hosts, **extra: str) -> dict[str, str]:
    """The environment of a launcher (or Snakemake) on host a: the test hosts' ssh settings."""
    env = snakemake_env({**hosts.env, **extra})
    env.pop("CLUSTERBENCH_LAUNCHER", None)
    return env


def left_in(hosts, *patterns: str) -> dict[str, list]:
    """What still runs in each namespace whose command line matches one of ``patterns``."""
    found = {}
    for host, name in enumerate(hosts.names):
        procs = [p for pattern in patterns for p in hosts.processes(host, pattern)]
        if procs:
            found[name] = procs
    return found


def wait_until_gone(hosts, *patterns: str) -> dict[str, list]:
    deadline = time.monotonic() + BOUND_S
    while left_in(hosts, *patterns) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left_in(hosts, *patterns)


@pytest.mark.ssh
def test_a_rank_killed_on_one_host_stops_the_other_and_leaves_nothing(ssh_hosts, tmp_path):
    launcher, out, script, pids = start_loop(ssh_hosts, tmp_path)
    try:
        assert left_in(ssh_hosts, str(script)).keys() == {"cb-a", "cb-b"}
        os.kill(pids[1], signal.SIGKILL)
        launcher.wait(timeout=BOUND_S)
        text = out.read_text()
        assert launcher.returncode == 137, text
        assert "rank 1 on cb-b exited with code 137: stopping the other ranks" in text, text
        assert "rank 1 of 2 on host cb-b exited with code 137" in text, text
        assert wait_until_gone(ssh_hosts, str(script), "rank_agent") == {}
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def start_loop(hosts, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path, dict[int, int]]:
    """A launcher on host a running :data:`LOOP` on both hosts, once both ranks are ready:
    (the launcher, its output, the script, rank -> pid)."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--"]
    cmd += ["python", str(script)]
    out = tmp_path / "launcher.out"
    with out.open("w") as fh:
        launcher = subprocess.Popen(
            hosts.netns_exec(0, cmd),
            cwd=tmp_path,
            env=launcher_env(hosts),
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120
    while out.read_text().count("ready rank") < 2:
        if launcher.poll() is not None or time.monotonic() > deadline:
            launcher.kill()
            raise AssertionError(out.read_text())
        time.sleep(0.2)
    text = out.read_text()
    pids = {r: int(text.split(f"ready rank {r} pid ")[1].split()[0]) for r in (0, 1)}
    assert pids[0] in hosts.pids(0) and pids[1] in hosts.pids(1), "a rank is on the wrong host"
    return launcher, out, script, pids


@pytest.mark.ssh
def test_a_killed_launcher_leaves_no_rank_on_either_host(ssh_hosts, tmp_path):
    """SIGKILL to the launcher: nothing of it can stop anything. The launcher's watchdog ends the
    local ssh client, and the agent at the remote end, its connection gone, stops the rank: no
    orphan on host b (ssh itself passes no signal on)."""
    launcher, out, script, pids = start_loop(ssh_hosts, tmp_path)
    try:
        launcher.kill()
        launcher.wait(timeout=30)
        left = wait_until_gone(ssh_hosts, str(script), "rank_agent")
        assert left == {}, (left, out.read_text()[-3000:])
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def tiny_run_config(tmp_path: Path, **run) -> dict:
    cfg = default_config()
    cfg["download"]["cache_dir"] = str(tmp_path / "cache")
    cfg["runs"] = [
        {"name": "ssh-2w", "dataset": "digits", "workers": 2, "nodes": 2, "epochs": 2, **run}
    ]
    cfg["comm"] = {
        "enabled": True,
        "max_bytes": 1 << 18,
        "seconds_per_size": 0.01,
        "warmup_iterations": 1,
        "min_iterations": 5,
    }
    return cfg


def snakemake_on_a(hosts, workdir: Path, *args: str, check=True, timeout=900, **env):
    """Snakemake with the ssh profile, on host a (in its namespace), as a user runs it: the
    hosts file named, and nothing else (the profile selects the ssh scheduler by itself)."""
    cmd = snakemake_cmd(workdir, "--profile", str(REPO / "profiles" / "ssh"), *args)
    env = launcher_env(hosts, **env)
    env.pop("CLUSTERBENCH_SCHEDULER", None)
    return run_snakemake(hosts.netns_exec(0, cmd), REPO, workdir / "results", check, timeout, env)


@pytest.mark.ssh
@pytest.mark.slow
def test_two_ranks_train_and_measure_across_the_hosts_over_the_veth(ssh_hosts, tmp_path):
    """The workflow's 2-worker training and its comm job, one rank on each host: every host's
    rank records the interface it used (its own veth end: the two are named differently), and
    host b's veth carried at least what the comm job's broadcasts sent it (there is no other
    way between the namespaces; Horovod's Gloo bound to lo could not even connect)."""
    workdir = tmp_path / "work"
    write_config(workdir, tiny_run_config(tmp_path))
    before = ssh_hosts.iface_bytes(1)
    loop_before = ssh_hosts.iface_bytes(1, "lo")
    targets = ("results/runs/ssh-2w/run.json", "results/comm/2w-2n-cpu-horovod/comm.json")
    snakemake_on_a(ssh_hosts, workdir, *targets)
    received = ssh_hosts.iface_bytes(1)[0] - before[0]
    loop = sum(ssh_hosts.iface_bytes(1, "lo")) - sum(loop_before)
    info = json.loads((workdir / targets[0]).read_text())
    assert info["world"]["scheduler"] == "ssh"
    assert info["world"]["hosts"] == ["cb-a", "cb-b"]
    ifaces = {h["node"]: h["iface"] for h in info["provenance"]["hosts"]}
    assert ifaces == dict(zip(ssh_hosts.names, ssh_hosts.ifaces, strict=True))
    comm = json.loads((workdir / targets[1]).read_text())
    assert comm["interfaces"] == ifaces and comm["ranks"] == 2
    assert [h["ranks"] for h in comm["provenance"]["hosts"]] == [[0], [1]]
    broadcast = sum(r["bytes"] * r["iterations"] for r in comm["rows"] if r["op"] == "broadcast")
    assert broadcast > 1 << 20  # a meaningful amount
    assert received >= broadcast, (received, broadcast)
    assert loop < broadcast / 100, (loop, broadcast)  # host b's lo carried none of it
    print(f"host b's veth received {received} B (broadcasts alone: {broadcast} B); lo: {loop} B")


@pytest.mark.ssh
@pytest.mark.slow
def test_a_host_that_cannot_be_reached_stops_the_workflow_before_any_job(ssh_hosts, tmp_path):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(f"cb-a\n{ssh_hosts.unreachable}\n")
    workdir = tmp_path / "work"
    write_config(workdir, tiny_run_config(tmp_path))
    started = time.monotonic()
    proc = snakemake_on_a(
        ssh_hosts,
        workdir,
        check=False,
        timeout=300,
        CLUSTERBENCH_HOSTS_FILE=str(hosts_file),
        CLUSTERBENCH_SSH_TIMEOUT="3",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"host {ssh_hosts.unreachable}: ssh: not reachable" in out, out
    assert "host cb-a:" not in out, out  # the other host is ready
    assert "training job(s) are to be submitted: 'ssh-2w'" in out, out
    for word in ("Traceback", "InputFunctionException", "WorkflowError", 'File "'):
        assert word not in out, out
    assert not (workdir / "results").exists(), "a job ran"
    assert time.monotonic() - started < 120


@pytest.mark.ssh
@pytest.mark.slow
def test_sigint_to_snakemake_stops_every_rank_on_every_host(ssh_hosts, tmp_path):
    workdir = tmp_path / "work"
    write_config(workdir, tiny_run_config(tmp_path, epochs=2000, name="ssh-long"))
    cmd = snakemake_cmd(workdir, "--profile", str(REPO / "profiles" / "ssh"))
    cmd.append("results/runs/ssh-long/run.json")
    log = workdir / "results" / "logs" / "train" / "ssh-long.log"
    output = tmp_path / "snakemake.out"
    with output.open("wb") as out:
        proc = subprocess.Popen(
            ssh_hosts.netns_exec(0, cmd),
            cwd=REPO,
            env=launcher_env(ssh_hosts),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=default_sigint,
        )
    try:
        deadline = time.monotonic() + 600
        while "epoch 1:" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.5)
        running = left_in(ssh_hosts, "scripts/train.py")
        assert running.keys() == {"cb-a", "cb-b"}, running  # a rank on each host
        os.kill(proc.pid, signal.SIGINT)  # snakemake alone (ip netns exec became it)
        start = time.monotonic()
        proc.wait(timeout=BOUND_S)
        left = wait_until_gone(ssh_hosts, "scripts/train.py", "rank_agent", "clusterbench.launch")
        took = time.monotonic() - start
        print(f"SIGINT to snakemake: every rank on both hosts gone after {took:.1f} s")
        assert left == {}, (left, output.read_text()[-3000:], log.read_text()[-3000:])
        assert proc.returncode != 0
        assert not (workdir / "results" / "runs" / "ssh-long" / "model.pt").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pids in left_in(ssh_hosts, "scripts/train.py", "rank_agent").values():
            for pid, _ in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.ssh
@pytest.mark.slow
def test_an_elastic_run_goes_on_without_the_host_whose_rank_was_killed(ssh_hosts, tmp_path):
    """Horovod elastic over the hosts file: 2 ranks, one a host; the rank on host b is killed
    after the first epoch, its host is taken out and the run finishes on host a alone."""
    from test_train import make_dataset, read_metrics, run_config

    data = make_dataset(tmp_path / "data")
    run = run_config(workers=2, min_workers=1, max_workers=2, epochs=3, batch_size=24)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "clusterbench.launch", "--np", "2", "--min-np", "1"]
    cmd += ["--max-np", "2", "--", "python", str(REPO / "scripts" / "train.py")]
    cmd += ["--data-dir", str(data), "--run", json.dumps(run), "--out-dir", str(out)]
    env = launcher_env(
        ssh_hosts,
        CLUSTERBENCH_GLOO_TIMEOUT="10",
        CLUSTERBENCH_CHECKPOINTS=json.dumps({"elastic_commit_steps": 3}),
    )
    launcher = subprocess.Popen(
        ssh_hosts.netns_exec(0, cmd),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        metrics = out / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.stdout.read()
            time.sleep(0.2)
        remote = [pid for pid, _ in ssh_hosts.processes(1, f"^python {REPO}/scripts/train.py")]
        assert len(remote) == 1, remote
        os.kill(remote[0], signal.SIGKILL)
        logs, _ = launcher.communicate(timeout=420)
        assert launcher.returncode == 0, logs[-4000:]
        # (elastic ranks are numbered by Horovod's driver: the one on host b may be rank 0)
        assert "on cb-b exited with code 137: Horovod elastic goes on without cb-b" in logs, logs
        sizes = [m["world_size"] for m in read_metrics(out)]
        assert sizes[0] == 2 and sizes[-1] == 1 and len(sizes) == 3, sizes
        info = json.loads((out / "run.json").read_text())
        assert info["world"]["hosts"] == ["cb-a"] and info["world"]["scheduler"] == "ssh"
        assert wait_until_gone(ssh_hosts, "scripts/train.py", "rank_agent") == {}
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_the_plan_names_the_scheduler_where_it_is_not_the_executors_own():
    from clusterbench.plan import Plan, format_plan

    plan = Plan(jobs=[], skipped={})
    assert format_plan(plan, "local", "ssh").startswith(
        "clusterbench plan (local executor, ssh scheduler):"
    )
    assert format_plan(plan, "slurm", "slurm").startswith("clusterbench plan (slurm executor):")


@pytest.mark.ssh
def test_a_host_that_drops_off_the_network_fails_the_run(ssh_hosts, tmp_path):
    """Host b's link goes down while the ranks train (a host that dies sends nothing more): its
    ssh gives up (ServerAlive) and the launcher stops the run, blaming cb-b; once the link is
    back, nothing of the run is left on host b either."""
    launcher, out, script, pids = start_loop(ssh_hosts, tmp_path)
    link = ["ip", "-n", ssh_hosts.namespaces[1], "link", "set", ssh_hosts.ifaces[1]]
    try:
        subprocess.run([*link, "down"], check=True)
        launcher.wait(timeout=BOUND_S + 30)
        text = out.read_text()
        assert launcher.returncode != 0, text
        assert "on host cb-b exited with code 255" in text or "on cb-b exited with code 255" in (
            text
        ), text
    finally:
        subprocess.run([*link, "up"], check=True)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    left = wait_until_gone(ssh_hosts, str(script), "rank_agent")
    assert left == {}, left
