"""What the config's runs need installed beside the workflow's own packages: Horovod, for the
runs that train with it (``backend: horovod``, the default, and every elastic run).

Horovod is optional: ``make setup`` builds it only where the config has a Horovod run (or
``HOROVOD=1``), and an install without it trains DDP runs. A Horovod run in such an install
is refused while the Snakefile is parsed, before any job, naming the runs and how to install
it (:func:`missing`): the jobs run the Python of the Snakemake that plans them
(:meth:`clusterbench.pipeline.Pipeline.environment`), so what this Python has is what they
have.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from clusterbench.launch.horovod_runner import INSTALL_HINT, available


def horovod_runs(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The names of the runs that train with Horovod, in order."""
    return [name for name, run in runs.items() if run.get("backend") == "horovod"]


def missing(
    runs: Mapping[str, Mapping[str, Any]],
    installed: Callable[[], bool] = available,
    python: str = sys.executable,
) -> str | None:
    """Why the runs cannot train here (a message), None when they can."""
    users = horovod_runs(runs)
    if not users or installed():
        return None
    shown = ", ".join(users[:5]) + (f" (and {len(users) - 5} more)" if len(users) > 5 else "")
    return (
        f"run(s) {shown} train with backend: horovod (the default), but Horovod is not "
        f"installed in this environment ({python}): {INSTALL_HINT} (for every run: "
        "run_defaults: {backend: ddp})"
    )
