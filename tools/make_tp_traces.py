#!/usr/bin/env python3
"""Trace fixtures with communication kernels: a 2-GPU tensor-parallel-style run.

Run on a machine with 2 NVIDIA GPUs (torch with NCCL, transformers):

    torchrun --nproc_per_node 2 tools/make_tp_traces.py --out tests/fixtures/traces

Each rank builds the same randomly initialised Llama-style model (4 decoder
layers). Forward hooks all-reduce the outputs of every ``o_proj`` and
``down_proj`` (where SGLang's RowParallelLinear all-reduces), so each decoder
layer launches two NCCL all-reduce kernels, inside the module that owns them.
Only rank 0 is profiled (record_shapes, with_stack, with_modules). Traces:

  tp2_prefill.json.gz        one prefill (forward_extend), eager
  tp2_decode_mixed.json.gz   one eager decode step (forward_decode), then 3
                             replays of the same step captured as a CUDA graph
                             (the all-reduces are captured in the graph)

The weights are identical on both ranks, so the all-reduce doubles the
activations; the model is random, only the kernel sequence matters.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
from make_sample_traces import save  # the same gzip writer and summary line as the other fixtures
from torch.profiler import ProfilerActivity, profile

LAYERS = 4


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


def forward_extend(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def forward_decode(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def _profile(rank: int):
    if rank != 0:
        return contextlib.nullcontext()
    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   record_shapes=True, with_stack=True, with_modules=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/traces")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    os.makedirs(args.out, exist_ok=True)
    model = build()
    meta = {"model": "LlamaForCausalLM", "layers": LAYERS, "attn": "sdpa", "world_size": dist.get_world_size(),
            "rank": rank, "allreduce_after": ["o_proj", "down_proj"]}
    failed = 0

    # prefill
    try:
        ids = torch.randint(0, 4096, (1, 128), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        for _ in range(3):
            forward_extend(model, ids)
        torch.cuda.synchronize()
        with _profile(rank) as prof:
            forward_extend(model, ids)
            torch.cuda.synchronize()
        if rank == 0:
            save(prof, args.out, "tp2_prefill.json.gz", {**meta, "phase": "prefill", "batch": 1, "seq": 128})
    except Exception as exc:
        failed += 1
        print(json.dumps({"rank": rank, "job": "prefill", "error": repr(exc)[:2000]}), flush=True)

    # decode: one eager step, then CUDA-graph replays of the same step
    try:
        static_ids = torch.randint(0, 4096, (8, 1), device="cuda", generator=torch.Generator("cuda").manual_seed(2))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                forward_decode(model, static_ids)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward_decode(model, static_ids)
        graph.replay()
        torch.cuda.synchronize()
        with _profile(rank) as prof:
            forward_decode(model, static_ids)
            torch.cuda.synchronize()
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
        if rank == 0:
            save(prof, args.out, "tp2_decode_mixed.json.gz",
                 {**meta, "phase": "decode", "batch": 8, "seq": 1, "content": "1 eager step + 3 graph replays"})
    except Exception as exc:
        failed += 1
        print(json.dumps({"rank": rank, "job": "decode", "error": repr(exc)[:2000]}), flush=True)

    # The recorded run hung in NCCL teardown after the traces were written (stopped by `timeout`);
    # leave without tearing the process group down.
    torch.cuda.synchronize()
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
