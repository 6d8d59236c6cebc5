"""Virtual environments of their own, for the tests that need other packages than make test's
``.venv``: the oldest releases of pyproject.toml's ranges (tests/test_versions.py), and an
install without Horovod (tests/test_without_horovod.py).

Each is a real venv (``python -m venv``). What it is made for is installed into it by pip (or
left out); every other package of ``.venv`` (torch's gigabytes among them) is linked in, one
symbolic link per top-level entry of ``.venv``'s site-packages, never copied. Nothing is ever
installed over a link: pip runs before any link exists, so it cannot remove a file of ``.venv``
through one.

A venv is made once per ``make test`` and shared by its pytest-xdist workers: under the parent
of the session's base temporary folder, one builder at a time (a lock file), the others waiting
for the ``.complete`` marker.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

#: .venv's site-packages: what a venv of its own links from.
MAIN_SITE = Path(sysconfig.get_paths()["purelib"])


def dist_name(entry: str) -> str:
    """The normalised distribution (or top-level package) name of a site-packages entry:
    ``horovod``, ``horovod-0.28.1.dist-info``, ``snakemake_interface_common`` ->
    ``horovod``, ``horovod``, ``snakemake-interface-common``."""
    stem = re.sub(r"(\.dist-info|\.egg-info|\.pth|\.py)$", "", entry)
    stem = re.sub(r"-\d[^-]*$", "", stem)  # the version of a .dist-info
    return re.sub(r"[-_.]+", "-", stem).lower()


def shared(base: Path, name: str, build, key: Iterable[str] = ()) -> Path:
    """The venv ``name`` under ``base``, made by ``build(path)`` by the first worker to ask;
    ``key`` (what it is made of) names it too, so that a venv of other releases is another."""
    base.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\n".join([sys.version, str(MAIN_SITE), *key]).encode())
    name = f"{name}-{digest.hexdigest()[:12]}"
    path = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".complete").exists():
            shutil.rmtree(path, ignore_errors=True)
            build(path)
            (path / ".complete").write_text("")
    return path


def create(path: Path, requirements: Iterable[str] = ()) -> Path:
    """A new venv at ``path`` with ``requirements`` installed by pip (from the package index);
    its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    requirements = list(requirements)
    if requirements:
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             *requirements],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(requirements)}: {proc.stderr[-3000:]}")
    return python


def site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def link_rest(python: Path, leave_out: Iterable[str] = (), sources: Iterable[Path] = ()) -> None:
    """Link every entry of the site-packages ``sources`` (then ``.venv``'s) into ``python``'s
    venv, except those of a distribution it has already (pip put it there, or an earlier
    source) or of one in ``leave_out``."""
    site = site_packages(python)
    skip = {dist_name(e.name) for e in site.iterdir()} | {dist_name(n) for n in leave_out}
    for source in [*sources, MAIN_SITE]:
        linked = set()
        for entry in source.iterdir():
            name = dist_name(entry.name)
            if entry.name == "__pycache__" or name in skip or (site / entry.name).exists():
                continue
            os.symlink(entry.resolve(), site / entry.name)
            linked.add(name)
        skip |= linked


def without(base: Path, name: str, leave_out: Iterable[str], sites: Iterable[Path] = ()) -> Path:
    """A venv of ``.venv``'s packages but ``leave_out``; with ``sites`` (pythons of other
    venvs), their packages first; its python."""
    leave_out, sites = list(leave_out), list(sites)

    def build(path: Path) -> None:
        link_rest(create(path), leave_out, [site_packages(p) for p in sites])

    key = [*leave_out, *map(str, sites)]
    return shared(base, name, build, key) / "bin" / "python"


def with_releases(base: Path, name: str, requirements: Iterable[str]) -> Path:
    """A venv with ``requirements`` installed from the package index, and the rest of
    ``.venv``'s packages; its python."""
    requirements = list(requirements)

    def build(path: Path) -> None:
        link_rest(create(path, requirements))

    return shared(base, name, build, requirements) / "bin" / "python"


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.venvs without-horovod PATH``: a venv at PATH with every package of
    ``.venv`` but Horovod (``make check-ddp`` runs the DDP tier in it)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("kind", choices=["without-horovod"])
    parser.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    path = args.path.resolve()
    if not (path / ".complete").exists():
        shutil.rmtree(path, ignore_errors=True)
        link_rest(create(path), ["horovod"])
        (path / ".complete").write_text("")
    print(path / "bin" / "python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
