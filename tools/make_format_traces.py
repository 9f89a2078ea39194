#!/usr/bin/env python3
"""Format-trait trace fixtures: a committed H200 trace rewritten in the field types of other
profiler versions, so a test can check that kernelscope reads them like the original.

Runs on any machine (no GPU): it rewrites ``tests/fixtures/traces/llama_prefill_sdpa.json.gz``
event by event, keeping every timestamp, duration, name and correlation id:

    python3 tools/make_format_traces.py --out tests/fixtures/traces

Traces written:

  format_pt18_prefill.json.gz   the first Kineto schema (PyTorch 1.8/1.9): categories ``Kernel``,
                                ``Memcpy``, ``Memset``, ``Runtime``, ``Operator``; GPU events on
                                ``tid`` ``"stream 7"``; CPU ``tid`` as strings of digits; ``Input dims``;
                                flow events ``async``/``launch``; no version metadata but
                                ``schemaVersion``. (The ``python_function`` module spans are kept,
                                as they would be had the profiler recorded them, so attribution
                                can be compared with the original.)
  format_rocm_stream_prefill.json.gz  ROCm 6.2's field types (HTA's MI250 trace): HIP runtime names
                                (``hipLaunchKernel``, ``hipExtModuleLaunchKernel``, ...), ``args.stream`` of
                                every runtime call as a hex string (``"0x0"``), ``args.kernel`` naming the
                                launched kernel, roctracer/HIP version metadata.
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import sys

SRC = "tests/fixtures/traces/llama_prefill_sdpa.json.gz"

OLD_CATS = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cuda_runtime": "Runtime",
            "cuda_driver": "Runtime", "cpu_op": "Operator"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
HIP_NAMES = {"cudaLaunchKernel": "hipLaunchKernel", "cudaLaunchKernelExC": "hipExtModuleLaunchKernel",
             "cuLaunchKernel": "hipModuleLaunchKernel", "cuLaunchKernelEx": "hipExtModuleLaunchKernel",
             "cudaMemcpyAsync": "hipMemcpyAsync", "cudaMemsetAsync": "hipMemsetAsync"}


def _write(data: dict, out: str, name: str) -> None:
    blob = json.dumps(data, separators=(",", ":")).encode()
    path = os.path.join(out, name)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(blob)
    ev = data["traceEvents"]
    print(json.dumps({"file": name, "json_bytes": len(blob), "gz_bytes": os.path.getsize(path), "events": len(ev),
                      "cats": sorted({str(e.get("cat")) for e in ev})}), flush=True)


def pt18(src: dict) -> dict:
    ev = []
    for e in src["traceEvents"]:
        e = copy.deepcopy(e)
        cat = e.get("cat")
        if cat in GPU_CATS and isinstance(e.get("tid"), int):
            e["tid"] = f"stream {e['tid']}"
        elif isinstance(e.get("tid"), int):
            e["tid"] = str(e["tid"])
        if cat == "ac2g":
            e["cat"], e["name"] = "async", "launch"
        elif cat in OLD_CATS:
            e["cat"] = OLD_CATS[cat]
        args = e.get("args")
        if isinstance(args, dict) and "Input Dims" in args:
            args["Input dims"] = args.pop("Input Dims")
        ev.append(e)
    meta = {"schemaVersion": 1, "traceEvents": ev,
            "kernelscope_fixture": {**src.get("kernelscope_fixture", {}),
                                    "rewritten_by": "tools/make_format_traces.py pt18", "from": os.path.basename(SRC)}}
    return meta


def rocm_stream(src: dict) -> dict:
    kernel_of = {e["args"]["correlation"]: e["name"] for e in src["traceEvents"]
                 if e.get("cat") == "kernel" and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    ev = []
    for e in src["traceEvents"]:
        e = copy.deepcopy(e)
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["cat"] = "cuda_runtime"  # roctracer files every HIP call under cuda_runtime
            name = str(e.get("name", ""))
            e["name"] = HIP_NAMES.get(name, "hip" + name[4:] if name.startswith("cuda") else name)
            args = e.setdefault("args", {})
            args["stream"] = "0x0"
            k = kernel_of.get(args.get("correlation"))
            if k is not None:
                args["kernel"] = k
        ev.append(e)
    out = {k: v for k, v in src.items() if k not in ("traceEvents", "cuda_runtime_version", "cuda_driver_version",
                                                     "cupti_version")}
    out.update({"roctracer_version": 4.1, "hip_runtime_version": 60242134, "hip_driver_version": 60242134,
                "traceEvents": ev})
    out["kernelscope_fixture"] = {**src.get("kernelscope_fixture", {}),
                                  "rewritten_by": "tools/make_format_traces.py rocm_stream", "from": os.path.basename(SRC)}
    return out


# ---- recipes built at test time (tests/test_traces_field.py): traces with no GPU activity ----

GPU_ACTIVITY = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"}


def cpu_only(src: dict) -> dict:
    """The trace as ``ProfilerActivity.CPU`` alone records it: no GPU activity, no runtime calls."""
    ev = [e for e in src["traceEvents"] if e.get("cat") not in GPU_ACTIVITY | {"cuda_runtime", "cuda_driver"}]
    return {**src, "traceEvents": ev}


def cupti_ranges(src: dict) -> dict:
    """As HTA's CUPTI-profiler trace: runtime calls kept, each kernel replaced by a ``cuda_profiler_range``
    event holding counters (no timeline)."""
    ev = []
    for e in src["traceEvents"]:
        if e.get("cat") == "kernel":
            ev.append({"ph": "X", "cat": "cuda_profiler_range", "name": e["name"], "pid": 0, "tid": 0,
                       "ts": e["ts"], "dur": e["dur"], "args": {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 0}})
        elif e.get("cat") not in GPU_ACTIVITY:
            ev.append(e)
    return {**src, "traceEvents": ev}


def gpu_damaged(src: dict) -> dict:
    """Every GPU activity event without its ``args.correlation`` (all skipped as damaged)."""
    ev = []
    for e in src["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e = copy.deepcopy(e)
            e["args"].pop("correlation", None)
        ev.append(e)
    return {**src, "traceEvents": ev}


def annotate_replays(src: dict, name: str) -> dict:
    """A ``user_annotation`` span named ``name`` around every graph launch, on the launching thread, as
    SGLang (``step[DECODE bs=8]``) and vLLM-style step annotations (``execute_context_C(...)_generation_G(...)``)
    enclose their replays."""
    launches = [e for e in src["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and str(e.get("name", "")).startswith(("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch"))]
    ev = list(src["traceEvents"])
    for e in launches:
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": e["pid"], "tid": e["tid"],
                   "ts": e["ts"] - 1.0, "dur": float(e.get("dur", 0.0)) + 2.0, "args": {}})
    return {**src, "traceEvents": ev}


def drop_capture_launch(src: dict, nth: int) -> dict:
    """The capture trace without its ``nth`` kernel launch (a capture that does not match its replay
    one to one)."""
    seen = -1
    ev = []
    for e in src["traceEvents"]:
        if e.get("cat") == "cuda_runtime" and e.get("name") in ("cudaLaunchKernel", "cuLaunchKernelEx"):
            seen += 1
            if seen == nth:
                continue
        ev.append(e)
    return {**src, "traceEvents": ev}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/traces")
    ap.add_argument("--src", default=SRC)
    args = ap.parse_args()
    with gzip.open(args.src, "rb") as f:
        src = json.load(f)
    _write(pt18(src), args.out, "format_pt18_prefill.json.gz")
    _write(rocm_stream(src), args.out, "format_rocm_stream_prefill.json.gz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
