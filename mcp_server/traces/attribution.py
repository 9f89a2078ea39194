"""Kernel -> launch -> enclosing spans (module, cpu op, source line, phase).

All lookups are vectorised: per thread, the spans of one kind are sorted by
start; ``searchsorted`` finds the last span starting at or before the launch;
if that span ended before the launch, the lookup walks to its parent (parents
are computed per nesting depth, also with ``searchsorted``). The walk takes at
most "nesting depth" numpy steps, never a Python loop per kernel.

Then per kernel its module path (interned in a ``PathTable``) and its phase (see ``analyze``'s
module doc).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from mcp_server.core.vocab import PHASE_CODES, module_type
from mcp_server.traces.graph import UNATTRIBUTED_GRAPH
from mcp_server.traces.loader import GRAPH_LAUNCH_NAMES, RawTrace, phase_of_annotation

MODULE_PREFIX = "nn.Module: "


_FRAME = re.compile(r"\(\d+\): ")


def is_source_frame(name: str) -> bool:
    """A user-code frame (``file.py(123): func``): not a module marker, not a builtin/frozen frame, not
    inside torch/, not an annotation."""
    if not name or name.startswith("<") or name.startswith(MODULE_PREFIX):
        return False
    if name.startswith("torch/") or "/torch/" in name:
        return False
    return _FRAME.search(name) is not None


def phase_of_frame(name: str) -> str:
    """The phase a span marks: SGLang's ``forward_extend`` / ``forward_decode`` functions, or a phase
    annotation (``loader.PHASE_ANNOTATION``); '' for any other span."""
    if "forward_extend" in name:
        return "prefill"
    if "forward_decode" in name:
        return "decode"
    return phase_of_annotation(name)


@dataclass
class SpanSet:
    """Spans of one kind, sorted by (thread, start, -end), with parent indices (-1 = none)."""

    ts: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    name: np.ndarray
    parent: np.ndarray
    extra: np.ndarray | None = None

    @classmethod
    def build(cls, ts, end, thread, name, extra=None) -> "SpanSet":
        order = np.lexsort((-end, ts, thread))
        ts, end, thread, name = ts[order], end[order], thread[order], name[order]
        extra = extra[order] if extra is not None else None
        parent = np.full(len(ts), -1, dtype=np.int64)
        for th in np.unique(thread):
            lo, hi = np.searchsorted(thread, [th, th + 1])
            s, e = ts[lo:hi], end[lo:hi]
            n = hi - lo
            ends_sorted = np.sort(e)
            depth = np.arange(n) - np.searchsorted(ends_sorted, s, side="right")
            depth = np.maximum(depth, 0)
            for d in range(1, int(depth.max()) + 1 if n else 0):
                kids = np.flatnonzero(depth == d)
                ups = np.flatnonzero(depth == d - 1)
                j = np.searchsorted(ups, kids) - 1
                ok = j >= 0
                parent[lo + kids[ok]] = lo + ups[j[ok]]
        return cls(ts, end, thread, name, parent, extra)

    def __len__(self) -> int:
        return len(self.ts)

    def enclosing(self, q_thread: np.ndarray, q_ts: np.ndarray) -> np.ndarray:
        """Index of the deepest span enclosing each query on its thread (-1 when none)."""
        out = np.full(len(q_ts), -1, dtype=np.int64)
        if not len(self.ts) or not len(q_ts):
            return out
        for th in np.unique(q_thread):
            lo, hi = np.searchsorted(self.thread, [th, th + 1])
            qi = np.flatnonzero(q_thread == th)
            t = q_ts[qi]
            idx = np.searchsorted(self.ts[lo:hi], t, side="right") - 1 + lo
            idx[idx < lo] = -1
            for _ in range(512):
                live = idx >= 0
                bad = np.zeros(len(idx), dtype=bool)
                bad[live] = self.end[idx[live]] < t[live]
                if not bad.any():
                    break
                idx[bad] = self.parent[idx[bad]]
            out[qi] = idx
        return out


@dataclass
class Linked:
    """Per-kernel results of the direct (eager) attribution."""

    launch_idx: np.ndarray  # index into launches, -1 when no launch found
    graph: np.ndarray  # bool: launched by a graph launch
    graph_group: np.ndarray  # correlation of the graph launch (-1 when not a replay)
    module_span: np.ndarray  # index into modules SpanSet (-1)
    cpu_op: np.ndarray  # index into cpu SpanSet (-1)
    source: np.ndarray  # index into source SpanSet (-1)
    phase_span: np.ndarray  # index into phase SpanSet (-1)
    modules: SpanSet
    cpu: SpanSet
    sources: SpanSet
    phases: SpanSet
    module_paths: list[str]  # per module span: instance path


def link(rt: RawTrace) -> Linked:
    names = rt.names
    n = len(rt.k_name)
    # 1. kernel -> launch by correlation (first launch per id)
    order = np.argsort(rt.l_corr, kind="stable")
    lc = rt.l_corr[order]
    pos = np.searchsorted(lc, rt.k_corr)
    pos_c = np.minimum(pos, max(len(lc) - 1, 0))
    hit = (pos < len(lc)) & (lc[pos_c] == rt.k_corr) if len(lc) else np.zeros(n, dtype=bool)
    launch_idx = np.where(hit, order[pos_c] if len(lc) else -1, -1)
    graph_name_ids = np.array([i for i, s in enumerate(names) if s in GRAPH_LAUNCH_NAMES], dtype=np.int32)
    is_graph_launch = np.isin(rt.l_name, graph_name_ids)
    graph = np.zeros(n, dtype=bool)
    graph[hit] = is_graph_launch[launch_idx[hit]]
    graph_group = np.where(graph, rt.k_corr, -1)

    # 2. span sets
    pname = rt.p_name
    uniq = np.unique(pname)
    mod_ids = np.array([i for i in uniq if names[i].startswith(MODULE_PREFIX)], dtype=np.int32)
    src_ids = np.array([i for i in uniq if is_source_frame(names[i])], dtype=np.int32)
    ph_ids = np.array([i for i in uniq if phase_of_frame(names[i])], dtype=np.int32)

    def subset(ids):
        m = np.isin(pname, ids)
        return SpanSet.build(rt.p_ts[m], rt.p_end[m], rt.p_thread[m], pname[m])

    modules, sources, phases = subset(mod_ids), subset(src_ids), subset(ph_ids)
    cpu = SpanSet.build(rt.c_ts, rt.c_end, rt.c_thread, rt.c_name, rt.c_dims)

    # 3. queries at the launch time on the launch thread (eager kernels only)
    q = np.flatnonzero(hit & ~graph)
    qth = rt.l_thread[launch_idx[q]]
    qts = rt.l_ts[launch_idx[q]]

    def stab(ss: SpanSet) -> np.ndarray:
        out = np.full(n, -1, dtype=np.int64)
        out[q] = ss.enclosing(qth, qts)
        return out

    # graph launches: phase markers only (module spans do not exist inside a replay)
    phase_span = stab(phases)
    gq = np.flatnonzero(graph)
    if len(gq):
        phase_span[gq] = phases.enclosing(rt.l_thread[launch_idx[gq]], rt.l_ts[launch_idx[gq]])

    # 4. module instance paths (parents precede children in start order)
    paths: list[str] = []
    for i in range(len(modules)):
        inst = names[modules.name[i]][len(MODULE_PREFIX):].strip()
        par = modules.parent[i]
        paths.append(f"{paths[par]}/{inst}" if par >= 0 else inst)
    return Linked(launch_idx, graph, graph_group, stab(modules), stab(cpu), stab(sources), phase_span,
                  modules, cpu, sources, phases, paths)


class PathTable:
    """Interned module instance paths; code 0 = '' (unattributed), 1 = the graph bucket.

    Adding a path adds its ancestors too, so every code's parent is a code.
    """

    def __init__(self) -> None:
        self.paths: list[str] = ["", UNATTRIBUTED_GRAPH]
        self.index: dict[str, int] = {"": 0, UNATTRIBUTED_GRAPH: 1}
        self._parent: list[int] = [-1, -1]

    def code(self, path: str) -> int:
        c = self.index.get(path)
        if c is not None:
            return c
        par = self.code(path.rsplit("/", 1)[0]) if "/" in path else -1
        c = self.index[path] = len(self.paths)
        self.paths.append(path)
        self._parent.append(par)
        return c

    def arrays(self):
        """parent, depth, instance names, type names, root types (numpy / lists, by code)."""
        parent = np.array(self._parent, dtype=np.int64)
        depth = np.array([p.count("/") for p in self.paths], dtype=np.int64)
        inst = [p.rsplit("/", 1)[-1] if i > 1 else "" for i, p in enumerate(self.paths)]
        types = [module_type(x) for x in inst]
        roots = [module_type(p.split("/", 1)[0]) if i > 1 else "" for i, p in enumerate(self.paths)]
        return parent, depth, inst, types, roots


def root_of(parent: np.ndarray) -> np.ndarray:
    """Per span of a ``SpanSet`` (by its ``parent`` column) the index of its outermost enclosing span."""
    root = np.arange(len(parent))
    for _ in range(512):
        p = parent[root]
        m = p >= 0
        if not m.any():
            break
        root[m] = p[m]
    return root


def infer_root_phase(rt: RawTrace, lk: Linked) -> dict[int, str]:
    """Phase per root module span from its aten::embedding input ids (see ``analyze``'s module doc)."""
    out: dict[int, str] = {}
    names = rt.names
    emb = [i for i, s in enumerate(names) if s == "aten::embedding"]
    if not emb or not len(lk.modules):
        return out
    cpu = lk.cpu
    m = np.isin(cpu.name, emb)
    if not m.any():
        return out
    idx = np.flatnonzero(m)
    span = lk.modules.enclosing(cpu.thread[idx], cpu.ts[idx])
    roots = root_of(lk.modules.parent)
    for i, s in zip(idx, span):
        if s < 0:
            continue
        r = int(roots[s])
        if r in out:
            continue
        try:
            dims = json.loads(rt.dims[cpu.extra[i]]) if cpu.extra is not None and cpu.extra[i] else None
        except ValueError:
            dims = None
        if isinstance(dims, list) and len(dims) >= 2 and isinstance(dims[1], list) and len(dims[1]) == 2:
            out[r] = "decode" if dims[1][1] == 1 else "prefill"
    return out


def direct_attribution(lk: Linked, table: PathTable, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per module span its path code; per kernel the path code of its enclosing module span and the
    confidence (1 when a module encloses the launch, else 0)."""
    span_pc = np.array([table.code(p) for p in lk.module_paths], dtype=np.int64)
    path_code = np.zeros(n, dtype=np.int64)
    has_mod = lk.module_span >= 0
    path_code[has_mod] = span_pc[lk.module_span[has_mod]]
    confidence = np.where(has_mod, 1.0, 0.0)
    return span_pc, path_code, confidence


def kernel_phases(rt: RawTrace, lk: Linked) -> np.ndarray:
    """Per kernel the phase code (index into ``PHASE_CODES``): the SGLang marker enclosing its
    launch, else the phase inferred for its root-module call (see ``analyze``'s module doc)."""
    names = rt.names
    n = len(rt.k_name)
    has_mod = lk.module_span >= 0
    ph_code_of_span = np.array([PHASE_CODES.index(phase_of_frame(names[i])) for i in lk.phases.name], dtype=np.int8)
    phase = np.zeros(n, dtype=np.int8)
    hp = lk.phase_span >= 0
    phase[hp] = ph_code_of_span[lk.phase_span[hp]]
    inferred = infer_root_phase(rt, lk)
    if inferred:
        roots = root_of(lk.modules.parent)
        need = np.flatnonzero((phase == 0) & has_mod)
        for i in need:
            p = inferred.get(int(roots[lk.module_span[i]]))
            if p:
                phase[i] = 1 if p == "prefill" else 2
    return phase
