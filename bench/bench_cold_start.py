#!/usr/bin/env python3
"""Benchmark: MCP server cold start, spawn to initialized, as Claude Code and the Inspector start it.

Each run spawns a fresh ``python -m mcp_server`` on stdio and speaks raw JSON-RPC as those clients do:
``initialize`` (timed from the spawn to its answer: "initialized"), ``notifications/initialized``,
``tools/list`` (timed to its answer), then stdin closed (timed to the exit). Three setups, runs
interleaved so that a busy machine weighs on each alike:

- ``front``: the default; the front (mcp_server/faces/front.py) repeats the SDK's recorded answers to
  ``initialize`` and ``tools/list`` (the state after any earlier start of the same code);
- ``front, cold cache``: the first start after a code change (a fresh cache directory each run): the
  SDK answers, through the front, which records its answers;
- ``SDK only``: ``KERNELSCOPE_FRONT=0``, the SDK answers everything (what issue 22 measured).

Goal: median spawn-to-initialized of ``front`` at most 0.5 s.

    .venv/bin/python bench/bench_cold_start.py [--runs 10] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.5


def one_start(env: dict[str, str]) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "mcp_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert p.stdin is not None and p.stdout is not None

    def send(obj: dict) -> None:
        assert p.stdin is not None
        p.stdin.write((json.dumps(obj) + "\n").encode())
        p.stdin.flush()

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    assert "result" in json.loads(p.stdout.readline())
    t_init = time.perf_counter() - t0
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert json.loads(p.stdout.readline())["result"]["tools"]
    t_list = time.perf_counter() - t0
    p.stdin.close()
    p.wait(timeout=60)
    p.stdout.close()
    return t_init, t_list, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as td:
        warm = {**base, "KERNELSCOPE_FRONT": "1", "XDG_CACHE_HOME": str(Path(td) / "warm")}
        one_start(warm)  # fills the warm cache, as any earlier start of this code would have
        setups = {"front": lambda i: warm,
                  "front, cold cache": lambda i: {**warm, "XDG_CACHE_HOME": str(Path(td) / f"cold{i}")},
                  "SDK only": lambda i: {**base, "KERNELSCOPE_FRONT": "0"}}
        got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in setups}
        for i in range(a.runs):
            for name, env in setups.items():
                got[name].append(one_start(env(i)))
    load = os.getloadavg()[0]
    if a.markdown:
        print(f"| setup | spawn to initialized (median of {a.runs}, min-max) | spawn to tools listed | "
              "stdin closed to exit |")
        print("|---|---|---|---|")
    for name, runs in got.items():
        init = [r[0] for r in runs]
        lst = [r[1] for r in runs]
        ex = [r[2] - r[1] for r in runs]
        cols = (f"{statistics.median(init):.3f} s ({min(init):.3f}-{max(init):.3f})",
                f"{statistics.median(lst):.3f} s", f"{statistics.median(ex):.3f} s")
        print(f"| {name} | " + " | ".join(cols) + " |" if a.markdown else f"{name:20s} " + "  ".join(cols))
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} CPUs")
    return 0 if statistics.median(r[0] for r in got["front"]) <= GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
