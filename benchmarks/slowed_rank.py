"""A rank on a shared core, for the uneven-workers bench (F16): ``slowed_rank.py CMD ...`` under
``clusterbench.launch``. Each rank is pinned to one core of its affinity mask (its local
rank's); the rank ``$BENCH_SLOW_RANK`` shares its core with a busy loop (a neighbour's job on
that core), so it computes at about half its speed. Then the rank becomes ``CMD`` (exec: the
same process, its environment and pid); the loop ends when the rank does.
"""

from __future__ import annotations

import os
import sys


def busy_until_parent_ends(parent: int) -> None:
    """Spin on this core; end once ``parent`` (the rank) has ended (this process is then
    another's child)."""
    count = 0
    while True:
        count += 1
        if count % 1_000_000 == 0 and os.getppid() != parent:
            os._exit(0)


def main() -> None:
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    os.sched_setaffinity(0, {core})
    if rank == int(os.environ.get("BENCH_SLOW_RANK", "-1")):
        parent = os.getpid()
        if os.fork() == 0:  # the neighbour: the same core
            busy_until_parent_ends(parent)
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
