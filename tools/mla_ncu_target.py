"""ncu target for issue 11: the BF16 cuBLAS bmm, the INT4 and the FP8 kernel on the 8-layer
stacked W_UK / W_UV shapes (128 MiB BF16), M = 1 and 64, each launched once between
cudaProfilerStart/Stop (run ncu with --profile-from-start off). Configs: --configs JSON
({"int4|M|K|N": cfg, ...}) from tools/mla_h200.py, else tuning's table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mcp_server.kernels import bench, tuning  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=None)
    a = ap.parse_args()
    table = json.loads(Path(a.configs).read_text()) if a.configs else {}

    def pick(kind, M, K, N):
        return table.get(f"{kind}|{M}|{K}|{N}") or tuning.config_for(kind, M, K, N)

    runs = []
    for (K, N) in ((128, 512), (512, 128)):
        for M in (1, 64):
            buf = bench.ShapeBuffers(1024, M, K, N, "warm")
            fns = [buf.bf16_fns()[0], buf.int4_fns(pick("int4", M, K, N))[0], buf.fp8_fns(pick("fp8", M, K, N))[0]]
            if M == 1 and K == 128:   # the persistent (software-pipelined) INT4 variant, for comparison
                fns.append(buf.int4_fns({"variant": "persistent", "BLOCK_N": 128, "num_warps": 4,
                                         "num_stages": 3, "CTAS_PER_SM": 5})[0])
            for f in fns:
                f()     # compile outside the profiled range
            runs.append((buf, fns))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _buf, fns in runs:
        for f in fns:
            # a fresh weight read: flush by touching 256 MB (ncu --cache-control all also flushes)
            f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
