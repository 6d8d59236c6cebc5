"""Session-scoped pytest fixtures that start the test clusters (import them in conftest.py).

``slurm_cluster`` / ``sge_cluster`` / ``ssh_hosts`` install the Debian packages when missing,
start a private cluster (two ssh hosts) under a temporary directory, yield it
(:class:`~tests.clusters.common.Cluster`: ``.env``, ``.environ()``, ``.run(cmd)``, ``.nodes``
...) and stop every daemon it started, by pid file, at the end of the session — also when tests
fail. The temporary directory is removed unless
``CLUSTERBENCH_KEEP_CLUSTER=1``.

``CLUSTERBENCH_SLURM_DIR`` / ``CLUSTERBENCH_SGE_DIR`` / ``CLUSTERBENCH_SSH_DIR``: use the already
running dev cluster in that directory (``python -m tests.clusters slurm up --dir DIR``) instead;
it is left running.

When the packages cannot be installed the fixture skips, or fails when ``CI`` is true.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from . import CLUSTERS, Cluster, ClusterUnavailable, install


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def cluster_session(kind: str) -> Iterator[Cluster]:
    """Start (or attach to) the ``kind`` cluster, yield it, stop it: the fixtures' body."""
    cls = CLUSTERS[kind]
    existing = os.environ.get(f"CLUSTERBENCH_{kind.upper()}_DIR")
    if existing:
        yield cls.attach(existing)
        return
    try:
        install((kind,))
    except ClusterUnavailable as exc:
        message = f"{kind} test cluster unavailable: {exc}"
        if _truthy(os.environ.get("CI")):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    base = tempfile.mkdtemp(prefix=f"cb-{kind}-")
    cluster = cls(base)
    keep = _truthy(os.environ.get("CLUSTERBENCH_KEEP_CLUSTER"))
    try:
        try:
            cluster.start()
        except ClusterUnavailable as exc:  # e.g. no network namespaces without root
            message = f"{kind} test cluster unavailable: {exc}"
            if _truthy(os.environ.get("CI")):
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        yield cluster
    finally:
        cluster.stop(remove=not keep)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    """A running two-node Slurm cluster (``SlurmCluster``) for the whole test session."""
    yield from cluster_session("slurm")


@pytest.fixture(scope="session")
def sge_cluster() -> Iterator[Cluster]:
    """A running SGE cell (``SgeCell``) for the whole test session."""
    yield from cluster_session("sge")


@pytest.fixture(scope="session")
def ssh_hosts() -> Iterator[Cluster]:
    """Two ssh hosts (``SshHosts``: two network namespaces joined by a veth pair, an sshd in
    each) for the whole test session."""
    yield from cluster_session("ssh")
