#!/usr/bin/env python3
"""Write a small synthetic Kineto trace with the traits the GPU time breakdown must handle.

The committed H200 traces run every kernel on one stream of one GPU; the field corpus holds traces
whose streams overlap (NCCL next to compute, copies on a side stream), several devices in one file,
and GPU events recorded before the profiler saw the CPU side (no launch event). This script writes
those traits, deterministically (a fixed seed), into ``breakdown_streams.json.gz``:

* device 0: stream 7 (compute kernels, a memset), stream 13 (NCCL all-reduce kernels that partly
  overlap the compute), stream 20 (memcpy, some under compute, some alone);
* device 1: stream 7 (compute only), so the trace has two devices;
* 6 kernels at the start of device 0 whose correlation ids match no launch event (the warm-up work
  a profiler flushes into the trace without its CPU side);
* one ``cudaLaunchKernel`` runtime event per launched GPU event, on one CPU thread, and one
  ``nn.Module: Net_0`` span around those launches;
* 3 backward kernels launched from a second CPU thread (the autograd engine's) inside an
  ``aten::native_layer_norm_backward`` op, with no module span on that thread;
* 2 kernels launched on the module thread after ``Net_0`` returned (outside every module call).

    python3 tools/make_breakdown_trace.py --out tests/fixtures/breakdown
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path


def build(seed: int = 23) -> dict:
    rnd = random.Random(seed)
    events: list[dict] = []
    corr = 1000
    t0 = 1_000_000.0

    def gpu(cat: str, name: str, ts: float, dur: float, device: int, stream: int, launched: bool,
            thread: int = 100) -> None:
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": round(ts, 3),
                       "dur": round(dur, 3), "args": {"device": device, "stream": stream, "correlation": corr}})
        if launched:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": thread,
                           "ts": round(ts - 5.0, 3), "dur": 2.0, "args": {"correlation": corr}})

    # warm-up kernels recorded without their launches
    t = t0
    for _ in range(6):
        d = rnd.uniform(3, 9)
        gpu("kernel", "warmup_kernel", t, d, 0, 7, False)
        t += d + rnd.uniform(1, 4)
    start = t + 50.0
    # device 0, stream 7: compute with gaps; a memset
    t = start
    for i in range(40):
        d = rnd.uniform(4, 30)
        name = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn" if i % 3 == 0 else "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
        gpu("kernel", name, t, d, 0, 7, True)
        t += d + rnd.uniform(0.5, 12)
        if i == 20:
            gpu("gpu_memset", "Memset (Device)", t, 1.5, 0, 7, True)
            t += 3.0
    end7 = t
    # device 0, stream 13: all-reduces that start under compute and run past it
    t = start + 40.0
    for _ in range(6):
        d = rnd.uniform(20, 60)
        gpu("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", t, d, 0, 13, True)
        t += d + rnd.uniform(30, 90)
    # device 0, stream 20: copies, some under compute or NCCL, two after everything
    t = start + 10.0
    for _ in range(8):
        d = rnd.uniform(2, 15)
        gpu("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t, d, 0, 20, True)
        t += d + rnd.uniform(40, 120)
    for k in range(2):
        gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", max(end7, t) + 20.0 + 30.0 * k, 6.0, 0, 20, True)
    # device 1, stream 7: compute only
    t = start + 5.0
    for _ in range(15):
        d = rnd.uniform(5, 25)
        gpu("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            t, d, 1, 7, True)
        t += d + rnd.uniform(1, 20)
    launches = [e["ts"] for e in events if e["cat"] == "cuda_runtime"]
    # backward: 3 kernels launched from the autograd thread (tid 101), which holds no module spans
    t = max(end7, t) + 200.0
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm_backward", "pid": 100, "tid": 101,
                   "ts": round(t - 10.0, 3), "dur": 120.0, "args": {}})
    for _ in range(3):
        d = rnd.uniform(5, 15)
        gpu("kernel", "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>", t, d, 0, 7,
            True, thread=101)
        t += d + 20.0
    events.append({"ph": "X", "cat": "python_function", "name": "nn.Module: Net_0", "pid": 100, "tid": 100,
                   "ts": min(launches) - 1.0, "dur": max(launches) - min(launches) + 5.0, "args": {}})
    # 2 kernels launched on the module thread after Net_0 returned (a copy of the outputs, a sampling step)
    t += 50.0
    for name in ("void at::native::index_elementwise_kernel<128, 4>", "void at::native::reduce_kernel<512, 1>"):
        gpu("kernel", name, t, 4.0, 0, 7, True)
        t += 10.0
    events.sort(key=lambda e: e["ts"])
    return {"schemaVersion": 1, "kernelscope_fixture": "tools/make_breakdown_trace.py (synthetic)",
            "deviceProperties": [{"id": 0, "name": "synthetic"}, {"id": 1, "name": "synthetic"}],
            "traceEvents": events}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/breakdown", help="output directory")
    ap.add_argument("--seed", type=int, default=23)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = json.dumps(build(a.seed), separators=(",", ":"))
    (out / "breakdown_streams.json.gz").write_bytes(gzip.compress(doc.encode(), 9, mtime=0))
    print(out / "breakdown_streams.json.gz")


if __name__ == "__main__":
    main()
