#!/usr/bin/env python3
"""Trace sets with collectives on every rank: a tensor-parallel-style run on one GPU (gloo).

Run on the GPU machine (torch with CUDA, transformers):

    torchrun --standalone --nproc_per_node 4 tools/make_collective_traces.py --out tests/fixtures/tracesets

Four ranks share ``cuda:0``; the process group is gloo (NCCL refuses two ranks on one GPU). Each
rank builds the same random Llama-style model (4 decoder layers, hidden 512). Forward hooks
all-reduce the outputs of every ``o_proj`` and ``down_proj`` (where SGLang's RowParallelLinear
all-reduces) with ``dist.all_reduce`` on the CUDA tensor, so each decoder layer runs two
collectives inside the module that owns them. Every rank is profiled at the same time (the
collectives need all of them), so the ranks' kernels time-slice on the one GPU; the collective
waits are on the host (gloo), where the clocks of the four processes are the same clock.

Sets:
  tp4_gloo/            every rank the same: one prefill, batch 1 x 128 tokens
  tp4_gloo_straggler/  rank 2 does extra host work (CPU matmuls, EXTRA_CPU_MS) at the start of every
                       decoder layer, so it reaches each layer's first all-reduce last

Files: ``<set>/llama-TP-<rank>.trace.json.gz``. The script also prints, per trace, the names and
argument keys of the events that look like collectives (for the fixtures README).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections import Counter

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

LAYERS = 4
SEQ = 128
STRAGGLER = 2
EXTRA_CPU_MS = 3.0


def build():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=LAYERS,
                      num_attention_heads=8, num_key_value_heads=2, vocab_size=4096,
                      max_position_embeddings=1024)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()

    def allreduce_hook(_mod, _inp, out):
        dist.all_reduce(out)
        return out

    for layer in model.model.layers:
        layer.self_attn.o_proj.register_forward_hook(allreduce_hook)
        layer.mlp.down_proj.register_forward_hook(allreduce_hook)
    return model


def cpu_work(ms: float) -> int:
    """CPU matmuls for about ``ms`` milliseconds (a fixed count, calibrated once)."""
    a = torch.randn(192, 192)
    n = 0
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        a = torch.tanh(a @ a)
        n += 1
    return n


def forward_extend(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def save(prof, path: str, meta: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f:
            data = json.load(f)
    data.setdefault("kernelscope_fixture", {}).update(meta)
    blob = json.dumps(data, separators=(",", ":")).encode()
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(blob)
    ev = data.get("traceEvents", [])
    looks = Counter()
    keys = {}
    for e in ev:
        name = str(e.get("name", ""))
        low = name.lower()
        if any(w in low for w in ("gloo", "comms", "allreduce", "all_reduce", "nccl", "c10d")):
            looks[(e.get("cat"), name)] += 1
            keys.setdefault(name, sorted((e.get("args") or {}).keys()))
    info = {"file": path, "gz_bytes": os.path.getsize(path), "events": len(ev),
            "kernels": sum(1 for e in ev if e.get("cat") == "kernel"),
            "collective_like": {f"{c}|{n}": k for (c, n), k in looks.items()}, "arg_keys": keys, **meta}
    print(json.dumps(info), flush=True)
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/tracesets")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    torch.set_num_threads(1)
    model = build()
    ids = torch.randint(0, 4096, (1, SEQ), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    failed = 0
    for set_name, slow in (("tp4_gloo", None), ("tp4_gloo_straggler", STRAGGLER)):
        out_dir = os.path.join(args.out, set_name)
        os.makedirs(out_dir, exist_ok=True)
        hooks = []
        if rank == slow:
            def extra(_mod, _args):
                cpu_work(EXTRA_CPU_MS)  # returns None: the layer's input is unchanged

            hooks = [layer.register_forward_pre_hook(extra) for layer in model.model.layers]
        meta = {"set": set_name, "rank": rank, "world_size": world, "backend": "gloo", "layers": LAYERS,
                "tokens": SEQ, "allreduce_after": ["o_proj", "down_proj"],
                "extra_cpu_ms_per_layer": EXTRA_CPU_MS if rank == slow else 0.0}
        try:
            for _ in range(3):
                forward_extend(model, ids)
            torch.cuda.synchronize()
            dist.barrier()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                         with_stack=True, with_modules=True) as prof:
                forward_extend(model, ids)
                torch.cuda.synchronize()
            dist.barrier()
            save(prof, os.path.join(out_dir, f"llama-TP-{rank}.trace.json.gz"), meta)
        except Exception as exc:
            failed += 1
            print(json.dumps({"rank": rank, "set": set_name, "error": repr(exc)[:2000]}), flush=True)
        for h in hooks:
            h.remove()
    dist.barrier()
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
