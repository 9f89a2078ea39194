#!/usr/bin/env python3
"""Longer fuzz run of the file readers (issues 14, 21): cases, clean errors, crashes, hangs, peak RSS, secrets.

    .venv/bin/python bench/bench_fuzz.py [--cases 1000] [--timeout 30] [--memory 4G] [--seed 0]
                                         [--parsers trace,xlsx,recategorize,timeline,rules_csv,
                                                    traceset,proposals,validate_spec,ledger]
                                         [--mcp 40] [--json out.json]

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

Issue 21's surfaces (tests/fuzz_surfaces.py): trace sets (each rank's distributedInfo head mutated; analysed
inline), loop proposals TOML, validate spec TOML (loaded, never run) and experiment ledgers (SQLite: damaged
pages, stored JSON that is deep, huge, not JSON or of another type; list, show and export). Every such input
carries a marker and the children run with a credential variable set (``fuzz_surfaces.SECRET_ENV``): a
``secrets`` count is an answer or error holding the variable's value, or an error holding the file's marker.
``--mcp N`` then sends N cases of each of traceset, ledger and rules_csv through one real MCP server over stdio
(the official client; the variable set in its environment), checks after every call that a small real call
still succeeds, and counts tool errors, answers, server restarts and secrets in the answers.
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
HOSTILE_PARSER = {"xlsx_": "xlsx", "trace_": "trace", "categories_": "rules_csv", "spec_": "validate_spec"}
#: hostile traces that are about a set's head: each also runs as a one-trace set
HOSTILE_SETS = ("trace_world_size.json", "trace_rank_huge.json", "trace_dist_deep.json.gz")


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
    import fuzz_surfaces as S

    os.environ.update(S.SECRET_ENV)
    table = {**F.PARSERS, **S.SURFACES}

    tmp = Path(tempfile.mkdtemp(prefix="ks-fuzz-"))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        parser, seed, path = msg
        make, run = table[parser]
        seen: list[str] = []

        def captured(p: Path, run=run, seen=seen):  # what the case answered or raised, to look for secrets in
            try:
                res = run(p)
            except Exception as exc:
                seen.append(str(exc))
                raise
            seen.append(res.model_dump_json() if hasattr(res, "model_dump_json") else json.dumps(res, default=str))
            return res

        secrets: list[str] = []
        try:
            p = Path(path) if path else make(random.Random(seed), tmp)
            size = _size(p)
            t0 = time.perf_counter()
            try:
                outcome, detail = F.contract(captured, p), ""
            except F.ContractBroken as exc:
                outcome, detail = "broken", str(exc)[:400]
            wall = time.perf_counter() - t0
            secrets = S.secrets_in(" ".join(seen), outcome)
            if not path:
                _remove(p)
        except MemoryError:
            outcome, detail, size, wall = "crash", "MemoryError outside the contract", 0, 0.0
        conn.send((outcome, detail, size, wall, _hwm_mib(), secrets))


def _size(p: Path) -> int:
    return sum(q.stat().st_size for q in p.rglob("*") if q.is_file()) if p.is_dir() else p.stat().st_size


def _remove(p: Path) -> None:
    import shutil

    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    elif p.parent.name.startswith(("props", "spec")):  # a case's own folder (its proposals or spec and files)
        shutil.rmtree(p.parent, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


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
    """(child, outcome, detail, size, wall, rss, secrets): the child is replaced after a crash or a hang."""
    ans = child.ask(msg, timeout)
    if ans is None:
        child.proc.kill()
        child.proc.join()
        return Child(memory), "hang", f"no answer in {timeout} s", 0, timeout, 0.0, []
    if ans == "dead":
        code = child.proc.exitcode
        child.proc.join()
        return Child(memory), "crash", f"child exit code {code}", 0, 0.0, 0.0, []
    return (child, *ans)


def hostile_inputs(tmp: Path) -> list[tuple[str, Path]]:
    import make_hostile_inputs as recipes

    out = []
    for p in sorted(HOSTILE.iterdir()):
        parser = next((v for k, v in HOSTILE_PARSER.items() if p.name.startswith(k)), None)
        if parser:
            out.append((parser, p))
    for name in HOSTILE_SETS:  # the same heads as a trace set (analyze DIR)
        d = tmp / f"set_{name.split('.')[0]}"
        d.mkdir()
        (d / name).write_bytes((HOSTILE / name).read_bytes())
        out.append(("traceset", d))
    for recipe in (recipes.ledger_damaged, recipes.ledger_env_text):
        db = tmp / f"{recipe.__name__}.db"
        recipe(db)
        out.append(("ledger", db))
    zeros = tmp / "zeros_4g.json.gz"
    recipes.gzip_zeros(zeros, 4096)
    out.append(("trace", zeros))
    buf = tmp / "buffer_128m.bin"
    recipes.big_buffer(buf, 128 << 20)
    out.append(("timeline", buf))
    return out


#: per surface, the MCP call a fuzz case becomes (its input path -> tool, arguments)
MCP_CALLS = {
    "traceset": lambda p: ("analyze_trace_set", {"paths": [str(p)], "executor": "inline", "top_n": 3}),
    "ledger": lambda p: ("export_ledger", {"ledger": str(p), "format": "json"}),
    "rules_csv": lambda p: ("analyze_trace", {"trace_path": str(ROOT / "tests" / "fixtures" / "traces" /
                                                                "llama_prefill_sdpa.json.gz"),
                                              "categories": str(p), "top_n": 3}),
}
ALIVE = ("analyze_trace", {"trace_path": str(HOSTILE / "trace_device_name.json")})


async def _mcp_session(params, make, call, tmp: Path, todo: list[int], row: dict, timeout: float) -> None:
    """Send the cases ``todo`` (seeds, consumed as they go) through one server; after each, a small real call."""
    import anyio
    import fuzz_surfaces as S
    from mcp import Client

    async with Client(params, read_timeout_seconds=timeout) as c:
        while todo:
            i = todo.pop(0)
            tool, args = call(make(random.Random(i), tmp))
            row["calls"] += 1
            try:
                with anyio.fail_after(timeout):
                    r = await c.call_tool(tool, args)
            except TimeoutError:
                row["hangs"] += 1
                raise
            text = "".join(getattr(x, "text", "") for x in r.content)
            found = S.secrets_in(text + json.dumps(r.structured_content, default=str), "error" if r.is_error else "ok")
            row["secrets"] += bool(found)
            row["tool_errors" if r.is_error else "answers"] += 1
            if found and len(row["examples"]) < 3:
                row["examples"].append(f"seed {i}: {found}: {text[:200]}")
            alive = await c.call_tool(*ALIVE)
            if alive.is_error:
                row["not_alive"] += 1


def mcp_phase(cases: int, seed: int, timeout: float) -> dict:
    """``cases`` fuzz cases of each ``MCP_CALLS`` surface through one stdio MCP server (restarted if it dies)."""
    import anyio
    import fuzz_cases as F
    import fuzz_surfaces as S
    from mcp import StdioServerParameters

    table = {**F.PARSERS, **S.SURFACES}
    out: dict = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELSCOPE_ROOTS=os.pathsep.join([str(tmp), str(ROOT)]),
                   **S.SECRET_ENV)
        params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], env=env, cwd=str(ROOT))
        for surface, call in MCP_CALLS.items():
            make = table[surface][0]
            row = {"calls": 0, "answers": 0, "tool_errors": 0, "hangs": 0, "server_restarts": 0, "not_alive": 0,
                   "secrets": 0, "examples": []}
            todo = list(range(seed, seed + cases))
            t0 = time.perf_counter()
            while todo:
                try:
                    anyio.run(_mcp_session, params, make, call, tmp, todo, row, timeout)
                except BaseException as exc:  # noqa: BLE001 - the server died or hung: count it, start another
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    row["server_restarts"] += 1
                    if len(row["examples"]) < 3:
                        row["examples"].append(f"session ended: {type(exc).__name__}: {str(exc)[:200]}")
            row["seconds"] = round(time.perf_counter() - t0, 1)
            out[surface] = row
            print(f"mcp {surface:11s} {json.dumps(row)}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000, help="cases per parser")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--memory", default="4G", help="address-space limit of the child")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parsers", default="trace,xlsx,recategorize,timeline,rules_csv,traceset,proposals,"
                                         "validate_spec,ledger")
    ap.add_argument("--mcp", type=int, default=0, help="cases per surface sent through the MCP server (0: none)")
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args()
    memory = _parse_size(a.memory)
    parsers = [p for p in a.parsers.split(",") if p]
    report: dict = {"cases_per_parser": a.cases, "timeout_s": a.timeout, "memory_limit": a.memory,
                    "seed": a.seed, "parsers": {}, "hostile": [], "mcp": {}}
    child = Child(memory)
    t_all = time.perf_counter()
    for parser in parsers:
        counts = {"ok": 0, "error": 0, "broken": 0, "crash": 0, "hang": 0, "secrets": 0}
        examples: list[str] = []
        peak, max_size, walls = 0.0, 0, []
        t0 = time.perf_counter()
        for i in range(a.cases):
            child, outcome, detail, size, wall, rss, secrets = run_case(child, memory, (parser, a.seed + i, None),
                                                                        a.timeout)
            counts[outcome] += 1
            counts["secrets"] += bool(secrets)
            if secrets and len(examples) < 5:
                examples.append(f"seed {a.seed + i}: secret {secrets}")
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
            c, outcome, detail, size, wall, rss, secrets = run_case(c, memory, (parser, 0, str(p)), a.timeout * 4)
            c.stop()
            row = {"input": p.name, "parser": parser, "bytes": size or p.stat().st_size, "outcome": outcome,
                   "peak_rss_mib": round(rss), "seconds": round(wall, 2), "secrets": secrets, "detail": detail[:200]}
            report["hostile"].append(row)
            print(f"hostile {json.dumps(row)}", flush=True)
    if a.mcp:
        report["mcp"] = mcp_phase(a.mcp, a.seed, a.timeout * 4)
    report["seconds"] = round(time.perf_counter() - t_all, 1)
    report["python"] = sys.version.split()[0]
    report["cpus"] = os.cpu_count()
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    tot = {k: sum(v[k] for v in report["parsers"].values()) for k in ("cases", "ok", "error", "broken", "crash",
                                                                      "hang", "secrets")}
    print("total", json.dumps(tot), f"{report['seconds']} s")


if __name__ == "__main__":
    main()
