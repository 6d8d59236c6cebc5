"""``clusterbench-launch``: the command line.

    clusterbench-launch --np W [--backend auto|horovod|ddp]
                        [--min-np A --max-np B [--grow jobs [--grow-resources JSON]
                        [--grow-site KEY=VALUE ...] [--grow-record PATH]]]
                        [--scheduler auto|<name>]
                        [--iface IF] [--timeout S] [--log-level L] [--lock PATH] -- CMD ARGS...

:func:`parse_args` reads the options, :func:`main` runs a fixed-size launch
(:mod:`clusterbench.launch.fixed`), or with ``--min-np``/``--max-np`` Horovod elastic's
(:mod:`clusterbench.launch.elastic`). With ``--lock`` one launch at a time runs a training
(:mod:`clusterbench.launch.exclusive`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from clusterbench.launch import elastic, fixed, horovod_runner, schedulers
from clusterbench.launch.exclusive import RunLock, describe
from clusterbench.launch.schedulers import AllocationError, LaunchError

log = logging.getLogger("clusterbench.launch")

#: What the ranks of a launch run: the training backends (clusterbench.backends).
BACKENDS = ("horovod", "ddp")
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")
# Launcher verbosity for each Horovod log level; without one the launcher logs at INFO.
_PY_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.INFO,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


# ------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    """The options before ``--``."""
    parser = argparse.ArgumentParser(
        prog="clusterbench-launch",
        description="Start one rank per slot of the current allocation (torch.distributed's "
        "variables for every rank; with --backend horovod also Horovod's rendezvous).",
        epilog="Environment: CLUSTERBENCH_SCHEDULER, CLUSTERBENCH_IFACE, CLUSTERBENCH_LOG_LEVEL, "
        "CLUSTERBENCH_GLOO_TIMEOUT (the flags win), CLUSTERBENCH_HOSTS_FILE (the hosts an elastic "
        "launch may use). SIGINT/SIGTERM stop every rank; SIGUSR1 is passed on to every rank.",
    )
    parser.add_argument("--np", type=int, required=True, help="number of ranks")
    parser.add_argument(
        "--backend",
        choices=("auto", *BACKENDS),
        default="auto",
        help="what the ranks run: horovod (Horovod's rendezvous and HOROVOD_* variables beside "
        "torch.distributed's), ddp (torch.distributed's alone: no Horovod needed), or auto "
        "(default: horovod where Horovod is installed, else ddp); elastic launches are Horovod's",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="the scheduler whose allocation this runs in: auto (default: the first of "
        f"{', '.join(schedulers.SCHEDULERS)} whose job this is), or one of them",
    )
    # its old name: deprecated, still accepted (with a warning, see main)
    parser.add_argument("--launcher", dest="old_scheduler", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--min-np",
        type=int,
        default=None,
        help="Horovod elastic: the fewest ranks the training may go on with (with --max-np)",
    )
    parser.add_argument(
        "--max-np",
        type=int,
        default=None,
        help="Horovod elastic: the most ranks; it starts on every slot the scheduler's hosts "
        "give (at least --np), up to this many, and ranks join and leave as they change",
    )
    add_grow_options(parser)
    parser.add_argument("--iface", default=None, help="network interface for Gloo")
    parser.add_argument(
        "--timeout", default=None, help="Gloo timeout in seconds (HOROVOD_GLOO_TIMEOUT_SECONDS)"
    )
    parser.add_argument(
        "--log-level",
        default=None,
        help=f"the ranks' communication log level ({', '.join(LOG_LEVELS)}): HOROVOD_LOG_LEVEL, "
        "NCCL_DEBUG and TORCH_DISTRIBUTED_DEBUG (clusterbench.launch.common.LOG_VARIABLES)",
    )
    parser.add_argument(
        "--lock",
        default=None,
        metavar="PATH",
        help="hold an exclusive lock on PATH while the ranks run: a second launch with the same "
        "PATH waits for the first to end, and starts no rank if that one succeeded meanwhile "
        "(two jobs of one run: a requeued one and its retry)",
    )
    return parser


def add_grow_options(parser: argparse.ArgumentParser) -> None:
    """The options of an elastic launch that grows through worker jobs (``--grow jobs``)."""
    parser.add_argument(
        "--grow",
        choices=("none", "jobs"),
        default="none",
        help="Horovod elastic: jobs = keep one worker job queued per slot beyond --np, up to "
        "--max-np; each one's rank joins when it starts and leaves when it ends (Slurm, SGE)",
    )
    parser.add_argument(
        "--grow-resources",
        default=None,
        metavar="JSON",
        help='--grow jobs: where worker jobs go, when not where this job went: {"slurm_partition": '
        '..., "qos": ..., "sge_queue": ...}',
    )
    parser.add_argument(
        "--grow-site",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--grow jobs: where worker jobs go by the site's profile (slurm_partition, qos, "
        "sge_queue; an empty VALUE: not set); --grow-resources wins. Ignored without --grow jobs",
    )
    parser.add_argument(
        "--grow-record",
        default=None,
        metavar="PATH",
        help="--grow jobs: write what happened to every worker job there (JSON), for the ranks",
    )


def parse_args(argv: Sequence[str], env: Mapping[str, str]) -> argparse.Namespace:
    """The options before ``--`` (flags win over the CLUSTERBENCH_* variables), the command
    after it in ``.command``."""
    argv = list(argv)
    parser = build_parser()
    if "--" not in argv:
        parser.parse_known_args(argv)  # --help, or an error about the options themselves
        raise LaunchError("missing '--' before the command to run (... --np W -- CMD ARGS)")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    args = parser.parse_args(options)
    if not command:
        raise LaunchError("no command after '--'")
    args.command = command
    args.deprecated = []
    if args.old_scheduler is not None:
        args.deprecated.append(
            "--launcher is deprecated (the launcher is this program, the scheduler what it runs "
            f"under): use --scheduler {args.old_scheduler}"
        )
        args.scheduler = args.scheduler or args.old_scheduler
    if args.backend == "auto":  # an elastic launch is Horovod's, installed or not (then named)
        wants = horovod_runner.available() or args.min_np is not None
        args.backend = "horovod" if wants else "ddp"
    check_sizes(args)
    read_environment(args, env)
    return args


def check_sizes(args: argparse.Namespace) -> None:
    """``--np`` and the elastic bounds: a :class:`LaunchError` naming the ones that disagree."""
    if args.np < 1:
        raise LaunchError(f"--np must be at least 1, got {args.np}")
    if (args.min_np is None) != (args.max_np is None):
        raise LaunchError("elastic training needs both --min-np and --max-np")
    if args.min_np is not None and args.backend != "horovod":
        raise LaunchError(
            f"elastic training (--min-np/--max-np) is Horovod's: not --backend {args.backend}"
        )
    if args.min_np is not None and not 1 <= args.min_np <= args.np <= args.max_np:
        raise LaunchError(
            f"elastic bounds must satisfy 1 <= --min-np ({args.min_np}) <= --np ({args.np}) "
            f"<= --max-np ({args.max_np})"
        )
    args.grow_resources = grow_resources(args)


def grow_resources(args: argparse.Namespace) -> dict[str, str]:
    """``--grow-resources`` read (a JSON object of strings), after ``--grow`` was checked."""
    if args.grow == "none":
        if args.grow_resources or args.grow_record:
            raise LaunchError("--grow-resources and --grow-record go with --grow jobs")
        grow_site(args.grow_site)  # checked, but no worker jobs: nowhere to send them
        return {}
    if args.min_np is None:
        raise LaunchError("--grow jobs grows an elastic launch: give --min-np and --max-np")
    if args.max_np <= args.np:
        raise LaunchError(
            f"--grow jobs adds worker jobs beyond --np ({args.np}) up to --max-np "
            f"({args.max_np}): none to add"
        )
    try:
        value = json.loads(args.grow_resources or "{}")
    except ValueError as exc:
        raise LaunchError(f"--grow-resources is not JSON: {exc}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise LaunchError(f"--grow-resources must be an object of strings: {args.grow_resources}")
    return {**grow_site(args.grow_site), **value}


#: The keys of ``--grow-site`` (and of ``--grow-resources``).
GROW_KEYS = ("slurm_partition", "qos", "sge_queue")


def grow_site(pairs: Sequence[str]) -> dict[str, str]:
    """``--grow-site KEY=VALUE`` options read: the site's places for worker jobs (the train
    rule's ``grow_*`` resources, from the profile), those with a VALUE."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in GROW_KEYS:
            raise LaunchError(
                f"--grow-site {pair!r}: expected KEY=VALUE with KEY one of {', '.join(GROW_KEYS)}"
            )
        if value:
            found[key] = value
    return found


def read_environment(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """The settings a flag or a ``CLUSTERBENCH_*`` variable gives (the flag wins), checked;
    ``args.origins``: where the interface and the log level came from (the flag, the variable,
    or none), which every rank gets (:data:`clusterbench.core.rank_env.NETWORK_FROM_VAR`)."""
    args.origins = {
        "iface": origin(args.iface, env, "CLUSTERBENCH_IFACE", "--iface"),
        "log_level": origin(args.log_level, env, "CLUSTERBENCH_LOG_LEVEL", "--log-level"),
    }
    args.iface = args.iface or env.get("CLUSTERBENCH_IFACE") or None
    level = args.log_level or env.get("CLUSTERBENCH_LOG_LEVEL") or None
    if level is not None and level.lower() not in LOG_LEVELS:
        raise LaunchError(f"unknown log level {level!r}: choose one of {', '.join(LOG_LEVELS)}")
    args.log_level = level.lower() if level else None
    timeout = args.timeout or env.get("CLUSTERBENCH_GLOO_TIMEOUT") or None
    if timeout is not None:
        try:
            args.timeout = int(timeout)
        except ValueError:
            args.timeout = 0
        if args.timeout <= 0:
            raise LaunchError(f"the Gloo timeout must be a positive number of seconds: {timeout!r}")


def origin(flag: str | None, env: Mapping[str, str], var: str, name: str) -> str | None:
    """Where a setting came from: the flag ``name`` (the workflow passes the config's value as
    it), the variable ``var``, or None (neither: the launcher's choice, the libraries'
    defaults)."""
    if flag:
        return name
    return var if env.get(var) else None


class _StderrHandler(logging.StreamHandler):
    """A handler writing to the current ``sys.stderr``, also when it was replaced since."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, env)
    except LaunchError as exc:
        print(f"clusterbench-launch: error: {exc}", file=sys.stderr)
        return 2
    level = _PY_LEVELS[args.log_level] if args.log_level else logging.INFO
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[launch] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level)
    for warning in args.deprecated:
        log.warning(warning)
    if args.min_np is not None:  # Horovod elastic: its own plan and driver
        prepare_plan, run_plan = elastic.prepare, elastic.run
    else:
        prepare_plan, run_plan = fixed.prepare, fixed.run
    lock = RunLock(args.lock) if args.lock else None
    if lock is not None:
        try:
            if not lock.acquire():
                log.info(
                    "%s finished this training with success while this one waited: nothing "
                    "left to do, no rank started",
                    describe(lock.before),
                )
                lock.release()
                return 0
        except OSError as exc:
            log.warning("cannot lock %s (%s): going on without the lock", args.lock, exc)
            lock = None
    exit_code = None
    try:
        try:
            plan = prepare_plan(args, env)
        except (LaunchError, AllocationError) as exc:
            print(f"clusterbench-launch: error: {exc}", file=sys.stderr)
            exit_code = 2
            return exit_code
        exit_code = run_plan(plan)
        return exit_code
    finally:
        if lock is not None:
            lock.release(exit_code)


def cli() -> None:
    sys.exit(main())
