#!/usr/bin/env python3
"""Replays of the bundled H200 traces: rebuilt coverage, and replay vs trace kernel time on the GPU.

    python bench/bench_repro.py make              write bench/results/repro/<trace>/ (ops.json, repro.py) here
    (GPU) python3 bench/results/repro/<trace>/repro.py --device cuda --json replay_<trace>.json
          (or `kernelscope repro run bench/results/repro/<trace> --detail --json > replay_<trace>.json`)
    python bench/bench_repro.py table DIR         the band check of each replay_<trace>.json in DIR, as Markdown

The GPU step needs torch only (repro.py is standalone), so it runs on a machine without kernelscope.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRACES = ["llama_prefill_eager", "llama_prefill_sdpa", "dsv3_prefill"]
OUT = ROOT / "bench" / "results" / "repro"


def make() -> None:
    from mcp_server.repro.extract import make_repro

    for t in TRACES:
        res = make_repro(str(ROOT / "tests" / "fixtures" / "traces" / f"{t}.json.gz"), str(OUT / t), top=30)
        print(f"{t}: {res.coverage_pct:.1f} % of {res.selected_kernel_us:.1f} us rebuilt, {len(res.ops)} ops written")


def table(d: Path) -> None:
    from mcp_server.repro.run import summarize

    print("| trace | ops | replayed trace us | within 20 % | of which warm / cold | outside the band (warm / cold ratio) |")
    print("|---|---|---|---|---|---|")
    for t in TRACES:
        f = d / f"replay_{t}.json"
        if not f.exists():
            continue
        doc = json.loads((OUT / t / "ops.json").read_text())
        res = summarize(OUT / t, doc, json.loads(f.read_text()), "cuda")
        calls = {o["id"]: o["calls"] for o in doc["ops"]}
        share = {b: 100 * sum(o.trace_us * calls[o.id] for o in res.ops if o.band == b) / res.replayed_trace_us
                 for b in ("warm", "cold")}

        out = [f"{o.id} {o.name} {o.ratio:.2f}x / " + (f"{o.ratio_cold:.2f}x" if o.ratio_cold else "-")
               for o in res.ops if o.within_band is False]
        print(f"| {t} | {len(res.ops)} | {res.replayed_trace_us:.1f} | {res.within_band_pct:.1f} % | "
              f"{share['warm']:.1f} % / {share['cold']:.1f} % | {'; '.join(out) or '-'} |")

if __name__ == "__main__":
    if sys.argv[1:2] == ["make"]:
        make()
    elif sys.argv[1:2] == ["table"] and len(sys.argv) == 3:
        table(Path(sys.argv[2]))
    else:
        print(__doc__)
        sys.exit(2)
