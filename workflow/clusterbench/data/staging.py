"""Node-local staging (``staging: {dir: ...}``): before training, the run's preprocessed dataset
is copied to each node's own storage, and the ranks read it from there (the seeds' ImageNet
workflow synced its data to each GPU node's local disk first).

* **Where.** ``dir`` with its environment variables (``$TMPDIR``) and ``~`` expanded on the
  node, when the run starts; the copy is ``<dir>/<dataset>-<tag>/``, ``tag`` the start of the
  sha256 of the dataset's ``meta.json``: a dataset preprocessed again is staged anew.
* **One rank per node copies.** The node's ranks take an exclusive lock (``flock`` on
  ``<dir>/.<dataset>-<tag>.lock``) in turn: the first does the work, the others find it done.
  A lock is released by the kernel when its holder ends, however it ends: no rank waits for
  one that died.
* **Verified.** Each file is hashed as it is copied and checked against what preprocessing
  recorded (``meta.json``'s arrays and index: sizes and sha256). An image folder's images are
  copied from where its index reads them (a folder or archive read in place, or its extracted
  copy: :mod:`clusterbench.data.stage_files`), each checked against its recorded sha256 (an
  extracted copy's) or its recorded size and modification time (read in place), its sha256
  kept for a later run's verification;
  the copy is written to ``<...>.partial-<pid>`` and renamed into place when complete, with a
  marker (``.staged.json``) recording when it was verified. A large file whose record has the
  sha256 of each of its blocks (:func:`clusterbench.core.integrity.record_with_blocks`) is copied
  by the kernel (``copy_file_range``), block by block, and each block of the copy is hashed
  on its own core as soon as it is written: one file's sha256 is a single stream, which on
  one core runs slower than a copy.
* **Kept.** The copy stays for later runs on the node. The first rank of a later run verifies
  it again (sizes and sha256, every file) and uses it if intact, else copies it again; the
  other ranks of the same run, which started before that verification, check the sizes only.
* **Refused before training.** A ``dir`` that cannot be made or written, or whose file system
  has less free space than the dataset needs (``shutil.disk_usage``), stops the rank with a
  :class:`StagingError` naming the path and the bytes needed. A rank whose copy fails leaves
  a note (``<dir>/<dataset>-<tag>.failed.json``) that the node's ranks waiting for the lock
  read and stop with: every rank of the node stops with the message.

Staging changes no result: it is no rerun trigger (rules/train.smk passes it outside the
run's slice).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import itertools
import json
import mmap
import os
import shutil
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.config.storage import read_meta, storage_of
from clusterbench.core import integrity
from clusterbench.core.atomic import write_json
from clusterbench.core.paths import PathError, expand
from clusterbench.data import DataError
from clusterbench.data.loading import gib

#: Bytes read and written at a time.
CHUNK = 4 << 20
#: The marker of a complete copy, inside it.
MARKER = ".staged.json"


class StagingError(DataError):
    """The node-local copy cannot be made; the message names the path and the bytes."""


@dataclass(frozen=True)
class Staged:
    """Where the node's copy is (``data_dir``) and what this rank did (``facts``: ``node``,
    ``dir``, ``bytes`` copied, ``seconds``, ``action``: copied, verified or reused)."""

    data_dir: Path
    facts: dict[str, Any]


def expand_dir(setting: str, node: str) -> Path:
    """``staging.dir`` with its environment variables and ``~`` expanded here; a variable this
    node does not set is an error naming it."""
    try:
        expanded = expand(setting, "staging.dir", where=f"node {node}")
    except PathError as exc:
        raise StagingError(str(exc)) from None
    return Path(expanded).absolute()


def recorded_files(data_dir: Path, meta: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every file of the preprocessed ``data_dir`` (relative name -> ``{size, sha256}``), as
    preprocessing recorded it (an image folder's: its index; the images: :func:`images_of`);
    ``meta.json``'s own record is taken now."""
    files = dict(meta.get("files") or {})
    files["meta.json"] = integrity.record(data_dir / "meta.json")
    return files


def images_of(data_dir: Path, meta: Mapping[str, Any]) -> Any:
    """An image folder's images to stage (:func:`clusterbench.data.stage_files.plan`), or None
    for arrays."""
    if storage_of(meta) != "files":
        return None
    from clusterbench.data import stage_files
    from clusterbench.data.folder import read_index

    return stage_files.plan(data_dir, read_index(data_dir, meta))


def stage(data_dir: Path, setting: str, dataset: str, started: float, node: str) -> Staged:
    """Make (or find) this node's copy of ``data_dir`` under ``setting`` (module docstring).
    ``started``: when this rank's process started (``time.time()``)."""
    began = time.perf_counter()
    base = expand_dir(setting, node)
    meta_path = data_dir / "meta.json"
    meta = read_meta(data_dir)
    files = recorded_files(data_dir, meta)
    images = images_of(data_dir, meta)
    need = sum(int(r["size"]) for r in files.values()) + (images.need if images else 0)
    target = base / f"{dataset}-{integrity.sha256_of(meta_path)[:16]}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        lock = open(base / f".{target.name}.lock", "a")  # noqa: SIM115 (held until the end)
    except OSError as exc:
        raise StagingError(
            f"staging.dir {base} on node {node} cannot be written ({exc.strerror or exc}): "
            f"{need:,} bytes ({gib(need)}) of dataset {dataset!r} are to be copied there"
        ) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        action = under_lock(data_dir, target, files, need, started, node, images)
    facts = {
        "node": node,
        "dir": str(target),
        "bytes": need if action == "copied" else 0,
        "seconds": round(time.perf_counter() - began, 3),
        "action": action,
    }
    return Staged(target, facts)


def under_lock(
    data_dir: Path,
    target: Path,
    files: dict[str, dict[str, Any]],
    need: int,
    started: float,
    node: str,
    images: Any = None,
) -> str:
    """The work of the rank holding the node's lock: what it did (copied, verified, reused)."""
    from clusterbench.data import stage_files

    note = _read(target.with_name(target.name + ".failed.json"))
    if note is not None and note.get("time", 0) >= started:
        raise StagingError(f"{note['message']} (another rank of node {node} tried first)")
    marker = _read(target / MARKER)
    if marker is not None and marker.get("files") == files:
        if marker.get("verified", 0) >= started and not size_problems(target, files):
            return "reused"  # verified by a rank of this run, after this one started
        found = verify(target, files)
        if images is not None and not found:
            found = stage_files.verify(images, target, marker.get("images") or {}, threads())
        if not found:
            write_json(target / MARKER, {**marker, "verified": time.time()})
            return "verified"
        print(f"train: the copy at {target} is damaged ({found[0]}): copying it again")
    try:
        copy_all(data_dir, target, files, need, node, images)
    except (OSError, DataError) as exc:
        message = str(exc) if isinstance(exc, DataError) else f"staging to {target}: {exc}"
        try:
            write_json(
                target.with_name(target.name + ".failed.json"),
                {"time": time.time(), "message": message},
            )
        except OSError:
            pass  # the others then try themselves, and fail alike
        raise StagingError(message) from None
    target.with_name(target.name + ".failed.json").unlink(missing_ok=True)
    return "copied"


def copy_all(
    data_dir: Path,
    target: Path,
    files: dict[str, dict[str, Any]],
    need: int,
    node: str,
    images: Any = None,
) -> None:
    """Copy ``files`` of ``data_dir`` to ``target`` (hashed as copied, checked against their
    records), through a partial folder renamed into place; the space is checked first."""
    base = target.parent
    for stale in base.glob(f"{target.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a copy the lock's holder left unfinished
    if target.exists():
        shutil.rmtree(target)
    free = shutil.disk_usage(base).free
    if free < need:
        raise StagingError(
            f"staging.dir {base} on node {node}: {need:,} bytes ({gib(need)}) are needed to "
            f"stage {data_dir.name}, {free:,} ({gib(free)}) are free"
        )
    partial = base / f"{target.name}.partial-{os.getpid()}"
    try:
        for folder in sorted({str(Path(name).parent) for name in files}):
            (partial / folder).mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=threads()) as pool:
            jobs = [
                pool.submit(copy_file, data_dir / name, partial / name, record)
                for name, record in files.items()
            ]
            for job in jobs:
                job.result()
        kept = None
        if images is not None:
            from clusterbench.data import stage_files

            kept = stage_files.copy(images, partial, threads(), copy_hashing)
            write_json(partial / stage_files.ROOTS, images.places)
        marker = {"files": files, "verified": time.time(), "bytes": need, "images": kept}
        write_json(partial / MARKER, marker)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    os.replace(partial, target)


def copy_file(src: Path, dst: Path, record: Mapping[str, Any]) -> None:
    """Copy ``src`` to ``dst``, hashing what is read: a file that differs from ``record`` (its
    size and sha256 as preprocessing wrote it) is an error naming it. A record with blocks:
    :func:`copy_blocks`.

    A file of several chunks is hashed in a helper thread while the chunk is written and the
    next one read (hashlib and file I/O release the GIL): the copy then takes about as long as
    the slower of hashing and copying, not their sum. Three buffers in turn: a chunk's buffer
    is read into again only once its hash is done.
    """
    block = block_size(record)
    if block is not None:
        copy_blocks(src, dst, record, block)
        return
    digest = hashlib.sha256()
    if record["size"] <= CHUNK:
        data = src.read_bytes()
        digest.update(data)
        dst.write_bytes(data)
        size = len(data)
    else:
        size = copy_hashing(src, dst, digest)
    if size != record["size"] or digest.hexdigest() != record["sha256"]:
        raise differs(src, size, record)


def differs(src: Path, size: int, record: Mapping[str, Any]) -> DataError:
    """The error of a source file ``src`` of ``size`` bytes that differs from its ``record``."""
    return DataError(
        f"{src} differs from what preprocessing recorded ({size:,} bytes, expected "
        f"{record['size']:,}; or its sha256): not staged. Make it again with: "
        f"{integrity.remake_command(src.parent / 'meta.json')}"
    )


def copy_blocks(src: Path, dst: Path, record: Mapping[str, Any], block: int) -> None:
    """Copy ``src`` to ``dst`` block by block (``block`` bytes: :func:`block_size`), each
    block of the copy hashed in a pool of :func:`threads` as soon as it is written and checked
    against ``record["blocks"]``: the copy itself is checked, on several cores. A file that differs
    from ``record`` is an error naming it."""
    fin = os.open(src, os.O_RDONLY)
    try:
        size = os.fstat(fin).st_size
        if size != record["size"] or -(-size // block) != len(record["blocks"]):
            raise differs(src, size, record)
        with ThreadPoolExecutor(max_workers=threads()) as pool:
            fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                digests = []
                for offset in range(0, size, block):
                    length = min(block, size - offset)
                    copy_range(fin, fout, offset, length, src)
                    digests.append(pool.submit(block_sha256, dst, offset, length))
            finally:
                os.close(fout)
            if [job.result() for job in digests] != list(record["blocks"]):
                raise differs(src, size, record)
    finally:
        os.close(fin)


def copy_range(fin: int, fout: int, offset: int, length: int, src: Path) -> None:
    """Copy ``length`` bytes at ``offset`` from the file ``fin`` to the same place of ``fout``:
    in the kernel (``copy_file_range``) where the file systems allow it, else read and
    written here."""
    done = 0
    while done < length:
        at = offset + done
        try:
            moved = os.copy_file_range(fin, fout, length - done, at, at)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            moved = os.pwrite(fout, os.pread(fin, min(CHUNK, length - done), at), at)
        if moved == 0:
            raise DataError(f"{src} ended at {at:,} bytes while it was copied: not staged")
        done += moved


def block_sha256(path: Path, offset: int, length: int) -> str:
    """The sha256 of ``length`` bytes of ``path`` at ``offset`` (memory-mapped: the page
    cache's own pages, hashed without a copy; ``offset`` a multiple of the page size)."""
    with (
        open(path, "rb") as fh,
        mmap.mmap(fh.fileno(), length, mmap.MAP_SHARED, mmap.PROT_READ, offset=offset) as view,
    ):
        return hashlib.sha256(view).hexdigest()


def copy_hashing(src: Path, dst: Path, digest: Any) -> int:
    """Copy ``src`` to ``dst`` by chunks, each also fed to ``digest`` in a helper thread (in
    order); the bytes copied."""
    buffers = [bytearray(CHUNK) for _ in range(3)]
    pending: deque = deque()
    size = 0
    with (
        open(src, "rb") as fin,
        open(dst, "wb") as fout,
        ThreadPoolExecutor(max_workers=1) as hasher,
    ):
        for turn in itertools.count():
            while len(pending) >= len(buffers):  # this buffer's hash must be done first
                pending.popleft().result()
            buffer = buffers[turn % len(buffers)]
            read = fin.readinto(buffer)
            if not read:
                break
            chunk = memoryview(buffer)[:read]
            pending.append(hasher.submit(digest.update, chunk))
            fout.write(chunk)
            size += read
        for job in pending:
            job.result()
    return size


def size_problems(target: Path, files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each file of the copy that is missing or of another size than recorded."""
    found = []
    for name, record in files.items():
        try:
            size = (target / name).stat().st_size
        except OSError:
            found.append(f"{target / name} is missing")
            continue
        if size != record["size"]:
            found.append(f"{target / name} has {size:,} bytes, {record['size']:,} recorded")
    return found


def verify(target: Path, files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each file of the copy that is missing or differs from its record (sizes, then sha256)."""
    found = size_problems(target, files)
    if found:
        return found
    with ThreadPoolExecutor(max_workers=threads()) as pool:
        digests = {name: hash_tasks(pool, target / name, record) for name, record in files.items()}
        for name, record in files.items():
            if [job.result() for job in digests[name]] != expected_digests(record):
                found.append(f"{target / name} differs from its record (sha256)")
    return found


def block_size(record: Mapping[str, Any]) -> int | None:
    """The block size of a record with blocks that this copy can use (a positive multiple of
    the memory-map granularity, as :func:`clusterbench.core.integrity.record_with_blocks` writes);
    None for any other record (the file is then hashed whole)."""
    block = record.get("block")
    if "blocks" not in record or not isinstance(block, int) or block <= 0:
        return None
    return block if block % mmap.ALLOCATIONGRANULARITY == 0 else None


def hash_tasks(pool: ThreadPoolExecutor, path: Path, record: Mapping[str, Any]) -> list[Any]:
    """The sha256 of ``path`` in ``pool``: one task for each of its blocks (several cores on
    one large file), or one for the whole file."""
    block = block_size(record)
    if block is None:
        return [pool.submit(integrity.sha256_of, path)]
    size = int(record["size"])
    return [
        pool.submit(block_sha256, path, offset, min(block, size - offset))
        for offset in range(0, size, block)
    ]


def expected_digests(record: Mapping[str, Any]) -> list[str]:
    """What :func:`hash_tasks` must give for a file of ``record``."""
    return list(record["blocks"]) if block_size(record) is not None else [record["sha256"]]


def threads() -> int:
    """Files copied or hashed at once (hashing and I/O release the GIL)."""
    return max(2, min(8, len(os.sched_getaffinity(0))))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None
