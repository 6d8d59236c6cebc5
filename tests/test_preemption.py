"""clusterbench.core.preemption in a real process: warnings recorded, not fatal, also at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from clusterbench.core import preemption

# Registered before install(), so it runs after install()'s own exit function (atexit is
# last-in, first-out): it prints which warnings the process ignores as it ends.
CHILD = textwrap.dedent(
    """
    import atexit, os, signal, sys
    from clusterbench.core import preemption

    def disposition_at_exit():
        ignored = int(
            [l for l in open("/proc/self/status") if l.startswith("SigIgn:")][0].split()[1], 16
        )
        print(" ".join(
            str(sig.name) for sig in preemption.WARNING_SIGNALS if ignored >> (sig - 1) & 1
        ))

    atexit.register(disposition_at_exit)
    preemption.install()
    os.kill(os.getpid(), signal.SIGUSR1)
    print("warned", preemption.warned())
    sys.exit(preemption.EXIT_PREEMPTED)
    """
)


def test_a_warned_rank_records_the_warning_and_ignores_further_ones_as_it_exits():
    """A second copy of a warning arriving during interpreter teardown, where CPython puts
    Python-level handlers back to the default action, must not turn exit 75 into 138."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == preemption.EXIT_PREEMPTED, done.stderr
    assert done.stdout.splitlines() == ["warned True", "SIGUSR1 SIGUSR2"]


def test_checks_fall_every_n_steps_but_not_at_the_epoch_end():
    due = [s for s in range(1, 11) if preemption.check_due(s, 10, 3)]
    assert due == [3, 6, 9]
