"""Tamper detection: the functions the harness relies on, watched for replacement by user code.

The identities of the timers, synchronisation and graph entry points, the torch functions the checks use, and
the harness's own functions and classes are recorded once set-up is done (``take_snapshot``). After every user
call ``undo_replacements`` compares them with the record, puts each replaced one back and names it
(``time.perf_counter``, ``torch.cuda.Event.elapsed_time``, ...); the harness reports the names.
"""
from __future__ import annotations

import sys
from typing import Any

#: Functions on these objects are watched for replacement.
TIME_NAMES = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
              "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep")
TORCH_NAMES = ("equal", "isfinite", "isnan", "abs", "where", "empty", "empty_like", "full",
               "zeros", "clone", "topk", "stack", "cat", "tensor", "as_tensor", "manual_seed",
               "randn", "rand", "randint", "Generator", "set_num_threads")
CUDA_NAMES = ("synchronize", "Event", "Stream", "current_stream", "default_stream", "stream",
              "graph", "CUDAGraph", "set_stream", "memory_snapshot", "empty_cache", "get_device_name",
              "get_device_properties", "current_device", "is_available")
#: The callables the harness captured on itself at set-up (device.py), watched on the instance.
CAPTURED = ("_c_sync", "_Event", "_ev_record", "_ev_elapsed", "_ev_sync", "_current_stream", "_graph_replay")
#: The harness's own modules besides those of its classes (the timers, the comparisons, this one).
MODULES = ("mcp_server.validate.harness.clock", "mcp_server.validate.harness.tensors", __name__)

Target = tuple[str, Any, "tuple[str, ...] | None"]  # (label, object, names; None = every callable in it)
_MISSING = object()


def targets(torch: Any, harness: type) -> list[Target]:
    """What is watched: the time module, torch's entry points, and every module and class of the harness."""
    t = torch
    out: list[Target] = [
        ("time", sys.modules["time"], TIME_NAMES),
        ("torch", t, TORCH_NAMES),
        ("torch.Tensor", t.Tensor, None),
        ("torch._C.TensorBase", t._C.TensorBase, None),
        ("torch.cuda", t.cuda, CUDA_NAMES),
        ("torch.cuda.Event", t.cuda.Event, None),
        ("torch.cuda.Stream", t.cuda.Stream, None),
        ("torch.cuda.CUDAGraph", t.cuda.CUDAGraph, None),
        ("torch._C", t._C, ("_cuda_synchronize", "_CudaEventBase")),
    ]
    classes = [c for c in harness.__mro__ if c is not object]
    modules = dict.fromkeys([c.__module__ for c in classes] + list(MODULES))
    for name in modules:
        # the child runs as __main__: its module reads as "harness", the others by their last name
        label = "harness" if name == harness.__module__ else "harness." + name.rsplit(".", 1)[-1]
        out.append((label, sys.modules[name], None))
    out += [(f"harness.{c.__name__}", c, None) for c in classes]
    return out


def watchable(v: Any) -> bool:
    return callable(v) or isinstance(v, (staticmethod, classmethod, property))


def take_snapshot(watched: list[Target], owner: Any) -> dict[tuple[str, str], tuple[Any, Any]]:
    """(label, name) -> (object, the value now) for every watched name, and the owner's captured callables."""
    snap = {}
    for label, obj, names in watched:
        d = vars(obj)
        keys = names if names is not None else tuple(k for k, v in d.items() if watchable(v))
        for k in keys:
            if k in d:
                snap[(label, k)] = (obj, d[k])
    for k in CAPTURED:
        if k in owner.__dict__:
            snap[("harness.self", k)] = (owner, owner.__dict__[k])
    return snap


def undo_replacements(snapshot: dict[tuple[str, str], tuple[Any, Any]]) -> list[str]:
    """The watched names whose value changed since the snapshot ("time.perf_counter", ...), each put back."""
    changed = []
    for (label, k), (obj, orig) in snapshot.items():
        d = obj.__dict__ if label == "harness.self" else vars(obj)
        if d.get(k, _MISSING) is not orig:
            changed.append(f"{label}.{k}")
            try:
                setattr(obj, k, orig)
            except (AttributeError, TypeError):
                pass
    return changed
