#!/usr/bin/env python3
"""Produce the PyTorch-profiler trace fixtures on a CUDA machine.

Run on the GPU machine (needs torch with CUDA and transformers):

    python3 tools/make_sample_traces.py --out tests/fixtures/traces

Every model is randomly initialised from a small config (no weights are
downloaded). Each trace is profiled with record_shapes, with_stack and
with_modules, and written gzipped. The phase markers ``forward_extend`` and
``forward_decode`` are real Python functions so the profiler records them as
``python_function`` events, the way SGLang's traces carry them.

Traces written:
  llama_prefill_eager.json.gz   Llama-style, eager attention, one prefill
  llama_prefill_sdpa.json.gz    same weights, sdpa attention, one prefill
  llama_decode_mixed.json.gz    one eager decode step, then CUDA-graph replays
  llama_decode_graph.json.gz    CUDA-graph replays only
  dsv3_prefill.json.gz          DeepSeek-V3-style (MLA + MoE), one prefill
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

SEQ = 128
BATCH = 1


def llama_config(attn: str):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=4096,
        max_position_embeddings=1024,
    )
    cfg._attn_implementation = attn
    return cfg


def dsv3_config():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        hidden_size=512,
        intermediate_size=1024,
        moe_intermediate_size=256,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=2,
        topk_group=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        q_lora_rank=192,
        kv_lora_rank=128,
        qk_rope_head_dim=32,
        qk_nope_head_dim=64,
        v_head_dim=64,
        vocab_size=4096,
        max_position_embeddings=1024,
    )
    cfg._attn_implementation = "eager"
    return cfg


def build(cfg, cls_name: str, seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    cls = getattr(transformers, cls_name)
    model = cls(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    return model


def forward_extend(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def forward_decode(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def _profile():
    return profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        record_shapes=True,
        with_stack=True,
        with_modules=True,
    )


def save(prof, out_dir: str, name: str, meta: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f:
            data = json.load(f)
    data.setdefault("kernelscope_fixture", {}).update(meta)
    blob = json.dumps(data, separators=(",", ":")).encode()
    path = os.path.join(out_dir, name)
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(blob)
    ev = data.get("traceEvents", [])
    kernels = sum(1 for e in ev if e.get("cat") == "kernel")
    nccl = sum(1 for e in ev if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower())
    modules = sum(1 for e in ev if str(e.get("name", "")).startswith("nn.Module:"))
    info = {"file": name, "json_bytes": len(blob), "gz_bytes": os.path.getsize(path),
            "events": len(ev), "kernels": kernels, "nccl_kernels": nccl, "module_spans": modules, **meta}
    print(json.dumps(info), flush=True)
    return info


def prefill(out_dir: str, attn: str, name: str) -> dict:
    model = build(llama_config(attn), "LlamaForCausalLM")
    ids = torch.randint(0, 4096, (BATCH, SEQ), device="cuda")
    for _ in range(3):
        forward_extend(model, ids)
    torch.cuda.synchronize()
    with _profile() as prof:
        forward_extend(model, ids)
        torch.cuda.synchronize()
    return save(prof, out_dir, name, {"model": "LlamaForCausalLM", "attn": attn,
                                      "batch": BATCH, "seq": SEQ, "phase": "prefill"})


def decode(out_dir: str) -> list[dict]:
    """One-token forward captured as a CUDA graph (use_cache=False: the graph
    holds the whole decoder stack for one token, the shape of a decode step)."""
    model = build(llama_config("sdpa"), "LlamaForCausalLM")
    static_ids = torch.randint(0, 4096, (8, 1), device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            forward_decode(model, static_ids)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = forward_decode(model, static_ids)
    graph.replay()
    torch.cuda.synchronize()
    meta = {"model": "LlamaForCausalLM", "attn": "sdpa", "batch": 8, "seq": 1,
            "phase": "decode"}
    infos = []
    with _profile() as prof:
        forward_decode(model, static_ids)  # one eager step, module spans present
        torch.cuda.synchronize()
        for _ in range(3):
            static_ids.copy_(torch.randint(0, 4096, (8, 1), device="cuda"))
            graph.replay()
        torch.cuda.synchronize()
    infos.append(save(prof, out_dir, "llama_decode_mixed.json.gz",
                      {**meta, "content": "1 eager step + 3 graph replays"}))
    with _profile() as prof:
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    infos.append(save(prof, out_dir, "llama_decode_graph.json.gz",
                      {**meta, "content": "3 graph replays"}))
    assert torch.isfinite(static_out.float()).all()
    return infos


def dsv3(out_dir: str) -> dict:
    model = build(dsv3_config(), "DeepseekV3ForCausalLM")
    ids = torch.randint(0, 4096, (BATCH, SEQ), device="cuda")
    for _ in range(3):
        forward_extend(model, ids)
    torch.cuda.synchronize()
    with _profile() as prof:
        forward_extend(model, ids)
        torch.cuda.synchronize()
    return save(prof, out_dir, "dsv3_prefill.json.gz",
                {"model": "DeepseekV3ForCausalLM", "attn": "eager", "batch": BATCH,
                 "seq": SEQ, "phase": "prefill"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/traces")
    ap.add_argument("--only", nargs="*", default=None,
                    help="subset of: eager sdpa decode dsv3")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers

    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "device": torch.cuda.get_device_name(0)}), flush=True)
    jobs = {
        "eager": lambda: prefill(args.out, "eager", "llama_prefill_eager.json.gz"),
        "sdpa": lambda: prefill(args.out, "sdpa", "llama_prefill_sdpa.json.gz"),
        "decode": lambda: decode(args.out),
        "dsv3": lambda: dsv3(args.out),
    }
    failed = 0
    for key, job in jobs.items():
        if args.only and key not in args.only:
            continue
        t0 = time.time()
        try:
            job()
        except Exception as exc:  # report and keep going: one failure must not cost the others
            failed += 1
            print(json.dumps({"job": key, "error": repr(exc)[:2000]}), flush=True)
            import traceback

            traceback.print_exc()
        print(json.dumps({"job": key, "seconds": round(time.time() - t0, 1)}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
