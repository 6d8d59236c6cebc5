"""A stage's code as one input file of its jobs: its code stamp.

Editing a stage's code reruns the stage (and what follows), so its jobs take the code as input.
Listed file by file, the training loop alone adds a dozen inputs to every train job, and
Snakemake checks every input of every job for a job that makes it: at 5,000 runs that was most
of a no-op dry run (``make bench``'s workflow cost). So each stage's code is one input: the
stamp ``.snakemake/clusterbench/code/<name>.sha256`` in the working directory, a line per file
(sha256, path in the checkout), written while the Snakefile is parsed, and only when a line
changed. The stamp then takes the newest file's modification time: an edit makes it newer than
the stage's outputs and of another content, and so reruns the stage exactly as the files
themselves did as inputs; restoring a file with its old time (and content) makes nothing stale.

Your own model's module is code too: its files (the module's own and its packages'
``__init__.py``, found without importing them: :func:`clusterbench.models.custom.module_files`)
are the stamp ``model-<module>.sha256``, an input of the train jobs of the runs that train it
(:func:`model_stamp`). Modules it imports in turn are not (as a stage's shared modules are not).

The shared packages a stage imports (``core``, ``config``, ``models``, ``formats``, ``bn``,
``backends``, ``data``, ``launch``, ``pipeline``, ``records``) are in no stamp: most are imported
by several stages, and watching them would rerun every stage for any edit. After editing one,
the user forces what it affects (``snakemake --forcerun train``); docs/ARCHITECTURE.md, "Code
stamps", says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from clusterbench.core import atomic, integrity

#: Where the stamps are, in the working directory (Snakemake's own folder, as the checksums').
STAMPS = Path(".snakemake", "clusterbench", "code")


def stage_files(checkout: Path, stage: str) -> list[Path]:
    """The stage's code: the module ``workflow/clusterbench/<stage>.py``, or every module of
    the package ``workflow/clusterbench/<stage>/`` (sub-packages included: a report page is
    code of the report). The shared modules it imports are not (they would make every stage
    rerun for any change)."""
    package = Path(checkout) / "workflow" / "clusterbench" / stage
    if package.is_dir():
        return sorted(package.rglob("*.py"))
    return [package.with_suffix(".py")]


Digest = Callable[[Path], str]


def stamp_text(files: Iterable[Path], root: Path, sha256: Digest = integrity.sha256_of) -> str:
    """A line per file: its sha256 and its path under ``root`` (absolute, outside it: your own
    model's module)."""
    return "".join(f"{sha256(Path(p))}  {shown(Path(p), root)}\n" for p in files)


def shown(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


def model_stamp(model: str) -> Path:
    """Where the code stamp of your own model ``package.module:callable`` is: one per module."""
    return STAMPS / f"model-{model.partition(':')[0]}.sha256"


def write_stamp(
    stamp: Path, files: list[Path], root: Path, sha256: Digest = integrity.sha256_of
) -> bool:
    """Write ``files``' stamp at ``stamp`` if its text changed, with the newest file's
    modification time; whether it was written. ``sha256``: the workflow passes its digest
    cache (:class:`clusterbench.core.integrity.DigestCache`), so that an unchanged file is not read
    again at every parse."""
    text = stamp_text(files, root, sha256)
    try:
        if stamp.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    stamp.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(stamp, text)
    newest = max(os.stat(path).st_mtime_ns for path in files)
    os.utime(stamp, ns=(newest, newest))
    return True
