"""make_repro: from a trace's kernels to the ops that launched them, rebuilt as a standalone replay.

Per selected GPU activity (kernel, memcpy, memset; eager launches only) the innermost CPU op enclosing its
launch is found (``traces.cpu_ops``); calls of one op with identical recorded arguments form one op
signature. Each argument is rebuilt from ``Input type`` / ``Input Dims`` / ``Input Strides`` /
``Concrete Inputs``; what cannot be rebuilt faithfully (a custom op, a tensor list, integer index tensors
whose values decide what is read, a value the trace did not record) is listed with the reason, never
guessed. The directory gets ``ops.json`` (everything), ``repro.py`` (the replay, torch only) and a
validate_candidate spec per rebuilt op (``spec.toml`` for the slowest).
"""
from __future__ import annotations

import json
import os
import pprint
import re
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from mcp_server.core.atomic import atomic_write_text, call_roots
from mcp_server.core.errors import ReproError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.repro.models import KernelTime, MakeReproResult, ReproArg, ReproOp
from mcp_server.repro.requests import MakeReproRequest

if TYPE_CHECKING:
    import pandas as pd

    from mcp_server.traces.cpu_ops import LaunchOps

#: Kineto's ``Input type`` spellings of tensor element types -> torch dtype names.
DTYPES: dict[str, str] = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool", "unsigned int": "uint32",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
}
_FLOATS = ("float16", "bfloat16", "float32", "float64")
#: Ops whose integer tensor arguments are indices: their values decide which memory is read or written.
INDEX_OPS = frozenset({
    "embedding", "embedding_bag", "_embedding_bag", "index", "index_select", "gather", "scatter", "scatter_",
    "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_put", "index_put_", "index_add",
    "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "take", "take_along_dim", "put_",
    "nonzero", "masked_select", "bincount", "searchsorted", "repeat_interleave", "unique_dim", "_unique2",
    "one_hot", "embedding_dense_backward", "_grouped_mm", "grouped_mm", "_scaled_grouped_mm", "segment_reduce",
    "_segment_reduce", "histc", "cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss2d",
})
_INT_RE = re.compile(r"^-?\d+$")
_SCALAR_TYPES = ("Scalar", "ScalarList", "String", "Device", "Layout", "ScalarType", "MemoryFormat", "int", "bool")


def _value(text: Any) -> Any:
    """A ``Concrete Inputs`` text as a Python value: ints, floats, bools, lists of them, else the text."""
    if not isinstance(text, str):
        return text
    t = text.strip()
    if t in ("True", "False"):
        return t == "True"
    if _INT_RE.match(t):
        return int(t)
    try:
        return float(t)
    except ValueError:
        pass
    if t.startswith("[") and t.endswith("]"):
        try:
            return json.loads(t.replace("True", "true").replace("False", "false").replace("None", "null"))
        except ValueError:
            return t
    return t


def _contiguous(shape: list[int]) -> list[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(int(d), 1)
    return list(reversed(st))


def rebuild_args(name: str, args: dict[str, Any]) -> tuple[list[ReproArg], str]:
    """The op's arguments as replay inputs, and '' or the reason they cannot be rebuilt faithfully."""
    dims = args.get("Input Dims")
    types = args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return [], "shapes not recorded (record the trace with record_shapes=True)"
    strides = args.get("Input Strides")
    strides = strides if isinstance(strides, list) and len(strides) == len(dims) else None
    concrete = args.get("Concrete Inputs")
    concrete = concrete if isinstance(concrete, list) and len(concrete) == len(dims) else None
    short = name.split("::", 1)[-1]
    out: list[ReproArg] = []
    reason = ""
    for i, (d, t) in enumerate(zip(dims, types)):
        t = t if isinstance(t, str) else str(t)
        c = concrete[i] if concrete is not None else None
        if t in DTYPES and isinstance(d, list) and all(isinstance(x, int) for x in d):
            s = strides[i] if strides is not None else None
            stride = s if isinstance(s, list) and len(s) == len(d) and all(isinstance(x, int) for x in s) \
                else _contiguous(d)
            dt = DTYPES[t]
            out.append(ReproArg(kind="tensor", dtype=dt, shape=list(d), stride=list(stride), recorded_type=t))
            if short in INDEX_OPS and (dt.startswith(("int", "uint")) or dt == "bool") and not reason:
                reason = (f"data-dependent argument: input {i} is an integer/bool index tensor of {short} "
                          "(its values decide what is read; the trace does not record them)")
            continue
        if t in ("TensorList", "GenericList") or (isinstance(d, list) and d and isinstance(d[0], list)):
            out.append(ReproArg(kind="unsupported", recorded_type=t))
            reason = reason or f"a tensor list (input {i}): the trace records no element types"
            continue
        if t == "" and (c in (None, "") or concrete is None):
            out.append(ReproArg(kind="none", recorded_type=t))
            continue
        if t in _SCALAR_TYPES or t.startswith(("Scalar", "Optional")):
            if c is None or (c == "" and t != "String"):
                out.append(ReproArg(kind="unsupported", recorded_type=t))
                reason = reason or (f"input {i} ({t}): the value was not recorded (PyTorch before 2.1 writes no "
                                    "'Concrete Inputs')")
                continue
            v = _value(c)
            kind = "list" if isinstance(v, list) else "string" if isinstance(v, str) else "scalar"
            if t in ("String", "Device") or (isinstance(v, str) and t != "Scalar"):
                kind = "string"
            elif isinstance(v, str):
                out.append(ReproArg(kind="unsupported", value=None, recorded_type=t))
                reason = reason or f"input {i} ({t}): value {v[:40]!r} is not a number"
                continue
            out.append(ReproArg(kind=kind, value=v, recorded_type=t))
            continue
        out.append(ReproArg(kind="unsupported", recorded_type=t))
        reason = reason or f"input {i}: argument type {t[:60]!r} is not one a replay can rebuild"
    return out, reason


def _module_match(wanted: str):
    w = wanted.strip("/")
    by_path = "/" in w or re.search(r"_\d+$", w) is not None

    def match(path: str) -> bool:
        if not path:
            return False
        if by_path:
            return path == w or path.startswith(w + "/") or f"/{w}/" in f"/{path}/"
        return any(re.sub(r"_\d+$", "", comp) == w for comp in path.split("/"))

    return match


def _first_instance(paths: list[str], wanted: str) -> str:
    """The path of the first matched module instance (the module itself, not its children)."""
    w = wanted.strip("/")
    for p in paths:
        comps = p.split("/")
        for i in range(len(comps)):
            head = "/".join(comps[: i + 1])
            if head == w or head.endswith("/" + w) or re.sub(r"_\d+$", "", comps[i]) == w:
                return head
    return ""


def _check_dir(out: Path, overwrite: bool) -> list[Path]:
    """The files of an earlier replay in ``out`` that this call replaces; refuses to write into a directory
    holding other files (or, over MCP, to replace anything) unless ``overwrite``."""
    if not out.is_dir() or not any(out.iterdir()):
        return []
    ours = [f for f in out.iterdir() if f.name in ("ops.json", "repro.py", "spec.toml")
            or re.fullmatch(r"spec_op\d+\.toml", f.name)]
    if overwrite:
        return ours
    if not (out / "ops.json").is_file() or not (out / "repro.py").is_file():
        raise ReproError("output_dir holds files make_repro did not write", path=out,
                         hint="give a new or empty directory, or pass overwrite=true (CLI --overwrite)")
    if call_roots() is not None and ours:
        raise ReproError("output_dir holds an earlier replay", path=out,
                         hint="pass overwrite=true to replace it, or give a new directory")
    return ours


@engine(MakeReproRequest)
def make_repro(req: MakeReproRequest, progress: ProgressFn | None = None) -> MakeReproResult:
    """Extract the ops behind a trace's slowest kernels into a replay directory."""
    from mcp_server.traces import analyze_trace

    def report(done: float, msg: str) -> None:
        if progress:
            progress(done, 4.0, msg)

    out = Path(os.path.expanduser(req.output_dir))
    if out.exists() and not out.is_dir():
        raise ReproError("output_dir exists and is not a directory", path=out, hint="give a directory path")
    earlier = _check_dir(out, req.overwrite)
    report(0, "attributing kernels to modules")
    res = analyze_trace(req.trace_path)
    report(1, "reading the CPU ops and their arguments")
    lops = _cpu_ops_with_shapes(req.trace_path)
    report(2, "selecting and rebuilding ops")
    sel, scope = _select_kernels(res.kernels, req.module, req.kernel, req.trace_path)
    want_op = None if not req.op else (req.op if "::" in req.op else f"aten::{req.op}")
    inst = _first_instance([str(p) for p in sel["module_path"]], req.module) if req.module else ""
    found = _group_launches(sel, lops, want_op, inst)
    warnings: list[Warning_] = []
    if found.graph_us:
        warnings.append(Warning_(code=WarningCode.graph_kernels_skipped, message=(
            f"{found.graph_us:.1f} us of the selected kernels are CUDA/HIP-graph replays: no CPU op launches them "
            "in this trace; run repro on the eager reference or capture trace of the same run")))
    if found.total <= 0:
        raise ReproError("the selected kernels were launched by no eager op of this trace", path=req.trace_path,
                         hint="for graph replays, run repro on the eager reference or capture trace")
    ops, bad, by_key = _rebuild_ops(found)
    kept = _number(ops, bad, req.top)
    report(3, "writing ops.json, repro.py and the specs")
    out.mkdir(parents=True, exist_ok=True)
    for f in earlier:  # an earlier replay's specs must not outlive the ops they named
        if f.name.startswith("spec"):
            f.unlink(missing_ok=True)
    seq = [by_key[k].id for k, _ in found.order if by_key[k].function] if req.module else []
    files = _write(out, res.trace, kept, bad, seq, inst, scope, found.total)
    warnings += _left_out_warnings(ops, kept, bad, found.total, req.top)
    report(4, "done")
    rebuilt_us = sum(o.kernel_us for o in kept)
    torch_us = sum(o.kernel_us for o in kept if not o.library)
    total = found.total
    return MakeReproResult(
        trace=res.trace, output_dir=str(out), files=files, scope=", ".join(scope) or "all eager kernels",
        selected_kernel_us=round(total, 3), rebuilt_kernel_us=round(rebuilt_us, 3),
        coverage_pct=round(100.0 * rebuilt_us / total, 2), torch_only_pct=round(100.0 * torch_us / total, 2),
        ops=kept, not_rebuilt=bad, spec=str(out / "spec.toml") if any(o.spec for o in kept) else "",
        warnings=warnings)


def _cpu_ops_with_shapes(trace_path: str) -> LaunchOps:
    """The trace's CPU ops (``traces.cpu_ops``); ``ReproError`` when it recorded no op shapes."""
    from mcp_server.traces.cpu_ops import read_cpu_ops

    lops = read_cpu_ops(trace_path)
    if not any("Input Dims" in o.args for o in lops.ops):
        raise ReproError("the trace records no op shapes, so no op can be rebuilt", path=trace_path,
                         hint="profile with torch.profiler.profile(record_shapes=True, ...)")
    return lops


def _select_kernels(kt: pd.DataFrame, module: Optional[str], kernel: Optional[str],
                    trace_path: str) -> tuple[pd.DataFrame, list[str]]:
    """The kernels of ``module`` matching ``kernel`` (either may be None), and the scope in words."""
    sel = kt
    scope = []
    if module:
        m = _module_match(module)
        sel = sel[[m(str(p)) for p in sel["module_path"]]]
        scope.append(f"module {module}")
    if kernel:
        from mcp_server.core.userregex import compile_user_regex

        rx = compile_user_regex(kernel, where="kernel")
        sel = sel[[bool(rx.search(str(n))) for n in sel["name"]]]
        scope.append(f"kernels matching {kernel!r}")
    if sel.empty:
        raise ReproError(f"no GPU kernel matches {' and '.join(scope) or 'the trace'}", path=trace_path,
                         hint="`kernelscope analyze TRACE` lists the modules and kernels")
    return sel, scope


@dataclass
class _Launches:
    """The selected kernels by the op signature whose eager call launched them."""

    groups: dict[tuple, dict[str, Any]] = field(default_factory=dict)  # (op name, recorded args) -> group
    unlinked: dict[str, dict[str, Any]] = field(default_factory=dict)  # kernels no CPU op encloses, by name
    order: list[tuple] = field(default_factory=list)  # op signatures of the first module instance, in launch order
    total: float = 0.0     # us of the selected eager kernels (of ``want_op``'s when given)
    graph_us: float = 0.0  # us of graph replays, which no CPU op launches


def _group_launches(sel: pd.DataFrame, lops: LaunchOps, want_op: Optional[str], inst: str) -> _Launches:
    """Each eager kernel to the innermost CPU op enclosing its launch; calls with identical recorded arguments form
    one group. ``inst``: the first module instance, whose op order is kept."""
    found = _Launches()
    for row in sel.itertuples(index=False):
        dur = float(row.dur_us)
        if bool(row.graph):
            found.graph_us += dur
            continue
        idx = lops.by_correlation.get(int(row.correlation), -1)
        cop = lops.ops[idx] if idx >= 0 else None
        # the innermost aten op: a custom op's own launches stay with it (no schema to replay it by)
        name = cop.name if cop is not None else ""
        if want_op and name != want_op:
            continue
        found.total += dur
        fresh = {"kernels": defaultdict(list), "calls": set(), "us": 0.0, "path": str(row.module_path)}
        if cop is None:
            g = found.unlinked.setdefault(f"(no op) {row.name}", {"name": "(no CPU op)", **fresh})
            call = int(row.correlation)
        else:
            a = cop.args
            key = (name, json.dumps([a.get("Input Dims"), a.get("Input type"), a.get("Input Strides"),
                                     a.get("Concrete Inputs")], default=str))
            g = found.groups.setdefault(key, {"name": name, "args": a, **fresh})
            call = cop.index
            if inst and (str(row.module_path) == inst or str(row.module_path).startswith(inst + "/")):
                if not found.order or found.order[-1] != (key, call):
                    found.order.append((key, call))
        g["kernels"][str(row.name)].append(dur)
        g["us"] += dur
        g["calls"].add(call)
    return found


def _rebuild_ops(found: _Launches) -> tuple[list[ReproOp], list[ReproOp], dict[tuple, ReproOp]]:
    """(rebuilt ops, ops not rebuilt with the reason, op of each signature), slowest first."""
    ops: list[ReproOp] = []
    bad: list[ReproOp] = []
    by_key: dict[tuple, ReproOp] = {}
    for key, g in sorted(found.groups.items(), key=lambda kv: -kv[1]["us"]):
        args, reason = rebuild_args(g["name"], g["args"])
        library = "" if g["name"].startswith("aten::") else g["name"].split("::", 1)[0]
        if library and not reason and "::" not in g["name"]:
            reason = f"{g['name']} is a profiler label, not a dispatcher op: nothing to call"
        if library and not reason and any(a.kind == "tensor" and (a.dtype or "").startswith(("int", "uint"))
                                          for a in args):
            reason = (f"data-dependent argument: {g['name']} takes integer tensors (indices, positions or "
                      "lengths whose values the trace does not record)")
        item = by_key[key] = _op_model(g, args, reason, found.total)
        item.library = library if not reason else ""
        (bad if reason else ops).append(item)
    for g in sorted(found.unlinked.values(), key=lambda g: -g["us"]):
        bad.append(_op_model(g, [], "no CPU op encloses the launch (a Triton or custom launch outside any op)",
                             found.total))
    return ops, bad, by_key


def _number(ops: list[ReproOp], bad: list[ReproOp], top: int) -> list[ReproOp]:
    """The ``top`` slowest rebuilt ops, named op0, op1, ... (their replay functions too); skip0, ... the rest."""
    kept = ops[:top]
    for i, o in enumerate(kept):
        o.id = f"op{i}"
        o.function = f"op{i}"
    for i, o in enumerate(bad):
        o.id = f"skip{i}"
    return kept


def _left_out_warnings(ops: list[ReproOp], kept: list[ReproOp], bad: list[ReproOp], total: float,
                       top: int) -> list[Warning_]:
    warnings = []
    if bad:
        miss = sum(o.kernel_us for o in bad)
        warnings.append(Warning_(code=WarningCode.not_rebuilt, count=len(bad), message=(
            f"{len(bad)} op signature(s) holding {miss:.1f} us ({100 * miss / total:.1f} %) of the selected kernel "
            "time could not be rebuilt; not_rebuilt lists each with the reason")))
    if len(ops) > len(kept):
        warnings.append(Warning_(code=WarningCode.summary_truncated, count=len(ops) - len(kept), message=(
            f"{len(ops) - len(kept)} more rebuildable op signature(s) beyond top={top} were left out")))
    return warnings


def _op_model(g: dict[str, Any], args: list[ReproArg], reason: str, total: float) -> ReproOp:
    kernels = [KernelTime(name=k, count=len(v), total_us=round(sum(v), 3), mean_us=round(sum(v) / len(v), 3))
               for k, v in sorted(g["kernels"].items(), key=lambda kv: -sum(kv[1]))]
    calls = max(len(g["calls"]), 1)
    path = g["path"]
    return ReproOp(id="", name=g["name"], calls=calls, kernel_us=round(g["us"], 3),
                   per_call_us=round(g["us"] / calls, 3), share_pct=round(100 * g["us"] / total, 2) if total else 0,
                   module_path=path, module_type=re.sub(r"_\d+$", "", path.rsplit("/", 1)[-1]) if path else "",
                   kernels=kernels, args=args, rebuilt=not reason, reason=reason)


def _inplace(o: ReproOp) -> bool:
    return o.name.endswith("_") and not o.name.endswith("__")


def _main_dtype(o: ReproOp) -> Optional[str]:
    for a in o.args:
        if a.kind == "tensor" and a.dtype in _FLOATS:
            return a.dtype
    return None


def _write(out: Path, trace: str, kept: list[ReproOp], bad: list[ReproOp], seq: list[str], inst: str,
           scope: list[str], total: float) -> list[str]:
    for o in kept:
        dt = _main_dtype(o)
        if dt and not _inplace(o):
            o.spec = f"spec_{o.id}.toml"
    table = {o.id: {"name": o.name, "args": [a.model_dump(exclude_none=True) for a in o.args],
                    "trace_us": o.per_call_us, "calls": o.calls, "module_path": o.module_path,
                    "kernels": [k.name for k in o.kernels], "library": o.library} for o in kept}
    doc = {"trace": trace, "scope": ", ".join(scope) or "all eager kernels", "selected_kernel_us": round(total, 3),
           "ops": [o.model_dump() for o in kept], "not_rebuilt": [o.model_dump() for o in bad],
           "sequence": {"module": inst, "ops": seq} if seq else None}
    files = []

    def put(name: str, text: str) -> None:
        atomic_write_text(out / name, text, name)
        files.append(str(out / name))

    put("ops.json", json.dumps(doc, indent=1) + "\n")
    template = resources.files("mcp_server.repro").joinpath("repro_template.py").read_text(encoding="utf-8")
    filled = (template.replace("TRACE = \"\"  # filled in", f"TRACE = {json.dumps(os.path.basename(trace))}")
              .replace("OPS: dict = {}  # filled in",
                       "OPS: dict = " + pprint.pformat(table, width=110, sort_dicts=False))
              .replace("SEQUENCE: list = []  # filled in", "SEQUENCE: list = " + repr(seq)))
    put("repro.py", filled)
    specs = [o for o in kept if o.spec]
    for o in specs:
        put(o.spec, _spec_text(o))
    if specs:  # the slowest op's spec under the name the answer gives
        put("spec.toml", _spec_text(specs[0]))
    return files


def _spec_text(o: ReproOp) -> str:
    return (f"# validate_candidate spec for {o.id} ({o.name}, {o.per_call_us:.2f} us per call in the trace, "
            f"{o.calls} call(s); module {o.module_path or '-'}).\n"
            "# Write a candidate with the same signature as the baseline and point `candidate` at it.\n"
            f'baseline  = "repro.py:{o.function}"\n'
            f'candidate = "repro.py:{o.function}"   # replace with "my_kernel.py:{o.function}"\n'
            'inputs    = "repro.py:make_inputs"\n'
            f'shapes    = [{{op = "{o.id}"}}]\n'
            f'dtype     = "{_main_dtype(o)}"\n'
            'device    = "cuda"\n'
            'mode      = "ab"\n'
            'min_gain  = 0.03\n')
