"""Real Slurm and SGE test clusters, started from Debian packages on this one machine.

``SlurmCluster`` (two ``slurmd`` nodes + slurmctld + slurmdbd/MariaDB + munged), ``SgeCell``
(qmaster + execd, queue ``all.q``, PEs ``smp`` and ``mpi``) and ``SshHosts`` (two network
namespaces joined by a veth pair, an sshd in each) each live under one directory and are
stopped by the pids in their pid files. pytest fixtures: :mod:`tests.clusters.fixtures`.
Command line (developers, CI): ``python -m tests.clusters --help``.
"""

from .common import Cluster, ClusterError, ClusterUnavailable, install, missing_packages
from .sge import SgeCell
from .slurm import SlurmCluster
from .ssh import SshHosts

CLUSTERS: dict[str, type[Cluster]] = {"slurm": SlurmCluster, "sge": SgeCell, "ssh": SshHosts}

__all__ = [
    "CLUSTERS",
    "Cluster",
    "ClusterError",
    "ClusterUnavailable",
    "SgeCell",
    "SlurmCluster",
    "SshHosts",
    "install",
    "missing_packages",
]
