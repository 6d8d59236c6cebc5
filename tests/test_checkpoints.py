"""clusterbench.training.checkpoints: naming, order, and which checkpoint a run continues from."""

from __future__ import annotations

import os

import pytest
import torch
from clusterbench.training import checkpoints
from clusterbench.training.checkpoints import Position

RUN = {"name": "r", "lr": 0.05, "momentum": 0.9, "workers": 2}


def state(epoch: int, run=RUN, **extra) -> dict:
    return {"model": {"w": torch.full((3,), float(epoch))}, "config": dict(run), **extra}


def test_slice_hash_follows_every_key_and_not_their_order():
    same = dict(reversed(list(RUN.items())))
    assert checkpoints.slice_hash(same) == checkpoints.slice_hash(RUN)
    assert checkpoints.slice_hash({**RUN, "lr": 0.01}) != checkpoints.slice_hash(RUN)
    assert len(checkpoints.slice_hash(RUN)) == checkpoints.HASH_DIGITS


def test_positions_order_by_epoch_then_step_and_describe_themselves():
    assert Position(2) < Position(2, 5) < Position(3) < Position(1000)
    assert Position(3).describe() == "after epoch 3"
    assert Position(3, 120).describe() == "epoch 4, after step 120"
    assert Position(0).describe() == "before any training"


def test_saved_checkpoints_list_oldest_first_past_epoch_999(tmp_path):
    for where in (Position(1000), Position(999), Position(2, 7), Position(2)):
        checkpoints.save(tmp_path, where, state(where.epoch))
    (tmp_path / "epoch-x.pt").touch()
    (tmp_path / "notes.txt").touch()
    assert [p for p, _ in checkpoints.checkpoint_paths(tmp_path)] == [
        Position(2),
        Position(2, 7),
        Position(999),
        Position(1000),
    ]
    name = checkpoints.checkpoint_paths(tmp_path)[1][1].name
    assert name.startswith("epoch-0002-step-000007-") and name.endswith(".pt")


def test_prune_keeps_the_newest(tmp_path):
    for epoch in range(1, 5):
        checkpoints.save(tmp_path, Position(epoch), state(epoch))
    checkpoints.prune(tmp_path, 2)
    assert [p.epoch for p, _ in checkpoints.checkpoint_paths(tmp_path)] == [3, 4]


def test_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        path = checkpoints.save(tmp_path, Position(1), state(1))
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


def test_the_newest_intact_checkpoint_of_the_slice_is_used(tmp_path):
    mine = checkpoints.slice_dir(tmp_path, RUN)
    for epoch in (1, 2):
        checkpoints.save(mine, Position(epoch), state(epoch))
    checkpoints.save(mine, Position(2, 40), state(2, ranks=[{"rng": None}]))
    lines: list[str] = []
    position, ckpt = checkpoints.newest_valid(tmp_path, RUN, lines.append)
    assert position == Position(2, 40) and ckpt["ranks"] == [{"rng": None}]
    assert ckpt["position"] == [2, 40] and torch.equal(ckpt["model"]["w"], torch.full((3,), 2.0))
    assert lines == []


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda b: b[: len(b) // 2], "content changed since it was written"),
        (lambda b: b[:1000] + bytes([b[1000] ^ 0xFF]) + b[1001:], "content changed"),
        (lambda b: b"", "content changed"),
    ],
    ids=["truncated", "one-flipped-byte", "empty"],
)
def test_a_damaged_checkpoint_is_passed_over_for_the_previous_one(tmp_path, damage, reason):
    mine = checkpoints.slice_dir(tmp_path, RUN)
    checkpoints.save(mine, Position(1), state(1))
    newest = checkpoints.save(mine, Position(2), state(2))
    newest.write_bytes(damage(newest.read_bytes()))
    lines: list[str] = []
    position, ckpt = checkpoints.newest_valid(tmp_path, RUN, lines.append)
    assert position == Position(1) and torch.equal(ckpt["model"]["w"], torch.ones(3))
    assert len(lines) == 1 and str(newest) in lines[0] and "after epoch 2" in lines[0]
    assert reason in lines[0]
    assert newest.exists()  # passed over, not deleted


def test_a_checkpoint_whose_content_is_not_its_name_is_damaged(tmp_path):
    mine = checkpoints.slice_dir(tmp_path, RUN)
    one = checkpoints.save(mine, Position(1), state(1))
    # a file renamed to a later position (its hash still matches its bytes)
    one.rename(mine / one.name.replace("epoch-0001", "epoch-0005"))
    lines: list[str] = []
    assert checkpoints.newest_valid(tmp_path, RUN, lines.append) is None
    assert "its content is for position [1, 0]" in lines[0]


def test_checkpoints_of_another_slice_or_layout_are_ignored_and_logged(tmp_path):
    other_run = {**RUN, "lr": 0.01}
    checkpoints.save(checkpoints.slice_dir(tmp_path, other_run), Position(7), state(7, other_run))
    (tmp_path / "checkpoints" / "epoch-003.pt").write_bytes(b"an older layout")
    lines: list[str] = []
    assert checkpoints.newest_valid(tmp_path, RUN, lines.append) is None
    assert any("made for another training slice (differs in lr)" in line for line in lines)
    assert any("epoch-003.pt" in line and "older clusterbench" in line for line in lines)


def test_a_slice_directory_holding_another_slice_is_refused(tmp_path):
    # copied by hand into this slice's directory: the recorded config decides
    other_run = {**RUN, "momentum": 0.0}
    checkpoints.save(checkpoints.slice_dir(tmp_path, RUN), Position(3), state(3, other_run))
    lines: list[str] = []
    assert checkpoints.newest_valid(tmp_path, RUN, lines.append) is None
    assert "made for another training slice (differs in momentum)" in lines[0]


def test_remove_all_deletes_every_slice(tmp_path):
    checkpoints.save(checkpoints.slice_dir(tmp_path, RUN), Position(1), state(1))
    checkpoints.remove_all(tmp_path)
    assert not (tmp_path / "checkpoints").exists()
    checkpoints.remove_all(tmp_path)  # nothing there: no error
