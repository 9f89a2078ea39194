"""The one atomic-output helper: publish on success, leave the target intact on failure."""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mcp_server.core.atomic import (
    _host_tag,
    atomic_copy,
    atomic_target,
    atomic_write_text,
    default_file_mode,
    probe_writable,
    sweep_stale_temps,
)
from mcp_server.core.errors import WriteError


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


# --------------------------------------------------------------------------- symlinks, permissions, temps, fsync


def test_symlink_writes_its_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real" / "r.txt"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(Path("real") / "r.txt")  # relative, as users make them
    chain = tmp_path / "chain.txt"
    chain.symlink_to(link)
    atomic_write_text(chain, "new")
    assert chain.is_symlink() and link.is_symlink() and os.readlink(link) == str(Path("real") / "r.txt")
    assert real.read_text() == "new" and not real.is_symlink()
    assert sorted(x.name for x in real.parent.iterdir()) == ["r.txt"]
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "real" / "created.txt")
    atomic_write_text(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "real" / "created.txt").read_text() == "made"
    loop = tmp_path / "loop.txt"
    loop.symlink_to(loop)
    with pytest.raises(WriteError, match="symlink loop"):
        atomic_write_text(loop, "x")


def test_read_only_file_is_refused_unless_forced(tmp_path):
    p = tmp_path / "report.xlsx"
    p.write_text("original")
    os.chmod(p, 0o444)
    with pytest.raises(WriteError, match=r"read-only \(mode 0444\)") as ei:
        atomic_write_text(p, "new")
    assert str(p) in str(ei.value) and "\n" not in str(ei.value)
    assert p.read_text() == "original" and [x.name for x in tmp_path.iterdir()] == ["report.xlsx"]
    with pytest.raises(WriteError, match="read-only"):
        probe_writable(p)
    atomic_write_text(p, "forced", force=True)
    assert p.read_text() == "forced" and stat.S_IMODE(os.stat(p).st_mode) == 0o444


def test_non_regular_target_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(WriteError, match="not a regular file"):
        atomic_write_text(fifo, "x", force=True)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temps_of_killed_writers_are_swept_on_the_next_write(tmp_path):
    target = tmp_path / "a.xlsx"
    host = _host_tag()
    dead = tmp_path / f".a.xlsx.{host}-{_dead_pid()}.k3j_x9q2.tmp"
    dead_png = tmp_path / f".a.xlsx.{host}-{_dead_pid()}.abcdefgh.png"
    live = tmp_path / f".a.xlsx.{host}-{os.getppid()}.abcdefgh.tmp"           # a running writer: kept
    other_host = tmp_path / f".a.xlsx.ffffff-{_dead_pid()}.abcdefgh.tmp"      # another machine's, young: kept
    legacy_old = tmp_path / ".a.xlsx.q1w2e3r4.tmp"                           # the old name form, 2 h old
    legacy_young = tmp_path / ".a.xlsx.z1x2c3v4.tmp"
    not_ours = [tmp_path / ".a.xlsx.notatemp", tmp_path / ".b.xlsx.q1w2e3r4.tmp", tmp_path / "a.xlsx.q1w2e3r4.tmp"]
    for f in [dead, dead_png, live, other_host, legacy_old, legacy_young, *not_ours]:
        f.write_text("partial")
    old = time.time() - 7200
    os.utime(legacy_old, (old, old))
    for f in not_ours:
        os.utime(f, (old, old))
    atomic_write_text(target, "done")
    left = sorted(x.name for x in tmp_path.iterdir())
    assert left == sorted(["a.xlsx", live.name, other_host.name, legacy_young.name, *(f.name for f in not_ours)])
    # a day later even a live pid's or another host's temp is stale
    assert sorted(sweep_stale_temps(target, now=time.time() + 2 * 86400)) == sorted(
        [live.name, other_host.name, legacy_young.name])
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(["a.xlsx", *(f.name for f in not_ours)])


def test_long_names_and_fsync(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    p = tmp_path / ("k" * 250 + ".json")  # NAME_MAX is 255: the temp name must be shorter than "." + name
    atomic_write_text(p, "{}")
    assert p.read_text() == "{}" and [x.name for x in tmp_path.iterdir()] == [p.name]
    assert len(synced) == 2 and synced[0].startswith(str(tmp_path / ("." + "k" * 100))) and synced[1] == str(tmp_path)


def test_unwritable_directory_is_a_write_error(tmp_path, monkeypatch):
    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    with pytest.raises(WriteError, match="Permission denied"):
        atomic_write_text(tmp_path / "x.txt", "x")
    with pytest.raises(WriteError, match="Permission denied"):
        probe_writable(tmp_path / "x.txt")


def test_copy_is_atomic_and_follows_links(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"\x00" * 1000)
    real = tmp_path / "real.bin"
    real.write_bytes(b"previous")
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    atomic_copy(src, link)
    assert link.is_symlink() and real.read_bytes() == b"\x00" * 1000
    with pytest.raises(WriteError, match="source"):
        atomic_copy(tmp_path / "missing", tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


WRITE_ONLY_FAILS = """
import errno, sys, tempfile
import mcp_server.reports.xlsx_writer as W
W.probe_writable = lambda *a, **k: None          # get past the early check: the save itself fails
def denied(*a, **k):
    raise PermissionError(errno.EACCES, "Permission denied")
from mcp_server.core.errors import WriteError
from mcp_server.traces import analyze_trace
a = analyze_trace(sys.argv[1])
tempfile.mkstemp = denied
try:
    W.write_analysis_report(a, sys.argv[2])
except WriteError as e:
    print("WriteError", e)
"""


def test_failed_report_save_prints_no_noise(tmp_path):
    trace = Path(__file__).parent / "fixtures" / "traces" / "llama_prefill_eager.json.gz"
    r = subprocess.run([sys.executable, "-c", WRITE_ONLY_FAILS, str(trace), str(tmp_path / "r.xlsx")],
                       capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent)
    assert r.returncode == 0 and r.stdout.startswith("WriteError") and "Permission denied" in r.stdout
    assert r.stderr == "", r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    os.chmod(d, 0o555)
    try:
        with pytest.raises(WriteError, match="Permission denied"):
            atomic_write_text(d / "x.txt", "x")
    finally:
        os.chmod(d, 0o755)
