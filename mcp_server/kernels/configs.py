"""DeepSeek-V2/V3 MLA configurations as data, and the absorbed reconstruction BMM shapes.

In absorbed MLA decode (weights of the latent up-projection folded into the query and the
output), two batched matrix products per layer touch the per-head reconstruction weights:

* ``W_UK``: ``q_nope[H, M, qk_nope] @ W_UK[H, qk_nope, kv_lora] -> q_latent[H, M, kv_lora]``
  (K = qk_nope_head_dim = 128, N = kv_lora_rank = 512);
* ``W_UV``: ``o_latent[H, M, kv_lora] @ W_UV[H, kv_lora, v_head] -> o[H, M, v_head]``
  (K = kv_lora_rank = 512, N = v_head_dim = 128).

H is the batch of the BMM (one matrix per attention head), M the decode batch (tokens).
One layer's W_UK or W_UV is ``128 * 128 * 512 * 2 B = 16 MiB`` in BF16: it fits in the H200's
L2. A serving engine cycles through every layer, so each layer's weights come back from HBM;
the *stacked* case puts ``layers`` consecutive layers' matrices into one BMM batch
(H = heads * layers), the form in which the weights no longer fit in L2 even within one launch.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Decode batch sizes the issue covers (1..256).
BATCH_RANGE = (1, 256)
DEFAULT_BATCHES = (1, 8, 64)
#: Layers stacked into one BMM: 1 (one layer, 16 MiB BF16), 8 (128 MiB), 32 (512 MiB).
DEFAULT_STACKS = (1, 8, 32)


@dataclass(frozen=True)
class MLAConfig:
    """The attention dimensions of one model that fix the reconstruction BMMs."""

    name: str
    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    num_layers: int
    source: str


#: From the models' published config.json files (huggingface deepseek-ai/DeepSeek-V2 and
#: DeepSeek-V3): num_attention_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
#: v_head_dim, num_hidden_layers.
MODELS: dict[str, MLAConfig] = {
    "deepseek-v2": MLAConfig("deepseek-v2", 128, 512, 128, 64, 128, 60, "DeepSeek-V2 config.json"),
    "deepseek-v3": MLAConfig("deepseek-v3", 128, 512, 128, 64, 128, 61, "DeepSeek-V3 config.json"),
}


@dataclass(frozen=True)
class BmmShape:
    """One batched product ``x[H, M, K] @ W[H, K, N]`` (weights W, activations x)."""

    model: str
    weight: str          # "W_UK" or "W_UV"
    H: int               # BMM batch: heads * layers
    M: int               # decode tokens
    K: int
    N: int
    layers: int = 1

    @property
    def weight_elems(self) -> int:
        return self.H * self.K * self.N

    @property
    def weight_bytes_bf16(self) -> int:
        return 2 * self.weight_elems

    @property
    def weight_mb(self) -> float:
        """BF16 weight size in MB (10^6 bytes)."""
        return self.weight_bytes_bf16 / 1e6

    @property
    def flops(self) -> int:
        return 2 * self.H * self.M * self.K * self.N

    @property
    def label(self) -> str:
        lay = f" x{self.layers}L" if self.layers > 1 else ""
        return f"{self.weight}{lay} {self.H}x{self.M}x{self.K}x{self.N}"


def get_model(name: str) -> MLAConfig:
    """The named config; KeyError lists the known names."""
    key = name.strip().lower()
    if key not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


def reconstruction_shapes(cfg: MLAConfig, M: int, layers: int = 1) -> list[BmmShape]:
    """The two absorbed-decode BMMs of ``layers`` stacked layers at decode batch ``M``."""
    if not BATCH_RANGE[0] <= M <= BATCH_RANGE[1]:
        raise ValueError(f"decode batch M={M} outside {BATCH_RANGE[0]}..{BATCH_RANGE[1]}")
    if not 1 <= layers <= cfg.num_layers:
        raise ValueError(f"layers={layers} outside 1..{cfg.num_layers} for {cfg.name}")
    H = cfg.num_heads * layers
    return [
        BmmShape(cfg.name, "W_UK", H, M, cfg.qk_nope_head_dim, cfg.kv_lora_rank, layers),
        BmmShape(cfg.name, "W_UV", H, M, cfg.kv_lora_rank, cfg.v_head_dim, layers),
    ]


def mla_shapes(model: str, batches=DEFAULT_BATCHES, stacks=DEFAULT_STACKS) -> list[BmmShape]:
    """Every (stack, weight, M) shape of a model, stacks outermost."""
    cfg = get_model(model)
    out: list[BmmShape] = []
    for layers in stacks:
        for M in batches:
            out.extend(reconstruction_shapes(cfg, M, layers))
    return out
