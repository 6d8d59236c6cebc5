"""Atomic outputs: all or nothing under the real name, with the mode ordinary tools give."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from clusterbench.core.atomic import atomic_open, current_umask, write_json


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_get_the_mode_of_the_umask_not_0600(tmp_path: Path, umask: int):
    code = (
        "import os, sys\n"
        f"os.umask({umask})\n"
        "from clusterbench.core.atomic import write_json\n"
        "write_json(sys.argv[1], {'a': 1})\n"
        "open(sys.argv[2], 'w').close()\n"
    )
    out, plain = tmp_path / "out.json", tmp_path / "plain"
    subprocess.run([sys.executable, "-c", code, str(out), str(plain)], check=True)
    assert mode(out) == 0o666 & ~umask == mode(plain)


def test_current_umask_does_not_change_it():
    before = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert current_umask() == 0o027
    finally:
        os.umask(before)


def test_a_failed_write_leaves_neither_the_output_nor_a_temp_file(tmp_path: Path):
    dest = tmp_path / "out.json"
    write_json(dest, {"old": True})
    with pytest.raises(RuntimeError), atomic_open(dest) as fh:
        fh.write("half")
        raise RuntimeError("crash")
    assert dest.read_text().startswith('{\n  "old": true')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
