"""What the launcher (:mod:`clusterbench.launch`) tells every rank it starts, beside Horovod's
and ``torch.distributed``'s variables: the names of those environment variables, and the
record of an elastic run's worker jobs that rank 0 reads. Both sides import them from here.

Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: ``<launch tag>.<rank>``: which launch a rank belongs to (and how a local rank is found).
RANK_ID_VAR = "CLUSTERBENCH_RANK_ID"
#: The node a rank runs on, as its scheduler names it (Horovod's host may be a local slot or a
#: worker job).
NODE_VAR = "CLUSTERBENCH_NODE"
#: Every rank's CPUs (its job's CPUs per task): a run's CPU-hours.
CPUS_PER_RANK_VAR = "CLUSTERBENCH_CPUS_PER_RANK"
#: ``grow: jobs``: the launcher's record of the run's worker jobs (JSON, rewritten atomically).
GROW_RECORD_VAR = "CLUSTERBENCH_GROW_RECORD"


def read_grow_record(path: str | Path | None) -> dict[str, Any] | None:
    """The launcher's record of the worker jobs at ``path`` (None: no path, no file yet, or not
    a JSON object: the launcher rewrites it whole at its next change)."""
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return dict(data) if isinstance(data, Mapping) else None
