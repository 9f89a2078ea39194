#!/usr/bin/env python3
"""Longer fuzz run of the file readers (issue 14): cases, clean errors, crashes, hangs, peak RSS.

    .venv/bin/python bench/bench_fuzz.py [--cases 1000] [--timeout 30] [--memory 4G] [--seed 0]
                                         [--parsers trace,xlsx,recategorize,timeline,rules_csv] [--json out.json]

Every case runs in a supervised child process (spawned, address-space limit ``--memory``): the child
builds one mutated input from the real fixtures (tests/fuzz_cases.py, seed = ``--seed`` + case number)
and runs the engine under the one-error contract (``fuzz_cases.contract``). The parent counts:

* ``ok``: a result whose JSON form is finite; ``error``: one ``KernelscopeError`` line naming the file;
* ``broken``: any other exception, a multi-line error, an error not naming the file, a non-finite result;
* ``crash``: the child died (native abort, out of memory under the limit); it is replaced;
* ``hang``: no answer within ``--timeout`` s; the child is killed and replaced.

Then every hostile reproducer (tests/fixtures/hostile, plus the 4 MB / 4 GiB gzip of zeros and a 128 MiB
probe buffer built from tools/make_hostile_inputs.py recipes) runs in a fresh child each, so its peak RSS
(``VmHWM``) is that input's own. Goals: crashes 0, hangs 0, peak RSS under 1 GB for any input under
10 MB.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))

HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
HOSTILE_PARSER = {"xlsx_": "xlsx", "trace_": "trace", "categories_": "rules_csv"}


def _parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def _hwm_mib() -> float:
    """This process's peak RSS (VmHWM: per address space, so a spawned child does not inherit the
    parent's, as ``ru_maxrss`` does across fork + exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker(conn, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    import fuzz_cases as F

    tmp = Path(tempfile.mkdtemp(prefix="ks-fuzz-"))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        parser, seed, path = msg
        make, run = F.PARSERS[parser]
        try:
            p = Path(path) if path else make(random.Random(seed), tmp)
            size = p.stat().st_size
            t0 = time.perf_counter()
            try:
                outcome, detail = F.contract(run, p), ""
            except F.ContractBroken as exc:
                outcome, detail = "broken", str(exc)[:400]
            wall = time.perf_counter() - t0
            if not path:
                p.unlink(missing_ok=True)
        except MemoryError:
            outcome, detail, size, wall = "crash", "MemoryError outside the contract", 0, 0.0
        conn.send((outcome, detail, size, wall, _hwm_mib()))


class Child:
    def __init__(self, memory: int) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, memory), daemon=True)
        self.proc.start()
        child.close()

    def ask(self, msg, timeout: float):
        self.conn.send(msg)
        if not self.conn.poll(timeout):
            return None
        try:
            return self.conn.recv()
        except EOFError:
            return "dead"

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def run_case(child: Child, memory: int, msg, timeout: float):
    """(child, outcome, detail, size, wall, rss): the child is replaced after a crash or a hang."""
    ans = child.ask(msg, timeout)
    if ans is None:
        child.proc.kill()
        child.proc.join()
        return Child(memory), "hang", f"no answer in {timeout} s", 0, timeout, 0.0
    if ans == "dead":
        code = child.proc.exitcode
        child.proc.join()
        return Child(memory), "crash", f"child exit code {code}", 0, 0.0, 0.0
    return (child, *ans)


def hostile_inputs(tmp: Path) -> list[tuple[str, Path]]:
    import make_hostile_inputs as recipes

    out = []
    for p in sorted(HOSTILE.iterdir()):
        parser = next((v for k, v in HOSTILE_PARSER.items() if p.name.startswith(k)), None)
        if parser:
            out.append((parser, p))
    zeros = tmp / "zeros_4g.json.gz"
    recipes.gzip_zeros(zeros, 4096)
    out.append(("trace", zeros))
    buf = tmp / "buffer_128m.bin"
    recipes.big_buffer(buf, 128 << 20)
    out.append(("timeline", buf))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000, help="cases per parser")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--memory", default="4G", help="address-space limit of the child")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parsers", default="trace,xlsx,recategorize,timeline,rules_csv")
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args()
    memory = _parse_size(a.memory)
    parsers = [p for p in a.parsers.split(",") if p]
    report: dict = {"cases_per_parser": a.cases, "timeout_s": a.timeout, "memory_limit": a.memory,
                    "seed": a.seed, "parsers": {}, "hostile": []}
    child = Child(memory)
    t_all = time.perf_counter()
    for parser in parsers:
        counts = {"ok": 0, "error": 0, "broken": 0, "crash": 0, "hang": 0}
        examples: list[str] = []
        peak, max_size, walls = 0.0, 0, []
        t0 = time.perf_counter()
        for i in range(a.cases):
            child, outcome, detail, size, wall, rss = run_case(child, memory, (parser, a.seed + i, None), a.timeout)
            counts[outcome] += 1
            walls.append(wall)
            peak, max_size = max(peak, rss), max(max_size, size)
            if outcome in ("broken", "crash", "hang") and len(examples) < 5:
                examples.append(f"seed {a.seed + i}: {outcome}: {detail}")
        walls.sort()
        report["parsers"][parser] = {
            **counts, "cases": a.cases, "peak_rss_mib": round(peak), "largest_input_bytes": max_size,
            "median_ms": round(1000 * walls[len(walls) // 2], 1), "max_ms": round(1000 * walls[-1], 1),
            "seconds": round(time.perf_counter() - t0, 1), "examples": examples}
        print(f"{parser:13s} {json.dumps(report['parsers'][parser])}", flush=True)
    child.stop()
    with tempfile.TemporaryDirectory() as t:
        for parser, p in hostile_inputs(Path(t)):
            c = Child(memory)  # a fresh child: its peak RSS is this input's
            c, outcome, detail, size, wall, rss = run_case(c, memory, (parser, 0, str(p)), a.timeout * 4)
            c.stop()
            row = {"input": p.name, "parser": parser, "bytes": size or p.stat().st_size, "outcome": outcome,
                   "peak_rss_mib": round(rss), "seconds": round(wall, 2), "detail": detail[:200]}
            report["hostile"].append(row)
            print(f"hostile {json.dumps(row)}", flush=True)
    report["seconds"] = round(time.perf_counter() - t_all, 1)
    report["python"] = sys.version.split()[0]
    report["cpus"] = os.cpu_count()
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    tot = {k: sum(v[k] for v in report["parsers"].values()) for k in ("cases", "ok", "error", "broken", "crash",
                                                                      "hang")}
    print("total", json.dumps(tot), f"{report['seconds']} s")


if __name__ == "__main__":
    main()
