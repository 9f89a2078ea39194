"""Functional blocks: kernel -> module key -> module-type group -> block.

``_shared/functional_blocks.csv`` (``pattern,block,role``; '#' comment lines) maps a
kernel's *module key* to a functional block (attn_qkv_proj, attn_core, moe_experts,
mlp_down_proj, ...). The CSV header comment documents the key; in short:

* the key is the chain of module types from the root to the owning module
  (``LlamaForCausalLM/LlamaModel/LlamaDecoderLayer/LlamaAttention/Linear``);
* a generic leaf (``Linear`` and the parallel-linear variants) gets ``@pre`` or
  ``@post``: ``@post`` when its parent instance already launched kernels of its
  own during the current call (the attention core before ``o_proj``, the
  ``act*up`` multiply before ``down_proj``), else ``@pre``;
* consecutive kernels with the same key under the same parent instance form one
  group (module type = instance name without its numeric suffix, so
  ``Linear_0, Linear_1, Linear_2`` = q, k, v form one group);
* a kernel in category ``communication`` is block ``communication`` wherever it runs;
  a key no rule matches keeps the owning module type as block; no module ->
  ``(unattributed)``.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from mcp_server.core.paths import shared_path
from mcp_server.core.rules import parse_rule_table, read_rules_file
from mcp_server.core.userregex import UserRegex
from mcp_server.core.vocab import COMMUNICATION, module_type

GENERIC_LEAVES = frozenset({
    "Linear", "ReplicatedLinear", "ColumnParallelLinear", "RowParallelLinear", "LinearBase",
    "NonDynamicallyQuantizableLinear", "Conv1D",
})
UNATTRIBUTED = "(unattributed)"


@dataclass(frozen=True)
class BlockRule:
    pattern: str
    block: str
    role: str
    regex: UserRegex = field(compare=False, repr=False)


@dataclass
class BlockRules:
    rules: tuple[BlockRule, ...]
    source: str
    sha256: str
    _memo: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False, compare=False)

    def match(self, key: str, fallback: str) -> tuple[str, str]:
        """(block, role) of a module key; ``fallback`` (the module type) when no rule matches."""
        hit = self._memo.get(key)
        if hit is None:
            hit = ("", "")
            for r in self.rules:
                if r.regex.search(key):
                    hit = (r.block, r.role)
                    break
            self._memo[key] = hit
        return hit if hit[0] else (fallback, "")

    def role_of(self, block: str) -> str:
        for r in self.rules:
            if r.block == block:
                return r.role
        return ""


def parse_blocks(text: str, source: str = "<string>") -> BlockRules:
    table = parse_rule_table(text, source, required=("pattern", "block"), optional=("role",),
                             what="functional block rules")
    rules = tuple(BlockRule(r.values["pattern"], r.values["block"], r.values["role"], r.regex) for r in table.rows)
    return BlockRules(rules, source, table.sha256)


@lru_cache(maxsize=8)
def _parsed(source: str, text: str) -> BlockRules:
    return parse_blocks(text, source=source)


def load_blocks(path: str | os.PathLike | None = None) -> BlockRules:
    p = Path(path) if path else shared_path("functional_blocks.csv")
    text, resolved = read_rules_file(p, what="functional blocks", hint="pass a CSV with header 'pattern,block,role'")
    return _parsed(resolved, text)


def module_keys(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Per kernel (in ``df`` row order = execution order): module key and parent instance path.

    A generic leaf is ``@post`` when its parent's current call launched kernels of its own
    before it and none after it (o_proj after the attention core, down_proj after act*up),
    else ``@pre`` (q/k/v, MLA q_a/q_b/kv_a/kv_b, gate/up, router). A parent's call is a
    maximal run of consecutive kernels inside its subtree. Vectorised per parent instance.
    """
    n = len(df)
    if n == 0:
        return [], []
    empty = {"", "nan", "None"}
    def col(c):
        return df[c].astype(str).to_numpy(dtype=object) if c in df else np.full(n, "", dtype=object)
    codes, uniq = pd.factorize(col("module_path"))
    uniq = [str(u) for u in uniq]
    u_chain, u_parent, u_generic = [], [], []
    for u in uniq:
        if u in empty:
            u_chain.append("")
            u_parent.append("")
            u_generic.append(False)
            continue
        parent, _, leaf = u.rpartition("/")
        u_chain.append("/".join(module_type(x) for x in u.split("/")))
        u_parent.append(parent)
        u_generic.append(module_type(leaf) in GENERIC_LEAVES and bool(parent))
    keys = np.asarray(u_chain, dtype=object)[codes]
    parents = np.asarray(u_parent, dtype=object)[codes]
    # Rows without a module path: the module type (or the instance's) is the key.
    no_path = np.asarray([u in empty for u in uniq], dtype=bool)[codes]
    if no_path.any():
        mt, md = col("module_type")[no_path], col("module")[no_path]
        keys[no_path] = [t if t not in empty else (module_type(m) if m not in empty else "") for t, m in zip(mt, md)]
    generic_u = np.asarray(u_generic, dtype=bool)
    if generic_u.any():
        code_of = {u: i for i, u in enumerate(uniq)}
        idx = np.arange(n)
        suffix = np.full(n, "", dtype=object)
        u_parent_arr = np.asarray(u_parent, dtype=object)
        order = sorted(range(len(uniq)), key=uniq.__getitem__)
        sorted_u = [uniq[i] for i in order]
        for parent in dict.fromkeys(u_parent[i] for i in np.flatnonzero(generic_u)):
            # the parent's subtree: itself plus the sorted range of paths starting with "parent/"
            in_sub_u = np.zeros(len(uniq), dtype=bool)
            lo, hi = bisect.bisect_left(sorted_u, parent + "/"), bisect.bisect_left(sorted_u, parent + "0")
            in_sub_u[[order[j] for j in range(lo, hi)]] = True
            if parent in code_of:
                in_sub_u[code_of[parent]] = True
            rows = np.flatnonzero(in_sub_u[codes])
            if not len(rows):
                continue
            call = np.cumsum(np.r_[True, np.diff(rows) > 1])  # calls: runs of consecutive rows in the subtree
            pc = code_of.get(parent, -1)
            is_self = codes[rows] == pc
            child_u = generic_u & (u_parent_arr == parent)
            is_child = child_u[codes[rows]]
            ncall = int(call[-1]) + 1
            first = np.full(ncall, n, dtype=np.int64)
            last = np.full(ncall, -1, dtype=np.int64)
            if is_self.any():
                np.minimum.at(first, call[is_self], idx[rows][is_self])
                np.maximum.at(last, call[is_self], idx[rows][is_self])
            cr = rows[is_child]
            cc = call[is_child]
            post = (first[cc] < cr) & (last[cc] < cr)
            suffix[cr] = np.where(post, "@post", "@pre")
        g = suffix != ""
        keys[g] = keys[g] + suffix[g]
    return keys.tolist(), parents.tolist()


def _fallback(key: str) -> str:
    return key.rsplit("/", 1)[-1].split("@", 1)[0]


def assign_blocks(df: pd.DataFrame, rules: BlockRules, *, columns: list[str] | None = None) -> pd.DataFrame:
    """Return ``df`` (execution order; only ``columns`` of it when given) with columns
    ``module_key``, ``group``, ``block``, ``role``."""
    keys, parents = module_keys(df)
    out = df[columns].copy() if columns is not None else df.copy()
    n = len(out)
    out["module_key"] = keys
    if n == 0:
        out["group"] = np.zeros(0, dtype=np.int64)
        out["block"] = []
        out["role"] = []
        return out
    k_arr = np.asarray(keys, dtype=object)
    p_arr = np.asarray(parents, dtype=object)
    change = np.ones(n, dtype=bool)
    change[1:] = (k_arr[1:] != k_arr[:-1]) | (p_arr[1:] != p_arr[:-1])
    group = np.cumsum(change) - 1
    out["group"] = group
    table: dict[str, tuple[str, str]] = {}
    for key in dict.fromkeys(keys):
        table[key] = (UNATTRIBUTED, "kernels with no owning module") if not key else rules.match(key, _fallback(key))
    blocks = np.asarray([table[k][0] for k in keys], dtype=object)
    roles = np.asarray([table[k][1] for k in keys], dtype=object)
    if "category" in df:
        # Collectives are their own block wherever they are launched (e.g. the all-reduce inside
        # RowParallelLinear): platforms differ in how they communicate, not in the projection.
        is_comm = df["category"].astype(str).to_numpy(dtype=object) == COMMUNICATION
        if is_comm.any():
            blocks[is_comm] = COMMUNICATION
            roles[is_comm] = rules.role_of(COMMUNICATION) or "collective communication"
    out["block"] = blocks
    out["role"] = roles
    return out
