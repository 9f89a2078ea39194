#!/usr/bin/env python3
"""Write small synthetic rank traces with a collective trait seen in the field, for tests.

The trait (issue 23): two ranks of a 128-rank pipeline-parallel job, profiled in windows sampled
separately on each rank, each holding point-to-point ``ncclDevKernel_SendRecv`` kernels. The k-th
SendRecv of rank 0 and of rank 1 are not the same transfer (rank 0's ends before rank 1's begins),
and the other 126 ranks of the group are not in the set: nothing can be matched with evidence.

    python3 tools/make_collective_traits.py [--out tests/fixtures/tracesets]

Writes (Kineto JSON, the fields the PyTorch profiler writes, gzipped):
  p2p_2of128/pp-rank-{0,1}.trace.json.gz       SendRecv kernels with PyTorch's collective metadata
                                               (Collective name send / recv, Process Group Ranks cut
                                               short as the profiler does past 30 ranks, Group size 128)
  p2p_2of128_bare/pp-rank-{0,1}.trace.json.gz  the same kernels without metadata (older PyTorch)
Each rank: distributedInfo (nccl, world size 128), 6 steps of a GEMM then a SendRecv on stream 20.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

WORLD = 128
SEND = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
# the profiler writes a rank list longer than 30 as its first 29 ranks, '...' and the last one
RANKS_CUT = "[" + ", ".join(str(r) for r in range(29)) + f", ..., {WORLD - 1}]"


def rank_trace(rank: int, t0: float, with_meta: bool) -> dict:
    pid, tid = 4000 + rank, 4000 + rank
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    corr = 100
    t = t0
    for step in range(6):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": tid,
                   "ts": t, "dur": 900.0})
        for name, dur, stream, meta in (
            (GEMM, 300.0, 7, None),
            (SEND, 120.0, 20, {"Collective name": "send" if rank == 0 else "recv", "In msg nelems": 1 << 20,
                               "Out msg nelems": 1 << 20, "Group size": WORLD, "dtype": "BFloat16",
                               "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                               "Process Group Description": "default_pg", "Process Group Ranks": RANKS_CUT}),
        ):
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": t + 5.0, "dur": 4.0, "args": {"correlation": corr, "External id": corr}})
            args = {"queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": corr,
                    "External id": corr, "grid": [132, 1, 1], "block": [384, 1, 1]}
            if meta and with_meta:
                args.update(meta)
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": t + 20.0,
                       "dur": dur, "args": args})
            t += dur + 30.0
        t += 900.0
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": WORLD, "pg_count": 1,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                               "pg_size": WORLD, "ranks": list(range(WORLD))}]},
            "traceEvents": ev, "displayTimeUnit": "ms",
            "kernelscope_fixture": {"script": "tools/make_collective_traits.py", "synthetic": True}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tracesets"))
    out = Path(ap.parse_args().out)
    for sub, meta in (("p2p_2of128", True), ("p2p_2of128_bare", False)):
        d = out / sub
        d.mkdir(parents=True, exist_ok=True)
        # rank 1's window was sampled 400 us after rank 0's: each of its SendRecv kernels starts after
        # rank 0's k-th one ended
        for rank, t0 in ((0, 1_700_000_000_000.0), (1, 1_700_000_000_400.0)):
            data = json.dumps(rank_trace(rank, t0, meta), separators=(",", ":")).encode()
            (d / f"pp-rank-{rank}.trace.json.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        print(d)


if __name__ == "__main__":
    main()
