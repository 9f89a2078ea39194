"""The one atomic-output helper: publish on success, leave the target intact on failure."""
from __future__ import annotations

import os
import stat

import pytest

from mcp_server.atomic import atomic_target, atomic_write_text, default_file_mode
from mcp_server.errors import WriteError


def test_new_file_gets_umask_mode_not_mkstemp_0600(tmp_path):
    p = atomic_write_text(tmp_path / "a.txt", "hello")
    assert p.read_text() == "hello"
    assert stat.S_IMODE(os.stat(p).st_mode) == default_file_mode()
    assert [x.name for x in tmp_path.iterdir()] == ["a.txt"]


def test_replacing_keeps_the_existing_mode(tmp_path):
    p = tmp_path / "b.txt"
    p.write_text("old")
    os.chmod(p, 0o640)
    atomic_write_text(p, "new")
    assert p.read_text() == "new"
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640


def test_failure_midway_leaves_original_and_no_temp(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("original")
    with pytest.raises(RuntimeError):
        with atomic_target(p) as tmp:
            with open(tmp, "w") as fh:
                fh.write("partial")
            raise RuntimeError("boom")
    assert p.read_text() == "original"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.txt"]


def test_directory_and_missing_parent_are_refused(tmp_path):
    with pytest.raises(WriteError, match="is a directory"):
        atomic_write_text(tmp_path, "x")
    with pytest.raises(WriteError, match="does not exist"):
        atomic_write_text(tmp_path / "nope" / "x.txt", "x")
