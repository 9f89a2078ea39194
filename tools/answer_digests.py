"""Digests of every CPU verb's ``--json`` answer on the committed fixtures.

A structural change must not change what any verb answers. Run this before the change with
``--write FILE`` and after it with ``--check FILE``: every answer (stdout and exit code) is
compared byte for byte. Each verb runs as ``kernelscope VERB ... --json`` (the console script beside the
interpreter) in a fresh process, with outputs written under one fixed scratch directory (wiped first), so paths inside
answers are the same from run to run.

    python tools/answer_digests.py --write bench/results/answer_digests.json
    python tools/answer_digests.py --check bench/results/answer_digests.json

GPU verbs (mla, decode-gemm, l2-sweep, validate on CUDA, ncu run, repro run, loop) are not here:
their answers hold timings. ``--keep DIR`` keeps every answer for a diff when a check fails.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = Path("/tmp/kernelscope_answer_digests")
T = "tests/fixtures/traces/"
TS = "tests/fixtures/tracesets/"
TL = "tests/fixtures/timeline/"
NCU = "tests/fixtures/ncu/"
FIELD = "tests/fixtures/field/"
EV = "--events"
PHASES = "load,compute,reduce,store,done"


def cases() -> dict[str, list[str]]:
    """name -> argv after ``kernelscope`` (``{out}`` is the scratch directory)."""
    c: dict[str, list[str]] = {}
    for t in ("llama_prefill_eager", "llama_prefill_sdpa", "dsv3_prefill", "llama_decode_mixed",
              "format_pt18_prefill", "format_rocm_stream_prefill", "tp2_prefill", "capture_eager",
              "train_graph"):
        c[f"analyze.{t}"] = ["analyze", T + t + ".json.gz"]
    c["analyze.graph_ref"] = ["analyze", T + "llama_decode_graph.json.gz", "--reference-trace",
                              T + "llama_decode_mixed.json.gz"]
    c["analyze.capture_ref"] = ["analyze", T + "capture_replay.json.gz", "--reference-trace",
                                T + "capture_capture.json.gz"]
    c["analyze.detail"] = ["analyze", T + "llama_prefill_eager.json.gz", "--detail"]
    c["analyze.xlsx"] = ["analyze", T + "llama_prefill_sdpa.json.gz", "-o", "{out}/sdpa.xlsx"]
    c["analyze.field_h100"] = ["analyze", FIELD + "qwen_layer0_h100.json.gz"]
    c["analyze.field_mi300"] = ["analyze", FIELD + "qwen_layer0_mi300.json.gz"]
    c["analyze.breakdown"] = ["analyze", "tests/fixtures/breakdown/breakdown_streams.json.gz"]
    for s in ("straggler", "balanced", "moving", "tp4_gloo", "p2p_2of128"):
        c[f"traceset.{s}"] = ["traceset", "analyze", TS + s]
    c["traceset.compare"] = ["traceset", "compare", TS + "balanced", TS + "straggler"]
    c["compare.prefill"] = ["compare", T + "llama_prefill_eager.json.gz", T + "llama_prefill_sdpa.json.gz",
                            "--labels", "eager", "sdpa"]
    c["compare.prefill.detail"] = ["compare", T + "llama_prefill_eager.json.gz",
                                   T + "llama_prefill_sdpa.json.gz", "--detail"]
    c["compare.field"] = ["compare", FIELD + "qwen_layer0_h100.json.gz", FIELD + "qwen_layer0_mi300.json.gz"]
    c["compare.xlsx"] = ["compare", "tests/fixtures/upstream/llama_prefill_eager.xlsx",
                         "tests/fixtures/upstream/llama_prefill_sdpa.xlsx"]
    c["compare.files"] = ["compare", T + "llama_prefill_eager.json.gz", T + "llama_prefill_sdpa.json.gz",
                          "-o", "{out}/cmp.xlsx", "--html", "{out}/cmp.html"]
    c["budget.decode"] = ["budget", T + "llama_decode_mixed.json.gz", T + "llama_decode_graph.json.gz",
                          "--labels", "mixed", "graph"]
    c["budget.prefill"] = ["budget", T + "llama_prefill_eager.json.gz", T + "dsv3_prefill.json.gz"]
    c["recategorize"] = ["recategorize", "{out}/sdpa.xlsx"]
    c["repro.eager"] = ["repro", T + "llama_prefill_eager.json.gz", "-o", "{out}/repro_eager"]
    c["repro.module"] = ["repro", T + "llama_prefill_sdpa.json.gz", "--module", "LlamaAttention", "--top", "10",
                         "-o", "{out}/repro_attn"]
    c["repro.dsv3"] = ["repro", T + "dsv3_prefill.json.gz", "-o", "{out}/repro_dsv3"]
    c["refs.local"] = ["refs", "mla", "--sources", "aiter-local", "--no-cache"]
    for b in ("balanced_probe", "imbalanced_probe", "balanced_legacy", "imbalanced_legacy"):
        c[f"timeline.{b}"] = ["timeline", "analyze", TL + b + ".bin", EV, PHASES]
    c["timeline.triton"] = ["timeline", "analyze", TL + "triton_rows.bin", EV,
                             (ROOT / TL / "triton_rows.events").read_text().strip().replace("\n", ",")]
    c["timeline.compare"] = ["timeline", "compare", TL + "balanced_probe.bin", TL + "imbalanced_probe.bin",
                             EV, PHASES]
    for n in ("targets_all.raw.csv", "targets_all.details.csv", "targets_none.raw.csv",
              "targets_all.aliases.raw.csv"):
        c[f"ncu.parse.{n}"] = ["ncu", "parse", NCU + n]
        c[f"classify.{n}"] = ["classify", NCU + n, "--gpu", "h200"]
        c[f"select.{n}"] = ["select", NCU + n, "--gpu", "h200"]
    for ex in ("examples/mla_decode/h200/ledger.db", "examples/repro_softmax/h200/ledger.db"):
        name = ex.split("/")[1]
        c[f"ledger.list.{name}"] = ["ledger", "list", "--ledger", ex]
        c[f"ledger.show.{name}"] = ["ledger", "show", "1", "--ledger", ex]
        c[f"ledger.export.{name}"] = ["ledger", "export", "--ledger", ex, "--format", "json"]
    return c


#: values that change from run to run (a clock read): masked before hashing
VOLATILE = re.compile(rb'(\\?"(?:elapsed_s|exported_at)\\?": ?)(\\?"[^"\\]*\\?"|[0-9.e-]+)')


def run(name: str, argv: list[str]) -> tuple[str, int, bytes]:
    args = [a.replace("{out}", str(SCRATCH)) for a in argv]
    env = dict(os.environ, COLUMNS="120")
    p = subprocess.run([str(Path(sys.executable).parent / "kernelscope"), *args, "--json"], cwd=ROOT, env=env,
                       capture_output=True, timeout=600)
    return name, p.returncode, VOLATILE.sub(rb"\1<volatile>", p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path, help="record the digests in FILE")
    g.add_argument("--check", type=Path, help="compare with the digests recorded in FILE")
    ap.add_argument("--keep", type=Path, help="write every answer into DIR")
    ap.add_argument("--only", help="run only the cases whose name starts with this")
    a = ap.parse_args()
    # answers name the scratch directory, so it is the same path on every run: runs take turns
    lock = open(f"{SCRATCH}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    todo = {k: v for k, v in cases().items() if not a.only or k.startswith(a.only)}
    # analyze.xlsx writes the workbook that recategorize edits: run those two first, in order
    first = [k for k in ("analyze.xlsx", "recategorize") if k in todo]
    got = dict((n, (rc, out)) for n, rc, out in (run(k, todo[k]) for k in first))
    with ThreadPoolExecutor(max(1, (os.cpu_count() or 2))) as ex:
        for n, rc, out in ex.map(lambda kv: run(*kv), [(k, v) for k, v in todo.items() if k not in first]):
            got[n] = (rc, out)
    digests = {n: {"rc": rc, "sha256": hashlib.sha256(out).hexdigest(), "bytes": len(out)}
               for n, (rc, out) in sorted(got.items())}
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
        for n, (_, out) in got.items():
            (a.keep / f"{n}.json").write_bytes(out)
    if a.write:
        a.write.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        bad = [n for n, d in digests.items() if d["bytes"] == 0]
        print(f"{len(digests)} answers recorded in {a.write}" + (f"; empty: {bad}" if bad else ""))
        return 0
    want = json.loads(a.check.read_text())
    diff = [n for n in digests if want.get(n) != digests[n]]
    missing = [n for n in want if n not in digests and (not a.only or n.startswith(a.only))]
    for n in diff:
        print(f"DIFFERS {n}: was {want.get(n)}, now {digests[n]}")
    for n in missing:
        print(f"MISSING {n}")
    print(f"{len(digests) - len(diff)} of {len(digests)} answers byte-identical")
    return 1 if diff or missing else 0


if __name__ == "__main__":
    sys.exit(main())
