"""Where and with what a result was produced: versions, host, CPU, GPU, git state, date.

Every probe degrades to a placeholder instead of failing: no git (or not a repository) gives
``"unknown"``, a missing package gives ``"not installed"``, no GPU gives an empty list. torch is
never imported here (:func:`gpu_names` uses it only if the process already has).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
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
PACKAGE_DIR = Path(__file__).resolve().parent


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``."""
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


def gpu_names() -> list[str]:
    """Names of the visible NVIDIA GPUs; empty when there are none.

    Asks ``nvidia-smi``, else the driver's /proc entries, else torch if it is already imported
    (importing torch just for this would cost seconds; no driver means no CUDA device anyway).
    """
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        if out is not None:
            return [line.strip() for line in out.splitlines() if line.strip()]
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        for line in info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model":
                names.append(value.strip())
    if names:
        return names
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # a broken CUDA set-up is reported as no GPU, not as a failed report
        pass
    return []


def versions() -> dict[str, str]:
    """Python's and the key packages' versions (no subprocess, no import of the packages)."""
    return {
        "python": platform.python_version(),
        **{name: package_version(dist) for name, dist in PACKAGES.items()},
    }


def collect(repo_dir: str | os.PathLike[str] = PACKAGE_DIR) -> dict[str, Any]:
    """All provenance fields of this process and host, as a JSON-serialisable dict."""
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": socket.gethostname() or UNKNOWN,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_cores": cpu_cores(),
        "gpus": gpu_names(),
        "git": git_info(repo_dir),
        "versions": versions(),
    }
