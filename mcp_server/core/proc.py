"""Run an external program safely: argument list, timeout, whole process group killed on expiry."""
from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class ProcResult:
    rc: int | None  # None: killed on timeout
    stdout: str
    stderr: str
    timed_out: bool


def _start(args: list[str], cwd: str | None, env: Mapping[str, str] | None, stdout: Any,
           stderr: Any) -> subprocess.Popen:
    """``args`` started in a process group of its own (no shell, no stdin; ``LC_ALL=C.UTF-8`` unless set)."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("LC_ALL", "C.UTF-8")
    return subprocess.Popen(args, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                            start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(args: list[str], *, timeout: float, cwd: str | None = None,
        env: Mapping[str, str] | None = None, max_bytes: int = 4 << 20) -> ProcResult:
    """Run ``args`` (no shell). On timeout the process group gets SIGKILL and ``timed_out`` is set."""
    proc = _start(args, cwd, env, subprocess.PIPE, subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.05))
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    return ProcResult(
        rc=None if timed_out else proc.returncode,
        stdout=out[:max_bytes].decode("utf-8", "replace"),
        stderr=err[:65536].decode("utf-8", "replace"),
        timed_out=timed_out,
    )


def stream(args: list[str], *, timeout: float, on_line: Callable[[str], None],
           cwd: str | None = None, env: Mapping[str, str] | None = None,
           max_bytes: int = 16 << 20, max_stderr: int = 65536, grace_s: float = 2.0) -> ProcResult:
    """Like ``run`` but hands each stdout line to ``on_line`` (in the calling thread) as it arrives.

    The time limit covers the whole run: on expiry the process group gets SIGKILL and
    ``timed_out`` is set. After the process exits, its group is killed too (a grandchild left
    holding the pipes cannot hang the caller). stderr keeps its last ``max_stderr`` bytes.
    """
    proc = _start(args, cwd, env, subprocess.PIPE, subprocess.PIPE)
    lines: queue.Queue[bytes | None] = queue.Queue()
    err_tail: collections.deque[bytes] = collections.deque()
    err_size = [0]

    def read_out() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            lines.put(line)
        lines.put(None)

    def read_err() -> None:
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            err_tail.append(chunk)
            err_size[0] += len(chunk)
            while err_size[0] - len(err_tail[0]) >= max_stderr and len(err_tail) > 1:
                err_size[0] -= len(err_tail.popleft())

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + max(timeout, 0.05)
    out: list[str] = []
    size = 0
    timed_out = False
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > grace_s:
                break
            try:
                item = lines.get(timeout=min(0.2, deadline - now))
            except queue.Empty:
                continue
            if item is None:
                break
            text = item.decode("utf-8", "replace")
            if size < max_bytes:
                out.append(text)
                size += len(item)
            on_line(text.rstrip("\n"))
    finally:
        _kill_group(proc)
    proc.wait()
    for t in readers:
        t.join(timeout=1.0)
    err = b"".join(err_tail)[-max_stderr:]
    return ProcResult(
        rc=None if timed_out else proc.returncode,
        stdout="".join(out),
        stderr=err.decode("utf-8", "replace"),
        timed_out=timed_out,
    )


def run_watched(args: list[str], *, timeout: float, watch: str | os.PathLike | None = None,
                on_line: Callable[[str], None] | None = None, cwd: str | None = None,
                env: Mapping[str, str] | None = None, poll_s: float = 0.2,
                max_bytes: int = 4 << 20) -> ProcResult:
    """``run`` for long programs that write a log file: follow ``watch`` while the program runs.

    Every complete new line of ``watch`` goes to ``on_line`` (e.g. count ncu's ``==PROF==``
    lines for progress). stdout and stderr go to temporary files (no pipe can fill and block the
    child); on timeout the whole process group gets SIGKILL and ``timed_out`` is set.
    """
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        proc = _start(args, cwd, env, out_f, err_f)
        deadline = time.monotonic() + max(timeout, 0.05)
        pos = 0
        partial = b""
        wpath = Path(watch) if watch is not None else None

        def follow() -> None:
            nonlocal pos, partial
            if wpath is None or on_line is None or not wpath.is_file():
                return
            try:
                with open(wpath, "rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
            except OSError:
                return
            if not chunk:
                return
            pos += len(chunk)
            data = partial + chunk
            *lines, partial = data.split(b"\n")
            for ln in lines:
                on_line(ln.decode("utf-8", "replace").rstrip("\r"))

        timed_out = False
        while True:
            try:
                proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                follow()
                if time.monotonic() >= deadline:
                    _kill_group(proc)
                    proc.wait()
                    timed_out = True
                    break
        follow()
        if partial and on_line is not None:
            on_line(partial.decode("utf-8", "replace"))
        if not timed_out:
            _kill_group(proc)  # the leader exited: make sure no child it left behind keeps running
        out_f.seek(0)
        err_f.seek(0)
        out = out_f.read(max_bytes)
        err = err_f.read()
    return ProcResult(
        rc=None if timed_out else proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err[-65536:].decode("utf-8", "replace"),
        timed_out=timed_out,
    )


# --------------------------------------------------------------------------- git without the repository's programs

#: Settings given on every git command line (they override the repository's own config): no fsmonitor hook,
#: no hooks at all, no untracked cache, no external diff or pager, no ssh or editor program.
GIT_SAFE_CONFIG = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "core.untrackedCache=false",
                   "diff.external=", "core.pager=cat", "core.sshCommand=ssh", "core.editor=true",
                   "core.askPass=", "credential.helper=", "protocol.allow=never")


def _git_drivers(git: str, directory: str, env: Mapping[str, str], timeout: float) -> list[str]:
    """``-c`` settings emptying every clean/smudge/process filter the repository's config names (reading
    config runs nothing; an empty command is no command to git)."""
    r = run([git, "-C", directory, *_flags(GIT_SAFE_CONFIG), "config", "-z", "--get-regexp", r"^filter\."],
            timeout=timeout, env=env)
    names = set()
    for item in r.stdout.split("\0") if r.rc == 0 else []:
        key = item.split("\n", 1)[0]
        if key.startswith("filter.") and key.count(".") >= 2:
            names.add(key[len("filter."):key.rindex(".")])
    out: list[str] = []
    for n in sorted(names):
        out += [f"filter.{n}.clean=", f"filter.{n}.smudge=", f"filter.{n}.process=", f"filter.{n}.required=false"]
    return out


def _flags(settings: "tuple[str, ...] | list[str]") -> list[str]:
    return [x for s in settings for x in ("-c", s)]


def git_env() -> dict[str, str]:
    """The environment of a safe git command: no system config, no prompts, no optional index writes, and none
    of the caller's GIT_* variables (GIT_DIR, GIT_EXTERNAL_DIFF, GIT_CONFIG_PARAMETERS, ...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", GIT_PAGER="cat",
               GIT_ATTR_NOSYSTEM="1")
    return env


def git(directory: "str | os.PathLike", *args: str, timeout: float = 30.0) -> ProcResult:
    """Run ``git -C directory ARGS`` without executing any program the repository configures (fsmonitor, hooks,
    clean/smudge/process filters, external diff, pager, ssh, editor, credential helpers): a directory a caller
    names may hold a hostile ``.git/config``. Diff commands must still pass ``--no-ext-diff --no-textconv``."""
    import shutil

    exe = shutil.which("git")
    if exe is None:
        return ProcResult(rc=127, stdout="", stderr="git not found", timed_out=False)
    d = os.fspath(directory)
    env = git_env()
    extra = _git_drivers(exe, d, env, timeout)
    return run([exe, "-C", d, *_flags(GIT_SAFE_CONFIG), *_flags(extra), *args], timeout=timeout, env=env)
