# Where clusterbench's code is: CHECKOUT, a local folder, whether the workflow runs from a
# checkout or from a git source (a module whose snakefile is gitfile(...), github(...) or
# gitlab(...) at a tag: docs/running.md). The jobs run its scripts and its package, and its
# stage modules are code inputs (clusterbench.pipeline.code): local files in every case.
# The standard library only: nothing of clusterbench can be imported before this has run.
import os
from pathlib import Path

from snakemake.exceptions import WorkflowError


def _uri(source):
    """A Snakemake source file's path or URI (Snakemake 9.x added ``secret_free``)."""
    try:
        return source.get_path_or_uri(secret_free=True)
    except TypeError:
        return source.get_path_or_uri()


def _git_source(basedir):
    """(repository folder, ref, this folder's path in it) of a folder of a git source:
    ``gitfile(...)`` (a local repository) or ``github(...)``/``gitlab(...)`` (the clone
    Snakemake keeps in its cache)."""
    if hasattr(basedir, "repo_path"):
        return Path(basedir.repo_path), basedir.ref, basedir.path
    hosted = getattr(basedir, "hosted_repo", None)
    if hosted is not None:
        return Path(hosted.repo.git_dir), basedir.ref, basedir.path
    raise WorkflowError(
        f"clusterbench's rules are read from {_uri(basedir)}: clusterbench runs from a "
        "local checkout or from a git source (a module whose snakefile is gitfile(...), "
        "github(...) or gitlab(...) at a tag); see docs/running.md"
    )


def _git(repo, *args):
    import subprocess

    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        said = getattr(exc, "stderr", b"") or str(exc).encode()
        raise WorkflowError(
            f"clusterbench's code in {repo}: git {args[0]} failed: "
            f"{said.decode(errors='replace').strip()}"
        ) from None


def _sync(dest, archive):
    """Make ``dest`` hold exactly the files of the tar ``archive`` (bytes). A file whose
    content and mode are unchanged is left as it is, its time included: a new tag makes stale
    only the stages whose code changed, as an edit of a checkout does. A changed file is
    written beside and renamed over."""
    import io
    import tarfile

    kept = set()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            target = dest / member.name
            if not member.isfile() or ".." in Path(member.name).parts:
                continue
            data = tar.extractfile(member).read()
            kept.add(target)
            mode = member.mode & 0o777
            same = target.is_file() and (target.stat().st_mode & 0o777) == mode
            if same and target.read_bytes() == data:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            made = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            made.write_bytes(data)
            os.chmod(made, mode)
            os.replace(made, target)
    for path in list(dest.rglob("*")):
        if path.is_file() and path not in kept and path.name != ".complete":
            path.unlink()


def _local_copy(basedir):
    """The tree ``basedir`` is a folder of (the checkout: its parent), at its ref, as a local
    folder: ``.snakemake/clusterbench/source`` in the working directory, brought to that
    commit at every parse (:func:`_sync`), its commit in ``.complete``."""
    repo, ref, path = _git_source(basedir)
    tree = os.path.dirname(path.strip("/"))
    commit = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()
    dest = Path(".snakemake", "clusterbench", "source").resolve()
    marker = dest / ".complete"
    if marker.is_file() and marker.read_text().split()[-1:] == [commit]:
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    _sync(
        dest,
        _git(repo, "archive", "--format=tar", f"{commit}:{tree}" if tree else commit),
    )
    marker.write_text(f"{ref} {commit}\n")
    return dest


def _checkout(basedir):
    """The clusterbench checkout this file is part of, as a local folder: its parent folder
    (never ``workflow.basedir``, the folder of the *main* Snakefile: the including workflow's
    in a module). A local path as it is; a git source as its local copy (:func:`_local_copy`),
    which a cluster job's Snakemake finds in ``CLUSTERBENCH_HOME`` (set by the workflow for
    its jobs: clusterbench.pipeline.Pipeline.environment)."""
    if type(basedir).__name__ == "LocalSourceFile":
        return Path(_uri(basedir)).resolve().parent
    home = os.environ.get("CLUSTERBENCH_HOME")
    if workflow.remote_exec and home and (Path(home) / ".complete").is_file():
        return Path(home)
    return _local_copy(basedir)


#: The clusterbench checkout: local files (scripts and stage modules are inputs).
CHECKOUT = _checkout(workflow.current_basedir)
