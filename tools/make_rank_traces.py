#!/usr/bin/env python3
"""Multi-rank trace-set fixtures: four data-parallel ranks on one GPU (gloo).

Run on the GPU machine (torch with CUDA, transformers):

    torchrun --nproc_per_node 4 tools/make_rank_traces.py --out tests/fixtures/tracesets

Each rank is a data-parallel replica of the same randomly initialised
Llama-style model (4 decoder layers, hidden 512), all on ``cuda:0``; the process
group uses the gloo backend, so the ranks can share the one GPU. Each rank
profiles one prefill step (record_shapes, with_stack, with_modules: the
module spans come from the Python tracer that with_stack turns on) per set, and the
profiler writes ``distributedInfo`` (backend, rank, world size) into every
trace. Files are named the way SGLang names per-rank traces:
``<set>/llama-TP-<rank>.trace.json.gz``.

The ranks take turns on the GPU: rank r runs its profiled step while the
others wait at a gloo barrier, so kernels of different processes never
time-slice against each other and the planted differences are not blurred by
contention. After each step the ranks all-reduce a small CPU tensor (a DP loss
sync, gloo) outside the profiled region.

Sets (planted differences):
  balanced/   every rank the same: batch 1 x 128 tokens
  straggler/  rank 1 does extra work inside every decoder layer's MLP
              (a fixed straggler: the same rank is slowest in every layer)
  moving/     in decoder layer L, rank L % 4 does the extra work
              (the slow rank moves from layer to layer, like a hot MoE expert)
  tokens/     rank 3 is given 8 x the tokens (1024 instead of 128)

The extra work is EXTRA_MATMULS matmuls of [tokens, 512] x [512, 2048] inside
the MLP's forward, so its kernels are attributed to that LlamaMLP instance.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

LAYERS = 4
SEQ = 128
EXTRA_MATMULS = 10
SETS = ("balanced", "straggler", "moving", "tokens")


def build():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=LAYERS,
                      num_attention_heads=8, num_key_value_heads=2, vocab_size=4096,
                      max_position_embeddings=1024)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()


def slow_layers(set_name: str, rank: int, world: int) -> list[int]:
    if set_name == "straggler":
        return list(range(LAYERS)) if rank == 1 else []
    if set_name == "moving":
        return [layer for layer in range(LAYERS) if layer % world == rank]
    return []


def tokens(set_name: str, rank: int) -> int:
    return 8 * SEQ if set_name == "tokens" and rank == 3 else SEQ


class Planted:
    """Replace the MLP forward of the chosen layers by one that adds extra matmuls (and restore it)."""

    def __init__(self, model, layers: list[int]):
        self.mlps = [model.model.layers[i].mlp for i in layers]
        self.w = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)

    def __enter__(self):
        for mlp in self.mlps:
            orig = mlp.forward

            def forward(x, _orig=orig):
                y = _orig(x)
                for _ in range(EXTRA_MATMULS):
                    torch.matmul(x, self.w)
                return y

            mlp.forward = forward
        return self

    def __exit__(self, *exc):
        for mlp in self.mlps:
            del mlp.forward  # back to the class's forward
        return False


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
    kern = [e for e in ev if e.get("cat") == "kernel"]
    info = {"file": path, "json_bytes": len(blob), "gz_bytes": os.path.getsize(path), "events": len(ev),
            "kernels": len(kern), "kernel_us": round(sum(float(e.get("dur", 0)) for e in kern), 1),
            "distributedInfo": data.get("distributedInfo"), **meta}
    print(json.dumps(info), flush=True)
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/tracesets")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    model = build()
    failed = 0
    for set_name in SETS:
        out_dir = os.path.join(args.out, set_name)
        os.makedirs(out_dir, exist_ok=True)
        n = tokens(set_name, rank)
        layers = slow_layers(set_name, rank, world)
        ids = torch.randint(0, 4096, (1, n), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        meta = {"set": set_name, "rank": rank, "world_size": world, "backend": "gloo", "layers": LAYERS,
                "tokens": n, "extra_work_layers": layers, "extra_matmuls": EXTRA_MATMULS if layers else 0}
        try:
            with Planted(model, layers):
                for _ in range(3):
                    forward_extend(model, ids)
                torch.cuda.synchronize()
                for turn in range(world):
                    dist.barrier()
                    if turn != rank:
                        continue
                    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                 record_shapes=True, with_stack=True, with_modules=True) as prof:
                        forward_extend(model, ids)
                        torch.cuda.synchronize()
                dist.barrier()
            loss = torch.ones(1)
            dist.all_reduce(loss)  # the DP sync, outside the profiled region
            save(prof, os.path.join(out_dir, f"llama-TP-{rank}.trace.json.gz"), meta)
        except Exception as exc:
            failed += 1
            print(json.dumps({"rank": rank, "set": set_name, "error": repr(exc)[:2000]}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
