#!/usr/bin/env python3
"""Cut small trace excerpts with a trait seen in the field corpus (../shared/field), for tests.

The corpus is read, never copied whole: each excerpt keeps the host events inside the first
``--layers`` instances of a module (plus the module spans and cpu ops that enclose them, so module
paths stay whole), the runtime launches there, their flow events and the GPU activities they
launched, and the trace's top-level metadata. Timestamps and names are unchanged.

    python3 tools/make_field_excerpts.py [--field ../shared/field] [--out tests/fixtures/field]

Excerpts written (tests/fixtures/README.md says what each holds):
  qwen_layer0_h100.json.gz / qwen_layer0_mi300.json.gz: decoder layer 0 of TraceLens's
    Qwen1.5-0.5B-Chat traces on H100 and MI300X (the attention block where the eager CUDA
    elementwise kernels face ROCm's ``elementwise_kernel_manual_unroll`` variants).
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

EXCERPTS = {
    # out name: (corpus path, module span name prefix)
    "qwen_layer0_h100.json.gz": ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                 "nn.Module: Qwen2DecoderLayer_0"),
    "qwen_layer0_mi300.json.gz": ("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "nn.Module: Qwen2DecoderLayer_0"),
}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def excerpt(doc: dict, span_name: str) -> dict:
    ev = doc["traceEvents"]
    span = next(e for e in ev if e.get("ph") == "X" and e.get("name", "") == span_name)
    w0, w1 = float(span["ts"]), float(span["ts"]) + float(span["dur"])
    host_pid = span["pid"]
    keep: list[dict] = []
    corr: set = set()
    for e in ev:
        if e.get("ph") == "M":
            keep.append(e)
            continue
        if e.get("cat") in GPU_CATS or e.get("pid") != host_pid or "ts" not in e:
            continue
        ts = float(e["ts"])
        end = ts + float(e.get("dur", 0) or 0)
        inside = w0 <= ts and end <= w1
        encloses = e.get("ph") == "X" and ts <= w0 and end >= w1 and e.get("cat") in ("python_function", "cpu_op",
                                                                                      "user_annotation")
        if inside or encloses:
            keep.append(e)
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
                corr.add(e["args"]["correlation"])
    for e in ev:
        if e.get("cat") in GPU_CATS and e.get("args", {}).get("correlation") in corr:
            keep.append(e)
        elif e.get("cat") == "ac2g" and e.get("id") in corr:
            keep.append(e)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = keep
    out["kernelscope_fixture"] = {"excerpt_of": span_name, "window_us": [w0, w1]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--field", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "field"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "field"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (rel, span) in EXCERPTS.items():
        with gzip.open(Path(args.field) / rel, "rt") as fh:
            doc = json.load(fh)
        ex = excerpt(doc, span)
        ex["kernelscope_fixture"]["source"] = rel
        data = json.dumps(ex, separators=(",", ":")).encode()
        (out / name).write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        n_k = sum(1 for e in ex["traceEvents"] if e.get("cat") == "kernel")
        print(f"{out / name}: {len(ex['traceEvents'])} events, {n_k} kernels, {len(data)} bytes JSON")


if __name__ == "__main__":
    main()
