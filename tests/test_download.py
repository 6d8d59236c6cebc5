"""Stage 1 against a real HTTP server on loopback that misbehaves on request."""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from archives import make_mnist
from clusterbench import download
from clusterbench.config import ConfigError
from clusterbench.config.datasets import DATASETS, DatasetError, FileSpec, resolve_urls
from clusterbench.download import (
    ChecksumError,
    DownloadError,
    HTTPStatusError,
    RetryPolicy,
    TransientError,
    fetch,
    parse_params,
)
from conftest import REPO

FAST = RetryPolicy(retries=3, backoff_seconds=0.001, timeout_seconds=10)
DIGITS = DATASETS["digits"]
DIGITS_PATH = Path(urlsplit(DIGITS.files[0].url).path)


# --------------------------------------------------------------------------- the server


@dataclass
class Route:
    """What the server does for one path: ``script`` for the first requests, then ``then``.

    Behaviours: ``ok`` (honours Range: 206, or 416 past the end), ``full`` (ignores Range: 200),
    ``404``, ``503``, ``truncate`` (Content-Length of the whole body, half of it sent, then a
    clean close), ``drop`` (half the body, then the connection is reset).
    """

    data: bytes
    then: str = "ok"
    script: list[str] = field(default_factory=list)


@dataclass
class Seen:
    path: str
    range: str | None


class FaultServer:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append(Seen(self.path, self.headers.get("Range")))
                route = server.routes.get(self.path)
                if route is None:
                    return self.send_error(404)
                behaviour = route.script.pop(0) if route.script else route.then
                getattr(self, f"_{behaviour}")(route.data)

            def _head(self, status: int, length: int, **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(length))
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()

            def _ok(self, data: bytes) -> None:
                spec = self.headers.get("Range")
                if not spec:
                    return self._full(data)
                start = int(spec.removeprefix("bytes=").rstrip("-"))
                if start >= len(data):
                    return self._head(416, 0, Content_Range=f"bytes */{len(data)}")
                body = data[start:]
                rng = f"bytes {start}-{len(data) - 1}/{len(data)}"
                self._head(206, len(body), Content_Range=rng)
                self.wfile.write(body)

            def _full(self, data: bytes) -> None:
                self._head(200, len(data))
                self.wfile.write(data)

            def _404(self, data: bytes) -> None:
                self.send_error(404)

            def _503(self, data: bytes) -> None:
                self.send_error(503)

            def _truncate(self, data: bytes) -> None:
                self._head(200, len(data))
                self.wfile.write(data[: len(data) // 2])
                self.close_connection = True

            def _drop(self, data: bytes) -> None:
                self._truncate(data)
                # SO_LINGER 0: close() sends a reset instead of a clean end of stream
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def add(self, name: str, data: bytes, then: str = "ok", script: list[str] | None = None) -> str:
        self.routes[f"/{name}"] = Route(data, then, list(script or []))
        return self.url(name)

    def url(self, name: str = "") -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/{name}"


@pytest.fixture
def payload(tmp_path):
    """A generated MNIST training-image file (~50 KB of incompressible IDX data)."""
    fake = make_mnist(tmp_path / "src", n_train=64, n_test=4)
    return fake.files["train-images-idx3-ubyte.gz"]


def leftovers(directory: Path) -> list[str]:
    """Files under ``directory`` other than lock files."""
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.rglob("*") if p.is_file() and p.suffix != ".lock")


# --------------------------------------------------------------------------- fetch: success


def test_plain_http_download(server, payload, tmp_path):
    url = server.add(payload.name, payload.data)
    dest = fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, FAST)
    assert dest.read_bytes() == payload.data
    assert [r.range for r in server.requests] == [None]
    assert leftovers(tmp_path / "cache") == [payload.name]


def test_resumes_interrupted_transfer_with_range(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, script=["truncate"], then="ok")
    dest = fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, FAST)
    assert dest.read_bytes() == payload.data
    half = len(payload.data) // 2
    assert [r.range for r in server.requests] == [None, f"bytes={half}-"]


def test_resume_after_dropped_connection(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, script=["drop"], then="ok")
    dest = fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, FAST)
    assert dest.read_bytes() == payload.data
    assert len(server.requests) == 2


def test_server_ignoring_range_restarts_from_zero(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, script=["truncate"], then="full")
    dest = fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, FAST)
    assert dest.read_bytes() == payload.data  # not the first half twice
    assert server.requests[1].range == f"bytes={len(payload.data) // 2}-"


def test_transient_503_succeeds_after_retries(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, script=["503", "503"], then="ok")
    dest = fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, FAST)
    assert dest.read_bytes() == payload.data
    assert len(server.requests) == 3


def test_416_on_oversized_part_restarts(server, payload, tmp_path):
    url = server.add(payload.name, payload.data)
    dest = tmp_path / "cache" / payload.name
    dest.parent.mkdir()
    dest.with_name(dest.name + ".part").write_bytes(payload.data + b"junk!")
    fetch(payload.spec(url, size=False), url, dest, FAST)
    assert dest.read_bytes() == payload.data
    assert [r.range for r in server.requests] == [f"bytes={payload.size + 5}-", None]


def test_416_on_complete_part_keeps_it(server, payload, tmp_path):
    url = server.add(payload.name, payload.data)
    dest = tmp_path / "cache" / payload.name
    dest.parent.mkdir()
    dest.with_name(dest.name + ".part").write_bytes(payload.data)
    fetch(payload.spec(url, size=False), url, dest, FAST)
    assert dest.read_bytes() == payload.data
    assert [r.range for r in server.requests] == [f"bytes={payload.size}-"]
    assert leftovers(dest.parent) == [payload.name]


def test_cache_is_reused_without_network(server, payload, tmp_path):
    url = server.add(payload.name, payload.data)
    dest = tmp_path / "cache" / payload.name
    fetch(payload.spec(url), url, dest, FAST)
    server.httpd.shutdown()  # a request now would fail
    assert fetch(payload.spec(url), url, dest, FAST) == dest
    assert len(server.requests) == 1


def test_corrupt_cache_entry_is_fetched_again(server, payload, tmp_path):
    url = server.add(payload.name, payload.data)
    dest = tmp_path / "cache" / payload.name
    dest.parent.mkdir()
    dest.write_bytes(b"x" * payload.size)
    fetch(payload.spec(url), url, dest, FAST)
    assert dest.read_bytes() == payload.data
    assert len(server.requests) == 1


def test_file_url(payload, tmp_path):
    dest = fetch(payload.spec(), payload.path.as_uri(), tmp_path / "cache" / payload.name, FAST)
    assert dest.read_bytes() == payload.data


# --------------------------------------------------------------------------- fetch: failures


def test_404_fails_at_once(server, payload, tmp_path):
    url = server.url(payload.name)  # no route: 404
    cache = tmp_path / "cache"
    with pytest.raises(HTTPStatusError, match=r"HTTP 404 .* for http://127\.0\.0\.1") as info:
        fetch(payload.spec(url), url, cache / payload.name, FAST)
    assert info.value.status == 404
    assert info.value.url == url
    assert len(server.requests) == 1
    assert leftovers(cache) == []


def test_checksum_mismatch_fails_at_once(server, payload, tmp_path):
    wrong = bytes(reversed(payload.data))  # same size, other bytes
    url = server.add(payload.name, wrong)
    cache = tmp_path / "cache"
    expected = f"sha256 mismatch for {url}: expected {payload.sha256}, got "
    with pytest.raises(ChecksumError) as info:
        fetch(payload.spec(url), url, cache / payload.name, FAST)
    assert str(info.value).startswith(expected)
    assert len(server.requests) == 1
    assert leftovers(cache) == []


def test_size_mismatch_detected_from_headers(server, payload, tmp_path):
    url = server.add(payload.name, payload.data + b"extra")
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match=f"size mismatch for {url}: expected {payload.size}"):
        fetch(payload.spec(url), url, cache / payload.name, FAST)
    assert len(server.requests) == 1
    assert leftovers(cache) == []


def test_md5_is_verified_too(server, payload, tmp_path):
    url = server.add(payload.name, payload.data)
    spec = FileSpec(payload.name, url, payload.sha256, payload.size, md5="0" * 32)
    with pytest.raises(ChecksumError, match=f"md5 mismatch for {url}: expected 0000"):
        fetch(spec, url, tmp_path / "cache" / payload.name, FAST)
    assert leftovers(tmp_path / "cache") == []


def test_truncated_body_fails_after_retries(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, then="truncate")
    dest = tmp_path / "cache" / payload.name
    policy = RetryPolicy(retries=2, backoff_seconds=0.001, timeout_seconds=10)
    with pytest.raises(TransientError, match=f"giving up on {url} after 3 attempts") as info:
        fetch(payload.spec(url), url, dest, policy)
    half = len(payload.data) // 2
    assert f"truncated body from {url}: received {half} of {payload.size} bytes" in str(info.value)
    assert len(server.requests) == 3
    assert not dest.exists()  # only the .part file, kept for a later resume


def test_dropped_connection_fails_after_retries(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, then="drop")
    dest = tmp_path / "cache" / payload.name
    policy = RetryPolicy(retries=1, backoff_seconds=0.001, timeout_seconds=10)
    with pytest.raises(TransientError, match=f"giving up on {url} after 2 attempts"):
        fetch(payload.spec(url), url, dest, policy)
    assert len(server.requests) == 2
    assert not dest.exists()


def test_persistent_503_gives_up(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, then="503")
    policy = RetryPolicy(retries=2, backoff_seconds=0.001, timeout_seconds=10)
    with pytest.raises(TransientError, match=f"HTTP 503 .* from {url}"):
        fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, policy)
    assert len(server.requests) == 3


def test_connection_refused_is_retried_then_reported(payload, tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/{payload.name}"
    policy = RetryPolicy(retries=1, backoff_seconds=0.001, timeout_seconds=5)
    with pytest.raises(TransientError, match=f"giving up on {url} after 2 attempts: cannot fetch"):
        fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, policy)


def test_missing_file_url(payload, tmp_path):
    url = (tmp_path / "nope.gz").as_uri()
    with pytest.raises(DownloadError, match=f"cannot read {url}"):
        fetch(payload.spec(), url, tmp_path / "cache" / payload.name, FAST)
    assert leftovers(tmp_path / "cache") == []


# --------------------------------------------------------------------------- registry, params


def test_digits_pin_matches_installed_scikit_learn():
    assert DIGITS.files[0].url.startswith("file://")
    assert download.verify(DIGITS_PATH, DIGITS.files[0]) is None


def test_registry_pins_every_file():
    for spec in DATASETS.values():
        assert spec.files and len(spec.class_names) == 10 and len(spec.image_shape) == 3
        for f in spec.files:
            assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0
            assert f.size and f.size > 0
    assert DATASETS["cifar10"].files[0].md5 == "c32a1d4ab5d03f1284b67883e8d87530"
    assert (
        DATASETS["cifar10"].files[0].url
        == "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
    )


def test_resolve_urls_overrides():
    base = resolve_urls("mnist")
    assert base["t10k-labels-idx1-ubyte.gz"].startswith("https://ossci-datasets.s3.amazonaws.com/")
    mirrored = resolve_urls(
        "mnist",
        {
            "mirror": "http://mirror.example/mnist",
            "files": {"t10k-labels-idx1-ubyte.gz": {"url": "file:///data/labels.gz"}},
        },
    )
    assert mirrored["train-images-idx3-ubyte.gz"] == (
        "http://mirror.example/mnist/train-images-idx3-ubyte.gz"
    )
    assert mirrored["t10k-labels-idx1-ubyte.gz"] == "file:///data/labels.gz"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"mirror": "ftp://x/"}, "mirror must be an http/https/file URL"),
        ({"miror": "http://x/"}, "unknown source keys"),
        ({"files": {"nope.gz": {"url": "http://x/"}}}, "has no file 'nope.gz'"),
        ({"files": {"digits.csv.gz": "http://x/"}}, r"must be \{'url': URL\}"),
    ],
)
def test_resolve_urls_rejects_bad_sources(source, message):
    with pytest.raises(DatasetError, match=message):
        resolve_urls("digits", source)


def test_unknown_dataset():
    with pytest.raises(DatasetError, match="unknown dataset 'imagenet'; known datasets: cifar10"):
        resolve_urls("imagenet")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("{", "--params is not valid JSON"),
        ('{"retries": -1}', r"--params\.retries: -1 is less than the minimum of 0"),
        ('{"retries": 1.5}', r"--params\.retries: 1\.5 is not of type 'integer'"),
        ('{"timeout_seconds": 0}', r"--params\.timeout_seconds: 0 is less than or equal to"),
        ('{"backoff_seconds": NaN}', r"--params\.backoff_seconds: nan is not a finite number"),
        ('{"cache_dir": 3}', r"--params\.cache_dir: 3 is not of type 'string', 'null'"),
        ('{"bogus": 1}', r"'bogus' was unexpected"),
        ('{"source": {"mirror": 3}}', r"--params\.source\.mirror: 3 is not of type 'string'"),
        ('{"declared": [{"url": "http://h/a.npz"}]}', r"declared\[0\]: 'sha256' is a required"),
    ],
)
def test_parse_params_rejects(params, message):
    with pytest.raises(ConfigError, match=message):
        parse_params(params)


def test_parse_params_fills_the_schemas_defaults():
    parsed = parse_params("{}")
    assert parsed.policy == RetryPolicy(
        retries=4, backoff_seconds=1.0, timeout_seconds=60.0, deadline_seconds=3600.0
    )
    assert parsed.cache_dir is None and parsed.declared is None


# --------------------------------------------------------------------------- main()


def params(cache: Path, **extra) -> str:
    base = {"cache_dir": str(cache), "retries": 2, "backoff_seconds": 0.001, "timeout_seconds": 10}
    return json.dumps({**base, **extra})


def test_main_digits_offline_default(tmp_path):
    """A file:// source is read where it is: verified, never copied (not into the cache, not
    beside the manifest); the manifest records where it is."""
    cache, out = tmp_path / "cache", tmp_path / "raw" / "digits"
    rc = download.main(
        ["--dataset", "digits", "--params", params(cache), "--out", f"{out}/MANIFEST.json"]
    )
    assert rc == 0
    manifest = json.loads((out / "MANIFEST.json").read_text())
    f = DIGITS.files[0]
    assert manifest == {
        "dataset": "digits",
        "files": {
            f.name: {
                "sha256": f.sha256,
                "size": f.size,
                "url": f.url,
                "path": str(DIGITS_PATH),
                "stored": "in place",
            }
        },
    }
    assert leftovers(out) == ["MANIFEST.json"] and not cache.exists()

    # a second run replaces its own outputs cleanly; a copy an older version placed is removed
    (out / f.name).write_bytes(DIGITS_PATH.read_bytes())
    rc = download.main(
        ["--dataset", "digits", "--params", params(cache), "--out", f"{out}/MANIFEST.json"]
    )
    assert rc == 0
    assert leftovers(out) == ["MANIFEST.json"]


def test_a_damaged_file_source_is_refused_naming_it(tmp_path, capsys):
    source = tmp_path / "src" / "digits.csv.gz"
    source.parent.mkdir()
    source.write_bytes(DIGITS_PATH.read_bytes()[:-10] + b"0123456789")
    out = tmp_path / "raw"
    extra = {"source": {"files": {"digits.csv.gz": {"url": source.as_uri()}}}}
    argv = ["--dataset", "digits", "--params", params(tmp_path / "c", **extra)]
    assert download.main([*argv, "--out", f"{out}/MANIFEST.json"]) == 1
    err = capsys.readouterr().err
    assert f"sha256 mismatch for {source.as_uri()}: expected {DIGITS.files[0].sha256}" in err
    assert leftovers(out) == [] and source.read_bytes()[-10:] == b"0123456789"  # untouched


def test_main_over_http_mirror(server, tmp_path):
    data = DIGITS_PATH.read_bytes()
    server.add("mirror/digits.csv.gz", data, script=["503", "truncate"])
    cache, out = tmp_path / "cache", tmp_path / "raw"
    source = {"mirror": server.url("mirror")}
    rc = download.main(
        [
            "--dataset",
            "digits",
            "--params",
            params(cache, source=source),
            "--out",
            f"{out}/MANIFEST.json",
        ]
    )
    assert rc == 0
    manifest = json.loads((out / "MANIFEST.json").read_text())
    entry = manifest["files"]["digits.csv.gz"]
    assert entry["url"] == server.url("mirror/digits.csv.gz") and entry["stored"] == "cache"
    cached = cache / "digits" / "digits.csv.gz"
    assert entry["path"] == str(cached) and cached.read_bytes() == data
    assert leftovers(out) == ["MANIFEST.json"]  # stored once, in the cache
    assert [r.range for r in server.requests] == [None, None, f"bytes={len(data) // 2}-"]


@pytest.mark.parametrize(
    ("then", "message"),
    [
        ("404", "HTTP 404 .* for http://"),
        ("wrong", "sha256 mismatch for http://.*: expected 09f66e6d"),
        ("truncate", "giving up on http://.* truncated body"),
        ("drop", "giving up on http://.* after 3 attempts"),
    ],
)
def test_main_failures_leave_no_outputs(server, tmp_path, capsys, then, message):
    data = DIGITS_PATH.read_bytes()
    if then == "wrong":
        data, then = bytes(reversed(data)), "ok"
    server.add("m/digits.csv.gz", data, then=then)
    cache, out = tmp_path / "cache", tmp_path / "raw"
    rc = download.main(
        [
            "--dataset",
            "digits",
            "--params",
            params(cache, source={"mirror": server.url("m/")}),
            "--out",
            f"{out}/MANIFEST.json",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith("download: error: ")
    assert re.search(message, err), err
    assert leftovers(out) == []
    assert not (cache / "digits" / "digits.csv.gz").exists()


def test_main_rejects_bad_input_before_any_request(server, tmp_path, capsys):
    server.add("m/digits.csv.gz", b"")
    out = tmp_path / "raw" / "MANIFEST.json"
    cache = tmp_path / "cache"
    for dataset, extra in [
        ("imagenet", {}),
        ("digits", {"source": {"mirror": "gopher://x"}}),
        ("digits", {"retries": "many"}),
    ]:
        rc = download.main(
            ["--dataset", dataset, "--params", params(cache, **extra), "--out", str(out)]
        )
        assert rc == 2
    assert server.requests == []
    assert not out.parent.exists() or leftovers(out.parent) == []
    assert capsys.readouterr().err.count("download: error: ") == 3


def test_damage_to_the_cache_is_found_and_the_file_fetched_again(server, tmp_path):
    """The manifest points at the one copy, in the cache: damage to it is found against the
    manifest's sha256 (the workflow's check at every invocation), and the download then
    fetches the file again instead of using it."""
    from clusterbench.core import integrity

    url = server.add("m/digits.csv.gz", DIGITS_PATH.read_bytes())
    cache, out = tmp_path / "cache", tmp_path / "raw"
    extra = {"source": {"mirror": url.rsplit("/", 1)[0]}}
    argv = ["--dataset", "digits", "--params", params(cache, **extra)]
    argv += ["--out", f"{out}/MANIFEST.json"]
    assert download.main(argv) == 0
    cached = cache / "digits" / "digits.csv.gz"
    assert integrity.recorded_problems(out / "MANIFEST.json", "files", strict=True) == []
    with open(cached, "r+b") as fh:  # damaged in place, as a disk or a user might
        fh.write(b"XXXX")
    assert integrity.recorded_problems(out / "MANIFEST.json", "files", strict=True) == [
        f"{cached} differs from what was written (sha256)"
    ]
    requests = len(server.requests)
    assert download.main(argv) == 0  # the damaged cache copy is fetched again, not used
    assert cached.read_bytes() == DIGITS_PATH.read_bytes() and len(server.requests) > requests
    assert integrity.recorded_problems(out / "MANIFEST.json", "files", strict=True) == []


def mirrored(server) -> dict:
    """Params taking digits from a mirror on loopback (so that it goes into the cache)."""
    url = server.add("mirror-digits/digits.csv.gz", DIGITS_PATH.read_bytes())
    return {"source": {"mirror": url.rsplit("/", 1)[0]}}


def test_cache_dir_from_environment(server, tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERBENCH_CACHE", str(tmp_path / "env-cache"))
    out = tmp_path / "raw"
    where = json.dumps(mirrored(server))
    rc = download.main(["--dataset", "digits", "--params", where, "--out", f"{out}/MANIFEST.json"])
    assert rc == 0
    assert (tmp_path / "env-cache" / "datasets" / "digits" / "digits.csv.gz").is_file()


def test_script_entry_point(tmp_path):
    out = tmp_path / "raw" / "MANIFEST.json"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/download.py",
            "--dataset",
            "digits",
            "--params",
            params(tmp_path / "cache"),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["dataset"] == "digits"
    assert "%|" not in proc.stderr  # no progress bar when stderr is not a terminal


def test_main_flags_override_params(server, tmp_path: Path):
    """The workflow passes retries/cache as flags (no rerun trigger); they win over --params."""
    out = tmp_path / "out"
    flag_cache = tmp_path / "flag-cache"
    rc = download.main(
        [
            "--dataset",
            "digits",
            "--params",
            params(tmp_path / "param-cache", **mirrored(server)),
            "--cache-dir",
            str(flag_cache),
            "--retries",
            "0",
            "--out",
            f"{out}/MANIFEST.json",
        ]
    )
    assert rc == 0
    assert (flag_cache / "digits" / "digits.csv.gz").is_file()
    assert not (tmp_path / "param-cache").exists()


def test_main_reads_settings_from_environment(server, tmp_path: Path, monkeypatch):
    """The workflow passes download settings in $CLUSTERBENCH_DOWNLOAD (not a rerun trigger)."""
    env_cache = tmp_path / "env-cache"
    monkeypatch.setenv(download.SETTINGS_ENV, json.dumps({"cache_dir": str(env_cache)}))
    out = tmp_path / "out"
    where = params(tmp_path / "p", **mirrored(server))
    rc = download.main(["--dataset", "digits", "--params", where, "--out", f"{out}/MANIFEST.json"])
    assert rc == 0
    assert (env_cache / "digits" / "digits.csv.gz").is_file()
    monkeypatch.setenv(download.SETTINGS_ENV, "[1]")
    assert download.main(["--dataset", "digits", "--params", "{}", "--out", str(out / "M")]) == 2


def test_retries_stop_at_the_download_deadline(server, payload, tmp_path):
    url = server.add(payload.name, payload.data, then="503")
    policy = RetryPolicy(retries=10, backoff_seconds=0.3, timeout_seconds=5, deadline_seconds=0.5)
    with pytest.raises(TransientError, match=r"would pass download\.deadline_seconds=0\.5"):
        fetch(payload.spec(url), url, tmp_path / "cache" / payload.name, policy)
    assert len(server.requests) == 2  # 0.3 s wait, then the next 0.6 s would pass 0.5 s


def test_a_malformed_url_fails_at_once_without_retries(payload, tmp_path):
    policy = RetryPolicy(retries=5, backoff_seconds=10, timeout_seconds=5)
    url = "http://127.0.0.1:9/a b.gz"
    with pytest.raises(DownloadError, match=r"malformed URL 'http://127\.0\.0\.1:9/a b") as err:
        fetch(payload.spec("x"), url, tmp_path / "f", policy)
    assert not isinstance(err.value, TransientError)


@pytest.mark.parametrize("where", ["proc", "file"])
def test_a_cache_that_cannot_be_made_is_a_bad_setting_not_a_traceback(
    server, tmp_path, capsys, where
):
    """As root, os.access grants /proc; making the folder is what fails (exit 2, named). (A
    file:// source needs no cache: it is read where it is.)"""
    if where == "file":
        (tmp_path / "file").write_text("x")
        cache = tmp_path / "file" / "cache"
    else:
        cache = Path("/proc/nope")
    out = tmp_path / "raw" / "digits"
    where = params(cache, **mirrored(server))
    rc = download.main(["--dataset", "digits", "--params", where, "--out", f"{out}/MANIFEST.json"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"download: error: the download cache {cache}/digits cannot be created: " in err
    assert "set download.cache_dir to a folder you can write" in err
    assert not out.exists()
