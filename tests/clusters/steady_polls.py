"""Snakemake as the tests run it, with the executor plugins' status polls kept steady.

Both executor plugins (slurm 2.8, sge 0.6) add 10 s to the wait before the next status poll
after every poll that saw no job finish, up to 180 s. That suits a shared cluster; on the test
clusters, whose jobs last seconds, it made Snakemake see a job end 10-40 s after it had ended,
and the cluster tests spent most of their time waiting on it. Here the wait never grows past
``--seconds-between-status-checks``: only how often Snakemake asks changes, not what it asks
or what the plugins do with the answer. Without a remote executor (the local profile) nothing
changes at all.

The SGE plugin also waits a fixed 30 s before its first poll (its ``common_settings``, which
no option sets); here it waits :data:`SGE_FIRST_POLL_S`. And it takes a job that has left
``qstat`` for finished only 20 s after its submission, in case ``qacct`` holds an older job of
the same id: the test cell is new in each session, its accounting starts empty and its ids are
never reused, so here that grace is 3 s (the plugin notes each submission's time
:data:`SGE_GRACE_CUT_S` early; its only other use of that clock is the age of its log files, in
days).

Used as ``python tests/clusters/steady_polls.py <snakemake arguments>``
(:func:`conftest.snakemake_cmd`).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import types

import snakemake_executor_plugin_sge as sge
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

#: The SGE plugin's wait before its first status poll, in seconds (it ships 30).
SGE_FIRST_POLL_S = 1
#: How much of the SGE status query's 20 s grace after a submission is cut.
SGE_GRACE_CUT_S = 17


def steady(executor: RemoteExecutor, seconds: float) -> None:
    """The plugin's next wait, at most ``--seconds-between-status-checks``."""
    most = executor.workflow.remote_execution_settings.seconds_between_status_checks
    executor._next_seconds_between_status_checks = min(seconds, most)


def keep_polls_steady() -> None:
    prop = RemoteExecutor.__dict__["next_seconds_between_status_checks"]
    RemoteExecutor.next_seconds_between_status_checks = prop.setter(steady)
    sge.common_settings = dataclasses.replace(
        sge.common_settings, init_seconds_before_status_checks=SGE_FIRST_POLL_S
    )
    sge.time = types.SimpleNamespace(time=lambda: time.time() - SGE_GRACE_CUT_S)


if __name__ == "__main__":
    keep_polls_steady()
    from snakemake.cli import main

    sys.argv[0] = "snakemake"
    main()
