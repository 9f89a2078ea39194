"""CUDA/HIP-graph replay attribution.

A replay's kernels have no module spans. They are attributed from eager
kernels of the same model (the same trace, or a reference trace):

1. Sequence alignment. The eager step whose kernel-name sequence is most
   similar to the replay's sequence is aligned with it (difflib matching
   blocks). A replay kernel matched to an eager kernel takes that kernel's
   module path (confidence 1.0). Kernels in a replaced/inserted stretch take
   the common ancestor of the eager stretch they replace (or of the matched
   neighbours around them), confidence 0.5. The same kernel name occurring in
   several modules (a gemm in every Linear) is thus placed by position.
2. Majority vote per name, when no eager step aligns well (ratio < 0.5) but
   at least half of the replay's kernels have names seen among eager kernels:
   the most frequent module path of that name; confidence = the share of that
   path. (Fewer known names means the eager kernels are of another model or
   configuration; guessing would mislead.) Votes are layer-aware: a kernel the
   layer cut puts in layer i takes the path its name most often has *relative
   to its decoder layer*, instantiated in the i-th eager layer, so a gemm of
   layer 5 is not piled onto layer 0.
3. Nothing learned: the bucket ``UNATTRIBUTED_GRAPH``.

Layer cuts: inside each replay, at communication kernels when there are any,
else at the repeat period of the kernel-name sequence (the longest run where
``seq[i] == seq[i + p]``).
"""
from __future__ import annotations

import difflib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mcp_server.vocab import split_instance

UNATTRIBUTED_GRAPH = "graph replay, unattributed"
MIN_RATIO = 0.5


@dataclass
class Reference:
    """What eager kernels teach about replays."""

    steps: list[tuple[list[str], list[str]]] = field(default_factory=list)  # (names, paths) per eager step
    vote: dict[str, tuple[str, float]] = field(default_factory=dict)
    # layer-aware votes: name -> (path relative to its repeated block, share); block paths in order;
    # (block index, relative path) -> full instance path
    layer_vote: dict[str, tuple[str, float]] = field(default_factory=dict)
    blocks: list[str] = field(default_factory=list)
    members: dict[tuple[int, str], str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.steps and not self.vote


def learn(names: Sequence[str], paths: Sequence[str], step_ids: Sequence[int]) -> Reference:
    """``names/paths/step_ids``: attributed eager kernels in time order."""
    by_step: dict[int, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    votes: dict[str, Counter] = defaultdict(Counter)
    for n, p, s in zip(names, paths, step_ids):
        a, b = by_step[s]
        a.append(n)
        b.append(p)
        votes[n][p] += 1
    vote = {}
    for n, c in votes.items():
        p, k = c.most_common(1)[0]
        vote[n] = (p, k / sum(c.values()))
    # distinct step shapes only (identical steps align identically)
    seen: set[tuple[str, ...]] = set()
    steps = []
    for a, b in by_step.values():
        key = tuple(a)
        if key in seen:
            continue
        seen.add(key)
        steps.append((a, b))
    return Reference(steps[:16], vote)


def learn_layers(ref: Reference, names: Sequence[str], paths: Sequence[str]) -> None:
    """Fill the layer-aware votes of ``ref`` from attributed eager kernels.

    The repeated block is the shallowest module type with two or more instances
    under one parent (the decoder layer). A kernel's path below its block is
    written with instance numbers relative to the smallest number of that type
    in the block (``LlamaAttention_1/Linear_7`` in layer 1 -> ``LlamaAttention_0/Linear_0``),
    which is the same in every layer because the profiler numbers instances per
    type in call order.
    """
    split = _splitter()
    uniq = sorted(set(p for p in paths if p))
    parts_of = {p: p.split("/") for p in uniq}
    # every (parent path, child type) edge of the paths and their ancestors, each node visited once
    nodes: set[str] = set()
    for p in uniq:
        q = p
        while "/" in q and q not in nodes:
            nodes.add(q)
            q = q.rpartition("/")[0]
    children: dict[tuple[str, str], set[int]] = defaultdict(set)
    for q in nodes:
        parent, _, leaf = q.rpartition("/")
        t, k = split(leaf)
        children[(parent, t)].add(k)
    repeated = [(parent.count("/") + 1, t) for (parent, t), ks in children.items() if len(ks) >= 2]
    if not repeated:
        return
    depth, btype = min(repeated)
    blocks: dict[str, int] = {}
    mins: dict[tuple[str, str], int] = {}
    rel_of: dict[str, tuple[str, str]] = {}
    inside = []  # (path, its block's path, (type, index) of each part below the block)
    for p in uniq:
        parts = parts_of[p]
        if len(parts) <= depth:
            continue
        bt, bk = split(parts[depth])
        if bt != btype:
            continue
        bpath = "/".join(parts[: depth + 1])
        blocks.setdefault(bpath, bk)
        below = [split(x) for x in parts[depth + 1:]]
        for t, k in below:
            key = (bpath, t)
            m = mins.get(key)
            if m is None or k < m:
                mins[key] = k
        inside.append((p, bpath, below))
    for p, bpath, below in inside:
        rel_of[p] = (bpath, "/".join([f"{t}_{k - mins[(bpath, t)]}" for t, k in below]))
    order = sorted(blocks, key=lambda b: blocks[b])
    bidx = {b: i for i, b in enumerate(order)}
    for p, (bpath, rel_path) in rel_of.items():  # (block, relative path) <-> path is one to one
        ref.members[(bidx[bpath], rel_path)] = p
    # per name the relative path it has most often (ties: the one seen first) and that path's share
    rel_id: dict[str, int] = {}
    path_rel = {p: rel_id.setdefault(r[1], len(rel_id)) for p, r in rel_of.items()}
    name_id: dict[str, int] = {}
    nid = np.fromiter((name_id.setdefault(n, len(name_id)) for n in names), dtype=np.int64, count=len(names))
    rid = np.fromiter((path_rel.get(p, -1) for p in paths), dtype=np.int64, count=len(paths))
    voted = rid >= 0
    if voted.any():
        rels, nl, R = list(rel_id), list(name_id), len(rel_id)
        uk, first, cnt = np.unique(nid[voted] * R + rid[voted], return_index=True, return_counts=True)
        kn, kr = uk // R, uk % R
        tot = np.bincount(kn, weights=cnt)
        o = np.lexsort((first, -cnt, kn))
        lead = o[np.r_[True, kn[o][1:] != kn[o][:-1]]]
        for j in lead.tolist():
            ref.layer_vote[nl[kn[j]]] = (rels[kr[j]], int(cnt[j]) / int(tot[kn[j]]))
    ref.blocks = order


def _splitter():
    """``split_instance`` memoised for one call (a model has few distinct instance names per level)."""
    memo: dict[str, tuple[str, int]] = {}

    def split(x: str) -> tuple[str, int]:
        r = memo.get(x)
        if r is None:
            r = memo[x] = split_instance(x)
        return r

    return split


def _lca(paths: Sequence[str]) -> str:
    parts = [p.split("/") for p in paths if p]
    if not parts:
        return ""
    common = parts[0]
    for q in parts[1:]:
        k = 0
        while k < len(common) and k < len(q) and common[k] == q[k]:
            k += 1
        common = common[:k]
    return "/".join(common)


def attribute_sequence(seq: Sequence[str], ref: Reference,
                       layers: Sequence[int] | None = None) -> tuple[list[str], list[float], str]:
    """Module path and confidence per replay kernel; method 'align' | 'vote' | 'none'.

    ``layers``: layer index per kernel from ``layer_cuts`` (-1 outside the repeated
    part); in vote mode a kernel inside layer i goes to the i-th eager block.
    """
    n = len(seq)
    best = None
    for names, paths in ref.steps:
        sm = difflib.SequenceMatcher(None, names, list(seq), autojunk=False)
        if sm.real_quick_ratio() < MIN_RATIO or sm.quick_ratio() < MIN_RATIO:
            continue
        r = sm.ratio()
        if best is None or r > best[0]:
            best = (r, sm, paths)
    if best is not None and best[0] >= MIN_RATIO:
        _, sm, epaths = best
        out: list[str] = [""] * n
        conf = [0.0] * n
        ops = sm.get_opcodes()
        for tag, i1, _i2, j1, j2 in ops:
            if tag == "equal":
                for k in range(j2 - j1):
                    out[j1 + k] = epaths[i1 + k]
                    conf[j1 + k] = 1.0
        for tag, i1, i2, j1, j2 in ops:
            if tag in ("replace", "insert") and j2 > j1:
                if tag == "replace":
                    p = _lca(epaths[i1:i2])
                else:
                    around = [epaths[i1 - 1]] if i1 > 0 else []
                    if i1 < len(epaths):
                        around.append(epaths[i1])
                    p = _lca(around)
                for k in range(j1, j2):
                    out[k] = p
                    conf[k] = 0.5 if p else 0.0
        for k in range(n):  # still empty: majority vote by name
            if not out[k] and seq[k] in ref.vote:
                out[k], conf[k] = ref.vote[seq[k]]
        return out, conf, "align"
    known = sum(1 for x in seq if x in ref.vote)
    if ref.vote and known >= MIN_RATIO * n:
        out = []
        conf = []
        nb = len(ref.blocks)
        lay = list(layers) if layers is not None else [-1] * n
        reps = max(lay) + 1 if lay else 0
        # repeated run shorter than the model: assume it ends at the last block
        shift = nb - reps if 0 < reps < nb else 0
        for s, li in zip(seq, lay):
            p, c = ref.vote.get(s, ("", 0.0))
            if li >= 0 and nb and s in ref.layer_vote:
                rel, share = ref.layer_vote[s]
                full = ref.members.get((li + shift, rel))
                if full:
                    p, c = full, share
            out.append(p)
            conf.append(c)
        return out, conf, "vote"
    return [""] * n, [0.0] * n, "none"


def layer_cuts(seq_ids: np.ndarray, is_comm: np.ndarray) -> tuple[np.ndarray, str, int]:
    """Layer index per kernel of one replay (-1 outside the repeated part)."""
    n = len(seq_ids)
    layer = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return layer, "none", 0
    if is_comm.any():
        return _comm_cuts(seq_ids, is_comm)
    best = (0, 0, 0)  # coverage, period, run start
    for p in range(2, n // 2 + 1):
        eq = seq_ids[:-p] == seq_ids[p:]
        if not eq.any():
            continue
        # longest run of True
        d = np.diff(np.concatenate([[0], eq.astype(np.int8), [0]]))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        lens = ends - starts
        j = int(np.argmax(lens))
        run = int(lens[j])
        if run >= p and run + p > best[0]:
            best = (run + p, p, int(starts[j]))
    cov, p, s = best
    if p == 0 or cov < 4:
        return layer, "none", 0
    reps = cov // p
    idx = np.arange(s, s + reps * p)
    layer[idx] = (idx - s) // p
    return layer, "period", reps


def _common_prefix(a: tuple, b: tuple) -> int:
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def _comm_cuts(seq_ids: np.ndarray, is_comm: np.ndarray) -> tuple[np.ndarray, str, int]:
    """Layer cut at collectives.

    Segment k runs from after collective k-1 up to and including collective k; the
    last segment is the tail after the final collective. The segments strictly
    between the first and the last collective repeat with some period q (q = 2 for
    an all-reduce after attention and one after the MLP): q collectives make one
    layer. A layer ends at its last collective, so work launched after it (the
    residual add) counts in the next layer. The first segment's kernels that do
    not match the end of segment q are the prologue (embedding, rope tables) and
    the tail after the final collective is the epilogue (final norm, lm_head):
    both get -1. The names alone cannot place the last layer's leftovers, which
    the tail also holds.
    """
    n = len(seq_ids)
    pos = np.flatnonzero(is_comm)
    m = len(pos)
    bounds = np.concatenate([[0], pos + 1, [n]]).astype(np.int64)
    sig = [tuple(seq_ids[bounds[k]:bounds[k + 1]].tolist()) for k in range(m + 1)]
    mids = sig[1:m]
    q = 1
    for cand in range(1, len(mids) // 2 + 1):
        if m % cand == 0 and all(mids[i] == mids[i + cand] for i in range(len(mids) - cand)):
            q = cand
            break
    before = np.concatenate([[0], np.cumsum(is_comm[:-1])]).astype(np.int64)  # collectives before each kernel
    layer = before // q
    nl = m // q
    layer[before >= m] = -1  # tail
    if m > q:
        ref = sig[q]  # leftovers of layer 0, then the start of layer 1
        s0 = sig[0]
        keep = _common_prefix(tuple(reversed(s0)), tuple(reversed(ref)))
        layer[: len(s0) - keep] = -1
    return layer, "communication", nl
