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
#: The communication log level in force (the launcher's ``--log-level``, else this variable
#: as the user set it): the launcher sets it for every rank to the level it applied.
LOG_LEVEL_VAR = "CLUSTERBENCH_LOG_LEVEL"
#: Where the interface and the log level came from (JSON ``{"iface", "log_level"}``: the
#: launcher's flag, its environment variable, or null).
NETWORK_FROM_VAR = "CLUSTERBENCH_NETWORK_FROM"
#: The variables a rank's communication reads for its interface and its debug output, as
#: run.json records them (:func:`network_facts`).
NETWORK_VARS = (
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "HOROVOD_GLOO_IFACE",
    "HOROVOD_LOG_LEVEL",
    "NCCL_DEBUG",
    "TORCH_DISTRIBUTED_DEBUG",
)


def network_facts(env: Mapping[str, str]) -> dict[str, Any]:
    """What a rank's environment says of its network and debug output: the interface its
    libraries use, the log level and where each came from (:data:`NETWORK_FROM_VAR`: the
    launcher's flag, its variable, or None), and :data:`NETWORK_VARS` as set."""
    try:
        origins = json.loads(env.get(NETWORK_FROM_VAR) or "{}")
    except ValueError:
        origins = {}
    origins = origins if isinstance(origins, dict) else {}
    iface = env.get("GLOO_SOCKET_IFNAME") or env.get("HOROVOD_GLOO_IFACE") or None
    return {
        "iface": iface,
        "iface_from": origins.get("iface"),
        "log_level": env.get(LOG_LEVEL_VAR) or None,
        "log_level_from": origins.get("log_level"),
        "variables": {k: env[k] for k in NETWORK_VARS if env.get(k)},
    }


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
