#!/usr/bin/env python3
"""Run the kernel-compass worked example end to end on a GPU: two loops recorded in one ledger.

1. 16 stacked layers of DeepSeek-V3's W_UV (256 MB of bf16 weights, streaming from HBM),
   profiled cold: the loop profiles, classifies, selects the BMM and validates the INT4 W4A16
   proposal (examples/mla_decode/proposals.toml).
2. One layer (16 MB, L2-resident), profiled warm (--cache-control none): the classifier says
   L2-resident and advises against quantization; the INT4 proposal is forced and validated.

Every step goes through the same CLI verbs an agent's MCP tools call. Writes the ledger, its
markdown and JSON export, and each step's JSON answer into --out.

    python3 tools/mla_loop_example.py --out /tmp/mla_example
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "mla_decode"


def ks(args: list[str], out: Path, name: str, env: dict) -> dict:
    t0 = time.monotonic()
    if "--" in args:  # --json belongs to kernelscope, not to the target after "--"
        i = args.index("--")
        args = [*args[:i], "--json", *args[i:]]
    else:
        args = [*args, "--json"]
    proc = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    (out / f"{name}.json").write_text(proc.stdout)
    (out / f"{name}.stderr.txt").write_text(proc.stderr)
    print(f"{name}: rc={proc.returncode} in {time.monotonic() - t0:.1f} s", flush=True)
    if proc.returncode not in (0, 3):  # 3: the loop completed and accepted nothing (README, "Exit status")
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
        print(f"{name} failed: {tail[0]}", file=sys.stderr, flush=True)
        FAILED.append(name)
        return {}
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


FAILED: list[str] = []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{EX}{os.pathsep}" + os.environ.get("PYTHONPATH", "")}
    ledger = str(out / "ledger.db")
    target = [sys.executable, str(EX / "mla_target.py"), "--batch", "1", "--iters", "3"]
    for name, layers, cache, proposals in (("hbm", 16, "all", "proposals.toml"),
                                           ("l2", 1, "none", "proposals_l2.toml")):
        ks(["loop", "--ledger", ledger, "--proposals", str(EX / proposals), "--cache-control", cache,
            "--gpu", "h200", "--iters", "1", "--", *target, "--layers", str(layers)], out, f"loop_{name}", env)
    ks(["ledger", "export", "--ledger", ledger, "--format", "md", "--output", str(out / "ledger.md")], out,
       "export_md", env)
    ks(["ledger", "export", "--ledger", ledger, "--format", "json", "--output", str(out / "ledger.json")], out,
       "export_json", env)
    if FAILED:
        print(f"{len(FAILED)} step(s) failed: {', '.join(FAILED)} (their stderr is in {out})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
