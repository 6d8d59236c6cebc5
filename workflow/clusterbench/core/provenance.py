"""Where and with what a result was produced: versions, host, CPU, GPU, git state, date.

Every probe degrades to a placeholder instead of failing: no git (or not a repository) gives
``"unknown"``, a missing package gives ``"not installed"``, no GPU gives an empty list and no
driver version (None), GPUs whose driver version cannot be read give ``"unknown"``. torch is
never imported here (:func:`gpu_info` uses it only if the process already has).

Training records its provenance as seen where it ran: every rank calls :func:`rank_facts`, the
runtime gathers them (``allgather_object``) and rank 0 writes :func:`merge_ranks` of them to
``run.json``: one entry per host (the ranks on it, its CPU, GPUs and driver), the code's git
commit and the package versions. The report (:func:`collect`) describes only its own host.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

UNKNOWN = "unknown"
NOT_INSTALLED = "not installed"

#: Distributions whose versions the report shows (display name -> distribution name).
PACKAGES = {
    "torch": "torch",
    "horovod": "horovod",
    "snakemake": "snakemake",
    "numpy": "numpy",
    "pandas": "pandas",
    "matplotlib": "matplotlib",
    "seaborn": "seaborn",
}

#: The repository this package lives in (the workflow repository when installed editable).
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``; that of the
    module itself where this process has imported it (torch's ``2.13.0+cu130`` names its build,
    which the distribution's ``2.13.0`` does not)."""
    module = sys.modules.get(dist)
    if isinstance(getattr(module, "__version__", None), str):
        return str(module.__version__)
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of ``cmd`` stripped, or None when it cannot be run or fails."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_info(path: str | os.PathLike[str] = PACKAGE_DIR) -> dict[str, Any]:
    """``{"commit": sha | "unknown", "dirty": bool | None}`` for the repository containing ``path``.

    ``dirty`` is True when tracked files differ from the commit (untracked files such as results
    do not count); None when the state is unknown (no git, not a repository, no commit yet).
    """
    if shutil.which("git") is None:
        return {"commit": UNKNOWN, "dirty": None}
    cwd = Path(path)
    commit = _run(["git", "rev-parse", "--verify", "HEAD"], cwd=cwd)
    if not commit:
        return {"commit": UNKNOWN, "dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def describe_commit(git: dict[str, Any]) -> str:
    """``git_info()`` as one string: ``<sha>``, ``<sha> (dirty)`` or ``unknown``."""
    return f"{git['commit']} (dirty)" if git.get("dirty") else str(git["commit"])


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux) or :mod:`platform`; ``"unknown"`` if none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or UNKNOWN


def cpu_cores() -> dict[str, int | None]:
    """Logical and (where psutil can tell) physical core counts."""
    physical = None
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except ImportError:
        pass
    return {"logical": os.cpu_count(), "physical": physical}


#: ``nvidia-smi`` query of every visible GPU's name and driver version, one CSV line per GPU.
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
#: The kernel module's version file: ``NVRM version: NVIDIA UNIX [Open ]Kernel Module ...``.
PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
#: The driver's per-GPU directories (``<bus id>/information`` holds ``Model: <name>``).
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_VERSION = re.compile(r"^\d+(?:\.\d+)+$")


def parse_nvidia_smi(text: str) -> tuple[list[str], str | None]:
    """``(GPU names, driver version)`` from the output of :data:`NVIDIA_SMI_QUERY`.

    One ``name, driver_version`` line per GPU; the driver is None when there is no GPU line,
    ``"unknown"`` when no line has a usable version, and the distinct versions joined by ``/``
    should GPUs ever report different ones.
    """
    names, drivers = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, driver = line.rpartition(",")
        if not sep:  # no driver column: the whole line is the name
            name, driver = driver, ""
        names.append(name.strip())
        driver = driver.strip()
        if driver and not driver.startswith("[") and driver.upper() != "N/A":
            drivers.append(driver)
    if not names:
        return [], None
    return names, "/".join(dict.fromkeys(drivers)) or UNKNOWN


def parse_proc_driver_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version, e.g. ``535.104.05`` from
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...`` or
    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...``;
    None when the text holds none."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() != "NVRM version":
            continue
        _, module, rest = value.partition("Kernel Module")
        for token in (rest if module else value).split():
            if _VERSION.match(token):
                return token
    return None


def gpu_info() -> dict[str, Any]:
    """``{"gpus": [names], "gpu_driver": version | "unknown" | None}`` of this host.

    Asks ``nvidia-smi`` once, else the driver's /proc entries, else torch for the names if it is
    already imported (importing torch just for this would cost seconds; no driver means no CUDA
    device anyway). No GPU: ``{"gpus": [], "gpu_driver": None}``.
    """
    if shutil.which("nvidia-smi"):
        out = _run(NVIDIA_SMI_QUERY)
        if out is not None:
            names, driver = parse_nvidia_smi(out)
            if names:
                return {
                    "gpus": names,
                    "gpu_driver": _proc_driver() if driver == UNKNOWN else driver,
                }
    names = []
    for info in sorted(PROC_GPUS.glob("*/information")):
        try:
            text = info.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model":
                names.append(value.strip())
    if not names:
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available():
                names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:  # a broken CUDA set-up is reported as no GPU, not as a failure
            names = []
    if not names:
        return {"gpus": [], "gpu_driver": None}
    return {"gpus": names, "gpu_driver": _proc_driver()}


def _proc_driver() -> str:
    """The driver version in :data:`PROC_DRIVER_VERSION`, or ``"unknown"``."""
    try:
        text = PROC_DRIVER_VERSION.read_text(errors="replace")
    except OSError:
        return UNKNOWN
    return parse_proc_driver_version(text) or UNKNOWN


def nccl_version() -> str | None:
    """The NCCL version of the torch this process has imported (``2.29.7``; torch is never
    imported here); None without torch or without NCCL (a CPU-only build)."""
    torch = sys.modules.get("torch")
    try:
        version = torch.cuda.nccl.version() if torch is not None else None
    except Exception:  # a build without NCCL raises; provenance never fails
        return None
    if isinstance(version, tuple):
        return ".".join(map(str, version))
    return None if version is None else str(version)


def versions() -> dict[str, str]:
    """Python's and the key packages' versions (no subprocess, no import of the packages), and
    ``nccl`` where this process has imported a torch with NCCL (the training's ranks)."""
    found = {
        "python": platform.python_version(),
        **{name: package_version(dist) for name, dist in PACKAGES.items()},
    }
    nccl = nccl_version()
    if nccl is not None:
        found["nccl"] = nccl
    return found


def host_facts() -> dict[str, Any]:
    """What this host is: name, platform, CPU model and cores, GPUs and their driver."""
    return {
        "host": socket.gethostname() or UNKNOWN,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_cores": cpu_cores(),
        **gpu_info(),
    }


def now() -> str:
    """The local time with its UTC offset, to the second (ISO 8601)."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def collect(repo_dir: str | os.PathLike[str] = PACKAGE_DIR) -> dict[str, Any]:
    """All provenance fields of this process and host, as a JSON-serialisable dict."""
    return {
        "date": now(),
        **host_facts(),
        "git": git_info(repo_dir),
        "versions": versions(),
    }


# --------------------------------------------------------------------------------------------
# Training: every rank's facts, gathered, one entry per host

#: The fields of a host entry in ``run.json``'s ``provenance.hosts`` (plus ``ranks``).
HOST_FIELDS = (
    "host",
    "node",
    "platform",
    "cpu_model",
    "cpu_cores",
    "gpus",
    "gpu_driver",
    "iface",
)

#: The variables that name the network interface the ranks' libraries open their sockets on
#: (clusterbench.launch sets all three to the interface it chose for the rank's host).
IFACE_VARS = ("HOROVOD_GLOO_IFACE", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def rank_iface(env: Mapping[str, str] = os.environ) -> str | None:
    """The network interface this rank's collectives use, as its environment names it
    (:data:`IFACE_VARS`): the one name they agree on, ``VAR=name`` for each where they differ
    (set by hand), None when none is set (a rank not started by clusterbench.launch)."""
    named = {var: env[var] for var in IFACE_VARS if env.get(var)}
    if not named:
        return None
    if len(set(named.values())) == 1:
        return next(iter(named.values()))
    return " ".join(f"{var}={name}" for var, name in named.items())


def rank_facts(
    rank: int,
    node: str | None = None,
    with_git: bool = True,
    repo_dir: str | os.PathLike[str] = PACKAGE_DIR,
) -> dict[str, Any]:
    """One rank's facts for :func:`merge_ranks`: its host (:func:`host_facts`), ``node`` (the
    scheduler's name for it; the host name when None), the network interface its collectives
    use (:func:`rank_iface`), its package versions and, where ``with_git`` (one rank per node
    is enough), the git state of the code it runs."""
    facts = {"rank": rank, **host_facts(), "versions": versions(), "iface": rank_iface()}
    facts["node"] = node or facts["host"]
    facts["git"] = git_info(repo_dir) if with_git else None
    return facts


def _differences(ref: dict[str, Any] | None, other: dict[str, Any] | None) -> dict[str, Any]:
    if not ref or not other:
        return {}
    return {k: other.get(k) for k in sorted({*ref, *other}) if ref.get(k) != other.get(k)}


def merge_ranks(facts: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``provenance`` of ``run.json`` from every rank's :func:`rank_facts`.

    ``{"hosts": [{host, node, platform, cpu_model, cpu_cores, gpus, gpu_driver, ranks}, ...],
    "git": {commit, dirty}, "versions": {...}}``: one host entry per (node, host) pair, in the
    order of their first rank, with its ranks sorted; git and versions are rank 0's (the lowest
    rank's). A host whose ranks run other versions or another commit than rank 0 gets
    ``"differs_from_rank0": {"<package>": version, "git": {...}}``.
    """
    if not facts:
        raise ValueError("no rank facts to merge")
    facts = sorted(facts, key=lambda f: f["rank"])
    first = facts[0]
    git = next((f["git"] for f in facts if f.get("git")), None)
    git = git or {"commit": UNKNOWN, "dirty": None}
    hosts: dict[tuple[str, str], dict[str, Any]] = {}
    for f in facts:
        entry = hosts.setdefault(
            (str(f.get("node")), str(f.get("host"))),
            {**{k: f.get(k) for k in HOST_FIELDS}, "ranks": []},
        )
        entry["ranks"].append(int(f["rank"]))
        differs = _differences(first.get("versions"), f.get("versions"))
        if _differences(git, f.get("git")):
            differs["git"] = f["git"]
        if differs:
            entry.setdefault("differs_from_rank0", {}).update(differs)
    return {"hosts": list(hosts.values()), "git": git, "versions": dict(first["versions"])}
