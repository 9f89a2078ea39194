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
3. Kernels left unmatched between two consecutive anchors of the alignment form
   a *replacement segment*: the A-side kernels there were replaced by the B-side
   kernels there. Inside a segment kernels are paired by category first
   (closest time wins), then across categories by time. A kernel with no partner
   is ``gone`` (A only) or ``new`` (B only).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Sequence

# Template identifiers that wrap the interesting functor rather than name the work.
_WRAPPERS = {
    "gpu_kernel_impl_nocast", "gpu_kernel_impl", "binaryfunctor", "aunaryfunctor", "bunaryfunctor",
    "unaryfunctor", "reduceop", "func_wrapper_t", "opaquetype", "trivialoffsetcalculator",
    "offsetcalculator", "loadwithcast", "storewithcast", "loadwithoutcast", "storewithoutcast",
    "tensoriteratorbase", "tensorinfo", "scantilestate", "policy_hub",
}
_WORKISH = re.compile(r"(functor|ops?$|_kernel_cuda$|_kernel_impl$|_impl$|_kernel$|_op$)", re.I)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ANON = re.compile(r"\(anonymous namespace\)::")
_LAMBDA = re.compile(r"\{lambda\([^)]*\)#\d+\}")
_NS = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*::")
# Tokens inside a base name that vary with tiling / arch / build.
_TILE = re.compile(r"(?<![a-z])\d+(?:x\d+)+|(?<=[a-z])\d+(?:x\d+)+", re.I)
_ARCH = re.compile(r"(?:^|_)(?:sm_?\d+[a-z]?|gfx\d+[a-z]?|tensorop|align\d+)(?=_|$)", re.I)
_HASH = re.compile(r"(?:^|_)(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}(?=_|$)", re.I)
_KNOB = re.compile(r"(?:^|_)(?:knob|kernel|cga|mt|mi|wg|pgr|plr|gsu)_?\d*(?=_|$)", re.I)
_NUMTOK = re.compile(r"(?:^|_)\d+(?=_|$)")
_MANGLED_ID = re.compile(r"(\d+)")
_GENERIC_BASES = {"kernel", "kernel2", "device_kernel", "kernel_entry", "global_kernel"}


def _cut_args(s: str) -> str:
    """Drop the top-level argument list ``(...)`` that follows the name/template."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


def _demangle_ids(name: str) -> list[str]:
    """Identifiers of an Itanium-mangled name (``_ZN7cutlass13device_kernel...``), in order."""
    out: list[str] = []
    i, n = 2, len(name)
    while i < n:
        m = _MANGLED_ID.match(name, i)
        if not m:
            i += 1
            continue
        ln = int(m.group(1))
        start = m.end()
        if ln <= 0 or start + ln > n:
            i = m.end()
            continue
        out.append(name[start:start + ln])
        i = start + ln
    return out


def _clean_base(base: str) -> str:
    b = base.strip().lower()
    b = _TILE.sub("", b)
    b = _ARCH.sub("_", b)
    b = _HASH.sub("_", b)
    b = _KNOB.sub("_", b)
    prev = None
    while prev != b:
        prev = b
        b = _NUMTOK.sub("_", b)
    b = re.sub(r"_+", "_", b).strip("_")
    return b


@lru_cache(maxsize=65536)
def normalize_kernel_name(name: str) -> str:
    """Stable identity of a kernel's work across builds/platforms (see module doc)."""
    s = (name or "").strip()
    if not s:
        return ""
    if s.startswith("_Z"):
        ids = [x for x in _demangle_ids(s) if x.lower() not in _WRAPPERS]
        work = [x for x in ids[2:] if _WORKISH.search(x) or "gemm" in x.lower()]
        base = "::".join(ids[:2]) if ids else s[:40]
        return _clean_base(base) + (f"[{work[0].lower()}]" if work else "")
    s = _ANON.sub("", s)
    s = _LAMBDA.sub("", s)
    if s.startswith("void "):
        s = s[5:]
    s = _cut_args(s)
    lt = s.find("<")
    base, templ = (s[:lt], s[lt:]) if lt >= 0 else (s, "")
    base = base.split("::")[-1] if "::" in base else base
    raw_base = base
    base = _clean_base(base)
    templ = _NS.sub("", templ)
    if not base or raw_base.lower() in _GENERIC_BASES:
        # ``cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>``: the work is the argument.
        first = _IDENT.search(templ)
        return _clean_base(first.group(0)) if first else (base or raw_base.lower())
    if not templ:
        return base
    # The functor / op that names the work, when the template carries one.
    for ident in _IDENT.findall(templ):
        low = ident.lower()
        if low in _WRAPPERS or not _WORKISH.search(ident):
            continue
        return f"{base}[{_clean_base(ident)}]"
    return base


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


MatchKind = Literal["same", "renamed", "category", "time", "gone", "new"]


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
    aligned on the name alone (same work at other shapes), and only the rest form replacement segments.
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


def display_kernel_name(name: str | None, width: int = 60) -> str:
    """A short readable name: the raw name when it fits, else its normalised form (``elementwise[mulfunctor]``)."""
    if not name:
        return ""
    s = name[5:] if name.startswith("void ") else name
    if len(s) <= width:
        return s
    n = normalize_kernel_name(name)
    if n and len(n) <= width:
        return n + "…"
    return s[: width - 1] + "…"
