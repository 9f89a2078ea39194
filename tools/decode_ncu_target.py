"""ncu target for issue 26: one launch each, between cudaProfilerStart/Stop (run ncu with
--profile-from-start off), in this order: at 4096x4096 M=1 cuBLAS BF16, tinygemm (when present),
INT4 before (tuning's default) and after (--configs winner), FP8 before and after; at 7168x2048
M=1 BF16 and INT4 after; the 8-layer MLA W_UV M=1 INT4 as tuned and the sweep's winner, and W_UK
M=1 INT4 as tuned. Configs: --configs JSON ({"int4|M|K|N": cfg, ...}) from decode_gemm_h200.py.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mcp_server.kernels import bench, decode, tuning  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=None)
    a = ap.parse_args()
    win = json.loads(Path(a.configs).read_text()) if a.configs else {}
    runs = []
    for K, N, what in ((4096, 4096, ("bf16", "tinygemm", "int4_before", "int4_after", "fp8_before", "fp8_after")),
                       (7168, 2048, ("bf16", "int4_after"))):
        buf = decode.DecodeBuffers(1, K, N)
        for name in what:
            fmt, _, when = name.partition("_")
            if fmt == "tinygemm" and not buf.tiny:
                continue
            cfg = None
            if fmt in ("int4", "fp8"):
                cfg = win.get(f"{fmt}|1|{K}|{N}") if when == "after" else tuning.config_for(fmt, 1, K, N)
                if cfg is None:
                    continue
            runs.append((f"{name} {K}x{N} M=1", buf, buf.fns(fmt, cfg)[0]))
    for K, N in ((512, 128), (128, 512)):
        buf = bench.ShapeBuffers(1024, 1, K, N, "warm")
        runs.append((f"int4_tuned mla8L {K}x{N} M=1", buf, buf.int4_fns(tuning.config_for("int4", 1, K, N))[0]))
        cfg = win.get(f"int4|1|{K}|{N}")
        if cfg:
            runs.append((f"int4_after mla8L {K}x{N} M=1", buf, buf.int4_fns(cfg)[0]))
    for _n, _b, f in runs:
        f()
    torch.cuda.synchronize()
    print("ORDER", json.dumps([n for n, _b, _f in runs]), file=sys.stderr)
    torch.cuda.cudart().cudaProfilerStart()
    for _n, _b, f in runs:
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
