"""Kernel matching across two runs: the ONE kernel-name normaliser, LCS alignment,
and the pairing of kernels that appear on one side only.

Two runs of the same model on two platforms (or two builds) rarely share kernel
names. Matching works in three steps:

1. ``normalize_kernel_name`` strips what varies between builds while the work
   stays the same: return types, argument lists, C++ template arguments (except
   the functor/op that names the work, e.g. ``CUDAFunctor_add``), hashes, tile
   and architecture suffixes (``64x128x64``, ``sm90``, ``gfx942``), numeric
   suffixes of generated kernels (``triton_poi_fused_add_0``).
2. ``align`` runs a longest-common-subsequence alignment of two kernel sequences
   on their normalised names; matched pairs keep execution order.
3. Kernels left unmatched between two consecutive anchors are first paired with
   a kernel of the same *work* on the other side (``work_key``: the functor or op
   the normalised name keeps, ``cudafunctor_add`` of both
   ``elementwise_kernel<..., CUDAFunctor_add>`` and ROCm's
   ``elementwise_kernel_manual_unroll<..., CUDAFunctor_add>``; closest launch count,
   then closest time): a kernel both sides run is never paired with another kind
   because a wrapper differs. Those are ``renamed`` pairs, outside any segment.
4. The rest form a *replacement segment*: the A-side kernels there were replaced
   by the B-side kernels there. Inside a segment kernels are paired by category
   first (closest time wins), then across categories by time. A kernel with no
   partner is ``gone`` (A only) or ``new`` (B only).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from mcp_server.compare.models import MatchKind
from mcp_server.core.kernel_names import normalize_kernel_name

# --------------------------------------------------------------------------- alignment


def lcs_pairs(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (equal items)."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return []
    # Trim common prefix / suffix (cheap and common between two builds).
    pre = 0
    while pre < n and pre < m and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and suf < m - pre and a[n - 1 - suf] == b[m - 1 - suf]:
        suf += 1
    head = [(i, i) for i in range(pre)]
    tail = [(n - suf + k, m - suf + k) for k in range(suf)]
    aa, bb = a[pre:n - suf], b[pre:m - suf]
    mid: list[tuple[int, int]] = []
    if aa and bb:
        if len(aa) * len(bb) > 4_000_000:  # guard: greedy on very long sequences
            j = 0
            for i, x in enumerate(aa):
                k = j
                while k < len(bb) and bb[k] != x:
                    k += 1
                if k < len(bb):
                    mid.append((pre + i, pre + k))
                    j = k + 1
        else:
            la, lb = len(aa), len(bb)
            dp = [[0] * (lb + 1) for _ in range(la + 1)]
            for i in range(la - 1, -1, -1):
                row, nxt = dp[i], dp[i + 1]
                x = aa[i]
                for j in range(lb - 1, -1, -1):
                    row[j] = nxt[j + 1] + 1 if x == bb[j] else (nxt[j] if nxt[j] >= row[j + 1] else row[j + 1])
            i = j = 0
            while i < la and j < lb:
                if aa[i] == bb[j]:
                    mid.append((pre + i, pre + j))
                    i += 1
                    j += 1
                elif dp[i + 1][j] >= dp[i][j + 1]:
                    i += 1
                else:
                    j += 1
    return head + mid + tail


@dataclass(frozen=True)
class Item:
    """One kernel (or one unique kernel name aggregated) on one side."""

    name: str
    category: str
    us: float
    count: float = 1  # launches (fractional per step: see compare.inputs.resolve_per_step)
    cpu_op: str = ""  # innermost cpu op of the launches ('' when the input does not carry it)
    dims: str = ""  # their Input Dims as text ('' when not recorded)


@dataclass(frozen=True)
class Pair:
    a: int | None  # index into the A sequence
    b: int | None  # index into the B sequence
    kind: MatchKind
    segment: int = -1  # replacement-segment id for kernels outside the LCS; -1 for LCS matches


def _pair_segment(a_idx: list[int], b_idx: list[int], a: Sequence[Item], b: Sequence[Item], seg: int) -> list[Pair]:
    out: list[Pair] = []
    free_b = list(b_idx)
    left_a: list[int] = []
    # 1) same category, closest time
    for i in a_idx:
        cands = [j for j in free_b if b[j].category == a[i].category]
        if cands:
            j = min(cands, key=lambda j: abs(b[j].us - a[i].us))
            free_b.remove(j)
            out.append(Pair(i, j, "category", seg))
        else:
            left_a.append(i)
    # 2) across categories, by time: largest with largest
    left_a.sort(key=lambda i: -a[i].us)
    free_b.sort(key=lambda j: -b[j].us)
    for i, j in zip(left_a, free_b):
        out.append(Pair(i, j, "time", seg))
    k = min(len(left_a), len(free_b))
    out += [Pair(i, None, "gone", seg) for i in left_a[k:]]
    out += [Pair(None, j, "new", seg) for j in free_b[k:]]
    return out


def work_key(name: str) -> str:
    """The work a kernel does: the functor / op its normalised name keeps (``cudafunctor_add``), else that name."""
    n = normalize_kernel_name(name)
    lb = n.find("[")
    return n[lb + 1:-1] if lb > 0 and n.endswith("]") else n


def _pair_same_work(ga: list[int], gb: list[int], a: Sequence[Item], b: Sequence[Item]) -> list[Pair]:
    """Pair the kernels of one gap that do the same work on both sides (see module doc, step 3)."""
    wa = {i: work_key(a[i].name) for i in ga}
    wb = {j: work_key(b[j].name) for j in gb}
    free_b = list(gb)
    out: list[Pair] = []
    for i in ga:
        cands = [j for j in free_b if wb[j] == wa[i]]
        if not cands:
            continue
        x = a[i]

        def distance(j: int, x: Item = x) -> tuple:
            y = b[j]
            same_shape = bool(x.dims and y.dims and dims_key(x.dims) == dims_key(y.dims))
            return (not same_shape, abs(x.count - y.count) / max(x.count, y.count, 1e-9), abs(x.us - y.us))
        j = min(cands, key=distance)
        free_b.remove(j)
        out.append(Pair(i, j, "same" if x.name == b[j].name else "renamed"))
    return out


_EMPTY_DIMS = re.compile(r",\[\](?=[,\]])|(?<=\[)\[\],")


def dims_key(dims: str) -> str:
    """Input Dims text in one form whoever wrote it: no spaces, no empty (scalar) entries."""
    s = re.sub(r"\s+", "", dims or "")
    prev = None
    while prev != s:
        prev, s = s, _EMPTY_DIMS.sub("", s)
    return s


def _keys(a: Sequence[Item], b: Sequence[Item]) -> tuple[list[str], list[str]]:
    """Alignment keys: normalised name, plus the cpu op and the input dims where both sides carry them."""
    use_op = any(x.cpu_op for x in a) and any(x.cpu_op for x in b)
    use_dims = any(x.dims for x in a) and any(x.dims for x in b)

    def key(x: Item) -> str:
        k = normalize_kernel_name(x.name)
        if use_op:
            k += "|" + x.cpu_op
        if use_dims:
            k += "|" + dims_key(x.dims)
        return k
    return [key(x) for x in a], [key(x) for x in b]


def align(a: Sequence[Item], b: Sequence[Item]) -> list[Pair]:
    """Align two kernel sequences (see module doc); result follows A's order then B's.

    Kernels are aligned on their normalised name plus, where both sides carry them, the enclosing
    cpu op and the input dims, so the same kernel doing other work (the attention-mask add next to
    the rope adds) is not taken for a slower copy of it. Kernels left between two anchors are then
    aligned on the name alone (same work at other shapes), then paired by the work they do (``work_key``),
    and only the rest form replacement segments.
    """
    na, nb = _keys(a, b)
    anchors = lcs_pairs(na, nb)
    pairs: list[Pair] = []
    pi = pj = 0
    seg = 0
    for i, j in anchors + [(len(a), len(b))]:
        ga, gb = list(range(pi, i)), list(range(pj, j))
        if ga and gb and na != [normalize_kernel_name(x.name) for x in a]:
            inner = lcs_pairs([normalize_kernel_name(a[x].name) for x in ga],
                              [normalize_kernel_name(b[y].name) for y in gb])
            hit_a = {ga[x] for x, _ in inner}
            hit_b = {gb[y] for _, y in inner}
            for x, y in inner:
                pairs.append(Pair(ga[x], gb[y], "same" if a[ga[x]].name == b[gb[y]].name else "renamed"))
            ga = [x for x in ga if x not in hit_a]
            gb = [y for y in gb if y not in hit_b]
        if ga and gb:
            work = _pair_same_work(ga, gb, a, b)
            pairs += work
            done_a = {p.a for p in work}
            done_b = {p.b for p in work}
            ga = [x for x in ga if x not in done_a]
            gb = [y for y in gb if y not in done_b]
        if ga or gb:
            pairs += _pair_segment(ga, gb, a, b, seg)
            seg += 1
        if i < len(a) and j < len(b):
            pairs.append(Pair(i, j, "same" if a[i].name == b[j].name else "renamed"))
        pi, pj = i + 1, j + 1
    return pairs


def segments(pairs: Sequence[Pair]) -> dict[int, tuple[list[int], list[int]]]:
    """Replacement segments: id -> (A indices, B indices) of the kernels outside the LCS."""
    out: dict[int, tuple[list[int], list[int]]] = {}
    for p in pairs:
        if p.segment < 0:
            continue
        sa, sb = out.setdefault(p.segment, ([], []))
        if p.a is not None:
            sa.append(p.a)
        if p.b is not None:
            sb.append(p.b)
    for sa, sb in out.values():
        sa.sort()
        sb.sort()
    return out


