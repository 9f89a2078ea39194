#!/usr/bin/env python3
"""Record two decode-step traces of a Hugging Face Llama decoder that differ only in the attention implementation.

Run on a CUDA machine with transformers installed (the worked example of examples/repro_hf_decode/):

    python3 tools/record_hf_decode.py --out examples/repro_hf_decode/traces

The model is transformers' own ``LlamaForCausalLM`` with random weights (no download) and a
Llama-3.2-1B-like layer (hidden 2048, 32 query heads, 8 key/value heads, head dim 64, MLP 8192,
bf16) cut to a few layers. Both runs build the same weights (same seed), prefill the same batch of 8
prompts of ``--ctx`` tokens (not traced), decode ``--warm`` steps, then trace ONE decode step
(batch 8, one new token each, the KV cache in transformers' default DynamicCache) with the settings
users have: ``record_shapes``, ``with_stack``, ``with_modules``, CPU + CUDA activities. Only
``attn_implementation`` differs: ``eager`` (repeat_kv, matmul, softmax, matmul) against ``sdpa``
(torch's scaled_dot_product_attention with grouped-query heads, no repeat_kv).

Written: ``hf_decode_eager.json.gz``, ``hf_decode_sdpa.json.gz`` and ``record.json`` (the config, the
versions, each trace's size and the decode step time of each run, CUDA events, median of ``--steps``).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

CONFIG = dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
              head_dim=64, vocab_size=32000, max_position_embeddings=8192, rms_norm_eps=1e-5)


def build(attn: str, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=layers, **CONFIG)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval(), cfg


def decode_step(model, ids, cache):
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    return out.logits[:, -1:].argmax(-1), out.past_key_values


def run(attn: str, args) -> tuple[dict, dict]:
    nocudnn = attn.endswith("-nocudnn")  # sdpa with torch's cuDNN backend switched off (flash / efficient)
    if nocudnn:
        attn = attn[: -len("-nocudnn")]
    torch.backends.cuda.enable_cudnn_sdp(not nocudnn)
    model, cfg = build(attn, args.layers)
    gen = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(0, CONFIG["vocab_size"], (args.batch, args.ctx), generator=gen).to("cuda")
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        ids, cache = out.logits[:, -1:].argmax(-1), out.past_key_values
        for _ in range(args.warm):
            ids, cache = decode_step(model, ids, cache)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                     with_stack=True, with_modules=True) as prof:
            ids, cache = decode_step(model, ids, cache)
            torch.cuda.synchronize()
        # the step time of the same run, outside the profiler (the cache grows by one token per step)
        times = []
        for _ in range(args.steps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            ids, cache = decode_step(model, ids, cache)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
    assert bool(torch.isfinite(ids.float()).all())
    info = {"attn": attn + ("-nocudnn" if nocudnn else ""), "decode_step_us_median": round(statistics.median(times), 1),
            "decode_step_us_min": round(min(times), 1), "steps_timed": len(times),
            "kv_len_traced": args.ctx + args.warm + 1}
    del model, cache
    torch.cuda.empty_cache()
    return prof, info


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
    return {"file": os.path.basename(path), "json_bytes": len(blob), "gz_bytes": os.path.getsize(path),
            "events": len(ev), "kernels": sum(1 for e in ev if e.get("cat") == "kernel")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="examples/repro_hf_decode/traces")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=2048, help="prompt tokens per sequence (prefilled, not traced)")
    ap.add_argument("--warm", type=int, default=3, help="decode steps before the traced one")
    ap.add_argument("--steps", type=int, default=20, help="decode steps timed after the traced one")
    ap.add_argument("--runs", nargs="+", default=["eager", "sdpa"], choices=["eager", "sdpa", "sdpa-nocudnn"],
                    help="sdpa-nocudnn: sdpa with torch's cuDNN attention backend off")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import transformers

    os.makedirs(args.out, exist_ok=True)
    record = {"model": "LlamaForCausalLM (transformers, random weights)", "config": {**CONFIG, "num_hidden_layers":
              args.layers}, "batch": args.batch, "ctx": args.ctx, "warm_steps": args.warm, "dtype": "bfloat16",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "gpu": torch.cuda.get_device_name(0), "runs": []}
    for attn in args.runs:
        prof, info = run(attn, args)
        meta = {"model": "LlamaForCausalLM", "attn": info["attn"], "batch": args.batch, "phase": "decode",
                "kv_len": info["kv_len_traced"], "layers": args.layers}
        info.update(save(prof, os.path.join(args.out, f"hf_decode_{attn.replace('-', '_')}.json.gz"), meta))
        record["runs"].append(info)
        print(json.dumps(info), flush=True)
    with open(os.path.join(args.out, "record.json" if args.runs == ["eager", "sdpa"] else
                           f"record_{'_'.join(args.runs).replace('-', '_')}.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
