#!/usr/bin/env python3
"""Benchmark: CUDA/HIP-graph replays attributed from a capture trace (issue 23).

For each (replay trace, capture trace) pair: the share of replay kernel time attributed to a module
with no reference, with the capture as ``reference_trace``, and (where one exists) with an eager step;
and, where the eager twin is known (the H200 fixtures: each replay runs the eager step's kernels in
order), the share of replay kernel time attributed to its twin's module. Pairs: the committed H200
fixtures (tools/make_capture_traces.py) and SGLang's MI300X Qwen3-8B decode with its bs-32 capture
from the field corpus (``../shared/field`` when present).

    .venv/bin/python bench/capture_reference.py [--field ../shared/field] [--write bench/RESULTS.md]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_server.traces import analyze_trace  # noqa: E402

BEGIN = "<!-- capture_reference:begin -->"
END = "<!-- capture_reference:end -->"
TR = ROOT / "tests" / "fixtures" / "traces"
FIELD = ROOT.parent / "shared" / "field"
SGLANG = Path("tracelens") / "inference" / "sglang_decode"


def _replay_share(res) -> tuple[float, float]:
    k = res.kernels
    g = k[k["graph"]]
    tot = float(g["dur_us"].sum())
    att = float(g.loc[g["module"] != "", "dur_us"].sum())
    return 100.0 * att / tot if tot else 0.0, tot


def _twin(res, eager) -> Optional[float]:
    e = eager.kernels.sort_values("ts_us")
    names, paths = list(e["name"]), list(e["module_path"])
    g = res.kernels[res.kernels["graph"]].sort_values("ts_us")
    same = tot = 0.0
    for _, part in g.groupby("correlation", sort=False):
        if list(part["name"]) != names:
            return None
        for p, q, d in zip(part["module_path"], paths, part["dur_us"]):
            tot += d
            same += d if p == q else 0.0
    return 100.0 * same / tot if tot else None


def rows(field: Path) -> list[str]:
    pairs = [("H200 Llama-style decode (fixtures)", TR / "capture_replay.json.gz", TR / "capture_capture.json.gz",
              TR / "capture_eager.json.gz")]
    sg = field / SGLANG
    if sg.exists():
        pairs.append(("SGLang Qwen3-8B decode, MI300X (field corpus)", sg / "sglang_Qwen3-8B_decode.json.gz",
                      sg / "capture_traces" / "bs_32_rank0.json.gz", None))
    out = ["| replays | replay kernels | attributed, no reference | attributed, capture reference | "
           "attributed, eager reference | replay time in the eager twin's module (capture / eager ref) | "
           "phase of the replays (no ref / capture ref) | seconds (capture ref) |",
           "|---|---|---|---|---|---|---|---|"]
    for label, rep, cap, eager in pairs:
        alone = analyze_trace(rep)
        t0 = time.perf_counter()
        bycap = analyze_trace(rep, reference_trace=cap)
        secs = time.perf_counter() - t0
        byeager = analyze_trace(rep, reference_trace=eager) if eager else None
        twin = "n/a (no eager step)"
        if eager:
            e = analyze_trace(eager)
            a, b = _twin(bycap, e), _twin(byeager, e)
            twin = f"{a:.1f} % / {b:.1f} %" if a is not None and b is not None else "n/a"
        ph = lambda r: ", ".join(sorted(set(r.kernels.loc[r.kernels["graph"], "phase"].astype(str))))  # noqa: E731
        out.append(f"| {label} | {bycap.graph.graph_kernel_count} | {_replay_share(alone)[0]:.1f} % | "
                   f"{_replay_share(bycap)[0]:.1f} % | "
                   f"{f'{_replay_share(byeager)[0]:.1f} %' if byeager else 'n/a'} | {twin} | "
                   f"{ph(alone)} / {ph(bycap)} | {secs:.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", default=None, help="replace this benchmark's section of a RESULTS.md")
    ap.add_argument("--field", default=str(FIELD), help="the field corpus (default ../shared/field)")
    args = ap.parse_args()
    text = "\n".join(rows(Path(args.field)))
    print(text)
    if args.write:
        p = Path(args.write)
        body = p.read_text(encoding="utf-8")
        section = (f"{BEGIN}\n## Graph replays attributed from a capture trace (issue 23)\n\n"
                   f"`.venv/bin/python bench/capture_reference.py --write bench/RESULTS.md` (field corpus at "
                   f"`../shared/field`). The H200 pair's replays run the eager step's kernels in order, so each "
                   f"replay kernel has an eager twin; SGLang's trace has no eager decode step.\n\n{text}\n{END}")
        if BEGIN in body and END in body:
            body = body[:body.index(BEGIN)] + section + body[body.index(END) + len(END):]
        else:
            body = body.rstrip("\n") + "\n\n" + section + "\n"
        p.write_text(body, encoding="utf-8")


if __name__ == "__main__":
    main()
