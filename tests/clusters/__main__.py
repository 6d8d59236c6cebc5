"""Command line for the test clusters (run from the repository root).

    python -m tests.clusters install [slurm] [sge] [ssh]  # apt-get install what is missing (root)
    python -m tests.clusters slurm up --dir DIR        # start a dev cluster in DIR, print env
    python -m tests.clusters slurm env --dir DIR       # print its environment (export lines)
    python -m tests.clusters slurm down --dir DIR      # stop it (by pid file), delete DIR
    python -m tests.clusters sge up|env|down --dir DIR
    python -m tests.clusters ssh up|env|down --dir DIR  # two namespaces, an sshd in each

``eval "$(python -m tests.clusters slurm env --dir DIR)"`` points sbatch/sacct/... at it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from . import CLUSTERS, Cluster, ClusterError, ClusterUnavailable, install


def _exports(cluster: Cluster) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(cluster.env.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.clusters",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help="install the Debian packages the clusters need")
    p_install.add_argument(
        "kinds", nargs="*", metavar="{slurm,sge,ssh}", help="which clusters (default: all)"
    )
    for kind in CLUSTERS:
        p = sub.add_parser(kind, help=f"start/stop a standalone {kind} dev cluster")
        p.add_argument("action", choices=["up", "down", "env"])
        p.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
        p.add_argument("--keep", action="store_true", help="down: keep DIR (logs) after stopping")
    args = parser.parse_args(argv)

    try:
        if args.command == "install":
            unknown = set(args.kinds) - set(CLUSTERS)
            if unknown:
                parser.error(f"unknown cluster kind(s): {' '.join(sorted(unknown))}")
            done = install(args.kinds or list(CLUSTERS), quiet=False)
            print(f"installed: {' '.join(done)}" if done else "all packages already installed")
            return 0
        cls = CLUSTERS[args.command]
        if args.action == "up":
            if args.dir.exists() and any(args.dir.iterdir()):
                parser.error(f"--dir {args.dir} exists and is not empty")
            install((args.command,), quiet=False)
            cluster = cls(args.dir).start()
            print(f"# {args.command} cluster running in {cluster.base}", file=sys.stderr)
            print(_exports(cluster), end="")
        elif args.action == "env":
            print(_exports(cls.attach(args.dir)), end="")
        else:
            cls.attach(args.dir).stop(remove=not args.keep)
            print(f"# {args.command} cluster in {args.dir} stopped", file=sys.stderr)
    except (ClusterError, ClusterUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
