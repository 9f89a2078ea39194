"""``diff_modules``: the module-grouped side-by-side comparison of two runs.

Each side's kernels (execution order) are grouped by module type and mapped to
functional blocks (``blocks.py``, ``_shared/functional_blocks.csv``). Per block,
both sides' kernels (unique names, launches summed, first-appearance order) are
aligned (``matching.align``) and annotated:

* FUSION: kernels of one side that the other side does with fewer launches:
  a replacement segment where several kernels of one side face fewer on the
  other, or one side covering the same categories with fewer launches;
* IMPROVE: a kernel paired with a same-category kernel at least 1.5x faster per launch on
  the other side (and the time difference is at least 1 % of the block's larger total), at the same
  input dims where both sides record them;
* MISSING: a category present in the block on one side only.

Blocks are sorted by |gap| (b - a); the first is marked for optimisation.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional

from mcp_server.compare.blocks import BlockRules, assign_blocks, load_blocks
from mcp_server.compare.budget import ratio, side_info
from mcp_server.compare.inputs import STEP_WEIGHT, Side, distinct_labels, load_sides, resolve_per_step
from mcp_server.compare.matching import Item, align, dims_key, segments
from mcp_server.compare.models import Annotation, BlockDiff, DiffResult, KernelMatch, KernelRow
from mcp_server.compare.requests import DiffModulesRequest
from mcp_server.core.errors import InputError
from mcp_server.core.kernel_names import display_kernel_name
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import WarningCode

IMPROVE_RATIO = 1.5
IMPROVE_MIN_SHARE = 0.01


def _block_tables(side: Side, rules: BlockRules) -> tuple[dict[str, list[Item]], dict[str, tuple[str, list[str]]]]:
    k = side.kernels
    if k is None or not len(k):
        return {}, {}
    extra = [c for c in ("cpu_op", "input_dims", STEP_WEIGHT) if c in k.columns]
    kb = assign_blocks(k, rules, columns=["name", "category", "dur_us"] + extra)
    if STEP_WEIGHT not in kb.columns:
        kb[STEP_WEIGHT] = 1.0
    for c in ("cpu_op", "input_dims"):
        kb[c] = kb[c].astype(str).replace({"nan": "", "None": ""}) if c in kb.columns else ""
    kb["dims_key"] = kb["input_dims"].map(dims_key)
    items: dict[str, list[Item]] = {}
    # one item per kernel name, enclosing cpu op and input dims (the same kernel doing other work is
    # another item); launches of one item summed
    agg = kb.groupby(["block", "name", "cpu_op", "dims_key"], sort=False).agg(
        category=("category", "first"), us=("dur_us", "sum"), count=(STEP_WEIGHT, "sum"),
        dims=("input_dims", "first")).reset_index()
    for blk, name, op, _dk, cat, us, cnt, dims in agg.itertuples(index=False, name=None):
        # per step a count may be fractional (a kernel of the eager step only): kept as is for the notes
        n = int(cnt) if float(cnt).is_integer() else float(cnt)
        items.setdefault(str(blk), []).append(Item(str(name), str(cat), float(us), n, str(op), str(dims)))
    meta: dict[str, tuple[str, list[str]]] = {}
    for blk, role, key in kb[["block", "role", "module_key"]].drop_duplicates().itertuples(index=False, name=None):
        r, keys = meta.setdefault(str(blk), (str(role), []))
        short = "/".join(str(key).split("/")[-2:])
        if short not in keys and len(keys) < 8:
            keys.append(short)
    return items, meta


def _merge(items: list[Item], use_op: bool, use_dims: bool) -> list[Item]:
    """Items of one block merged on what both sides can tell apart (name, and cpu op / dims when used)."""
    out: dict[tuple, Item] = {}
    for x in items:
        key = (x.name, x.cpu_op if use_op else "", dims_key(x.dims) if use_dims else "")
        y = out.get(key)
        if y is None:
            out[key] = x
        else:
            op = y.cpu_op if y.cpu_op == x.cpu_op else ""
            dims = y.dims if dims_key(y.dims) == dims_key(x.dims) else ""
            out[key] = Item(x.name, y.category, y.us + x.us, y.count + x.count, op, dims)
    return list(out.values())


def _n(count: float) -> int:
    """A launch count for the result (per step it may be fractional: rounded, at least 1 when any)."""
    return max(1, round(count)) if count > 0 else 0


def _annotate(a: list[Item], b: list[Item], pairs, la: str, lb: str) -> list[Annotation]:
    """A block's notes (see the module doc): MISSING, then FUSION, then IMPROVE."""
    return _missing(a, b, la, lb) + _fusions(a, b, pairs, la, lb) + _improvements(a, b, pairs, la, lb)


def _missing(a: list[Item], b: list[Item], la: str, lb: str) -> list[Annotation]:
    """MISSING: a category of the block on one side only (``side``: the side that lacks it)."""
    notes: list[Annotation] = []
    for mine, other, lm, lacking in ((a, b, la, "b"), (b, a, lb, "a")):
        for cat in sorted({x.category for x in mine} - {x.category for x in other}):
            ks = [x for x in mine if x.category == cat]
            notes.append(Annotation(kind="MISSING", side=lacking, category=cat, kernels=[x.name for x in ks], message=(
                f"{cat} only on {lm}: {sum(x.count for x in ks)} launches, {sum(x.us for x in ks):.1f} us "
                f"({', '.join(display_kernel_name(x.name, 48) for x in ks[:3])})")))
    return notes


def _fusions(a: list[Item], b: list[Item], pairs, la: str, lb: str) -> list[Annotation]:
    """FUSION: replacement segments of several kernels against fewer, else one side covering the same
    categories with fewer launches."""
    notes: list[Annotation] = []
    # FUSION from replacement segments
    fused_sides: set[str] = set()
    for seg_a, seg_b in segments(pairs).values():
        if not seg_a or not seg_b:
            continue
        ca = sum(a[i].count for i in seg_a)
        cb = sum(b[j].count for j in seg_b)
        # several distinct kernels (and more launches) on one side against fewer on the other
        if len(seg_a) >= 2 and len(seg_a) > len(seg_b) and ca > cb:
            many, few, ml, fl, side = seg_a, seg_b, a, b, "a"
        elif len(seg_b) >= 2 and len(seg_b) > len(seg_a) and cb > ca:
            many, few, ml, fl, side = seg_b, seg_a, b, a, "b"
        else:
            continue
        lm, lf = (la, lb) if side == "a" else (lb, la)
        fused_sides.add(side)
        notes.append(Annotation(kind="FUSION", side=side, kernels=[ml[i].name for i in many], message=(
            f"{lm} runs {len(many)} kernels ({', '.join(display_kernel_name(ml[i].name, 40) for i in many)}) "
            f"where {lf} runs {len(few)} ({', '.join(display_kernel_name(fl[j].name, 40) for j in few)}): "
            f"they could merge into one fused kernel")))
    # FUSION: one side covers the same categories with fewer launches
    for mine, other, lm, lo, side in ((a, b, la, lb, "a"), (b, a, lb, la, "b")):
        n_mine, n_other = sum(x.count for x in mine), sum(x.count for x in other)
        if (side in fused_sides or not other or n_other >= n_mine
                or not {x.category for x in other} >= {x.category for x in mine}):
            continue
        idx_mine = {p.a if side == "a" else p.b for p in pairs if p.kind in ("gone", "new", "category", "time")}
        cand = [mine[i] for i in sorted(i for i in idx_mine if i is not None)]
        if not cand:  # same kernels, more launches on this side
            by = {x.name: x.count for x in other}
            cand = [x for x in mine if x.count > by.get(x.name, 0)]
        if not cand:
            continue
        notes.append(Annotation(kind="FUSION", side=side, kernels=[x.name for x in cand], message=(
            f"{lo} covers the same categories with {n_mine - n_other} fewer launches ({n_other} vs {n_mine}); "
            f"{lm}'s {', '.join(display_kernel_name(x.name, 40) for x in cand[:4])} could merge")))
    return notes


def _improvements(a: list[Item], b: list[Item], pairs, la: str, lb: str) -> list[Annotation]:
    """IMPROVE: a pair of same-category kernels, one at least ``IMPROVE_RATIO`` slower per launch."""
    notes: list[Annotation] = []
    floor = IMPROVE_MIN_SHARE * max(sum(x.us for x in a), sum(x.us for x in b))
    segs = segments(pairs)
    for p in pairs:
        if p.a is None or p.b is None:
            continue
        if p.segment >= 0 and (len(segs[p.segment][0]) != 1 or len(segs[p.segment][1]) != 1):
            continue  # part of a many-to-many replacement: FUSION speaks for it
        x, y = a[p.a], b[p.b]
        if x.category != y.category or min(x.us, y.us) <= 0:
            continue
        if x.dims and y.dims and dims_key(x.dims) != dims_key(y.dims):
            continue  # the same kernel at other shapes does other work: per-launch times do not compare
        # per launch, so that a kernel launched more often on one side is not called slower
        ax, ay = x.us / (x.count or 1), y.us / (y.count or 1)
        hi, lo = max(ax, ay), min(ax, ay)
        if hi / lo < IMPROVE_RATIO or abs(y.us - x.us) < floor or (hi - lo) * min(x.count, y.count) < floor:
            continue
        slow_is_b = ay > ax
        s, f = (y, x) if slow_is_b else (x, y)
        ls, lf = (lb, la) if slow_is_b else (la, lb)
        notes.append(Annotation(kind="IMPROVE", side="b" if slow_is_b else "a", category=x.category,
                                kernels=[s.name, f.name], message=(
            f"{x.category}: {ls} {display_kernel_name(s.name, 48)} takes {s.us / max(s.count, 1):.2f} us per launch "
            f"({s.count}x, {s.us:.1f} us) vs {lf} {display_kernel_name(f.name, 48)} {f.us / max(f.count, 1):.2f} us "
            f"({f.count}x, {f.us:.1f} us): {hi / lo:.1f}x slower")))
    return notes


@engine(DiffModulesRequest)
def diff_modules(req: DiffModulesRequest) -> DiffResult:
    """Module-grouped comparison of two runs (see module doc). ``reference_a`` / ``reference_b``:
    an eager trace of the same model per side, to attribute a graph-replay (decode) trace.
    ``per_step``: see ``inputs.resolve_per_step``."""
    rules = load_blocks(req.blocks)
    sa, sb = load_sides(req.a, req.b, categories=req.categories, phase=req.phase, purpose="diff",
                        references=(req.reference_a, req.reference_b))
    distinct_labels(sa, sb, req.labels)
    for s in (sa, sb):
        if s.kernels is None:
            raise InputError("no kernel table to group by module", path=s.path)
    warnings: list[Warning_] = sa.warnings + sb.warnings
    stepped = resolve_per_step(sa, sb, req.per_step, warnings)
    if not req.phase:
        for s in (sa, sb):
            if len(s.phases) > 1:
                warnings.append(Warning_(code=WarningCode.mixed_phases, message=(
                    f"{s.label} holds both prefill and decode kernels; blocks sum both (pass phase)")))
    blocks = _block_diffs(sa, sb, rules)
    star = _star(blocks, sa, sb, warnings)
    if star is not None:
        star.optimize = True
    if not (stepped or any(w.code == WarningCode.step_count_differs for w in warnings)):
        warnings += _step_warning(blocks, sa, sb)
    res = _result(sa, sb, req.phase, blocks, star, rules, warnings)
    _write_outputs(res, req.output_xlsx, req.output_html)
    return res


def _block_diffs(sa: Side, sb: Side, rules: BlockRules) -> list[BlockDiff]:
    """Per functional block, both sides' kernels aligned and annotated; sorted by |gap|."""
    ia, ma = _block_tables(sa, rules)
    ib, mb = _block_tables(sb, rules)
    # cpu op / input dims tell kernels apart only where both sides record them: else one item per name
    use_op = any(x.cpu_op for v in ia.values() for x in v) and any(x.cpu_op for v in ib.values() for x in v)
    use_dims = any(x.dims for v in ia.values() for x in v) and any(x.dims for v in ib.values() for x in v)
    if not (use_op and use_dims):
        ia = {k: _merge(v, use_op, use_dims) for k, v in ia.items()}
        ib = {k: _merge(v, use_op, use_dims) for k, v in ib.items()}
    out: list[BlockDiff] = []
    for blk in dict.fromkeys(list(ia) + list(ib)):
        role, keys = ma.get(blk) or mb.get(blk) or ("", [])
        keys = list(dict.fromkeys(keys + (mb.get(blk, ("", []))[1])))[:8]
        out.append(_block_diff(blk, role, keys, ia.get(blk, []), ib.get(blk, []), sa.label, sb.label))
    out.sort(key=lambda d: (-abs(d.gap_us), d.block))
    return out


def _block_diff(blk: str, role: str, keys: list[str], xa: list[Item], xb: list[Item], la: str, lb: str) -> BlockDiff:
    """One block: both sides' kernels aligned (``matching.align``) and annotated."""
    pairs = align(xa, xb)
    a_us, b_us = sum(x.us for x in xa), sum(x.us for x in xb)
    matches = [KernelMatch(
        kind=p.kind,
        a_name=xa[p.a].name if p.a is not None else None, b_name=xb[p.b].name if p.b is not None else None,
        a_category=xa[p.a].category if p.a is not None else None,
        b_category=xb[p.b].category if p.b is not None else None,
        a_us=xa[p.a].us if p.a is not None else 0.0, b_us=xb[p.b].us if p.b is not None else 0.0,
        a_count=_n(xa[p.a].count) if p.a is not None else 0, b_count=_n(xb[p.b].count) if p.b is not None else 0,
        a_dims=xa[p.a].dims if p.a is not None else "", b_dims=xb[p.b].dims if p.b is not None else "",
        segment=p.segment) for p in pairs]
    return BlockDiff(
        block=blk, role=role, a_us=a_us, b_us=b_us, gap_us=b_us - a_us, ratio=ratio(a_us, b_us),
        a_count=_n(sum(x.count for x in xa)), b_count=_n(sum(x.count for x in xb)),
        slower=("b" if b_us > a_us else "a" if a_us > b_us else None), module_types=keys,
        a_kernels=[KernelRow(name=x.name, category=x.category, us=x.us, count=_n(x.count), cpu_op=x.cpu_op,
                             input_dims=x.dims) for x in xa],
        b_kernels=[KernelRow(name=x.name, category=x.category, us=x.us, count=_n(x.count), cpu_op=x.cpu_op,
                             input_dims=x.dims) for x in xb],
        matches=matches, annotations=_annotate(xa, xb, pairs, la, lb),
    )


def _step_warning(blocks: list[BlockDiff], sa: Side, sb: Side) -> list[Warning_]:
    """``step_count_differs`` when most blocks launch a common multiple of the other side's kernels."""
    steps = _step_ratio(blocks)
    if steps is None:
        return []
    return [Warning_(code=WarningCode.step_count_differs, message=(
        f"{sb.label} launches {steps:.2f}x as many kernels as {sa.label} in most blocks: the runs cover "
        f"different numbers of steps (iterations, replays or layers), so totals, gaps and FUSION notes "
        f"compare unequal amounts of work; profile the same number of steps, or read ratios per launch"))]


def _result(sa: Side, sb: Side, phase: Optional[str], blocks: list[BlockDiff], star: Optional[BlockDiff],
            rules: BlockRules, warnings: list[Warning_]) -> DiffResult:
    ka, kb = sa.kernels, sb.kernels
    assert ka is not None and kb is not None  # checked by diff_modules
    tot_a = float(ka["dur_us"].sum()) if len(ka) else 0.0
    tot_b = float(kb["dur_us"].sum()) if len(kb) else 0.0
    return DiffResult(
        a=side_info(sa, total_us=tot_a, count=len(ka), table="kernels", phase=phase, phases=sa.phases),
        b=side_info(sb, total_us=tot_b, count=len(kb), table="kernels", phase=phase, phases=sb.phases),
        blocks=blocks, total_a_us=tot_a, total_b_us=tot_b, gap_us=tot_b - tot_a, ratio=ratio(tot_a, tot_b),
        top_block=star.block if star is not None else None, blocks_source=rules.source,
        mismatches=sa.mismatches + sb.mismatches, warnings=warnings,
    )


def _write_outputs(res: DiffResult, output_xlsx: Optional[str], output_html: Optional[str]) -> None:
    if output_xlsx:
        from mcp_server.compare.xlsx import write_diff_xlsx

        res.output_xlsx = str(write_diff_xlsx(res, output_xlsx))
    if output_html:
        from mcp_server.compare.html import write_diff_html

        res.output_html = str(write_diff_html(res, output_html))


def _star(blocks: list[BlockDiff], sa: Side, sb: Side, warnings: list[Warning_]) -> Optional[BlockDiff]:
    """The block to work on first: the largest |gap|, skipping blocks that are zero on a side whose
    module attribution is suspect (a reference of another phase, low confidence) or unattributed
    kernels: there the zero is the attribution's failure, not a missing module."""
    from mcp_server.compare.blocks import UNATTRIBUTED

    skipped = []
    for b in blocks:
        if abs(b.gap_us) <= 0:
            break
        zero_on = [s for s, us in ((sa, b.a_us), (sb, b.b_us)) if us <= 0]
        if b.block == UNATTRIBUTED or any(s.attribution_suspect for s in zero_on):
            skipped.append(b)
            continue
        if skipped:
            warnings.append(Warning_(code=WarningCode.reference_mismatch, message=(
                "not marked for optimisation: "
                f"{', '.join(f'{x.block} ({x.a_us:.1f} vs {x.b_us:.1f} us)' for x in skipped)}"
                f" - zero or unattributed on a side whose module attribution is suspect (see the reference warning)")))
        return b
    return None


def _step_ratio(blocks: list[BlockDiff]) -> Optional[float]:
    """The kernel-count ratio B/A shared by at least three quarters of the blocks (and at least
    three of them), when it is not 1: the two runs hold different numbers of steps."""
    ratios = [round(b.b_count / b.a_count, 2) for b in blocks if b.a_count and b.b_count]
    if len(ratios) < 3:
        return None
    common, n = Counter(ratios).most_common(1)[0]
    if n >= 0.75 * len(ratios) and abs(common - 1.0) > 0.05:
        return common
    return None


def replacements(block: BlockDiff) -> list[tuple[str, str, str]]:
    """(A kernel, B kernel, how paired) for the kernels one side replaced with another in a block."""
    return [(m.a_name or "", m.b_name or "", m.kind) for m in block.matches
            if m.kind in ("category", "time", "renamed")]
