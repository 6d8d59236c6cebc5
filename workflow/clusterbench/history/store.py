"""The history store: one SQLite file (``history.path``) that every workflow run appends its
runs to, shared by checkouts and users.

Tables (schema version :data:`SCHEMA_VERSION`):

- ``schema_version(version)``: one row, the schema the file is written in. A file of a newer
  schema is refused (update clusterbench); an older one is migrated in place, one step of
  :data:`MIGRATIONS` at a time, inside the writer's transaction, and the step is said on
  stderr; an older one without a migration is refused, naming both versions.
- ``appends(id, date, host, user, workdir, config_hash, commit)``: one row per append, i.e.
  per workflow run that added something; a run's entries are one point of its series.
- ``runs``: one row per run (:data:`RUN_COLUMNS`, made by :mod:`clusterbench.history.entries`),
  unique per ``(run_dir, end_time)``: appending the same finished run again adds nothing.

Safe with several writers at once: every append is one ``BEGIN IMMEDIATE`` transaction (the
writers queue for the file's write lock, waiting up to :data:`BUSY_TIMEOUT_SECONDS`), the schema
is created or migrated inside it, and on a local file system the file is in WAL mode (readers
never block the writer). On a network file system (NFS, Lustre, GPFS, CIFS, ...: WAL's shared
memory does not work across hosts) it keeps SQLite's rollback journal, whose locks are the file
system's POSIX locks. ``CLUSTERBENCH_HISTORY_JOURNAL=wal|delete`` overrides the choice.

A new file gets the mode a file made by ``open()`` gets (0666 less the umask), writable by the
group too where its directory is (a group's shared directory); SQLite gives its journal files
the database file's mode. Standard library only: the Snakefile imports this module to check,
before any job, that the path can be written (:func:`check_writable`).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import random
import socket
import sqlite3
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.core.paths import cannot_make_in, expand

#: The schema this module writes and reads.
SCHEMA_VERSION = 2

#: How long a writer waits for another's transaction before it gives up.
BUSY_TIMEOUT_SECONDS = 120.0

#: Environment variable forcing the journal mode: ``wal``, ``delete`` or ``auto`` (default).
JOURNAL_ENV = "CLUSTERBENCH_HISTORY_JOURNAL"

#: File system types SQLite's WAL mode cannot be shared on (its shared memory is per host).
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "fuse.ceph",
        "glusterfs",
        "fuse.glusterfs",
        "fuse.sshfs",
        "afs",
        "9p",
        "panfs",
        "wekafs",
        "pvfs2",
        "orangefs",
    }
)

#: The ``runs`` table's columns and their SQL types; an entry is a mapping with these keys.
RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    # which run, where, when: the key of an entry is (run_dir, end_time)
    ("run_dir", "TEXT NOT NULL"),
    ("end_time", "TEXT NOT NULL"),  # the training's end as run.json recorded it
    ("date", "TEXT NOT NULL"),  # the same, in UTC (ISO 8601): sorts as text
    ("run", "TEXT NOT NULL"),
    ("site", "TEXT NOT NULL"),
    ("experiment", "TEXT NOT NULL"),
    ("environment", "TEXT NOT NULL"),  # the preset's name, else 'W workers x N nodes ...'
    ("workload", "TEXT NOT NULL"),  # 'dataset / model'
    ("dataset", "TEXT NOT NULL"),
    ("model", "TEXT NOT NULL"),
    # how it trained: every training setting (JSON), the ones that set its speed (JSON, the
    # series key), and those the report names a configuration by
    ("settings", "TEXT NOT NULL"),
    ("speed_settings", "TEXT NOT NULL"),
    ("backend", "TEXT"),
    ("bn", "TEXT"),
    ("workers", "INTEGER"),
    ("nodes", "INTEGER"),
    ("gpus_per_node", "INTEGER"),
    ("device", "TEXT"),
    ("global_batch", "INTEGER"),
    ("precision", "TEXT"),
    ("memory_format", "TEXT"),
    ("grad_compression", "TEXT"),
    # provenance (run.json's, as the ranks saw it)
    ("hosts", "TEXT"),
    ("cpu_model", "TEXT"),
    ("gpu_model", "TEXT"),
    ("gpu_driver", "TEXT"),
    ("nccl", "TEXT"),
    ("python", "TEXT"),
    ("torch", "TEXT"),
    ("horovod", "TEXT"),
    ("commit_sha", "TEXT"),
    ("dirty", "INTEGER"),
    ("provenance", "TEXT"),  # run.json's whole provenance (JSON)
    # figures, with their spread over the timed epochs
    ("epochs", "INTEGER"),
    ("warmup_epochs", "INTEGER"),
    ("timed_epochs", "INTEGER"),
    ("epoch_seconds_mean", "REAL"),
    ("epoch_seconds_sd", "REAL"),
    ("images_per_second_mean", "REAL"),
    ("images_per_second_sd", "REAL"),
    ("tokens_per_second_mean", "REAL"),
    ("tokens_per_second_sd", "REAL"),
    ("final_val_accuracy", "REAL"),
    ("accuracy", "REAL"),  # the evaluation's, on eval_split
    ("eval_split", "TEXT"),
    ("train_seconds", "REAL"),
    ("epoch_metrics", "TEXT"),  # every epoch's seconds, images/s, val accuracy (JSON)
    # model FLOPs over the timed epochs (clusterbench.records.flops; schema version 2)
    ("tflops", "REAL"),
    ("mfu", "REAL"),
)

#: The names of :data:`RUN_COLUMNS`.
RUN_KEYS = tuple(name for name, _ in RUN_COLUMNS)

SCHEMA = f"""
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE appends (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    date TEXT NOT NULL,
    host TEXT NOT NULL,
    user TEXT NOT NULL,
    workdir TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    commit_sha TEXT NOT NULL
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    append_id INTEGER NOT NULL REFERENCES appends(id),
    {", ".join(f"{name} {kind}" for name, kind in RUN_COLUMNS)},
    UNIQUE (run_dir, end_time)
);
CREATE INDEX runs_series ON runs (site, environment, workload, speed_settings);
"""


#: Schema migrations: version v -> the function that makes a v file a v + 1 one (run inside
#: the writer's transaction).
def _add_flops(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: the columns ``tflops`` and ``mfu`` (NULL for the runs already there:
    their run.json may have no FLOPs)."""
    for name in ("tflops", "mfu"):
        conn.execute(f"ALTER TABLE runs ADD COLUMN {name} REAL")


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_flops}


class HistoryError(Exception):
    """A history store that cannot be used; the message names the file and what to do."""


@dataclass(frozen=True)
class Appended:
    """What an append did: its ``appends`` row (None: nothing new), the runs it added and
    those already there."""

    append_id: int | None
    added: int
    present: int


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the file system ``path`` (an existing path) is on: that of the longest
    mount point above it in ``mounts`` (the text of ``/proc/self/mounts``, read when None);
    None where that cannot be read."""
    try:
        lines = mounts or Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    target, best = str(path.resolve()), (-1, None)
    for line in lines.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > best[0]:
            best = (len(mount), fields[2])
    return best[1]


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def journal_mode(path: Path) -> str:
    """``wal`` on a local file system, ``delete`` (SQLite's rollback journal) on a network one
    (:data:`NETWORK_FILESYSTEMS`), or what :data:`JOURNAL_ENV` says."""
    forced = os.environ.get(JOURNAL_ENV, "auto").strip().lower() or "auto"
    if forced in ("wal", "delete"):
        return forced
    if forced != "auto":
        raise HistoryError(
            f"environment variable {JOURNAL_ENV}={forced!r}: expected wal, delete or auto"
        )
    fs = filesystem_type(nearest_existing(path.parent))
    return "delete" if fs in NETWORK_FILESYSTEMS else "wal"


def _new_file_mode(directory: Path) -> int:
    """The mode of a new store in ``directory``: 0666 less the umask, group-writable where the
    directory is."""
    from clusterbench.core.atomic import current_umask

    mode = 0o666 & ~current_umask()
    if directory.stat().st_mode & stat.S_IWGRP:
        mode |= stat.S_IRGRP | stat.S_IWGRP
    return mode


def _sqlite_connect(target: str, uri: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, uri=uri)
    conn.row_factory = sqlite3.Row
    return conn


def open_for_writing(path: Path) -> sqlite3.Connection:
    """A connection that appends to ``path`` (made, with its directory, if missing), in the
    journal mode of its file system (:func:`journal_mode`). Its schema is checked by the
    writer's transaction (:func:`ensure_schema`)."""
    path = Path(path)
    mode = journal_mode(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        conn = _sqlite_connect(str(path))
        if new and path.exists():
            os.chmod(path, _new_file_mode(path.parent))
        got = set_journal_mode(conn, mode)
    except sqlite3.OperationalError as exc:
        raise HistoryError(f"history store {path}: cannot be opened for writing: {exc}") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database"
        raise HistoryError(f"{path}: not a clusterbench history store ({exc})") from None
    except OSError as exc:
        raise HistoryError(f"history store {path}: cannot be opened for writing: {exc}") from None
    if mode == "delete" and got == "wal":
        conn.close()
        raise HistoryError(
            f"history store {path}: in WAL mode, which a network file system cannot share "
            "across hosts, and it cannot leave it while another process has it open; retry when "
            f"no workflow is appending (or set {JOURNAL_ENV}=wal if the file system is local)"
        )
    return conn


def set_journal_mode(conn: sqlite3.Connection, mode: str) -> str:
    """``PRAGMA journal_mode=<mode>``; the mode the file is in after it. Switching a file into
    WAL takes its exclusive lock, and SQLite answers "database is locked" at once, without its
    busy timeout, while another connection holds the file (writers appending to a new store
    together): so the switch is tried again, up to :data:`BUSY_TIMEOUT_SECONDS`."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    pause = 0.01
    while True:
        try:
            return conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause * (1 + random.random()))
        pause = min(pause * 2, 0.5)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an error): the writer holds the
    file's write lock from the start, so two writers queue instead of deadlocking."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows} - {"sqlite_sequence"}


def stored_version(conn: sqlite3.Connection, path: Path) -> int | None:
    """The file's schema version; None for an empty file; :class:`HistoryError` for a file
    that is no history store."""
    try:
        found = tables(conn)
    except sqlite3.OperationalError:
        raise
    except sqlite3.DatabaseError as exc:  # "file is not a database"
        raise HistoryError(f"{path}: not a clusterbench history store ({exc})") from None
    if not found:
        return None
    if "schema_version" not in found:
        raise HistoryError(
            f"{path}: not a clusterbench history store (an SQLite file with the tables "
            f"{', '.join(sorted(found))} and no schema_version); give history.path another file"
        )
    rows = conn.execute("SELECT version FROM schema_version").fetchall()
    if len(rows) != 1 or not isinstance(rows[0][0], int):
        raise HistoryError(f"{path}: damaged history store: schema_version holds {len(rows)} rows")
    return rows[0][0]


def version_problem(version: int, path: Path) -> str | None:
    """Why a file of schema ``version`` cannot be used by this clusterbench; None: it can
    (the current version, or an older one :data:`MIGRATIONS` migrate)."""
    if version > SCHEMA_VERSION:
        return (
            f"history store {path} has schema version {version}, newer than this clusterbench's "
            f"({SCHEMA_VERSION}): a newer clusterbench wrote it; update this checkout, or give "
            "history.path another file"
        )
    missing = [v for v in range(version, SCHEMA_VERSION) if v not in MIGRATIONS]
    if missing:
        return (
            f"history store {path} has schema version {version}, older than this clusterbench's "
            f"({SCHEMA_VERSION}), and no migration from version {missing[0]} exists; give "
            "history.path another file (the old one can still be read by the clusterbench that "
            "wrote it)"
        )
    return None


def ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Inside the writer's transaction: make the schema of an empty file, migrate an older
    one, refuse one that cannot be used."""
    version = stored_version(conn, path)
    if version is None:
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        return
    problem = version_problem(version, path)
    if problem:
        raise HistoryError(problem)
    for step in range(version, SCHEMA_VERSION):
        MIGRATIONS[step](conn)
        conn.execute("UPDATE schema_version SET version = ?", (step + 1,))
        print(f"history: migrated {path} from schema version {step} to {step + 1}", file=sys.stderr)


def append(path: Path, entries: Sequence[Mapping[str, Any]], batch: Mapping[str, str]) -> Appended:
    """Append ``entries`` (mappings with :data:`RUN_KEYS`) to the store at ``path`` in one
    transaction; those already there (same run_dir and end_time) are left as they are.
    ``batch``: the ``appends`` row's config_hash and commit_sha (its date, host, user and
    working directory are taken here); no row when nothing is new."""
    conn = open_for_writing(path)
    try:
        with closing(conn), transaction(conn):
            ensure_schema(conn, Path(path))
            return _insert_new(conn, entries, batch)
    except sqlite3.Error as exc:
        raise HistoryError(f"history store {path}: the append failed: {exc}") from None


def _insert_new(
    conn: sqlite3.Connection, entries: Sequence[Mapping[str, Any]], batch: Mapping[str, str]
) -> Appended:
    keys = [(e["run_dir"], e["end_time"]) for e in entries]
    present = {tuple(row) for row in _present(conn, keys)}
    new = {k: e for k, e in zip(keys, entries, strict=True) if k not in present}  # each once
    if not new:
        return Appended(None, 0, len(entries))
    append_id = conn.execute(
        "INSERT INTO appends (date, host, user, workdir, config_hash, commit_sha) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            batch.get("date") or _now(),
            socket.gethostname(),
            _user(),
            os.getcwd(),
            str(batch.get("config_hash", "")),
            str(batch.get("commit_sha", "")),
        ),
    ).lastrowid
    columns = ", ".join(("append_id", *RUN_KEYS))
    marks = ", ".join("?" * (len(RUN_KEYS) + 1))
    conn.executemany(
        f"INSERT INTO runs ({columns}) VALUES ({marks})",
        [(append_id, *(_sql_value(e.get(k)) for k in RUN_KEYS)) for e in new.values()],
    )
    return Appended(append_id, len(new), len(entries) - len(new))


def _present(conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> Iterable[sqlite3.Row]:
    """The (run_dir, end_time) pairs of ``keys`` the store has."""
    dirs = sorted({d for d, _ in keys})
    for start in range(0, len(dirs), 500):  # SQLite's limit of bound variables
        part = dirs[start : start + 500]
        yield from conn.execute(
            f"SELECT run_dir, end_time FROM runs WHERE run_dir IN ({', '.join('?' * len(part))})",
            part,
        )


def _sql_value(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return int(value)
    return value


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def open_for_reading(path: Path) -> sqlite3.Connection:
    """A read-only connection to the store at ``path``, its schema the current one. A reader
    that may not write the file's directory cannot open a WAL file's shared memory: it reads
    the file as it was last checkpointed (SQLite's ``immutable``; every append ends with one)."""
    path = Path(path)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.sqlite"))
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise HistoryError(
            f"history store {path}: a directory, not a history store: give the store's file, "
            f"the SQLite file history.path names (e.g. {path / 'history.sqlite'}){hint}"
        )
    if not path.is_file():
        raise HistoryError(f"history store {path}: no such file (history.path)")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        try:
            conn = _sqlite_connect(uri, uri=True)
            version = stored_version(conn, path)
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc):
                raise
            conn = _sqlite_connect(uri + "&immutable=1", uri=True)
            version = stored_version(conn, path)
    except sqlite3.Error as exc:
        raise HistoryError(f"history store {path}: cannot be read: {exc}") from None
    if version is None:
        conn.close()
        raise HistoryError(f"history store {path}: empty: nothing has been appended yet")
    if version != SCHEMA_VERSION:
        conn.close()
        raise HistoryError(
            version_problem(version, path)
            or f"history store {path} has schema version {version}: the next append migrates "
            f"it to {SCHEMA_VERSION} (run the workflow once), then it can be read"
        )
    return conn


def read_runs(
    path: Path, series: Iterable[Mapping[str, str]] | None = None
) -> list[dict[str, Any]]:
    """Every entry of the store at ``path`` (or those of ``series``: mappings of site,
    environment, workload and speed_settings), each with its append's id and date, oldest
    first."""
    query = (
        "SELECT runs.*, appends.date AS appended FROM runs "
        "JOIN appends ON appends.id = runs.append_id"
    )
    args: list[Any] = []
    keys = ("site", "environment", "workload", "speed_settings")
    if series is not None:
        wanted = list({tuple(s[k] for k in keys): None for s in series})
        if not wanted:
            return []
        query += " WHERE " + " OR ".join(
            "(" + " AND ".join(f"runs.{k} = ?" for k in keys) + ")" for _ in wanted
        )
        args = [v for key in wanted for v in key]
    with closing(open_for_reading(path)) as conn:
        try:
            rows = conn.execute(query + " ORDER BY runs.date, runs.id", args).fetchall()
        except sqlite3.Error as exc:
            raise HistoryError(f"history store {path}: cannot be read: {exc}") from None
    return [dict(row) for row in rows]


def workflow_path(setting: str, in_workdir: Callable[[str], str]) -> str:
    """``history.path`` as the workflow uses it: ``~`` and ``$VARIABLES`` expanded; a relative
    path lies under the working directory (``in_workdir``: and a module's prefix, as every file
    clusterbench writes)."""
    path = expand(setting, "history.path")
    return path if os.path.isabs(path) else in_workdir(path)


def unwritable_message(path: Path, setting: str) -> str | None:
    """Why the workflow cannot append to the store at ``path`` (given as ``setting``), with the
    remedy; None when it can. Read at parse time, before any job."""
    problem = check_writable(path)
    if not problem:
        return None
    return (
        f"{problem}\n(history.path: {setting!r}: every workflow run appends its runs there; "
        "give a file this user can write, see config/README.md)"
    )


def check_writable(path: Path) -> str | None:
    """Why the store at ``path`` cannot be appended to (None: it can): a path that is no
    file, a file this process cannot open for writing or one in a directory it cannot write
    (SQLite writes its journal beside the file), a directory it cannot create the file in, or
    a file of a schema this clusterbench cannot use. Reads, creates and changes nothing but
    opening the file."""
    path = Path(os.path.abspath(path))
    if path.exists():
        if not path.is_file():
            return f"history store {path} is not a file"
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError as exc:
            return f"history store {path} cannot be opened for writing: {exc.strerror}"
        why = cannot_make_in(path.parent)
        if why:
            return (
                f"history store {path}: its directory {path.parent} is not writable (SQLite "
                f"writes its journal beside the file: {why})"
            )
        return _schema_check(path)
    base = nearest_existing(path.parent)
    if not base.is_dir():
        return f"history store {path} cannot be created: {base} is not a directory"
    why = cannot_make_in(base)
    if why:
        return f"history store {path} cannot be created: nothing can be made in {base}: {why}"
    return None


def _schema_check(path: Path) -> str | None:
    """The schema problem of an existing store (None: none, or it is empty)."""
    if path.stat().st_size == 0:
        return None
    try:
        with closing(_sqlite_connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
            version = stored_version(conn, path)
    except HistoryError as exc:
        return str(exc)
    except sqlite3.Error as exc:
        return f"history store {path} cannot be read: {exc}"
    return None if version is None else version_problem(version, path)
