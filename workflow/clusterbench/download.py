"""Stage 1: make a dataset's files available once, verified, and record where they are.

* **A ``file://`` URL is read where it is:** verified against its pinned digests, never copied.
* **Anything else is fetched into the shared cache**, ``<cache>/<dataset>/<file>``: the body
  goes to ``<file>.part``, an interrupted transfer is resumed with an HTTP ``Range`` request,
  and only a file whose size and pinned digests match is renamed to its final name. A verified
  cached file is reused without any network access. Connection errors, 5xx answers and
  truncated bodies are retried with exponential back-off; a 4xx answer or a checksum mismatch
  fails at once.
* **A dataset read in place** (``datasets.<name>.path``) has no file to fetch: its folder is
  recorded.

``MANIFEST.json`` (written last, so a failed run leaves none) records each file's sha256, size,
URL and ``path``: where the later stages read it (the ``file://`` source itself, or the cache
entry), and ``stored`` (``in place`` or ``cache``). ``results/raw/<dataset>/`` holds nothing
else: no second copy. The workflow checks each recorded file against its sha256 at every
invocation (:mod:`clusterbench.pipeline.checks`; a damaged cache entry is fetched again).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import http.client
import logging
import math
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tqdm import tqdm

from clusterbench import __version__
from clusterbench.config import ConfigError, bad_settings, stage_params
from clusterbench.config.datasets import (
    DatasetError,
    FileSpec,
    bundled_file_hint,
    declared_spec,
    get_dataset,
    resolve_urls,
)
from clusterbench.core.atomic import write_json
from clusterbench.core.interrupted import one_line
from clusterbench.core.params import json_object
from clusterbench.core.paths import PathError, expand

log = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 16
#: HTTP statuses worth retrying besides 5xx.
RETRYABLE_STATUSES = frozenset({408, 425, 429})
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


class DownloadError(Exception):
    """A file could not be fetched; the message names the URL and the problem."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


class ChecksumError(DownloadError):
    """The bytes are not the pinned ones (digest or size mismatch). Never retried."""


class HTTPStatusError(DownloadError):
    """The server answered with an error status that retrying will not fix (404, 403, ...)."""

    def __init__(self, message: str, url: str, status: int) -> None:
        super().__init__(message, url)
        self.status = status


class TransientError(DownloadError):
    """A failure worth retrying: connection error, 5xx, truncated or dropped body."""


@dataclass(frozen=True)
class RetryPolicy:
    retries: int
    backoff_seconds: float
    timeout_seconds: float
    #: The most one file may take, retries and waits included.
    deadline_seconds: float = math.inf

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RetryPolicy:
        """The policy of resolved ``download`` settings (``config.stage_params``)."""
        return cls(
            retries=settings["retries"],
            backoff_seconds=float(settings["backoff_seconds"]),
            timeout_seconds=float(settings["timeout_seconds"]),
            deadline_seconds=float(settings["deadline_seconds"]),
        )

    def delay(self, attempt: int) -> float:
        """Back-off before retry number ``attempt`` (0-based): backoff * 2**attempt."""
        return self.backoff_seconds * 2**attempt


def default_policy() -> RetryPolicy:
    """The schema's default retry settings."""
    return RetryPolicy.from_settings(stage_params("download", {}))


@dataclass(frozen=True)
class DownloadParams:
    cache_dir: str | None
    policy: RetryPolicy
    source: Mapping[str, Any] = field(default_factory=dict)
    #: A declared dataset's files (``datasets.<name>.files`` with their names), else None.
    declared: tuple[Mapping[str, Any], ...] | None = None
    #: A dataset read in place: its folder (``datasets.<name>.path``), else None.
    path: str | None = None


# --------------------------------------------------------------------------- verification


def file_digests(path: Path, algorithms: tuple[str, ...] = ("sha256",)) -> dict[str, str]:
    """Hex digests of ``path`` for each ``hashlib`` algorithm, in one pass."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            for h in hashers.values():
                h.update(chunk)
    return {name: h.hexdigest() for name, h in hashers.items()}


def verify(path: Path, spec: FileSpec) -> tuple[str, str, str] | None:
    """``None`` if ``path`` has the pinned size and digests, else (what, expected, actual)."""
    size = path.stat().st_size
    if spec.size is not None and size != spec.size:
        return "size", f"{spec.size} bytes", f"{size}"
    pinned = spec.digests()
    actual = file_digests(path, tuple(pinned))
    for name, expected in pinned.items():
        if actual[name] != expected.lower():
            return name, expected, actual[name]
    return None


# --------------------------------------------------------------------------- transfer


def _progress(total: int | None, initial: int, desc: str) -> tqdm:
    """A byte progress bar on stderr, shown only when stderr is a terminal."""
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not sys.stderr.isatty(),
        leave=False,
    )


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of a ``Content-Range`` header; ``None`` for unknown parts."""
    match = _CONTENT_RANGE.fullmatch((value or "").strip())
    if not match:
        return None, None
    start, _end, total = match.groups()
    return (
        None if start is None else int(start),
        None if total == "*" else int(total),
    )


def _resume_offset(url: str, part: Path, expected_size: int | None) -> int | None:
    """The byte at which the transfer of ``url`` into ``part`` resumes: the size of ``part``
    (0: none yet, or one larger than ``expected_size``, removed); None when ``part`` holds
    ``expected_size`` bytes already."""
    offset = part.stat().st_size if part.exists() else 0
    if expected_size is not None and offset > expected_size:
        log.warning("%s is larger than %s should be; starting over", part, url)
        part.unlink()
        offset = 0
    if offset and offset == expected_size:
        return None
    return offset


def _request(url: str, offset: int, timeout: float) -> http.client.HTTPResponse:
    """The answer to a GET of ``url`` from byte ``offset`` on; urllib's errors, but a
    :class:`DownloadError` for a malformed URL (no retry can fix it)."""
    headers = {"User-Agent": f"clusterbench/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        log.info("resuming %s at byte %d", url, offset)
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except (ValueError, http.client.InvalidURL) as exc:
        raise DownloadError(f"malformed URL {url!r}: {exc}", url) from None


def _start_over(url: str, part: Path, exc: urllib.error.HTTPError, offset: int) -> bool:
    """What an error answer to the request from byte ``offset`` means: False, a 416 because
    ``part`` holds the whole body already; True, a 416 to any other range (``part`` removed:
    start over). Else it raises :class:`TransientError` (5xx, 408, 425, 429: retry) or
    :class:`HTTPStatusError` (``part`` removed)."""
    with exc:
        status, reason = exc.code, exc.reason
        content_range = exc.headers.get("Content-Range")
    if status == 416 and offset:
        _start, total = _content_range(content_range)
        if total == offset:
            return False
        log.warning("%s rejected the range of %s; starting over", url, part)
        part.unlink()
        return True
    if status >= 500 or status in RETRYABLE_STATUSES:
        raise TransientError(f"HTTP {status} {reason} from {url}", url) from exc
    part.unlink(missing_ok=True)
    raise HTTPStatusError(f"HTTP {status} {reason} for {url}", url, status) from exc


@dataclass(frozen=True)
class _Body:
    """How an answer's body is written: the ``part`` file's open ``mode`` (append a range,
    write a whole body), the byte it starts at, the file's total size and the body's length
    (None: unknown)."""

    mode: str
    offset: int
    total: int | None
    length: int | None


def _body(url: str, part: Path, resp: Any, offset: int, expected_size: int | None) -> _Body:
    """How to write the body of ``resp``, the answer to a request from byte ``offset``: a 206
    must start there, a 200 starts over; a total other than ``expected_size`` is a
    :class:`ChecksumError` (``part`` removed)."""
    length_header = resp.headers.get("Content-Length")
    length = int(length_header) if length_header and length_header.isdigit() else None
    if resp.status == 206:
        start, total = _content_range(resp.headers.get("Content-Range"))
        if start != offset:
            part.unlink(missing_ok=True)
            raise TransientError(
                f"{url} answered a range starting at {start}, asked for {offset}", url
            )
        mode = "ab"
    elif resp.status == 200:
        if offset:
            log.warning("%s ignored the Range request; downloading from the start", url)
            offset = 0
        total = length
        mode = "wb"
    else:
        raise HTTPStatusError(f"unexpected HTTP {resp.status} for {url}", url, resp.status)
    if total is None and length is not None:
        total = offset + length
    if expected_size is not None and total is not None and total != expected_size:
        part.unlink(missing_ok=True)
        raise ChecksumError(
            f"size mismatch for {url}: expected {expected_size} bytes, the server reports {total}",
            url,
        )
    return _Body(mode, offset, total, length)


def _receive(url: str, part: Path, resp: Any, body: _Body) -> None:
    """Write the body of ``resp`` into ``part``; a dropped or short body is a
    :class:`TransientError` (what arrived is kept, for the next attempt to resume)."""
    received = 0
    with (
        open(part, body.mode) as fh,
        _progress(body.total, body.offset, part.name.removesuffix(".part")) as bar,
    ):
        try:
            while chunk := resp.read(CHUNK_SIZE):
                fh.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        except (OSError, http.client.HTTPException) as exc:
            raise TransientError(
                f"connection to {url} dropped after {body.offset + received} bytes: {exc!r}", url
            ) from exc
    if body.length is not None and received < body.length:
        raise TransientError(
            f"truncated body from {url}: received {received} of {body.length} bytes", url
        )


def _http_attempt(url: str, part: Path, expected_size: int | None, timeout: float) -> None:
    """One request: append the rest of ``url`` to ``part``; raise TransientError to retry."""
    offset = _resume_offset(url, part, expected_size)
    if offset is None:
        return  # complete already; verification decides whether it is right
    try:
        resp = _request(url, offset, timeout)
    except urllib.error.HTTPError as exc:
        if _start_over(url, part, exc, offset):
            _http_attempt(url, part, expected_size, timeout)
        return
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransientError(f"cannot fetch {url}: {reason}", url) from exc
    with resp:
        _receive(url, part, resp, _body(url, part, resp, offset, expected_size))


def _http_download(url: str, part: Path, expected_size: int | None, policy: RetryPolicy) -> None:
    attempts = policy.retries + 1
    started = time.monotonic()
    for attempt in range(attempts):
        try:
            _http_attempt(url, part, expected_size, policy.timeout_seconds)
            return
        except TransientError as exc:
            if attempt + 1 == attempts:
                raise TransientError(
                    f"giving up on {url} after {attempts} attempts: {exc}", url
                ) from exc
            delay = policy.delay(attempt)
            if time.monotonic() - started + delay > policy.deadline_seconds:
                raise TransientError(
                    f"giving up on {url} after {attempt + 1} attempt(s): waiting {delay:g} s "
                    f"more would pass download.deadline_seconds={policy.deadline_seconds:g}: {exc}",
                    url,
                ) from exc
            log.warning("%s; retry %d/%d in %.2fs", exc, attempt + 1, policy.retries, delay)
            time.sleep(delay)


def _copy_local(url: str, part: Path) -> None:
    src = local_path(url)
    try:
        shutil.copyfile(src, part)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise DownloadError(f"cannot read {url}: {exc.strerror or exc}", url) from exc


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Exclusive lock on ``<path>.lock`` so concurrent runs sharing a cache do not collide."""
    with open(path.with_name(path.name + ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fetch(spec: FileSpec, url: str, dest: Path, policy: RetryPolicy | None = None) -> Path:
    """Make ``dest`` a verified copy of ``spec`` fetched from ``url`` (a no-op if cached).

    Raises a :class:`DownloadError` subclass; nothing is ever left under ``dest`` unverified.
    The ``.part`` file of a transfer that failed transiently is kept so the next run resumes it.
    """
    policy = policy or default_policy()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest):
        if dest.exists():
            mismatch = verify(dest, spec)
            if mismatch is None:
                log.info("using cached %s", dest)
                return dest
            log.warning("cached %s has the wrong %s; fetching it again", dest, mismatch[0])
            dest.unlink()
        part = dest.with_name(dest.name + ".part")
        if urlsplit(url).scheme == "file":
            _copy_local(url, part)
        else:
            _http_download(url, part, spec.size, policy)
        mismatch = verify(part, spec)
        if mismatch is not None:
            part.unlink(missing_ok=True)
            what, expected, actual = mismatch
            raise ChecksumError(
                f"{what} mismatch for {url}: expected {expected}, got {actual}", url
            )
        with open(part, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(part, dest)
        log.info("fetched %s -> %s", url, dest)
    return dest


# --------------------------------------------------------------------------- stage


def default_cache_dir() -> Path:
    """``$CLUSTERBENCH_CACHE/datasets``, else ``~/.cache/clusterbench/datasets``."""
    root = os.environ.get("CLUSTERBENCH_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "clusterbench"
    return base / "datasets"


#: Environment variable with a JSON object of download settings (cache_dir, retries,
#: backoff_seconds, timeout_seconds). The workflow sets it from the config instead of passing the
#: settings in --params, its rerun trigger: more retries must not make every stage stale.
SETTINGS_ENV = "CLUSTERBENCH_DOWNLOAD"


def parse_params(text: str) -> DownloadParams:
    """The ``--params`` JSON: where the files come from (``source``, ``declared``), optionally
    with download settings; all checked against the config schema, defaults filled from it."""
    raw = json_object(text, error=ConfigError)
    return params_from_mapping(raw)


#: ``--params`` keys saying where a dataset's files come from (the rest are settings).
SOURCE_KEYS = ("source", "declared", "path")


def params_from_mapping(raw: Mapping[str, Any]) -> DownloadParams:
    """:func:`parse_params` for an already parsed object."""
    settings = stage_params("download", {k: v for k, v in raw.items() if k not in SOURCE_KEYS})
    where = stage_params(
        "download_source", {"source": {}, **{k: raw[k] for k in SOURCE_KEYS if k in raw}}
    )
    declared = where.get("declared")
    return DownloadParams(
        cache_dir=settings["cache_dir"],
        policy=RetryPolicy.from_settings(settings),
        source=where["source"],
        declared=None if declared is None else tuple(declared),
        path=where.get("path"),
    )


def local_path(url: str) -> Path:
    """The file a ``file://`` URL names (absolute)."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise DownloadError(f"cannot fetch {url}: file URLs must be local", url)
    return Path(os.path.abspath(urllib.request.url2pathname(parts.path)))


def in_place(spec: FileSpec, url: str) -> Path:
    """The file of a ``file://`` URL, verified against ``spec`` where it is (never copied)."""
    path = local_path(url)
    try:
        mismatch = verify(path, spec)
    except OSError as exc:
        raise DownloadError(f"cannot read {url}: {exc.strerror or exc}", url) from None
    if mismatch is not None:
        what, expected, actual = mismatch
        raise ChecksumError(f"{what} mismatch for {url}: expected {expected}, got {actual}", url)
    log.info("reading %s where it is (verified, not copied)", path)
    return path


def record_folder(name: str, manifest: Path, folder: str) -> dict[str, Any]:
    """The manifest of a dataset read in place: its folder, no file."""
    key = f"datasets.{name}.path"
    try:
        path = Path(os.path.abspath(expand(folder, key)))
    except PathError as exc:  # a user or variable this host lacks
        raise ConfigError(str(exc)) from None
    if not path.is_dir():
        raise ConfigError(f"{key}: {path} is not a directory")
    content = {"dataset": name, "path": str(path), "files": {}}
    write_json(manifest, content)
    return content


def cache_of(name: str, params: DownloadParams) -> Path:
    """The dataset's folder of the download cache, made."""
    try:
        cache = (
            Path(expand(params.cache_dir, "download.cache_dir"))
            if params.cache_dir
            else default_cache_dir()
        )
    except PathError as exc:  # a user or variable this host lacks
        raise ConfigError(str(exc)) from None
    cache = Path(os.path.abspath(cache))
    try:
        (cache / name).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        setting = (
            "download.cache_dir"
            if params.cache_dir
            else "download.cache_dir (or $CLUSTERBENCH_CACHE)"
        )
        raise ConfigError(
            f"the download cache {cache / name} cannot be created: {exc.strerror or exc}; "
            f"set {setting} to a folder you can write"
        ) from None
    return cache / name


def download_dataset(name: str, manifest: Path, params: DownloadParams) -> dict[str, Any]:
    """Make every file of dataset ``name`` available (read in place, or in the cache), and
    write ``manifest`` last (module docstring)."""
    manifest = Path(manifest)
    manifest.unlink(missing_ok=True)
    if params.path is not None:
        return record_folder(name, manifest, params.path)
    if params.declared is not None:
        spec = declared_spec(name, params.declared)
        urls = {f.name: str(f.url) for f in spec.files}
    else:
        spec = get_dataset(name)
        urls = resolve_urls(name, params.source)
    remote = [f for f in spec.files if urlsplit(urls[f.name]).scheme != "file"]
    cache = cache_of(name, params) if remote else None
    found = {}
    for f in spec.files:
        url = urls[f.name]
        try:
            if cache is None or f not in remote:
                found[f.name] = (in_place(f, url), "in place")
            else:
                found[f.name] = (fetch(f, url, cache / f.name, params.policy), "cache")
        except ChecksumError as exc:
            hint = bundled_file_hint(spec, f, url)
            raise ChecksumError(f"{exc}\n{hint}" if hint else str(exc), exc.url) from None
    for f in spec.files:  # an earlier version's copy beside the manifest: no second copy
        old = manifest.parent / f.name
        if old.is_file() and not old.is_symlink() and old != found[f.name][0]:
            old.unlink()
    content = {
        "dataset": name,
        "files": {
            f.name: {
                "sha256": f.sha256,
                "size": path.stat().st_size,
                "url": urls[f.name],
                "path": str(path),
                "stored": stored,
            }
            for f in spec.files
            for path, stored in [found[f.name]]
        },
    }
    write_json(manifest, content)
    return content


@one_line("download")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="download", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="dataset name: digits, mnist, cifar10")
    parser.add_argument("--params", required=True, help="the rule's config slice as JSON")
    parser.add_argument("--out", required=True, type=Path, help="MANIFEST.json to write")
    # Settings that cannot change the downloaded bytes; precedence: flags, $CLUSTERBENCH_DOWNLOAD,
    # --params.
    parser.add_argument("--cache-dir", help="overrides params cache_dir")
    parser.add_argument("--retries", type=int, help="overrides params retries")
    parser.add_argument("--backoff", type=float, help="overrides params backoff_seconds")
    parser.add_argument("--timeout", type=float, help="overrides params timeout_seconds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    overrides = {
        key: value
        for key, value in (
            ("cache_dir", args.cache_dir),
            ("retries", args.retries),
            ("backoff_seconds", args.backoff),
            ("timeout_seconds", args.timeout),
        )
        if value is not None
    }
    try:
        env = json_object(os.environ.get(SETTINGS_ENV, "{}"), what=SETTINGS_ENV, error=ConfigError)
        stage_params("download", env, what=SETTINGS_ENV)  # names a bad key as the variable's
        given = json_object(args.params, error=ConfigError)
        params = params_from_mapping({**given, **env, **overrides})
    except ConfigError as exc:
        return bad_settings("download", exc)
    try:
        content = download_dataset(args.dataset, args.out, params)
    except (DatasetError, ConfigError) as exc:
        return bad_settings("download", ConfigError(str(exc)))
    except DownloadError as exc:
        print(f"download: error: {exc}", file=sys.stderr)
        return 1
    log.info("%s: %d file(s) -> %s", args.dataset, len(content["files"]), args.out)
    return 0
