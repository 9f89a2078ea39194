#!/usr/bin/env python3
# ruff: noqa: E501  (generated: OPS holds the recorded kernel names, which are long)
"""Replay of ops recorded in a PyTorch-profiler trace, written by `kernelscope repro` (torch only).

    python repro.py                          time every op, warm and cold; print trace vs replay
    python repro.py --only op0 --iters 20    one op
    python repro.py --device cpu             run on the CPU (no timing of GPU kernels)
    python repro.py --nvtx                   wrap each timed call in an NVTX range named by the op id
                                             (profile one op: ncu --nvtx --nvtx-include "op0/")

Importable: ``make_inputs(shape, dtype, device, seed)`` builds the inputs of ``shape = {"op": "op0"}``
(the recorded shapes, strides and dtypes; fresh random values per seed; ``dtype`` replaces the
floating-point element type when it differs), and ``op0(*inputs)`` ... call each op as recorded, so a
validate_candidate spec can use them as baseline and inputs (spec.toml beside this file).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

inf, nan = float("inf"), float("nan")  # recorded scalars such as masked_fill's -inf are written as inf / nan
TRACE = ""  # filled in
OPS: dict = {}  # filled in
SEQUENCE: list = []  # filled in

# c10::ScalarType / Layout / MemoryFormat enum values, as a trace's Concrete Inputs record them
_SCALAR_TYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
                 "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16"]
_LAYOUTS = ["strided", "sparse_coo"]
_MEMORY_FORMATS = ["contiguous_format", "preserve_format", "channels_last", "channels_last_3d"]


def _torch() -> Any:
    import torch

    return torch


_WRAPPED = ("float64", "int64", "complex128")


def _make_arg(a: dict, dtype: Any, device: str, gen: Any) -> Any:
    torch = _torch()
    kind = a["kind"]
    if kind == "none":
        return None
    if kind != "tensor":
        return a.get("value")
    dt = getattr(torch, a["dtype"])
    shape, stride = a["shape"], a["stride"]
    # A 0-dim double / long / complex-double tensor is how the profiler records a Python number passed to a tensor
    # op (``x + 1e-6``: a "wrapped number", a CPU scalar the kernel takes as an argument); made on the GPU it
    # would be one more operand and another kernel (a real 0-dim float64 GPU tensor is rare in models).
    wrapped = not shape and a["dtype"] in _WRAPPED
    if wrapped:
        device = "cpu"
    elif dtype is not None and dt.is_floating_point and dtype.is_floating_point and dt.itemsize >= 2:
        dt = dtype
    n = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(s > 0 for s in shape) else 0
    if dt.is_floating_point:
        base = (torch.randn(n, generator=gen) * 0.5).to(dt)
    elif dt.is_complex:
        base = torch.randn(n, generator=gen, dtype=torch.complex64).to(dt)
    elif dt == torch.bool:
        base = torch.rand(n, generator=gen) > 0.5
    else:
        base = torch.randint(0, 16, (n,), generator=gen).to(dt)
    return base.to(device).as_strided(shape, stride)


def make_inputs(shape: dict, dtype: Any = None, device: str = "cuda", seed: int = 0) -> tuple:
    """The inputs of ``shape["op"]`` (or of the module sequence, ``{"op": "sequence"}``: every op's, in order)."""
    torch = _torch()
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    ids = SEQUENCE if shape["op"] == "sequence" else [shape["op"]]
    args: list = []
    for op_id in ids:
        args.extend(_make_arg(a, dtype, device, gen) for a in OPS[op_id]["args"])
    return tuple(args)


def _fits(arg: Any, value: Any) -> bool:
    torch = _torch()
    t = str(arg.type)
    if isinstance(value, torch.Tensor):
        return "Tensor" in t and "[]" not in t and "List" not in t
    if value is None:
        return "Optional" in t or t.endswith("?")
    if "Tensor" in t and "Optional" not in t:
        return False
    if isinstance(value, list):
        return "[]" in t or "List" in t
    return "[]" not in t and "List" not in t


def _convert(arg: Any, value: Any, device: str) -> Any:
    torch = _torch()
    t = str(arg.type)
    if isinstance(value, int) and not isinstance(value, bool):
        if "ScalarType" in t and 0 <= value < len(_SCALAR_TYPES):
            return getattr(torch, _SCALAR_TYPES[value])
        if "Layout" in t and 0 <= value < len(_LAYOUTS):
            return getattr(torch, _LAYOUTS[value])
        if "MemoryFormat" in t and 0 <= value < len(_MEMORY_FORMATS):
            return getattr(torch, _MEMORY_FORMATS[value])
    if "Device" in t and isinstance(value, str):
        return torch.device(device)
    return value


#: Python modules that register a custom-op namespace when imported
_LIBRARIES = {"aiter": "aiter", "sgl_kernel": "sgl_kernel", "_C": "vllm._C", "vllm": "vllm._custom_ops",
              "flashinfer": "flashinfer", "_moe_C": "vllm._moe_C", "trtllm": "tensorrt_llm"}


def _packet(name: str) -> Any:
    torch = _torch()
    ns, op = name.split("::", 1)
    if ns != "aten":
        import importlib

        try:
            importlib.import_module(_LIBRARIES.get(ns, ns))
        except ImportError:
            pass
    try:
        return getattr(getattr(torch.ops, ns), op)
    except (AttributeError, RuntimeError):
        raise RuntimeError(f"torch.ops.{ns}.{op} is not registered here: install and import the library that "
                           f"defines the {ns} ops") from None


def call(name: str, args: tuple, device: str = "cuda") -> Any:
    """Call the op ``name`` (``aten::mm``) with its recorded arguments, in schema order: the overload whose
    schema takes them is chosen, and keyword-only arguments are passed by name."""
    packet = _packet(name)
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        params = list(schema.arguments)
        if len(params) < len(args) or any(not p.has_default_value() for p in params[len(args):]):
            continue
        if not all(_fits(p, v) for p, v in zip(params, args)):
            continue
        pos, kw = [], {}
        for p, v in zip(params, args):
            v = _convert(p, v, device)
            if p.kwarg_only:
                kw[p.name] = v
            else:
                pos.append(v)
        return getattr(packet, overload)(*pos, **kw)
    raise RuntimeError(f"no overload of {name} takes the recorded arguments")


def _device_of(args: tuple) -> str:
    """The device of the first tensor argument ("cpu" when none)."""
    torch = _torch()
    return next((str(a.device) for a in args if isinstance(a, torch.Tensor)), "cpu")


def _op_fn(op_id: str) -> Any:
    def fn(*args: Any) -> Any:
        return call(OPS[op_id]["name"], args, _device_of(args))

    fn.__name__ = fn.__qualname__ = op_id
    fn.__doc__ = f"{OPS[op_id]['name']} as recorded ({OPS[op_id]['module_path'] or 'no module'})"
    return fn


def sequence(*args: Any) -> Any:
    """The recorded ops of the module's first instance, in order (each on its own inputs); the last output."""
    out, i = None, 0
    for op_id in SEQUENCE:
        n = len(OPS[op_id]["args"])
        out = call(OPS[op_id]["name"], args[i:i + n], _device_of(args[i:i + n]))
        i += n
    return out


for _id in OPS:
    globals()[_id] = _op_fn(_id)


def time_op(op_id: str, device: str, iters: int, cache: str, nvtx: bool) -> dict:
    """Per call: profiler kernel time (mean) and CUDA-event wall time (median), warm (the same inputs every call,
    resident in the L2) and cold (the L2 flushed by a write of twice its size before each call, whatever the
    inputs' size)."""
    torch = _torch()
    fn = globals()[op_id]
    res: dict[str, Any] = {"id": op_id, "name": OPS[op_id]["name"], "trace_us": OPS[op_id]["trace_us"]}
    args = make_inputs({"op": op_id}, None, device, 0)
    cuda = device.startswith("cuda")

    def one() -> None:
        if nvtx and cuda:
            torch.cuda.nvtx.range_push(op_id)
        fn(*args)
        if nvtx and cuda:
            torch.cuda.nvtx.range_pop()

    for _ in range(3):
        one()
    if not cuda:
        t = []
        for _ in range(iters):
            t0 = time.perf_counter()
            one()
            t.append((time.perf_counter() - t0) * 1e6)
        res["replay_warm_us"] = statistics.median(t)
        return res
    torch.cuda.synchronize()
    flush: Any = None
    if cache in ("both", "cold"):  # written before each cold call: evicts the L2 (inputs, outputs, whatever was there)
        l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 64 << 20)
        flush = torch.empty(max(2 * int(l2), 1 << 22) // 4, dtype=torch.float32, device=device)
    warm: dict[str, float] = {}
    if cache in ("both", "warm"):
        res["replay_warm_us"] = _event_median(one, iters, None)
        warm = _kernel_times(lambda: _calls(one, iters, None))
        res["kernels"] = sorted(warm, key=lambda k: -warm[k])
        res["replay_kernel_us"] = sum(warm.values()) / iters if warm else None
    if flush is not None:
        res["replay_cold_us"] = _event_median(one, iters, flush)
        if not nvtx:  # under ncu (--nvtx) only the timed calls run: a profiled pass would add kernels
            fill = set(_kernel_times(lambda: flush.fill_(0.0)))
            cold = _kernel_times(lambda: _calls(one, iters, flush))
            if fill & set(warm or _kernel_times(lambda: _calls(one, iters, None))):
                # the op launches the flush's kernel: the two cannot be told apart
                res["cold_note"] = "the op launches the L2 flush's own kernel: no cold kernel time"
            else:
                mine = [v for k, v in cold.items() if k not in fill]
                res["replay_kernel_cold_us"] = sum(mine) / iters if mine else None
    return res


def _calls(one: Any, iters: int, flush: Any) -> None:
    """``iters`` calls; ``flush``: written before each (the L2 cold), or None."""
    for k in range(iters):
        if flush is not None:
            flush.fill_(float(k))
        one()


def _event_median(one: Any, iters: int, flush: Any) -> float:
    """The median CUDA-event time of ``iters`` calls in us (``flush`` as in ``_calls``)."""
    torch = _torch()
    ts = []
    for k in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if flush is not None:
            flush.fill_(float(k))
        s.record()
        one()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)


def _kernel_times(run: Any) -> dict[str, float]:
    """Profiler device time per CUDA kernel name over ``run()`` (synchronised before the profile ends)."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    per_name: dict[str, float] = {}
    for ev in prof.events():
        if getattr(ev, "device_type", None) is not None and str(ev.device_type).endswith("CUDA"):
            per_name[ev.name] = per_name.get(ev.name, 0.0) + ev.device_time
    return per_name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", nargs="*", default=None, help="op ids (default: all)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--cache", choices=["both", "warm", "cold"], default="both")
    p.add_argument("--nvtx", action="store_true")
    p.add_argument("--json", default=None, help="write the timings here")
    p.add_argument("--progress", action="store_true", help="print 'progress I N ID' lines")
    a = p.parse_args(argv)
    ids = a.only or list(OPS)
    unknown = [i for i in ids if i not in OPS]
    if unknown:
        print(f"unknown op id(s) {unknown}; known: {list(OPS)}", file=sys.stderr)
        return 2
    rows = []
    sticky = False
    for k, op_id in enumerate(ids):
        if a.progress:
            print(f"progress {k} {len(ids)} {op_id}", flush=True)
        try:
            rows.append(time_op(op_id, a.device, a.iters, a.cache, a.nvtx))
        except Exception as exc:  # one op failing does not stop the others
            text = str(exc).splitlines()[0][:300] if str(exc) else ""
            rows.append({"id": op_id, "name": OPS[op_id]["name"], "trace_us": OPS[op_id]["trace_us"],
                         "error": f"{type(exc).__name__}: {text}"})
            if "CUDA error" in text or type(exc).__name__ == "AcceleratorError":
                # the CUDA context is lost (a device-side assert is sticky): stop; the caller reruns the rest
                sticky = True
                break
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"trace": TRACE, "device": a.device, "ops": rows}, f)
    print(f"{'op':<6} {'name':<34} {'trace us':>9} {'kernel us':>9} {'warm us':>9} {'cold us':>9}")
    def num(x: Any) -> str:
        return f"{x:9.2f}" if isinstance(x, (int, float)) else f"{'-':>9}"

    for r in rows:
        print(f"{r['id']:<6} {r['name'][:34]:<34} {num(r['trace_us'])} {num(r.get('replay_kernel_us'))} "
              f"{num(r.get('replay_warm_us'))} {num(r.get('replay_cold_us'))} {r.get('error', '')}")
    return 3 if sticky else 0


if __name__ == "__main__":
    sys.exit(main())
