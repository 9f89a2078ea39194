#!/usr/bin/env python3
"""CUDA-graph capture fixtures: an eager decode step, the profiled capture of the same step, and
profiled replays of the captured graph, the three traces a serving engine's user holds.

Run on a CUDA machine (torch only; no transformers needed):

    python3 tools/make_capture_traces.py --out tests/fixtures/traces

The model is a small Llama-style decoder written here in plain ``torch.nn`` modules named as
transformers names Llama's (``LlamaForCausalLM > LlamaModel > LlamaDecoderLayer > LlamaAttention /
LlamaMLP / LlamaRMSNorm``, ``Linear`` projections), randomly initialised, bf16: 4 decoder layers,
hidden 512, 8 query heads / 2 KV heads of 64, MLP 1408, vocab 4096. One decode step takes
``[8, 1]`` token ids and a position tensor, writes K/V into a static cache of 256 positions and
attends over it with a mask computed on the GPU from the position, so the same code runs eagerly
and under capture (no host-side branch differs), and the replay's kernels are the eager step's.

Traces (profiled with record_shapes, with_stack, with_modules, CPU + CUDA activities):

  capture_eager.json.gz     one eager decode step (module spans, kernels run)
  capture_capture.json.gz   the capture of that step into a CUDA graph: launches inside module
                            spans, no kernel runs (what SGLang/vLLM users profile at start-up)
  capture_replay.json.gz    3 replays of the graph (between them the inputs are refreshed by
                            eager copies outside any module); no module spans

``--only train`` adds ``train_graph.json.gz``: a small MLP training step (forward, MSE loss,
backward, SGD) profiled once eagerly and then replayed twice from a CUDA graph of the whole
step: graph replays with no inference phase (neither a marker nor decode shapes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from make_sample_traces import save  # the same gzip writer and summary line as the other fixtures
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 4, 512, 8, 2, 64, 1408, 4096
BATCH, MAX_LEN, POS = 8, 256, 100


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, pos):  # pos: [B, 1] int64
        freqs = pos.float()[..., None] * self.inv_freq  # [B, 1, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)

    def forward(self, x, cos, sin, cache_k, cache_v, slot, mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        c, sn = cos[:, None], sin[:, None]
        q = q * c + _rotate_half(q) * sn
        k = k * c + _rotate_half(k) * sn
        cache_k.index_copy_(2, slot, k)
        cache_v.index_copy_(2, slot, v)
        o = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=mask, enable_gqa=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))


class LlamaMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, MLP, bias=False)
        self.up_proj = nn.Linear(HIDDEN, MLP, bias=False)
        self.down_proj = nn.Linear(MLP, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(HIDDEN)
        self.self_attn = LlamaAttention()
        self.post_attention_layernorm = LlamaRMSNorm(HIDDEN)
        self.mlp = LlamaMLP()

    def forward(self, x, cos, sin, cache_k, cache_v, slot, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache_k, cache_v, slot, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
        self.norm = LlamaRMSNorm(HIDDEN)
        self.rotary_emb = LlamaRotaryEmbedding()

    def forward(self, ids, pos, caches):
        x = self.embed_tokens(ids)
        cos, sin = self.rotary_emb(pos)
        slot = pos[0]  # one position for the whole batch: [1]
        mask = (torch.arange(MAX_LEN, device=ids.device) <= pos)[:, None, None, :]  # [B, 1, 1, L]
        for layer, (ck, cv) in zip(self.layers, caches):
            x = layer(x, cos, sin, ck, cv, slot, mask)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = LlamaModel()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids, pos, caches):
        return self.lm_head(self.model(ids, pos, caches))


def _profile():
    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   record_shapes=True, with_stack=True, with_modules=True)


def decode_traces(out: str) -> list[dict]:
    torch.manual_seed(0)
    model = LlamaForCausalLM().to(device="cuda", dtype=torch.bfloat16).eval()
    caches = [(torch.zeros(BATCH, KV_HEADS, MAX_LEN, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
               torch.zeros(BATCH, KV_HEADS, MAX_LEN, HEAD_DIM, device="cuda", dtype=torch.bfloat16))
              for _ in range(LAYERS)]
    ids = torch.randint(0, VOCAB, (BATCH, 1), device="cuda")
    pos = torch.full((BATCH, 1), POS, dtype=torch.long, device="cuda")

    def step():
        with torch.no_grad():
            return model(ids, pos, caches)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (cuBLAS handles, workspaces) off the capture
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    meta = {"model": "LlamaForCausalLM (plain torch, tools/make_capture_traces.py)", "layers": LAYERS,
            "batch": BATCH, "seq": 1, "kv_len": MAX_LEN, "phase": "decode"}
    infos = []
    with _profile() as prof:
        eager_out = step()
        torch.cuda.synchronize()
    infos.append(save(prof, out, "capture_eager.json.gz", {**meta, "content": "1 eager decode step"}))
    graph = torch.cuda.CUDAGraph()
    with _profile() as prof:
        with torch.cuda.graph(graph):
            static_out = step()
        torch.cuda.synchronize()
    infos.append(save(prof, out, "capture_capture.json.gz",
                      {**meta, "content": "capture of the decode step into a CUDA graph (no kernel runs)"}))
    graph.replay()
    torch.cuda.synchronize()
    if not torch.equal(static_out, eager_out):  # same inputs, same cache slot: the same logits
        print(json.dumps({"note": "replay output differs from the eager step",
                          "max_abs": float((static_out.float() - eager_out.float()).abs().max())}), flush=True)
    with _profile() as prof:
        for _ in range(3):
            ids.copy_(torch.randint(0, VOCAB, (BATCH, 1), device="cuda"))
            graph.replay()
        torch.cuda.synchronize()
    infos.append(save(prof, out, "capture_replay.json.gz", {**meta, "content": "3 replays of the captured graph"}))
    assert torch.isfinite(static_out.float()).all()
    return infos


def train_trace(out: str) -> dict:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                        nn.Linear(1024, 256)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    y = torch.randn(64, 256, device="cuda")

    def train_step():
        opt.zero_grad(set_to_none=False)
        loss = F.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step()
    torch.cuda.synchronize()
    with _profile() as prof:
        train_step()  # one eager step: module spans, no inference phase
        torch.cuda.synchronize()
        for _ in range(2):
            graph.replay()
        torch.cuda.synchronize()
    assert torch.isfinite(static_loss).all()
    return save(prof, out, "train_graph.json.gz",
                {"model": "MLP 256-1024-1024-256 (GELU), MSE loss, SGD", "batch": 64,
                 "content": "1 eager training step + 2 replays of the captured step"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/traces")
    ap.add_argument("--only", nargs="*", default=None, help="subset of: decode train")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "cuda": torch.version.cuda}), flush=True)
    jobs = {"decode": lambda: decode_traces(args.out), "train": lambda: train_trace(args.out)}
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
