"""The project's dependencies, read from their one declaration: pyproject.toml.

    python tools/deps.py pin torch        the pinned version of one package (for tools/setup.sh):
                                          its == in pyproject.toml (an extra's too), or for a
                                          range, the newest tested (tools/constraints.txt)
    python tools/deps.py oldest snakemake the oldest release of a package's range (>=)
    python tools/deps.py conda            workflow/envs/clusterbench.yaml, as it must read
    python tools/deps.py conda --write    regenerate that file

Standard library only (it runs before the virtual environment exists).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
CONDA_ENV = ROOT / "workflow" / "envs" / "clusterbench.yaml"
CONSTRAINTS = ROOT / "tools" / "constraints.txt"
#: Built after the environment is created (clusterbench.post-deploy.sh), not installed by pip.
BUILT_SEPARATELY = ("horovod",)
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")

CONDA_HEADER = """\
# Software of every rule, for sites that deploy with conda:
#   snakemake --profile ... --software-deployment-method conda
# GENERATED from pyproject.toml by `python tools/deps.py conda --write`: do not edit by hand
# (a test checks the two agree). The default (and tested) deployment is the virtual environment
# of tools/setup.sh, from the same list. Horovod is not in it: 0.28.1 needs a C++17 patch to
# build against torch 2.13, so clusterbench.post-deploy.sh builds it (cached wheel).
channels:
  - conda-forge
  - nodefaults
dependencies:
  - python={python}
  - pip
  - cmake>=3.13
  - make
  - cxx-compiler
  - pip:
"""


def dependencies() -> list[str]:
    """The requirement strings of ``[project] dependencies``, in their order."""
    with open(PYPROJECT, "rb") as fh:
        return list(tomllib.load(fh)["project"]["dependencies"])


def extras() -> dict[str, list[str]]:
    """``[project.optional-dependencies]``: extra -> its requirement strings."""
    with open(PYPROJECT, "rb") as fh:
        return dict(tomllib.load(fh)["project"].get("optional-dependencies", {}))


def constraints() -> list[str]:
    """tools/constraints.txt's requirement lines (the newest tested release of each range)."""
    lines = CONSTRAINTS.read_text().splitlines() if CONSTRAINTS.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def requirement(package: str) -> str:
    """``package``'s requirement string in pyproject.toml (dependencies or an extra)."""
    every = dependencies() + [r for reqs in extras().values() for r in reqs]
    for req in every:
        if name_of(req) == package.lower():
            return req
    raise SystemExit(f"{PYPROJECT}: no dependency named {package!r}")


def name_of(requirement: str) -> str:
    match = _NAME.match(requirement)
    if not match:
        raise SystemExit(f"{PYPROJECT}: cannot read a package name from {requirement!r}")
    return match.group(1).lower()


def pin(package: str) -> str:
    """The release of ``package`` make setup installs: its ``==`` in pyproject.toml, or for a
    range the ``==`` of tools/constraints.txt; exits naming the file otherwise."""
    req = requirement(package)
    _, sep, version = req.partition("==")
    if sep and version.strip():
        return version.strip()
    for line in constraints():
        if name_of(line) == package.lower() and "==" in line:
            return line.partition("==")[2].strip()
    raise SystemExit(f"{PYPROJECT}: {req!r} is a range with no == in {CONSTRAINTS}")


def oldest(package: str) -> str:
    """The oldest release of ``package``'s range (its ``>=``) in pyproject.toml."""
    req = requirement(package)
    for part in req[len(name_of(req)) :].split(","):
        if part.strip().startswith(">="):
            return part.strip()[2:].strip()
    raise SystemExit(f"{PYPROJECT}: {req!r} states no oldest release (>=)")


def python_version() -> str:
    """The lowest Python of ``requires-python`` (``>=3.11`` -> ``3.11``)."""
    with open(PYPROJECT, "rb") as fh:
        spec = tomllib.load(fh)["project"]["requires-python"]
    return spec.removeprefix(">=").strip()


def conda_env() -> str:
    lines = [CONDA_HEADER.format(python=python_version())]
    for requirement in dependencies():
        if name_of(requirement) not in BUILT_SEPARATELY:
            lines.append(f'      - "{requirement}"\n')
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("pin", help="print a package's pinned version").add_argument("package")
    sub.add_parser("oldest", help="print the oldest release of a range").add_argument("package")
    conda = sub.add_parser("conda", help="print (or --write) the conda environment file")
    conda.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "pin":
        print(pin(args.package))
    elif args.command == "oldest":
        print(oldest(args.package))
    elif args.write:
        tmp = CONDA_ENV.with_suffix(".yaml.tmp")
        tmp.write_text(conda_env(), encoding="utf-8")
        tmp.replace(CONDA_ENV)
    else:
        sys.stdout.write(conda_env())
    return 0


if __name__ == "__main__":
    sys.exit(main())
