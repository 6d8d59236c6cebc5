"""clusterbench.core.provenance: the GPU driver probe (pure parsers on sample output) and the
gathering of every rank's facts into run.json's per-host provenance (a fake runtime; the real
2-rank runs are in test_train.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from clusterbench.core import provenance
from clusterbench.core.provenance import merge_ranks, parse_nvidia_smi, parse_proc_driver_version

# --------------------------------------------------------------------------------------------
# GPU names and driver version

SMI_TWO_GPUS = """\
NVIDIA H100 80GB HBM3, 550.54.15
NVIDIA H100 80GB HBM3, 550.54.15
"""
PROC_CLOSED = """\
NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023
GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)
"""
PROC_OPEN = """\
NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  \
(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024
GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)
"""
PROC_AARCH64 = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.10  Release\n"


@pytest.mark.parametrize(
    ("text", "names", "driver"),
    [
        (SMI_TWO_GPUS, ["NVIDIA H100 80GB HBM3"] * 2, "550.54.15"),
        ("Tesla V100-SXM2-16GB, 470.82.01\n", ["Tesla V100-SXM2-16GB"], "470.82.01"),
        ("NVIDIA A100, 535.1\nNVIDIA A100, 535.2\n", ["NVIDIA A100"] * 2, "535.1/535.2"),
        ("NVIDIA A100, [N/A]\n", ["NVIDIA A100"], "unknown"),
        ("NVIDIA A100\n", ["NVIDIA A100"], "unknown"),  # no driver column
        ("", [], None),
        ("\n  \n", [], None),
    ],
)
def test_parse_nvidia_smi(text, names, driver):
    assert parse_nvidia_smi(text) == (names, driver)


@pytest.mark.parametrize(
    ("text", "driver"),
    [
        (PROC_CLOSED, "535.104.05"),
        (PROC_OPEN, "550.54.15"),
        (PROC_AARCH64, "570.86.10"),
        ("GCC version:  gcc version 12.2.0\n", None),
        ("NVRM version: something unexpected\n", None),
        ("", None),
    ],
)
def test_parse_proc_driver_version(text, driver):
    assert parse_proc_driver_version(text) == driver


def test_gpu_info_without_a_gpu_is_empty_and_never_fails(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(provenance.shutil, "which", lambda name: None)
    monkeypatch.setattr(provenance, "PROC_GPUS", tmp_path / "no-gpus")
    monkeypatch.setattr(provenance, "PROC_DRIVER_VERSION", tmp_path / "no-version")
    monkeypatch.delitem(provenance.sys.modules, "torch", raising=False)
    assert provenance.gpu_info() == {"gpus": [], "gpu_driver": None}


def test_gpu_info_asks_nvidia_smi_once(monkeypatch):
    calls = []
    monkeypatch.setattr(provenance.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(provenance, "_run", lambda cmd, cwd=None: calls.append(cmd) or SMI_TWO_GPUS)
    info = provenance.gpu_info()
    assert info == {"gpus": ["NVIDIA H100 80GB HBM3"] * 2, "gpu_driver": "550.54.15"}
    assert calls == [provenance.NVIDIA_SMI_QUERY]


def test_gpu_info_falls_back_to_proc(monkeypatch, tmp_path: Path):
    """nvidia-smi failing: names from /proc/driver/nvidia/gpus, driver from .../version; a
    missing version file gives "unknown", not an error."""
    gpus = tmp_path / "gpus"
    for bus, model in (("0000:17:00.0", "NVIDIA A100-SXM4-40GB"), ("0000:65:00.0", "NVIDIA A10")):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 42\n")
    monkeypatch.setattr(provenance.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(provenance, "_run", lambda cmd, cwd=None: None)  # nvidia-smi failed
    monkeypatch.setattr(provenance, "PROC_GPUS", gpus)
    monkeypatch.setattr(provenance, "PROC_DRIVER_VERSION", tmp_path / "version")
    names = ["NVIDIA A100-SXM4-40GB", "NVIDIA A10"]
    assert provenance.gpu_info() == {"gpus": names, "gpu_driver": "unknown"}
    (tmp_path / "version").write_text(PROC_OPEN)
    assert provenance.gpu_info() == {"gpus": names, "gpu_driver": "550.54.15"}


def test_collect_has_the_driver_and_stays_serialisable():
    prov = provenance.collect()
    assert set(provenance.HOST_FIELDS) - {"node", "iface"} <= set(prov)  # (a rank's own)
    assert (prov["gpu_driver"] is None) == (prov["gpus"] == [])
    json.dumps(prov)


# --------------------------------------------------------------------------------------------
# Every rank's facts, gathered, one entry per host


class FakeRuntime:
    """Stands in for clusterbench.dist's Runtime: ``allgather_object`` returns the objects
    that every rank contributed (here all made in this process), in rank order."""

    def __init__(self, contributions: list) -> None:
        self.contributions = contributions

    def allgather_object(self, obj, name: str = "gather") -> list:
        assert obj == self.contributions[0]  # rank 0's call
        return list(self.contributions)


def fake_rank(rank: int, node: str, host: str, monkeypatch, **changes) -> dict:
    """rank_facts() as rank ``rank`` on ``host`` would compute it (git on local rank 0)."""
    monkeypatch.setattr(provenance.socket, "gethostname", lambda: host)
    facts = provenance.rank_facts(rank, node, with_git=rank % 2 == 0)
    for key, value in changes.items():
        facts[key] = {**facts[key], **value} if isinstance(value, dict) else value
    return facts


def test_rank_facts_are_this_host_and_rank(monkeypatch):
    facts = fake_rank(3, "node7", "node7.cluster", monkeypatch)
    assert facts["rank"] == 3 and facts["node"] == "node7" and facts["host"] == "node7.cluster"
    assert facts["git"] is None  # one rank per node asks git
    assert facts["versions"] == provenance.versions()
    assert provenance.rank_facts(0)["node"] == provenance.rank_facts(0)["host"]
    json.dumps(facts)


def test_gathered_facts_merge_per_host_with_their_ranks(monkeypatch):
    ranks = [
        fake_rank(
            r, f"node{r // 2 + 1}", f"node{r // 2 + 1}", monkeypatch, cpu_model=f"CPU {r // 2}"
        )
        for r in range(4)
    ]
    gathered = FakeRuntime(ranks).allgather_object(ranks[0], name="train.provenance")
    random.Random(1).shuffle(gathered)  # the order does not matter
    merged = merge_ranks(gathered)
    assert [(h["host"], h["ranks"], h["cpu_model"]) for h in merged["hosts"]] == [
        ("node1", [0, 1], "CPU 0"),
        ("node2", [2, 3], "CPU 1"),
    ]
    host = merged["hosts"][0]
    assert set(host) == {*provenance.HOST_FIELDS, "ranks"}  # no rank-level keys leak
    assert host["gpus"] == ranks[0]["gpus"] and host["gpu_driver"] == ranks[0]["gpu_driver"]
    assert merged["git"] == ranks[0]["git"] and merged["versions"] == ranks[0]["versions"]
    json.dumps(merged)


def test_merge_marks_hosts_whose_software_differs_from_rank0(monkeypatch):
    ranks = [
        fake_rank(0, "a", "a", monkeypatch),
        fake_rank(1, "a", "a", monkeypatch),
        fake_rank(2, "b", "b", monkeypatch, versions={"torch": "0.0.1"}),
        fake_rank(3, "b", "b", monkeypatch, versions={"torch": "0.0.1"}),
    ]
    ranks[2]["git"] = {"commit": "f" * 40, "dirty": False}
    merged = merge_ranks(ranks)
    assert "differs_from_rank0" not in merged["hosts"][0]
    assert merged["hosts"][1]["differs_from_rank0"] == {
        "torch": "0.0.1",
        "git": {"commit": "f" * 40, "dirty": False},
    }
    assert merged["versions"]["torch"] == provenance.versions()["torch"]  # rank 0's


def test_several_scheduler_nodes_on_one_machine_stay_apart(monkeypatch):
    """A test cluster's node1 and node2 on one machine: two entries, the host name on both."""
    ranks = [fake_rank(r, f"node{r + 1}", "vm", monkeypatch) for r in range(2)]
    hosts = merge_ranks(ranks)["hosts"]
    assert [(h["node"], h["host"], h["ranks"]) for h in hosts] == [
        ("node1", "vm", [0]),
        ("node2", "vm", [1]),
    ]
    with pytest.raises(ValueError, match="no rank facts"):
        merge_ranks([])
