"""ncu target for tools/quant_tma_h200.py: one launch each between cudaProfilerStart/Stop (run ncu with
--profile-from-start off), in the order printed on stderr ("ORDER [...]"): the decode GEMM 4096x4096
at M = 1 (cuBLAS BF16, tinygemm where present, INT4 and FP8 as tuned and the sweep's winners), then
the 8-layer MLA BMMs (W_UK and W_UV at M = 1 and 64: INT4 as tuned and the winner; FP8 W_UK at M = 1 and
both at M = 64, as tuned and the winner). Configs: --configs JSON ({"int4|M|K|N": cfg, ...}; a key
"int4|M|K|N|label" adds a config of that shape, named by its label).
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
    K, N = 4096, 4096
    buf = decode.DecodeBuffers(1, K, N)
    runs.append(("bf16 4096x4096 M=1", buf, buf.fns("bf16")[0]))
    if buf.tiny:
        runs.append(("tinygemm 4096x4096 M=1", buf, buf.fns("tinygemm")[0]))
    for fmt in ("int4", "fp8"):
        runs.append((f"{fmt}_tuned 4096x4096 M=1", buf, buf.fns(fmt, tuning.config_for(fmt, 1, K, N))[0]))
        cfg = win.get(f"{fmt}|1|{K}|{N}")
        if cfg:
            runs.append((f"{fmt}_winner 4096x4096 M=1", buf, buf.fns(fmt, cfg)[0]))
    for K, N, M, kinds in ((128, 512, 1, ("int4", "fp8")), (512, 128, 1, ("int4",)), (128, 512, 64, ("int4", "fp8")),
                           (512, 128, 64, ("int4", "fp8"))):
        sb = bench.ShapeBuffers(1024, M, K, N, "warm")
        for fmt in kinds:
            fn = sb.int4_fns if fmt == "int4" else sb.fp8_fns
            runs.append((f"{fmt}_tuned mla8L {K}x{N} M={M}", sb, fn(tuning.config_for(fmt, M, K, N, 1024))[0]))
            cfg = win.get(f"{fmt}|{M}|{K}|{N}")
            if cfg:
                runs.append((f"{fmt}_winner mla8L {K}x{N} M={M}", sb, fn(cfg)[0]))
            for key, c in win.items():       # "fmt|M|K|N|label": more configs of the shape, named by label
                if key.startswith(f"{fmt}|{M}|{K}|{N}|"):
                    runs.append((f"{fmt}_{key.rsplit('|', 1)[1]} mla8L {K}x{N} M={M}", sb, fn(c)[0]))
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
