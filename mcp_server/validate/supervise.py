"""The harness supervisor: the one process between validate_candidate and the harness child.

The candidate is user code; it may start processes that leave the harness's process group (a double
fork and ``setsid``), and it may fill the machine's memory. This process
(``python -m mcp_server.validate.supervise --timeout S --memory BYTES -- CMD...``):

* becomes a **child subreaper** (Linux ``PR_SET_CHILD_SUBREAPER``): every process the harness starts
  that loses its parent is re-parented here, however it detached, instead of to init;
* runs ``CMD`` (the harness child), polling the **resident memory of the whole tree** below it (every
  descendant's RSS from /proc, summed) against ``--memory``. An address-space limit (RLIMIT_AS) would
  not do: CUDA reserves virtual ranges far larger than the memory it uses, and a limit per process is
  escaped by forking; a cgroup is rarely writable inside a container. RSS counts what the candidate
  actually takes, on the CPU and the GPU path alike;
* stops the harness at ``--timeout``, at the memory limit, or when told to (SIGTERM, or its parent's
  death: ``PR_SET_PDEATHSIG``), then **kills every descendant** (SIGKILL, repeated until none is left,
  zombies reaped) and writes one JSON line on stdout, ``{"type": "supervisor", ...}``, saying what
  stopped the run, the peak memory and how many stray processes it killed;
* exits with the harness's status.

Where /proc or prctl are missing (not Linux) it only runs the child and applies the time limit; the
caller's process-group kill still applies.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.05
_stop = False


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _ppid_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return kids
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        try:
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (zombies included), from /proc."""
    kids = _ppid_map()
    out: list[int] = []
    todo = list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def tree_rss(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            continue
    return total


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree(me: int, limit_s: float = 10.0) -> int:
    """SIGKILL every descendant of ``me`` until none is left (a forking process is caught on a later pass);
    returns how many distinct processes were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        _reap()
        live = []
        for p in descendants(me):
            try:
                with open(f"/proc/{p}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != b"Z":
                live.append(p)
        if not live:
            _reap()
            return len(killed)
        for p in live:
            try:
                os.kill(p, signal.SIGKILL)
                killed.add(p)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return len(killed)


def _on_signal(_sig: int, _frame: object) -> None:
    global _stop
    _stop = True


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("usage: supervise --timeout S --memory BYTES [--parent PID] -- CMD...\n")
        return 2
    i = argv.index("--")
    opts, cmd = argv[:i], argv[i + 1:]
    args = dict(zip(opts[::2], opts[1::2]))
    timeout = float(args.get("--timeout", "0") or 0)
    memory = int(args.get("--memory", "0") or 0)
    parent = int(args.get("--parent", "0") or 0)
    linux = sys.platform.startswith("linux")
    subreaper = linux and _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    if linux:
        _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG: the caller died -> clean up
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if parent and os.getppid() != parent:
        return 1  # the caller died before the death signal was armed
    me = os.getpid()
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    start = time.monotonic()
    event, peak = None, 0
    while child.poll() is None:
        if _stop:
            event = "stopped"
            break
        if timeout and time.monotonic() - start > timeout:
            event = "time"
            break
        pause = POLL_S
        if memory and linux:
            t0 = time.monotonic()
            rss = tree_rss([me, *descendants(me)])
            peak = max(peak, rss)
            if rss > memory:
                event = "memory"
                break
            pause = max(POLL_S, 10 * (time.monotonic() - t0))  # the scan costs at most ~10 % of one core
        time.sleep(pause)
    child.kill()  # a no-op once it has exited (Popen polls first and ignores a process already gone)
    rc = child.wait()
    stray = kill_tree(me) if linux else 0
    msg = {"type": "supervisor", "event": event, "memory_limit": memory or None, "peak_rss": peak or None,
           "stray_killed": stray, "subreaper": subreaper, "rc": rc}
    try:
        os.write(1, (json.dumps(msg) + "\n").encode())
    except OSError:
        pass
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
