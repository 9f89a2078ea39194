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
TRACE = "hf_decode_eager.json.gz"
OPS: dict = {'op0': {'name': 'aten::copy_',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 8, 4, 2052, 64],
                   'stride': [4202496, 525312, 131328, 64, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 8, 4, 2052, 64],
                   'stride': [1050624, 131328, 0, 64, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'scalar', 'value': False, 'recorded_type': 'Scalar'}],
         'trace_us': 71.739,
         'calls': 16,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void at::native::elementwise_kernel<128, 4, '
                     'at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
                     'const::{lambda()#12}::operator()() '
                     'const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, '
                     'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
                     'const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} '
                     'const&)::{lambda(int)#1}>(int, '
                     'at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
                     'const::{lambda()#12}::operator()() '
                     'const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, '
                     'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
                     'const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} '
                     'const&)::{lambda(int)#1})'],
         'library': ''},
 'op1': {'name': 'aten::bmm',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [256, 1, 2052],
                   'stride': [2052, 2052, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [256, 2052, 64],
                   'stride': [131328, 64, 1],
                   'recorded_type': 'c10::BFloat16'}],
         'trace_us': 43.732,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['std::enable_if<true, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, '
                     '__nv_bfloat16, __nv_bfloat16, float, true, true, false, false, 7, false, '
                     'cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, '
                     'cublasGemvTensorStridedBatched<__nv_bfloat16 const>, '
                     'cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >(cublasGemvParamsEx<int, '
                     'cublasGemvTensorStridedBatched<__nv_bfloat16 const>, '
                     'cublasGemvTensorStridedBatched<__nv_bfloat16 const>, '
                     'cublasGemvTensorStridedBatched<__nv_bfloat16>, float>)'],
         'library': ''},
 'op2': {'name': 'aten::bmm',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [256, 1, 64],
                   'stride': [64, 64, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [256, 64, 2052],
                   'stride': [131328, 1, 64],
                   'recorded_type': 'c10::BFloat16'}],
         'trace_us': 39.94,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void '
                     'cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_64x1_tn_align2>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_64x1_tn_align2::Params)'],
         'library': ''},
 'op3': {'name': 'aten::mm',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 2048],
                   'stride': [2048, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [2048, 2048],
                   'stride': [1, 2048],
                   'recorded_type': 'c10::BFloat16'}],
         'trace_us': 5.656,
         'calls': 16,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0/Linear_0',
         'kernels': ['nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT'],
         'library': ''},
 'op4': {'name': 'aten::mm',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 2048],
                   'stride': [2048, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [2048, 512],
                   'stride': [1, 2048],
                   'recorded_type': 'c10::BFloat16'}],
         'trace_us': 5.37,
         'calls': 16,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0/Linear_1',
         'kernels': ['nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN'],
         'library': ''},
 'op5': {'name': 'aten::_softmax',
         'args': [{'kind': 'tensor',
                   'dtype': 'float32',
                   'shape': [8, 32, 1, 2052],
                   'stride': [65664, 2052, 2052, 1],
                   'recorded_type': 'float'},
                  {'kind': 'scalar', 'value': -1, 'recorded_type': 'Scalar'},
                  {'kind': 'scalar', 'value': False, 'recorded_type': 'Scalar'}],
         'trace_us': 3.488,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, float, '
                     'at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 3>(float*, float '
                     'const*, long)'],
         'library': ''},
 'op6': {'name': 'aten::add',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 32, 1, 2052],
                   'stride': [65664, 2052, 2052, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 1, 1, 2052],
                   'stride': [2052, 2052, 2052, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'scalar', 'value': 1, 'recorded_type': 'Scalar'}],
         'trace_us': 3.32,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void at::native::elementwise_kernel<128, 4, '
                     'at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> '
                     '>(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> '
                     'const&)::{lambda(int)#1}>(int, '
                     'at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> '
                     '>(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> '
                     'const&)::{lambda(int)#1})'],
         'library': ''},
 'op7': {'name': 'aten::copy_',
         'args': [{'kind': 'tensor',
                   'dtype': 'float32',
                   'shape': [8, 32, 1, 2052],
                   'stride': [65664, 2052, 2052, 1],
                   'recorded_type': 'float'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 32, 1, 2052],
                   'stride': [65664, 2052, 2052, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'scalar', 'value': False, 'recorded_type': 'Scalar'}],
         'trace_us': 3.156,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void '
                     'at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
                     'const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, '
                     'TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, '
                     'at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, '
                     'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
                     'const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, '
                     'TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, '
                     'at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)'],
         'library': ''},
 'op8': {'name': 'aten::mul',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 32, 1, 64],
                   'stride': [2048, 64, 2048, 1],
                   'recorded_type': 'c10::BFloat16'},
                  {'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [1, 1, 1, 64],
                   'stride': [64, 64, 64, 1],
                   'recorded_type': 'c10::BFloat16'}],
         'trace_us': 2.28,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void at::native::elementwise_kernel<128, 4, '
                     'at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, '
                     'c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > '
                     '>(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, '
                     'c10::BFloat16, at::native::binary_internal::MulFunctor<float> > '
                     'const&)::{lambda(int)#1}>(int, '
                     'at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, '
                     'c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > '
                     '>(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, '
                     'c10::BFloat16, at::native::binary_internal::MulFunctor<float> > '
                     'const&)::{lambda(int)#1})'],
         'library': ''},
 'op9': {'name': 'aten::neg',
         'args': [{'kind': 'tensor',
                   'dtype': 'bfloat16',
                   'shape': [8, 32, 1, 32],
                   'stride': [2048, 64, 2048, 1],
                   'recorded_type': 'c10::BFloat16'}],
         'trace_us': 2.2,
         'calls': 8,
         'module_path': 'LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0',
         'kernels': ['void at::native::elementwise_kernel<128, 4, '
                     'at::native::gpu_kernel_impl_nocast<at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() '
                     'const::{lambda()#9}::operator()() '
                     'const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, '
                     'at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() '
                     'const::{lambda()#9}::operator()() const::{lambda(c10::BFloat16)#1} '
                     'const&)::{lambda(int)#1}>(int, '
                     'at::native::gpu_kernel_impl_nocast<at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() '
                     'const::{lambda()#9}::operator()() '
                     'const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, '
                     'at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() '
                     'const::{lambda()#9}::operator()() const::{lambda(c10::BFloat16)#1} '
                     'const&)::{lambda(int)#1})'],
         'library': ''}}
SEQUENCE: list = ['op3', 'op4', 'op4', 'op8', 'op9', 'op0', 'op0', 'op2', 'op6', 'op7', 'op5', 'op1', 'op3']

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
    torch = _torch()
    for a in args:
        if isinstance(a, torch.Tensor):
            return str(a.device)
    return "cpu"


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

    def one(a: tuple) -> None:
        if nvtx and cuda:
            torch.cuda.nvtx.range_push(op_id)
        fn(*a)
        if nvtx and cuda:
            torch.cuda.nvtx.range_pop()

    for _ in range(3):
        one(args)
    if not cuda:
        t = []
        for _ in range(iters):
            t0 = time.perf_counter()
            one(args)
            t.append((time.perf_counter() - t0) * 1e6)
        res["replay_warm_us"] = statistics.median(t)
        return res
    torch.cuda.synchronize()

    flush: Any = None
    if cache in ("both", "cold"):  # written before each cold call: evicts the L2 (inputs, outputs, whatever was there)
        l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 64 << 20)
        flush = torch.empty(max(2 * int(l2), 1 << 22) // 4, dtype=torch.float32, device=device)

    def events(cold: bool) -> float:
        ts = []
        for k in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if cold:
                flush.fill_(float(k))
            s.record()
            one(args)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e3)
        return statistics.median(ts)

    def kernels(cold: bool) -> dict[str, float]:
        """Profiler device time per kernel name over ``iters`` calls (cold: the L2 flushed before each)."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for k in range(iters):
                if cold:
                    flush.fill_(float(k))
                one(args)
            torch.cuda.synchronize()
        per_name: dict[str, float] = {}
        for ev in prof.events():
            if getattr(ev, "device_type", None) is not None and str(ev.device_type).endswith("CUDA"):
                per_name[ev.name] = per_name.get(ev.name, 0.0) + ev.device_time
        return per_name

    warm: dict[str, float] = {}
    if cache in ("both", "warm"):
        res["replay_warm_us"] = events(False)
        warm = kernels(False)
        res["kernels"] = sorted(warm, key=lambda k: -warm[k])
        res["replay_kernel_us"] = sum(warm.values()) / iters if warm else None
    if flush is not None:
        res["replay_cold_us"] = events(True)
        if not nvtx:  # under ncu (--nvtx) only the timed calls run: a profiled pass would add kernels
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                flush.fill_(0.0)
                torch.cuda.synchronize()
            fill = {ev.name for ev in prof.events()
                    if getattr(ev, "device_type", None) is not None and str(ev.device_type).endswith("CUDA")}
            cold = kernels(True)
            if fill & set(warm or kernels(False)):  # the op launches the flush's kernel: the two cannot be told apart
                res["cold_note"] = "the op launches the L2 flush's own kernel: no cold kernel time"
            else:
                mine = [v for k, v in cold.items() if k not in fill]
                res["replay_kernel_cold_us"] = sum(mine) / iters if mine else None
    return res


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
