"""The one kernel-name normaliser (docs/ARCHITECTURE.md, "Layers": shared base).

``normalize_kernel_name`` gives a kernel's work a stable identity across builds and platforms
(tile sizes, architecture tags, hashes and template wrappers dropped; the functor that names the
work kept: ``elementwise_kernel[mulfunctor]``); ``display_kernel_name`` a short readable form.
Every engine that shows or matches kernel names uses these.
"""
from __future__ import annotations

import re
from functools import lru_cache

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
