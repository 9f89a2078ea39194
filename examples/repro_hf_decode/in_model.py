#!/usr/bin/env python3
"""The accepted change, put back into the model: eager attention with its P.V bmm done by bmm_m1_triton.bmm.

    python3 examples/repro_hf_decode/in_model.py --out examples/repro_hf_decode/traces

Registers one attention implementation with transformers (``eager_pv_triton``: the eager steps, repeat_kv
included, with the one product the loop accepted swapped; the eager mask), then records the same decode step
as tools/record_hf_decode.py (same weights, prompts and settings): ``hf_decode_eager_pv_triton.json.gz``.
``kernelscope compare`` of it against ``hf_decode_eager.json.gz`` says what the change is worth in the model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "tools")]

from bmm_m1_triton import bmm  # noqa: E402
from record_hf_decode import run, save  # noqa: E402

NAME = "eager_pv_triton"


def eager_pv_triton(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    from transformers.models.llama.modeling_llama import repeat_kv

    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    b, h, q, kv = weights.shape
    out = bmm(weights.reshape(b * h, q, kv), value_states.reshape(b * h, kv, -1)).view(b, h, q, -1)
    return out.transpose(1, 2).contiguous(), weights


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "traces"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(NAME, eager_pv_triton)
    AttentionMaskInterface.register(NAME, eager_mask)
    prof, info = run(NAME, args)
    meta = {"model": "LlamaForCausalLM", "attn": NAME, "batch": args.batch, "phase": "decode",
            "kv_len": info["kv_len_traced"], "layers": args.layers}
    info.update(save(prof, os.path.join(args.out, f"hf_decode_{NAME}.json.gz"), meta))
    print(json.dumps(info), flush=True)
    with open(os.path.join(args.out, f"record_{NAME}.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
