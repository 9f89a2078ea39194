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
* a group whose kernels are all ``communication`` is block ``communication``;
  a key no rule matches keeps the owning module type as block; no module ->
  ``(unattributed)``.
"""
from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from mcp_server import shared_path
from mcp_server.errors import CategoriesError, FileMissingError

GENERIC_LEAVES = frozenset({
    "Linear", "ReplicatedLinear", "ColumnParallelLinear", "RowParallelLinear", "LinearBase",
    "NonDynamicallyQuantizableLinear", "Conv1D",
})
UNATTRIBUTED = "(unattributed)"
COMMUNICATION = "communication"
_SUFFIX = re.compile(r"_\d+$")


def default_blocks_path() -> Path:
    return shared_path("functional_blocks.csv")


@dataclass(frozen=True)
class BlockRule:
    pattern: str
    block: str
    role: str
    regex: re.Pattern[str] = field(compare=False, repr=False)


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
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        raise CategoriesError("functional blocks file has no header; expected 'pattern,block,role'", path=source)
    header = [h.strip().lower() for h in rows[0]]
    if "pattern" not in header or "block" not in header:
        raise CategoriesError(f"header must name columns 'pattern' and 'block' (and optionally 'role'), found {rows[0]!r}", path=source)
    pi, bi = header.index("pattern"), header.index("block")
    ri = header.index("role") if "role" in header else None
    rules = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) <= max(pi, bi):
            raise CategoriesError(f"data row {n}: expected 'pattern,block,role', got {row!r}", path=source)
        pat, block = row[pi].strip(), row[bi].strip()
        role = row[ri].strip() if ri is not None and len(row) > ri else ""
        if not pat or not block:
            raise CategoriesError(f"data row {n}: empty pattern or block", path=source)
        try:
            rx = re.compile(pat, re.IGNORECASE)
        except re.error as exc:
            raise CategoriesError(f"data row {n}: bad regex {pat!r}: {exc}", path=source) from None
        rules.append(BlockRule(pat, block, role, rx))
    if not rules:
        raise CategoriesError("no block rules found", path=source)
    return BlockRules(tuple(rules), source, hashlib.sha256(text.encode()).hexdigest())


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int) -> BlockRules:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CategoriesError("functional blocks file is not UTF-8 text", path=path) from None
    return parse_blocks(text, source=path)


def load_blocks(path: str | Path | None = None) -> BlockRules:
    p = Path(path) if path else default_blocks_path()
    if not p.is_file():
        raise FileMissingError("functional blocks file not found", path=p, hint="pass a CSV with header 'pattern,block,role'")
    st = p.stat()
    return _load_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


def strip_suffix(instance: str) -> str:
    return _SUFFIX.sub("", instance)


def module_keys(df: pd.DataFrame) -> tuple[list[str], list[str], list[str]]:
    """Per kernel (in ``df`` row order = execution order): module key, parent instance path, module type.

    A generic leaf is ``@post`` when its parent's current call launched kernels of its own
    before it and none after it (o_proj after the attention core, down_proj after act*up),
    else ``@pre`` (q/k/v, MLA q_a/q_b/kv_a/kv_b, gate/up, router).
    """
    n = len(df)
    paths = df["module_path"].astype(str).tolist() if "module_path" in df else [""] * n
    mtypes = df["module_type"].astype(str).tolist() if "module_type" in df else [""] * n
    mods = df["module"].astype(str).tolist() if "module" in df else [""] * n
    empty = ("", "nan", "None")
    keys: list[str] = []
    parents: list[str] = []
    types: list[str] = []
    leaf_call: dict[int, int] = {}  # kernel index of a generic leaf -> call id of its parent
    first_self: dict[int, int] = {}
    last_self: dict[int, int] = {}
    active: dict[str, int] = {}  # instance path -> id of its current call
    next_call = 0
    chain_memo: dict[str, tuple[str, str, str, bool]] = {}
    for i, (path, mtype, mod) in enumerate(zip(paths, mtypes, mods)):
        if path in empty:
            t = mtype if mtype not in empty else (strip_suffix(mod) if mod not in empty else "")
            keys.append(t)
            parents.append("")
            types.append(t)
            continue
        # Leave the calls this kernel is not inside.
        if active:
            gone = [k for k in active if not (path == k or path.startswith(k + "/"))]
            for k in gone:
                del active[k]
        memo = chain_memo.get(path)
        if memo is None:
            parent, _, leaf = path.rpartition("/")
            leaf_type = strip_suffix(leaf)
            chain = "/".join(strip_suffix(p) for p in path.split("/"))
            memo = (chain, parent, leaf_type, leaf_type in GENERIC_LEAVES and bool(parent))
            chain_memo[path] = memo
        chain, parent, leaf_type, generic = memo
        if path not in active:
            active[path] = next_call
            next_call += 1
        cid = active[path]
        first_self.setdefault(cid, i)
        last_self[cid] = i
        if generic:
            if parent not in active:
                active[parent] = next_call
                next_call += 1
            leaf_call[i] = active[parent]
        keys.append(chain)
        parents.append(parent)
        types.append(leaf_type)
    for i, pc in leaf_call.items():
        f, last = first_self.get(pc), last_self.get(pc)
        post = f is not None and f < i and last is not None and last < i
        keys[i] = keys[i] + ("@post" if post else "@pre")
    return keys, parents, types


def assign_blocks(df: pd.DataFrame, rules: BlockRules) -> pd.DataFrame:
    """Return ``df`` (execution order) with columns ``module_key``, ``group``, ``block``, ``role``."""
    keys, parents, types = module_keys(df)
    out = df.copy()
    out["module_key"] = keys
    n = len(out)
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
    blocks = np.empty(n, dtype=object)
    roles = np.empty(n, dtype=object)
    cats = out["category"].astype(str).to_numpy() if "category" in out else np.full(n, "", dtype=object)
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    for s, e in zip(starts, ends):
        key = keys[s]
        if (cats[s:e] == COMMUNICATION).all():
            blk, role = COMMUNICATION, rules.role_of(COMMUNICATION) or "collective communication"
        elif not key:
            blk, role = UNATTRIBUTED, "kernels with no owning module"
        else:
            blk, role = rules.match(key, types[s] or key)
        blocks[s:e] = blk
        roles[s:e] = role
    out["block"] = blocks
    out["role"] = roles
    return out
