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

Before any of these, a graph capture: a trace profiled while the graph was captured (SGLang's and
vLLM's capture traces; ``--reference-trace``, or the replay trace itself when it holds the capture)
holds the launches made during capture, inside their module spans, with no kernel run. A replay
runs the captured kernels in launch order, so the replay's i-th kernel is the capture's i-th launch
(``attribute_from_capture``): module path and phase by position, confidence 1.0. HIP launches name
their kernel (``args.kernel``), which must then match; CUDA launches do not, so there the kinds
(kernel / copy / memset) and the count must match. A capture whose sequence differs a little
(a launch more or less) is aligned (difflib on the tokens) and its unmatched stretches take the
common ancestor of their neighbours (confidence 0.5); without kernel names such an alignment is by
order alone and every kernel gets confidence 0.4 (``UNNAMED_MISMATCH``), which the answer warns of.
A replay's kernels are taken in start order across its streams: for a graph whose branches run
concurrently on several streams that is not exactly the launch order; HIP's kernel names keep such
a replay aligned, CUDA's unnamed launches may swap kernels between the concurrent branches.

Phase of a replay without a marker of its own: the phase its reference taught (the capture's
launches, or the eager step it aligns with at a ratio of PHASE_RATIO or more), else ``graph``
(replayed, phase unknown): training steps and diffusion pipelines replay graphs too, so a replay
is not decode by itself.

Layer cuts: inside each replay, at communication kernels when there are any,
else at the repeat period of the kernel-name sequence (the longest run where
``seq[i] == seq[i + p]``).
"""
from __future__ import annotations

import difflib
import functools
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from mcp_server.core.vocab import split_instance

UNATTRIBUTED_GRAPH = "graph replay, unattributed"
MIN_RATIO = 0.5
#: a capture whose launches name no kernel (CUDA) is used when its launch count is within this share of
#: the replay's kernel count (kinds aligned in order); with names, the usual MIN_RATIO of the alignment
CAPTURE_COUNT_SLACK = 0.1
#: an aligned eager step gives the replay its phase when the alignment ratio is at least this
PHASE_RATIO = 0.8
#: confidence of replay kernels placed by launch order alone in a capture whose launch count differs from
#: the replay's kernel count (CUDA launches name no kernel): under 0.5, so the answer warns
UNNAMED_MISMATCH = 0.4


@dataclass
class Capture:
    """One CUDA/HIP-graph capture: its launches in launch order (= the replay's kernel order)."""

    kinds: list[int]  # 0 kernel, 1 copy, 2 memset (loader.launch_kind)
    kernels: list[str]  # the kernel a launch names ('' when it names none: CUDA launches)
    paths: list[str]  # module instance path enclosing the launch ('' none)
    phases: list[str]  # phase of the launch ('' unknown)

    @property
    def named(self) -> bool:
        k = [n for n, t in zip(self.kernels, self.kinds) if t == 0]
        return bool(k) and sum(1 for n in k if n) >= 0.9 * len(k)


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
    step_phases: list[str] = field(default_factory=list)  # per step of ``steps``: its phase ('' unknown)
    phase: str = ""  # the phase of (nearly) all the eager kernels learned from, '' when mixed or unknown
    captures: list[Capture] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.steps and not self.vote and not self.captures


def learn_layers(ref: Reference, names: Sequence[str], paths: Sequence[str]) -> None:
    """Fill the layer-aware votes of ``ref`` from attributed eager kernels.

    The repeated block is the shallowest module type with two or more instances
    under one parent (the decoder layer). A kernel's path below its block is
    written with instance numbers relative to the smallest number of that type
    in the block (``LlamaAttention_1/Linear_7`` in layer 1 -> ``LlamaAttention_0/Linear_0``),
    which is the same in every layer because the profiler numbers instances per
    type in call order.
    """
    split = functools.cache(split_instance)  # memoised for this call: a model has few distinct instance names
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
            mins[(bpath, t)] = min(k, mins.get((bpath, t), k))
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


def _from_opcodes(ops: Sequence[tuple], paths: Sequence[str], n: int, sure: float) -> tuple[list[str], list[float]]:
    """Module path and confidence per kernel of an alignment's target (``ops``: difflib opcodes from ``paths``'
    kernels to the ``n`` targets): an equal run takes its counterparts' paths (confidence ``sure``), a replaced
    or inserted run the common ancestor of the paths it replaces or sits between (0.5; 0 when there is none)."""
    out, conf = [""] * n, [0.0] * n
    for tag, i1, _i2, j1, j2 in ops:
        if tag == "equal":
            for k in range(j2 - j1):
                out[j1 + k], conf[j1 + k] = paths[i1 + k], sure
    for tag, i1, i2, j1, j2 in ops:
        if tag in ("replace", "insert") and j2 > j1:
            around = paths[i1:i2] if tag == "replace" else (
                ([paths[i1 - 1]] if i1 > 0 else []) + ([paths[i1]] if i1 < len(paths) else []))
            p = _lca(around)
            for k in range(j1, j2):
                out[k], conf[k] = p, (0.5 if p else 0.0)
    return out, conf


def _lca(paths: Sequence[str]) -> str:
    """The longest common ancestor path of ``paths`` ('' ignored; '' when none)."""
    return "/".join(os.path.commonprefix([p.split("/") for p in paths if p]))


def attribute_from_capture(seq: Sequence[str], kinds: Sequence[int], captures: Sequence[Capture]
                           ) -> tuple[list[str], list[float], list[str]] | None:
    """Module path, confidence and phase per replay kernel from the capture that made the graph, or
    None when no capture fits (see the module doc)."""
    n = len(seq)
    best: Optional[tuple[float, Capture, list[tuple[str, int, int, int, int]], float]] = None
    ops: list[tuple[str, int, int, int, int]]
    for cap in captures:
        m = len(cap.kinds)
        if not m or not n:
            continue
        if cap.named:
            a: list[tuple[int, str]] = [(t, k if t == 0 else "") for t, k in zip(cap.kinds, cap.kernels)]
            b: list[tuple[int, str]] = [(t, s if t == 0 else "") for t, s in zip(kinds, seq)]
            if a == b:
                return list(cap.paths), [1.0] * n, list(cap.phases)
            sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
            if sm.real_quick_ratio() < MIN_RATIO or sm.quick_ratio() < MIN_RATIO:
                continue
            r = sm.ratio()
            if r >= MIN_RATIO and (best is None or r > best[0]):
                best = (r, cap, [tuple(o) for o in sm.get_opcodes()], 1.0)  # type: ignore[misc]
        else:
            if list(cap.kinds) == list(kinds):
                return list(cap.paths), [1.0] * n, list(cap.phases)
            if abs(m - n) > CAPTURE_COUNT_SLACK * max(m, n):
                continue
            if m * n > 4_000_000:  # kinds alone are nearly all "kernel": align in order, no quadratic matcher
                k = min(m, n)
                ops = [("equal", 0, k, 0, k)] + ([("insert", m, m, k, n)] if n > m else [])
                r = 2.0 * k / (m + n)
            else:
                smk = difflib.SequenceMatcher(None, list(cap.kinds), list(kinds), autojunk=False)
                r, ops = smk.ratio(), [tuple(o) for o in smk.get_opcodes()]  # type: ignore[misc]
            if best is None or r > best[0]:
                best = (r, cap, ops, UNNAMED_MISMATCH)
    if best is None:
        return None
    _, cap, ops, sure = best
    out, conf = _from_opcodes(ops, cap.paths, n, sure)
    phases = [""] * n
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            for k in range(j2 - j1):
                phases[j1 + k] = cap.phases[i1 + k]
        elif tag in ("replace", "insert") and j2 > j1:
            # the phase of the captured kernels around the run, when they agree on one
            ph = {cap.phases[i] for i in range(max(i1 - 1, 0), min(i2 + 1, len(cap.phases)))}
            one = next(iter(ph)) if len(ph) == 1 else ""
            for k in range(j1, j2):
                phases[k] = one
    return out, conf, phases


def attribute_sequence(seq: Sequence[str], ref: Reference,
                       layers: Sequence[int] | None = None) -> tuple[list[str], list[float], str, str]:
    """Module path and confidence per replay kernel; method 'align' | 'vote' | 'none'; and the phase the
    reference gives the replay (the aligned eager step's, else the reference's own; '' unknown).

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
            best = (r, sm, paths, names)
    if best is not None and best[0] >= MIN_RATIO:
        _, sm, epaths, enames = best
        # the step's phase is the replay's only when they are nearly the same kernels (a decode replay aligns
        # with an eager decode step at ~0.85, with a prefill step of the same model at ~0.63)
        step_phase = next((ph for (nm, _), ph in zip(ref.steps, ref.step_phases) if nm is enames), ref.phase) \
            if best[0] >= PHASE_RATIO else ""
        out, conf = _from_opcodes(sm.get_opcodes(), epaths, n, 1.0)
        for k in range(n):  # still empty: majority vote by name
            if not out[k] and seq[k] in ref.vote:
                out[k], conf[k] = ref.vote[seq[k]]
        return out, conf, "align", step_phase
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
        return out, conf, "vote", ""  # names voted one by one teach no phase
    return [""] * n, [0.0] * n, "none", ""


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
        keep = len(os.path.commonprefix([s0[::-1], ref[::-1]]))
        layer[: len(s0) - keep] = -1
    return layer, "communication", nl
